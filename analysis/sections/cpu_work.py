"""What the launching thread computes while the GPU waits, from nsys's CPU samples (--sample): each sample is given
to the library that owns its work, the first frame from the innermost that belongs to one, so that a memmove inside
a torch op is the torch op's and Python calling numpy is numpy's:

    frames of one sample (innermost first)        owner
    __memmove_avx (libc)  <- at::native::copy_ (libtorch_cpu)  <- _PyEval (python)      PyTorch CPU ops: at::native::copy_
    PyObject_Malloc (python3.12)                                                          Python code
"""
from __future__ import annotations

import os
import re

import numpy as np
import pandas as pd

from ..load.trace import Trace
from . import gpu, launchers
from .base import SAY, TRACE, Say, declare
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class CpuSamples:
    """The launching thread's CPU samples in some time: how many, their owners' shares, the top functions."""
    samples: int
    kinds: dict[str, float]
    functions: tuple[SampledFunction, ...]


@dataclass(frozen=True, kw_only=True)
class SampledFunction:
    """One function's share of the samples."""
    function: str
    library: str
    kind: str
    share: float

PROFILER = "the profiler (Nsight Systems)"
# owner kinds, in the order a frame is tested; STRONG ones own a sample wherever they are below the Python frames
KINDS = (
    ("tokenizing", re.compile(r"tokenizers"), None),
    ("compiling kernels", re.compile(r"libnvrtc|libnvJitLink|libnvptxcompiler|ptxas|libtriton|/triton/|"
                                     r"libnvidia-ptxjitcompiler"), None),
    ("PyTorch CPU ops", re.compile(r"libtorch_cpu|libc10\.so|libgomp|libtorch\.so"), None),
    ("numpy", re.compile(r"_multiarray_umath|numpy|openblas|libblas|liblapack|libmkl"), None),
    ("image decoding", re.compile(r"jpeg|libpng|_imaging|/PIL/|cv2|libavcodec|libwebp|libtiff"), None),
    ("pickling", re.compile(r"_pickle"), None),
    ("copying memory", re.compile(r"libc\.so"), re.compile(r"mem(move|cpy|set)|memcpy")),
    # nsys's own injection (its CUDA and OS-runtime hooks, its sampling): the capture's cost, not the program's work
    (PROFILER, re.compile(r"libToolsInjection"), None),
    ("the CUDA driver", re.compile(r"libcuda\.so|libcudart|libcupti"), None),
    ("Python code", re.compile(r"libpython|/python\d(\.\d+)?$|/python$"), None),
)
STRONG = {"tokenizing", "compiling kernels", "PyTorch CPU ops", "numpy", "image decoding", "pickling"}
TORCH_OP = re.compile(r"at::native::|at::_ops::|THPVariable_")  # the frames that name a PyTorch op
PYTHON_BINDING = re.compile(r"^(torch::autograd::)?THPVariable_")  # torch.argmax / Tensor.argmax's C entry
PYTHON = "Python code"
OTHER = "other native code"
LABEL_CHARS = 90


def _kind_of(module: str, symbol: str) -> str | None:
    for kind, mod, sym in KINDS:
        if mod.search(module) and (sym is None or sym.search(symbol)):
            return kind
    return None


RUST_PART = re.compile(r"(\d+)")


def rust_demangled(symbol: str) -> str:
    """A Rust symbol nsys left mangled (v0 `_R...` or legacy `_ZN...E`) as its path of identifiers:
    `_RNvCsfqybpY0L30a_18unicode_categories19table_binary_search` -> `unicode_categories::table_binary_search`."""
    parts, i = [], 2
    while i < len(symbol):
        m = RUST_PART.match(symbol, i)
        if not m:
            i += 1
            continue
        n, start = int(m.group(1)), m.end()
        if start < len(symbol) and symbol[start] == "_":  # v0: a separator before an identifier starting with a digit
            start += 1
        ident, after = symbol[start:start + n], symbol[start + n:start + n + 1]
        # an identifier is followed by the next length, a tag (E, N, C, ...) or the end: not by more of a word
        if n == 0 or len(ident) < n or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", ident) or \
                (after and not (after.isdigit() or after.isupper())):
            i = m.end()
            continue
        if not re.match(r"^h[0-9a-f]{16}$", ident):  # legacy mangling's hash
            parts.append(ident)
        i = start + n
    return "::".join(parts[-3:]) if parts else symbol


