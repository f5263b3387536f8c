"""Whether two analyses can be compared at all: one profiler, runs that did not fail, complete captures, the same
GPUs (or none on both sides: their loops are compared, cpu.py), one program, one definition of a step; and the warnings
a comparison that can be made carries."""
from __future__ import annotations

from pathlib import PurePath

from ..document import Document
from ..load.validate import NO_API_ROWS
from ..rules.capture import failed_run_evidence
from ..rules.facts import ProgramEnd
from ..sections.cpu_only import PYTHON
from .side import Side

STEP_RATIO = 2.0       # step counts further apart than this: warned
GENERIC_KERNELS = {"Kernel", "Kernel2", "kernel", "Kernel3"}
PROFILERS = {"nsys": "an Nsight Systems export", "torch.profiler": "a torch.profiler trace"}


class NotComparable(ValueError):
    """The two traces cannot be compared; the message says why and what to do."""


def _gpus(d: Document) -> list[str]:
    return [g.name or "?" for g in d.trace.gpus]


def check_same_profiler(kinds: dict[str, str]) -> None:
    """NotComparable when the traces (name -> "nsys" or "torch.profiler") were not all recorded by one profiler: the
    two record different things (OS runtime calls, CPU samples, the cost of profiling) and their figures differ by
    more than any fix, so a verdict across them would be the profilers' difference."""
    first = next(iter(kinds.items()), None)
    other = next(((n, k) for n, k in kinds.items() if first and k != first[1]), None)
    if first and other:
        raise NotComparable(f"{first[0]} is {PROFILERS.get(first[1], first[1])} and {other[0]} "
                            f"{PROFILERS.get(other[1], other[1])}: the two profilers record and time different "
                            "things; profile both the same way (both with nsys, or both with torch.profiler)")


def _recorded_by(d: Document) -> str:
    """What recorded the trace behind an analysis document: the trace section's `profiler`, nsys where absent (the
    document's word for it; facade.profiler_of reads a trace file's first bytes instead)."""
    return d.trace.profiler or "nsys"


def check_comparable(before: Side, after: Side) -> list[str]:
    """NotComparable when the two cannot be compared; else the warnings to print."""
    check_same_profiler({"before": _recorded_by(before.doc), "after": _recorded_by(after.doc)})
    for side in (before, after):
        end = side.doc.trace.program_end
        if end.failed:  # a failed run's speed is no speed: never a verdict of faster or slower
            said = failed_run_evidence(ProgramEnd(end.failed, end.exit_code, end.error, end.source))
            raise NotComparable(f"{side.path} is of a failed run: {said}; fix the program, "
                                "then trace it again before comparing")
    for side in (before, after):
        verdict = side.doc.trace.integrity.verdict
        if verdict not in (None, "complete"):
            what = ("nsys questions the capture's completeness" if verdict == "doubtful"
                    else "the capture lost CUDA events")
            raise NotComparable(f"{side.path}: {what} ({verdict}, analyze-trace --check says why): "
                                "capture it again before comparing")
    lacking = [side.path for side in (before, after) if any(w.startswith(NO_API_ROWS) for w in side.doc.warnings)]
    if len(lacking) == 1:
        raise NotComparable(f"{lacking[0]}: {NO_API_ROWS}, so its launching thread and its syncs are unknown and its "
                            "idle time is counted differently; capture it again with --trace=cuda")
    gb, ga = _gpus(before.doc), _gpus(after.doc)
    if len(gb) != len(ga) or sorted(gb) != sorted(ga):
        raise NotComparable(f"different GPUs: {', '.join(gb) or 'none'} before, {', '.join(ga) or 'none'} after; "
                            "compare captures from the same machine")
    _same_program(before, after)
    sb, sa = before.doc.steps, after.doc.steps
    if sb.count and sa.count and sb.regex != sa.regex:
        raise NotComparable(f"different steps: {sb.regex!r} before, {sa.regex!r} after; pass --step-regex "
                            "to use one definition for both")
    warnings = [w for w in [_program_warning(before, after), _sampled_warning(before, after)] if w]
    if bool(sb.count) != bool(sa.count):
        warnings.append("steps were found in only one trace: throughput is compared over the GPU windows")
    elif sb.count and max(sb.count, sa.count) > STEP_RATIO * min(sb.count, sa.count):
        warnings.append(f"{sb.count} steps before, {sa.count} after: per-step figures are compared, totals "
                        "are not")
    return warnings


