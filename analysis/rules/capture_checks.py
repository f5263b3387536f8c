"""The integrity verdict: is the trace complete or did the capture lose events? Each check is a rule over the figures
(sections/capture_figures.py): the share of the expected operations it finds lost, and above its threshold the sentence
that says so. The verdict is "lossy" when any check fires; its lost fraction is the largest share measured. Where no
check fires but nsys itself questions completeness (its DIAGNOSTIC_EVENT messages: "Not all CUDA events might have
been collected", "CUDA profiling might have not been started correctly") and nothing explains it, it is "doubtful":
the checks cannot see events nsys never recorded. The checks read the typed figures (sections/capture_figures.Figures), never
the trace: verdict(figures(trace)) is the verdict."""
from __future__ import annotations

from ..sections.capture_activity import API_ID_GAP_LOST
from ..sections.capture_figures import Doubt, Figures

# Share of the expected GPU operations (launch and copy API calls, or GPU rows) missing their other half before the
# trace is called lossy (and, below, the share of lost calls the other checks estimate). Complete real traces: 0 to
# 0.005 (the bundled H200 stages and 2-GPU runs, four public exports from nsys 2020.3 to 2025.3, three programs
# captured under nsys 2023.4 and 2024.2: at most a launch cut off at the capture's edge). The real lossy captures
# (nsys 2023.4 on CUDA 13) lost both halves of each call together, 34% and 98% of them, which the correlation-id
# check below measures. 5% leaves room for edge effects of short captures.
LOST_FRACTION_LOSSY = 0.05
# Fewer expected operations than this say nothing either way (a capture of 3 launches missing 1 is not evidence).
MIN_EXPECTED_OPS = 20
# A process whose GPU operations stop for good while at least this share of its NVTX/OSRT events still follows (and
# which ran at least MIN_GPU_OPS before) lost its tail. Complete traces: at most 0.09 (the bundled `multiproc` stage:
# post-processing after its last copy); the lossy capture: see docs/nsys-versions.md.
SILENT_TAIL_CPU_SHARE = 0.5
MIN_GPU_OPS = 100
# nsys 2024+ exports log "Number of CUDA events collected: N" (DIAGNOSTIC_EVENT): the exported CUDA rows (runtime +
# kernels + copies + memsets) equal N exactly in complete public exports; fewer rows than that lost some in import.
IMPORT_LOSS_LOSSY = 0.05

Reason = tuple[float, str]  # (share lost, the sentence that says so)
DOUBTFUL_PREFIX = "nsys questions this capture's completeness"  # how a doubtful verdict's evidence begins


class IntegrityCheck:
    """One check: measured(f) -> the shares it measured (each counts towards the lost fraction) and its reasons."""

    def measured(self, f: Figures) -> tuple[list[float], list[Reason]]:
        """The shares of the expected operations this check measured, and its reasons where it fires."""
        raise NotImplementedError


class CallsWithoutGpuWork(IntegrityCheck):
    """Kernel launch and copy calls whose GPU row is missing."""

    def measured(self, f: Figures) -> tuple[list[float], list[Reason]]:
        """(shares measured, reasons) of this check."""
        if f.expected_api < MIN_EXPECTED_OPS:
            return [], []
        share, kernel, copy = f.missing_api / f.expected_api, f.api["kernel"], f.api["copy"]
        return [share], [(share, f"{f.missing_api:,} of {f.expected_api:,} kernel launch and copy calls "
                                 f"({share:.0%}) have no GPU activity (kernels {kernel.without_gpu:,} of "
                                 f"{kernel.calls:,}, copies {copy.without_gpu:,} of "
                                 f"{copy.calls:,})")] if share > LOST_FRACTION_LOSSY else []


class GpuWorkWithoutCalls(IntegrityCheck):
    """Kernels and copies whose API call is missing."""

    def measured(self, f: Figures) -> tuple[list[float], list[Reason]]:
        """(shares measured, reasons) of this check."""
        if f.expected_gpu < MIN_EXPECTED_OPS or not (f.expected_api or f.missing_gpu == 0):
            return [], []
        share = f.missing_gpu / f.expected_gpu
        return [share], [(share, f"{f.missing_gpu:,} of {f.expected_gpu:,} kernels and copies ({share:.0%}) have no "
                                 "CUDA API call")] if share > LOST_FRACTION_LOSSY else []


