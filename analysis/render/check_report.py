"""The text `analyze-trace --check` prints: the integrity verdict, the figures behind it and nsys's own messages."""
from __future__ import annotations

from collections.abc import Sequence

from ...nsys_core import nsys_messages

from ..common.typed_json import from_json
from ..rules.capture_checks import DOUBTFUL_PREFIX
from ..sections.capture_activity import TIMELINE_BINS, ProcessActivity
from ..sections.capture_figures import Integrity, IntegrityFigures
from ..sections.capture_messages import NsysDiagnostics, NsysDoubt


def record_doubts(messages: list[dict], export_doubts: Sequence[NsysDoubt]) -> list[dict]:
    """The run record's nsys messages (its own dicts, not the analysis's) that question completeness
    (nsys_messages.doubt) and that the export's own diagnostics do not explain (the same doubt, of the same events,
    explained there: a capture range's end, say)."""
    explained = {(x.kind, x.events) for x in export_doubts if x.explained}
    return [m for m in messages if nsys_messages.doubt(str(m["text"])) not in explained | {None}]


def record_messages(record: dict) -> list[dict]:
    """nsys's messages in a run record; records written before it kept them: parsed from its last lines."""
    if isinstance(record.get("nsys_messages"), list):
        return [m for m in record["nsys_messages"] if isinstance(m, dict) and "text" in m]
    return nsys_messages.parse("\n".join(str(x) for x in record.get("last_lines", []) or []), stage="last lines")


SPARK = " ▁▂▃▄▅▆▇█"


def _spark(values: Sequence[float]) -> str:
    top = max(values) if values else 0
    return "".join(SPARK[0 if not v else max(1, round(v / top * (len(SPARK) - 1)))] for v in values) if top else \
        " " * len(values)


def integrity_of(verdict: dict) -> Integrity:
    """The integrity verdict of facade.capture_verdict (the JSON of the `trace.integrity` object), typed."""
    return from_json(Integrity, verdict)


def check_report(result: Integrity, path: str, record_path=None, record: dict | None = None) -> tuple[str, bool]:
    """The text `analyze-trace --check` prints for one trace, and whether the trace is to be trusted: not when the
    figures say events were lost, nor when nsys itself questions the capture's completeness (in the export, or in
    its output the run record beside it keeps) and nothing explains it, nor when the run record holds nsys errors
    (other warnings are shown only)."""
    f = result.figures
    messages = record_messages(record) if record is not None else []
    verdict, L = _verdict_lines(result, path, record_doubts(messages, f.diagnostics.doubts))
    L += _capture_lines(f) + _timeline_lines(f.timeline) + _nsys_lines(f.diagnostics)
    trusted = verdict == "complete"
    if record is not None:
        L.append(f"  run record {record_path}: " + (f"{len(messages)} nsys message(s)" if messages
                                                     else "no nsys warnings or errors"))
        for m in messages[:20]:
            L.append(f"    nsys {m.get('kind', 'message')} ({m.get('stage', '?')}): {m['text']}")
        if any(m.get("kind") == "error" for m in messages):
            trusted = False
    L.append(f"  => {'trusted' if trusted else 'NOT to be trusted'}")
    return "\n".join(L), trusted


def _verdict_lines(result: Integrity, path: str, doubted: list[dict]) -> tuple[str, list[str]]:
    """The verdict (doubtful where nsys's console output questions rows that pass) and its two lines."""
    verdict, evidence = result.verdict, result.evidence
    if verdict == "complete" and doubted:  # the export's rows pass, but nsys's console output questions them
        verdict = "doubtful"
        evidence = (f"{DOUBTFUL_PREFIX}: its output in the run record said "
                    + "; ".join(f'"{m["text"]}"' for m in doubted[:4])
                    + "; the rows pass every check here, but events nsys never recorded leave no mark in them.")
    measured = " measured by the checks" if verdict == "doubtful" else ""
    return verdict, [f"{path}: {verdict.upper()}"
                     + (f", lost fraction {result.lost_fraction:.1%}{measured}"
                        if result.lost_fraction is not None else ""), f"  {evidence}"]


def _capture_lines(f: IntegrityFigures) -> list[str]:
    """The capture's nsys and driver, and the API calls against the GPU rows they paired with."""
    c = f.capture
    driver = f"on a CUDA {c.driver_cuda} driver" if c.driver_cuda else "driver not recorded"
    newest = f", traces CUDA {c.nsys_newest_cuda}" if c.nsys_newest_cuda else ""
    L = [f"  capture: nsys {c.nsys_version}{newest}; {driver}"
         + ("  << nsys older than the driver" if c.nsys_older_than_driver else ""),
         f"  API calls vs GPU rows (paired by process and correlation id; method: {f.method}):"]
    for a, label in ((f.api.kernel, "kernel launches"), (f.api.graph, "graph launches"), (f.api.copy, "memcpy calls"),
                     (f.api.memset, "memset calls")):
        L.append(f"    {label:<16}{a.calls:>10,}   without a GPU row {a.without_gpu:>9,}")
    kernels = "kernels + graphs" if f.graph_runs else "kernels"
    for g, label in ((f.gpu.kernel, kernels), (f.gpu.copy, "copies"), (f.gpu.memset, "memsets")):
        w = "-" if g.without_api is None else f"{g.without_api:,}"
        L.append(f"    {label:<16}{g.rows:>10,}   without an API call {w:>7}")
    if f.graph_runs:
        L.append(f"    ({f.graph_runs:,} of the {kernels} are graph launches traced whole: one GPU row each)")
    if f.migrations:
        L.append(f"    unified-memory migrations {f.migrations:,}: made by the driver on page faults, with no API "
                 "call (not counted above)")
    sh = f.shared_correlation_ids
    L.append(f"    correlation ids held by several API calls: {sh.count:,}"
             + (" (each GPU operation joins the outermost call)" if sh.count else ""))
    return L


def _timeline_lines(timeline: Sequence[ProcessActivity]) -> list[str]:
    """Each process's GPU operations against its own CPU events over time (a capture cut short shows)."""
    L = []
    for tl in timeline:
        L.append(f"  process {tl.pid}: GPU operations vs its {tl.activity.upper()} events per second "
                 f"({TIMELINE_BINS} bins of {tl.bin_ns / 1e6:,.1f} ms)")
        L.append(f"    GPU ops |{_spark(tl.gpu_ops_per_s)}| peak {max(tl.gpu_ops_per_s):,.0f}/s, "
                 f"{tl.gpu_ops:,} in all")
        cpu = tl.cpu_events_per_s
        L.append(f"    {tl.activity:<7} |{_spark(cpu)}| peak {max(cpu):,.0f}/s, "
                 f"{tl.cpu_events:,} in all; after the last GPU operation: {tl.cpu_events_after:,} "
                 f"({tl.cpu_share_after:.1%})")
    return L


def _nsys_lines(d: NsysDiagnostics) -> list[str]:
    """What nsys itself said in the export: its event counts, messages and doubts (explained or not)."""
    L = []
    if d.cuda_events_collected is not None:
        L.append(f"  nsys counted {d.cuda_events_collected:,} CUDA events; "
                 f"the export holds {d.cuda_rows_exported:,}")
    for m in d.messages[:8]:
        L.append(f"  nsys (in the export): {m}")
    for x in d.doubts[:12]:
        whom = f" of process {x.pid}" if x.pid is not None else ""
        times = f", {x.times} times" if x.times > 1 else ""
        L.append(f"  nsys doubts{whom}{times}: \"{x.said}\" => "
                 + (f"explained: {x.explained}" if x.explained else "NOT explained by the rows or nsys's log"))
    return L
