"""The advice several rules share, as data: the fix for each NVTX range of this toolkit's own workloads, for the
ranges of the fixes library (nsys_transfer.fixes) in a user's program, the drop-in fixes for PyTorch programs, and per
operator range. A rule's own advice is written in the rule, beside its measure (rules/gpu_idle.py, copy.py, ...); an
idle cause's generic advice with the cause (common/idle_causes.py)."""
from __future__ import annotations

from ...nsys_core.contracts import COPY_TO_CPU, DRAIN_OUTPUTS, GET_BATCH, PIPELINE_DRAIN, PROCESS_OUTPUT, QUEUE_OUTPUT

# the fixes of this toolkit's own workloads, by the NVTX range where the GPU waited (named only for its own traces)
RANGE_FIXES = {
    PROCESS_OUTPUT: ("move post-processing off the launching thread into worker processes fed by a queue",
                       "multiproc"),
    COPY_TO_CPU: ("stop allocating a fresh output per batch: copy into a pool of pre-allocated shared-memory buffers "
                    "recycled through a queue", "bufpool"),
    QUEUE_OUTPUT: ("send a buffer index through the queue, not the tensor (which is copied into new shared memory on "
                     "every put): pre-allocated shared buffers", "bufpool"),
    GET_BATCH: ("load input in DataLoader workers with pin_memory=True and copy the next batch on a side stream while "
                  "this one computes (the prefetcher)", "baseline"),
    DRAIN_OUTPUTS: ("the output workers were still behind when the GPU finished, so in steady state the buffers run "
                      "out and the GPU waits: add output workers if the host has idle cores (the run record's "
                      "host_cpu), else give the job more cores or less CPU work per output (argmax or bf16 on the GPU)",
                      None),
}


# ranges the fixes library emits in any program that uses it, and what the GPU's wait inside them means
LIBRARY_RANGE_FIXES = {
    PIPELINE_DRAIN: "the OutputPipeline's workers were still behind when the GPU had finished (its post-processing, "
                    "not the GPU, sets the pace): give it more workers if the host has idle cores, or less CPU work "
                    "per output (argmax, a reduction or bf16 on the GPU before submit())",
}


# the toolkit's drop-in fixes (docs/fixes.md), named in the suggestion of each transfer finding of a PyTorch program
FIXES = {
    "output": "in a few lines: nsys_transfer.fixes.OutputPipeline does all of it (`with OutputPipeline(process, "
              "workers=8) as outputs:` ... `outputs.submit(i, model(batch))`; docs/fixes.md)",
    "input": "in one line: `for batch in nsys_transfer.fixes.prefetch(loader, device):` pins, copies ahead on a side "
             "stream and orders the compute after it (docs/fixes.md)",
    "scalars": "in a few lines: nsys_transfer.fixes.GpuScalars (`scalars.add(loss=loss)` instead of `loss.item()`, "
               "read every N steps without a sync; docs/fixes.md)",
}


# what the GPU waits for inside some PyTorch ops (emit_nvtx names them)
OPERATOR_FIXES = {
    "aten::cudnn_convolution": "cuDNN chooses an algorithm the first time it meets each convolution shape (and "
                               "benchmarks them with torch.backends.cudnn.benchmark=True): this is warm-up; run a few "
                               "batches of every shape before the part that must be fast, and keep shapes fixed",
}


# the CPU work the GPU waits for, by the library that owns the launching thread's samples (sections/cpu_work.py)
POST_PROCESS = ("do it on the GPU before the copy (the argmax, softmax or threshold on the CUDA tensor, then copy "
                "the small result), or hand each output to worker processes")
WORK_FIXES = {
    "PyTorch CPU ops": "the launching thread runs PyTorch ops on CPU tensors while the GPU waits: " + POST_PROCESS,
    "numpy": "the launching thread runs numpy on the outputs while the GPU waits: " + POST_PROCESS,
    "copying memory": "the launching thread copies memory (CPU tensors, concatenation, serialisation) while the GPU "
                      "waits: copy once into reused (pinned) buffers, and hand the outputs to worker processes",
    "pickling": "the launching thread pickles outputs (a torch.multiprocessing queue of tensors) while the GPU waits: "
                "send an index into buffers shared once instead, and let worker processes read them",
    "tokenizing": "the launching thread tokenizes the next batch while the GPU waits: tokenize in DataLoader worker "
                  "processes (in the Dataset or collate_fn, num_workers > 0), or the next batch on a thread while the "
                  "GPU runs this one (the Rust tokenizers release the GIL: tokenizer(batch) / encode_batch)",
    "image decoding": "the launching thread decodes images while the GPU waits: decode in DataLoader worker processes "
                      "(num_workers > 0), or on the GPU (torchvision.io.decode_jpeg(..., device='cuda'), DALI)",
    "the profiler (Nsight Systems)": "the samples are in nsys's own hooks (libToolsInjection): the capture's cost, "
                                     "not the program's work; compare with a capture without CPU sampling "
                                     "(nsys-transfer run --sample none --python-backtrace none) before changing code",
    "Python code": "the launching thread runs Python code while the GPU waits (the samples are in the interpreter): "
                   "queue the next step's GPU work before it, or move it to a worker thread or process; "
                   "nsys --python-sampling=true names the Python functions",
}
OUTPUT_WORK = ("PyTorch CPU ops", "numpy", "copying memory", "pickling")  # post-processing: OutputPipeline applies