class SilentGpuTail(IntegrityCheck):
    """A process's GPU operations stop while its own NVTX ranges go on. Only NVTX: OS runtime calls after the last
    GPU operation are ordinary (the last step's post-processing, joining workers, unmapping memory at exit: 60% of the
    calls of a complete nsys 2024.2 capture of stage baseline on the H200 came after its last copy)."""

    def measured(self, f: Figures) -> tuple[list[float], list[Reason]]:
        """(shares measured, reasons) of this check."""
        # at the process's rate of GPU operations per NVTX/OSRT event before the stop, the share of its events that
        # follow is also the share of its GPU operations missing
        return [], [(tl.cpu_share_after, f"process {tl.pid}'s GPU operations stop while "
                                          f"{tl.cpu_share_after:.0%} of its NVTX/OS runtime events "
                                          f"({tl.cpu_events_after:,}) follow")
                    for tl in f.tails if tl.activity == "nvtx" and tl.gpu_ops >= MIN_GPU_OPS
                    and tl.cpu_share_after >= SILENT_TAIL_CPU_SHARE]


class CorrelationIdHoles(IntegrityCheck):
    """Holes in a process's CUDA correlation ids while it kept running: calls never recorded."""

    def measured(self, f: Figures) -> tuple[list[float], list[Reason]]:
        """(shares measured, reasons) of this check."""
        return [], [(g.missing_share, f"{g.ids_lost:,} of process {g.pid}'s {g.id_span:,} CUDA API "
                                      f"correlation ids ({g.missing_share:.0%}) fall in "
                                      f"{g.gaps_while_running} holes of {API_ID_GAP_LOST:,}+ ids (up to "
                                      f"{g.largest_gap:,}) while it kept running: about "
                                      f"{g.est_missing_calls or 0:,} API calls and their GPU work are "
                                      f"missing beside the {g.api_rows:,} recorded")
                    for g in f.id_holes if g.missing_share > LOST_FRACTION_LOSSY]


class ImportLoss(IntegrityCheck):
    """nsys counted more CUDA events than the export holds (its DIAGNOSTIC_EVENT log, nsys 2024+)."""

    def measured(self, f: Figures) -> tuple[list[float], list[Reason]]:
        """(shares measured, reasons) of this check."""
        collected, exported = f.cuda_events_collected, f.cuda_rows_exported
        if not collected:
            return [], []
        share = max(0.0, 1 - exported / collected)
        return [share], [(share, f"nsys collected {collected:,} CUDA events but the export holds "
                                 f"{exported:,} ({share:.0%} lost)")] if share > IMPORT_LOSS_LOSSY else []


CHECKS: tuple[IntegrityCheck, ...] = (CallsWithoutGpuWork(), GpuWorkWithoutCalls(), SilentGpuTail(),
                                      CorrelationIdHoles(), ImportLoss())


def verdict(f: Figures) -> dict:
    """{verdict: complete | lossy | doubtful, lost_fraction, evidence (one sentence), figures} of the figures
    (sections/capture_figures.figures(trace): the figures as reported, with "cut" added)."""
    fractions: list[float] = []
    reasons: list[Reason] = []
    for check in CHECKS:
        shares, said = check.measured(f)
        fractions += shares
        reasons += said
    lost = round(max(fractions), 4) if fractions else None
    doubts = unexplained(f)
    if reasons:
        reasons.sort(key=lambda r: -r[0])
        lost = round(max([lost or 0.0] + [r[0] for r in reasons]), 4)
        cut = _cut_at(*f.edges)
        return {"verdict": "lossy", "lost_fraction": lost,
                "evidence": _lossy_evidence(f, reasons, cut)[:-1] + (f"; {nsys_said(doubts, f)}." if doubts else "."),
                "figures": {**f.reported, "cut": bool(cut)}}
    fig = {**f.reported, "cut": False}
    if doubts:
        return {"verdict": "doubtful", "lost_fraction": lost, "evidence": _doubtful_evidence(f, doubts), "figures": fig}
    if not (f.expected_api or f.expected_gpu):
        evidence = "No CUDA kernel launches or copies in the trace: nothing to cross-check."
    else:
        evidence = (f"Every check passed: {f.missing_ops:,} of {f.expected_ops:,} kernels and copies lack "
                    "their API call or GPU row, and GPU operations go on as long as the program's own activity"
                    + _capture_note(f) + ".")
    return {"verdict": "complete", "lost_fraction": lost, "evidence": evidence, "figures": fig}