def _sampled_warning(before: Side, after: Side) -> str | None:
    """CPU sampling with stacks costs each side what its CPU work costs: unequal between a program and its fix (on the
    H200, image_loop_fixed ran at 0.66 of its unprofiled pace so, image_loop at 0.95: docs/benchmarks.md)."""
    heavy = [s.label or s.path for s in (before, after) if s.recorded and
             (s.recorded.get("sample") not in (None, "none") or s.recorded.get("python_backtrace"))]
    if not heavy:
        return None
    return (f"{' and '.join(heavy)} captured with CPU sampling and stacks: nsys slows CPU-heavy work most, so the "
            "speed-up can be off; for it, capture both with `nsys-transfer run --sample none --python-backtrace none`")


def program_of(command: list | None) -> str | None:
    """The program a command line runs, by name: its first Python file (`my.py`), else the module after `-m`, else
    the executable where it is no Python interpreter; None where unknown."""
    if not command:
        return None
    args = command[1:]
    for i, a in enumerate(args):
        if a.endswith(".py"):
            return PurePath(a).name
        if a == "-m" and i + 1 < len(args):
            return args[i + 1]
    exe = PurePath(command[0]).name
    return None if PYTHON.match(exe) else exe


def _alike(b: str, a: str) -> bool:
    """Whether two programs' names can be one program's before and after a fix: one name holds the other
    (detect_post.py, detect_post_fixed.py; fixed_infer.py, infer.py) or they begin with the same three letters
    (seg_numpy_post.py, seg_numpy_post_mpfix.py; infer_old.py, infer_new.py). A fix keeps its program's name or adds
    to it; two names that share neither are two programs' (detect_post.py, imgcls_fixed.py). Only a warning: a
    renamed fix (old_infer.py -> new_infer.py) is warned of, and still compared."""
    b, a = (x.lower().removesuffix(".py") for x in (b, a))
    return b in a or a in b or b[:3] == a[:3]


def _program_warning(before: Side, after: Side) -> str | None:
    """A warning where the two command lines (the run records', else what nsys launched: Side.command) run programs
    whose names are not alike; None where they are, or either is unknown (a torch.profiler trace records none)."""
    b, a = program_of(before.command), program_of(after.command)
    if not b or not a or _alike(b, a):
        return None
    return f"these look like different programs: {b} vs {a}; verify compares two runs of one program"


def _names(d: Document) -> tuple[set[str], set[str]]:
    """The top kernels' names and the NVTX range names of a document (the program's own marks)."""
    # a library's generic short names (cuBLAS's and CUTLASS's `Kernel`, `Kernel2`) say nothing of the program
    kernels = {str(k.name) for k in (d.kernels.top if d.kernels else ())} - GENERIC_KERNELS
    ranges = {str(r.name) for r in (d.nvtx.ranges if d.nvtx else ())}
    return kernels, ranges


def _same_program(before: Side, after: Side) -> None:
    """NotComparable when the two share no top kernel and no NVTX range name: two different programs (a fix keeps
    most of a program's kernels, even in another precision its elementwise and copy kernels, or its ranges)."""
    kb, rb = _names(before.doc)
    ka, ra = _names(after.doc)
    if (kb and ka and not kb & ka) and not (rb & ra):
        raise NotComparable(f"different programs: no kernel among the top {len(kb)} before and {len(ka)} after, and "
                            "no NVTX range, is in both; verify compares one program before and after a fix")
