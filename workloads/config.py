"""Run configuration: the article's defaults, one dataclass, validated up front."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..nsys_core.contracts import STAGES

MODELS = ("deeplabv3", "encoder")
DTYPES = ("fp32", "bf16")
LOW_PRECISION_STAGES = ("pinned", "ceiling")
# Stages whose copy machinery (events, side streams) needs a GPU; pinned runs on the CPU through the fixes library.
GPU_ONLY_STAGES = ("async", "streams")
# Stages with a copy-monitor thread, the only place --unsafe changes anything.
UNSAFE_STAGES = ("async", "streams", "pinned")


class ConfigError(ValueError):
    """A configuration that cannot run; the message says what to change."""


@dataclass
class RunConfig:
    """One workload run: the stage, the model and its sizes, steps, workers and buffers (python -m nsys_transfer.workloads's
    options)."""
    stage: str = "baseline"
    model: str = "deeplabv3"
    batch: int = 64
    img: int = 512            # deeplabv3: input is 3 x img x img
    classes: int = 21         # deeplabv3: output channels
    tokens: int = 512         # encoder: sequence length
    dim: int = 768            # encoder: embedding width
    layers: int = 12          # encoder: transformer layers
    steps: int = 30
    warmup: int = 5
    loader_workers: int = 8
    output_workers: int = 8
    buffers: int = 0          # output buffer pool size; 0 = output_workers + 2
    postprocess: str = "devnull"   # devnull | npy:DIR
    chunk_mb: int = -1        # post-process in chunks of this size; -1 = stage default, 0 = whole batch
    split: int = 0            # workers sharing one batch (slices); 0 = stage default (pinned: 8, others: 1)
    device: str = "cuda"
    profile: bool = False     # bracket the measured steps with cudaProfilerStart/Stop
    unsafe: bool = False      # hand buffers to workers before their copy finished (to prove the checker)
    fault: str = ""           # test hook: "corrupt:N" flips a byte of batch N in the worker, "die:N" kills it
    seed: int = 0
    dtype: str = "fp32"       # fp32 | bf16: the model's weights, inputs and outputs
    channels_last: bool = False  # deeplabv3: NHWC memory format (with bf16: the fast path of the H200's convs)

    @property
    def n_buffers(self) -> int:
        """How many output buffers: --buffers, else the output workers plus two."""
        return self.buffers or self.output_workers + 2

    def output_shape(self) -> tuple[int, ...]:
        """The shape of one batch's output."""
        if self.model == "deeplabv3":
            return (self.batch, self.classes, self.img, self.img)
        return (self.batch, self.tokens, self.dim)

    def output_bytes(self) -> int:
        """The bytes of one batch's output (fp32: 4 per value, bf16: 2)."""
        n = 2 if self.dtype == "bf16" else 4
        for d in self.output_shape():
            n *= d
        return n

    def validate(self) -> "RunConfig":
        """The config itself when every value is usable; ConfigError naming the first that is not."""
        if self.stage not in STAGES:
            raise ConfigError(f"unknown stage {self.stage!r}; choose one of {', '.join(STAGES)}")
        if self.model not in MODELS:
            raise ConfigError(f"unknown model {self.model!r}; choose one of {', '.join(MODELS)}")
        for name in ("batch", "img", "classes", "tokens", "dim", "layers", "steps"):
            if getattr(self, name) < 1:
                raise ConfigError(f"--{name} must be at least 1 (got {getattr(self, name)})")
        for name in ("warmup", "loader_workers", "buffers", "split"):
            if getattr(self, name) < 0:
                raise ConfigError(f"--{name.replace('_', '-')} must be 0 or more")
        if self.output_workers < 1 and self.stage in ("multiproc", "bufpool", *GPU_ONLY_STAGES):
            raise ConfigError(f"stage {self.stage} needs --output-workers >= 1")
        if self.device not in ("cuda", "cpu"):
            raise ConfigError("--device must be cuda or cpu")
        if self.device == "cpu" and self.stage in GPU_ONLY_STAGES:
            raise ConfigError(f"stage {self.stage} overlaps GPU copies with compute and needs --device cuda; "
                              "on a CPU run naive-input, baseline, multiproc, bufpool or ceiling")
        if not (self.postprocess == "devnull" or self.postprocess.startswith("npy:")):
            raise ConfigError("--postprocess must be devnull or npy:DIR")
        if self.model == "encoder" and self.dim % 64 and self.dim >= 64:
            raise ConfigError("--dim must be a multiple of 64 (12 heads of 64 at 768)")
        if self.unsafe and self.stage not in UNSAFE_STAGES:
            raise ConfigError(f"--unsafe hands buffers to the workers before their asynchronous copy finished, which "
                              f"only stages {', '.join(UNSAFE_STAGES)} do; stage {self.stage} would ignore it, so drop it")
        if self.dtype not in DTYPES:
            raise ConfigError(f"--dtype must be one of {', '.join(DTYPES)}")
        if self.dtype != "fp32" and self.stage not in LOW_PRECISION_STAGES:
            raise ConfigError(f"--dtype {self.dtype}: NumPy has no bfloat16, so only stages "
                              f"{', '.join(LOW_PRECISION_STAGES)} (through the fixes library) take it")
        if self.fault and not any(self.fault.startswith(p) for p in ("corrupt:", "die:")):
            raise ConfigError("--fault must be corrupt:N or die:N")
        return self

    def as_dict(self) -> dict:
        """The config as a JSON-able dict (the run record's `config`)."""
        return dataclasses.asdict(self)