def unexplained(f: Figures) -> list[Doubt]:
    """nsys's doubts about the capture (its DIAGNOSTIC_EVENT messages that question completeness) that neither the
    rows nor its own log explain (sections/capture_messages.doubts)."""
    return [d for d in f.doubts if not d.explained]


def nsys_said(doubts: list[Doubt], f: Figures, lead: str = "nsys itself said") -> str:
    """'nsys itself said "..." of process 123, 27 times, which holds 2 CUDA API calls and no GPU work; ...'."""
    ops = {tl.pid: tl.gpu_ops for tl in f.tails}
    said = []
    for d in doubts[:4]:
        whom = f" of process {d.pid}" if d.pid is not None else ""
        times = f", {d.times} times" if d.times > 1 else ""
        held = ""
        if d.pid is not None and d.events == "CUDA":
            n = ops.get(d.pid, 0)
            held = (f", which holds {n:,} GPU operations" if n else
                    f", which holds {d.cuda_calls:,} CUDA API calls and no GPU work" if d.cuda_calls else
                    ", which holds no CUDA rows")
        said.append(f'"{d.said.rstrip(".")}"{whom}{times}{held}')
    more = f" and {len(doubts) - 4} more" if len(doubts) > 4 else ""
    return f"{lead} " + "; ".join(said) + more


def _doubtful_evidence(f: Figures, doubts: list[Doubt]) -> str:
    """The sentence of a doubtful verdict: what nsys said, and what the rows can and cannot tell."""
    checked = (f"the rows pass every check here ({f.missing_ops:,} of {f.expected_ops:,} kernels and copies "
               "lack their API call or GPU row), but events nsys never recorded leave no mark in them"
               if f.expected_api or f.expected_gpu else
               "the trace holds no kernel launches or copies to cross-check")
    return f"{DOUBTFUL_PREFIX}: {nsys_said(doubts, f, 'it said')}; {checked}{_capture_note(f)}."


def _lossy_evidence(f: Figures, reasons: list[tuple[float, str]], cut: str | None) -> str:
    """The sentence of a lossy verdict: a cut from a longer capture where the edges say so, else lost events."""
    said = "; ".join(r for _, r in reasons)
    if cut:
        return (f"The export looks cut out of a longer capture (a time slice, trimmed or exported with a time range): "
                f"{cut}; {said}. Figures near its edges are incomplete: analyse the whole capture, or a --window well "
                "inside this one.")
    return "The capture lost CUDA events: " + said + _capture_note(f) + "."


def _cut_at(calls: str | None, gpu: str | None) -> str | None:
    """Where a cut left its marks, in words, when every kind of unpaired row sits at an edge (calls: where the calls
    without GPU work sit, gpu: the GPU work without calls); None otherwise."""
    if not (calls or gpu) or {calls, gpu} & {"middle", "unknown"}:
        return None
    words = {"start": "its start", "end": "its end"}
    said = ([f"the calls without GPU work all come at {words[calls]}"] if calls else []) + \
           ([f"the GPU work without calls all comes at {words[gpu]}"] if gpu else [])
    return " and ".join(said)


def _capture_note(f: Figures) -> str:
    c = f.capture
    if not c.nsys_older_than_driver:
        return ""
    return (f" (exported by nsys {c.nsys_version}, which traces CUDA {c.nsys_newest_cuda.lstrip('<>=')} at "
            f"most, on a CUDA {c.driver_cuda} driver)")
