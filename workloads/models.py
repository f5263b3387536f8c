"""Model factories: DeepLabV3-ResNet50 (random weights, nothing downloaded) and a BERT-base-sized encoder."""
from __future__ import annotations

import torch
from torch import nn

from .data import VOCAB


class TokenEncoder(nn.Module):
    """Per-token embeddings for a vector store: embedding + TransformerEncoder, output B x T x dim fp32."""

    def __init__(self, dim: int = 768, layers: int = 12, max_tokens: int = 512):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, dim)
        self.pos = nn.Parameter(torch.randn(1, max_tokens, dim) * 0.02)
        layer = nn.TransformerEncoderLayer(d_model=dim, nhead=max(1, dim // 64), dim_feedforward=4 * dim,
                                           batch_first=True, activation="gelu")
        self.encoder = nn.TransformerEncoder(layer, num_layers=layers, enable_nested_tensor=False)

    def forward(self, ids):
        """Token ids -> the encoder's hidden states (batch x tokens x dim)."""
        x = self.embed(ids) + self.pos[:, : ids.shape[1]]
        return self.encoder(x)


class SegmentationLogits(nn.Module):
    """DeepLabV3 returns a dict; the pipelines want the logits tensor."""

    def __init__(self, classes: int, dtype: torch.dtype = torch.float32, channels_last: bool = False):
        super().__init__()
        from torchvision.models.segmentation import deeplabv3_resnet50  # noqa: PLC0415

        self.net = deeplabv3_resnet50(weights=None, weights_backbone=None, num_classes=classes, aux_loss=False)
        self.dtype, self.format = dtype, torch.channels_last if channels_last else torch.contiguous_format

    def forward(self, x):
        """Images -> DeepLabV3's logits (batch x classes x img x img), in the model's dtype and memory format."""
        return self.net(x.to(self.dtype).contiguous(memory_format=self.format))["out"]


def torch_dtype(cfg) -> torch.dtype:
    """The run's torch dtype (--dtype)."""
    return torch.bfloat16 if cfg.dtype == "bf16" else torch.float32


def build_model(cfg, device: torch.device) -> nn.Module:
    """The configured model (deeplabv3 or encoder), seeded, in eval mode on the device, in the run's dtype."""
    torch.manual_seed(cfg.seed)
    dtype = torch_dtype(cfg)
    if cfg.model == "deeplabv3":
        model = SegmentationLogits(cfg.classes, dtype, cfg.channels_last)
        fmt = torch.channels_last if cfg.channels_last else torch.contiguous_format
        return model.eval().to(device, dtype).to(memory_format=fmt)
    model = TokenEncoder(cfg.dim, cfg.layers, cfg.tokens)
    return model.eval().to(device, dtype)