def short_symbol(symbol: str) -> str:
    """A demangled symbol without its template and argument lists, shortened:
    `at::native::(anon)::argmax_kernel_impl`."""
    s = symbol.replace("(anonymous namespace)", "(anon)")
    if s.startswith(("_R", "_ZN")) and " " not in s:
        s = rust_demangled(s)
    out, depth = [], 0
    for ch in s:  # drop <...>
        depth += ch == "<"
        if depth == 0:
            out.append(ch)
        depth -= ch == ">" and depth > 0
    s = "".join(out).replace("(anon)", "{anon}")
    s = s.split("(", 1)[0] if not s.startswith("(") else s
    s = (s.split()[-1] if s.split() else s).replace("{anon}", "(anon)")  # without a return type
    return s if len(s) <= LABEL_CHARS else s[:LABEL_CHARS - 3] + "..."


NAMELESS = re.compile(r"^(0x[0-9a-fA-F]+|\[.*\]|)$")  # an address nsys could not resolve: no name for a cause


def _first_named(symbols: np.ndarray, at: int, end: int) -> int:
    """The frame at `at`, or where nsys left it nameless (a stripped libc memmove), the first named frame outward: the
    function that called it (`PyBytes_FromStringAndSize`, numpy's `array_tobytes`) says what the work is."""
    for j in range(at, end):
        if not NAMELESS.match(str(symbols[j])):
            return j
    return at


def owners(frames: pd.DataFrame) -> pd.DataFrame:
    """One row per sample of host.samples(): time_ns, global_tid, kind (KINDS, or OTHER), label (the owning frame's
    function) and library (its module's file name), in time order."""
    cols = ["time_ns", "global_tid", "kind", "label", "library"]
    if frames.empty:
        return pd.DataFrame(columns=cols)
    pairs = frames[["module", "symbol"]].drop_duplicates()
    kind_of = {(m, s): _kind_of(str(m), str(s)) for m, s in pairs.itertuples(index=False, name=None)}
    kind = np.array([kind_of[(m, s)] or "" for m, s in zip(frames["module"], frames["symbol"])], dtype=object)
    sample = frames["sample"].to_numpy()
    symbols = frames["symbol"].to_numpy()
    starts = np.flatnonzero(np.r_[True, sample[1:] != sample[:-1]])  # frames are in (sample, depth) order
    ends = np.r_[starts[1:], sample.size]
    strong = np.isin(kind, list(STRONG))
    python = kind == PYTHON
    chosen = np.empty(starts.size, dtype=np.int64)
    named = chosen.copy()  # the frame that names the work (the op's entry for PyTorch), within the owner's stack
    for i, (a, b) in enumerate(zip(starts, ends)):  # a few dozen frames a sample
        first_py = a + int(np.argmax(python[a:b])) if python[a:b].any() else b
        st = np.flatnonzero(strong[a:b])
        if st.size and a + st[0] < first_py:
            chosen[i] = a + st[0]
            named[i] = chosen[i]
            if kind[a + st[0]] == "PyTorch CPU ops":  # the op the program called names it better than its inner loop
                ops = [j for j in range(a + st[0], first_py) if TORCH_OP.search(str(symbols[j]))]
                named[i] = ops[-1] if ops else chosen[i]
        else:
            known = np.flatnonzero(kind[a:first_py] != "")
            chosen[i] = named[i] = a + known[0] if known.size else (first_py if first_py < b else a)
        named[i] = _first_named(symbols, named[i], b)
    k = kind[chosen]
    return pd.DataFrame({"time_ns": frames["time_ns"].to_numpy()[starts],
                         "global_tid": frames["global_tid"].to_numpy()[starts],
                         "kind": np.where(k == "", OTHER, k),
                         "label": [PYTHON_BINDING.sub("torch.", short_symbol(str(x))) or "?" for x in symbols[named]],
                         "library": [os.path.basename(str(x)) for x in frames["module"].to_numpy()[named]]})


def summary(counts: pd.Series, top: int = 3) -> CpuSamples:
    """The samples, each kind's share and the top functions of sample counts indexed by (kind, label, library)."""
    n = int(counts.sum())
    if not n:
        return CpuSamples(samples=0, kinds={}, functions=())
    by_kind = counts.groupby(level=0).sum().sort_values(ascending=False)
    fn = counts.sort_values(ascending=False).head(top)
    return CpuSamples(samples=n, kinds={str(k): round(float(v) / n, 3) for k, v in by_kind.items()},
                      functions=tuple(SampledFunction(function=str(lb), library=str(lib), kind=str(kd),
                                                      share=round(float(v) / n, 3)) for (kd, lb, lib), v in fn.items()))


def samples(trace: Trace, passed: gpu.DevicePass | None, tids: dict, say: Say) -> pd.DataFrame | None:
    """The launching threads' CPU samples by owner; None without GPU activity."""
    say("attributing idle time")
    return owners(trace.host.samples(tids["all"])) if passed is not None else None


declare(samples, needs=lambda: (TRACE, gpu.PassedOver.passed, launchers.tids, SAY))
