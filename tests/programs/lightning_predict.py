"""A PyTorch Lightning `Trainer.predict` loop, written the way users write it.

A LightningModule wraps an image classifier with random weights (torchvision resnet50 by default, or a timm
model with --model timm:NAME); `predict_step` returns `self(x).softmax(-1).cpu()`, as users often do. The
DataLoader reads torchvision FakeData through transforms in worker processes (pin_memory=True). A Callback
pushes/pops an NVTX range "predict_batch N" in on_predict_batch_start/end, and `trainer.predict` runs inside
`torch.autograd.profiler.emit_nvtx()`, so every aten op is an NVTX range too ("aten::conv2d, seq = N, op_id = M"
style names; --no-emit-nvtx leaves them out). Batch 0 is the warm-up (cuDNN, module loading).

usage:  python3 tests/programs/lightning_predict.py [--device cuda] [--batches 10] [--batch-size 64] [--workers 4]
trace:  python3 -m nsys_transfer.profiling run -o runs/lightning_predict --trace cuda,nvtx,osrt --no-capture-range -- \
            python3 tests/programs/lightning_predict.py --device cuda
        .venv/bin/analyze-trace runs/lightning_predict.sqlite --step-regex '^predict_batch \\d+$'
(the whole program is captured: no cudaProfilerStart/Stop.)
"""
import argparse
import contextlib
import time

import torch
import torchvision
from torch.utils.data import DataLoader
from torchvision import transforms

try:
    import lightning as L
except ImportError:  # the older package name
    import pytorch_lightning as L


class Classifier(L.LightningModule):
    def __init__(self, model_name: str):
        super().__init__()
        if model_name.startswith("timm:"):
            import timm
            self.model = timm.create_model(model_name[5:], pretrained=False)
        else:
            self.model = getattr(torchvision.models, model_name)(weights=None)

    def forward(self, x):
        return self.model(x)

    def predict_step(self, batch, batch_idx, dataloader_idx=0):
        x, _ = batch
        return self(x).softmax(-1).cpu()


class NvtxBatchRanges(L.Callback):
    def on_predict_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0):
        torch.cuda.nvtx.range_push(f"predict_batch {batch_idx}")

    def on_predict_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
        torch.cuda.nvtx.range_pop()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--batches", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--model", default="resnet50", help="torchvision model name, or timm:NAME")
    p.add_argument("--no-emit-nvtx", action="store_true", help="leave out the per-op NVTX ranges of emit_nvtx")
    args = p.parse_args()

    tf = transforms.Compose([transforms.ToTensor(),
                             transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])])
    dataset = torchvision.datasets.FakeData(size=args.batches * args.batch_size,
                                            image_size=(3, args.image_size, args.image_size), transform=tf)
    loader = DataLoader(dataset, batch_size=args.batch_size, num_workers=args.workers,
                        pin_memory=args.device == "cuda")

    model = Classifier(args.model)
    trainer = L.Trainer(accelerator="gpu" if args.device == "cuda" else "cpu", devices=1, logger=False,
                        callbacks=[NvtxBatchRanges()], enable_progress_bar=False, enable_model_summary=False)
    use_emit = args.device == "cuda" and not args.no_emit_nvtx  # emit_nvtx needs CUDA
    per_op = torch.autograd.profiler.emit_nvtx() if use_emit else contextlib.nullcontext()
    t0 = time.perf_counter()
    with per_op:
        predictions = trainer.predict(model, dataloaders=loader)
    dt = time.perf_counter() - t0
    probs = torch.cat(predictions)
    print(f"{args.model} {args.device}: {probs.shape[0]} images in {len(predictions)} batches, {dt:.2f} s "
          f"({len(predictions) / dt:.2f} batches/s incl. start-up); mean max prob {probs.max(1).values.mean():.4f}; "
          f"emit_nvtx {'on' if use_emit else 'off'}")


if __name__ == "__main__":
    main()
