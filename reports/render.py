"""report.md and report.html from the results table. Pure text out."""
from __future__ import annotations

import html

import pandas as pd

from ..analysis.render import palette
from ..analysis.render.formats import MS as IDLE_PER_STEP
from ..analysis.result import Finding
from ..nsys_core.contracts import STAGES as STAGE_NAMES
from .compare import NO_GPU

# the palette's keys the charts draw, named once in the HTML report's colour key
KEY_SHOWN = ("compute", "busy", "DtoH", "DtoH/Pageable", "HtoD", "HtoD/Pageable", "DtoD", "unified", *palette.causes(),
             "other")


def _f(v, fmt):
    return "" if v is None or (isinstance(v, float) and v != v) else fmt.format(v)


COLUMNS = [  # (heading, row -> cell); the stage-only ones are left out where no row has them
    ("trace", lambda r: r["stage"]), ("run", lambda r: r.get("run") or ""),
    ("steps/s", lambda r: _f(r["steps_per_s"], "{:.2f}")),
    ("vs baseline", lambda r: _f(r.get("speedup_vs_baseline"), "{:.1f}x")),
    ("of ceiling", lambda r: _f(r.get("of_ceiling"), "{:.0%}")),
    ("GPU busy", lambda r: _f(r["gpu_utilization"], "{:.0%}")), ("compute", lambda r: _f(r["compute_utilization"], "{:.0%}")),
    ("idle per step", lambda r: _f(r["gap_per_step_ms"], IDLE_PER_STEP)), ("DtoH per copy", lambda r: _f(r["dtoh_ms"], "{:,.1f} ms")),
    ("DtoH GB/s", lambda r: _f(r["dtoh_gbps"], "{:.1f}")), ("DtoH memory", lambda r: r["dtoh_memory"]),
    ("overlap", lambda r: _f(r["dtoh_overlap"], "{:.0%}")), ("integrity", lambda r: r["integrity"]),
    ("loop", lambda r: _f(r.get("loop_s"), "{:,.2f} s")),
    ("set-up", lambda r: _f(r.get("setup_s"), "{:,.1f} s")), ("top line", lambda r: r.get("top_line") or ""),
]
# shown only where a row has one: the stages' (run: a failed program; integrity: a bench's check), the GPU's (a report
# of CPU-only runs is not a table of empty cells), a user's run's (its loop time as verify reads it), a CPU-only
# capture's (its set-up, its loop's costliest line)
STAGE_ONLY = {"vs baseline", "of ceiling", "run", "integrity", "GPU busy", "compute", "idle per step", "DtoH per copy",
              "DtoH GB/s", "DtoH memory", "overlap", "loop", "set-up", "top line"}
STAGES_TITLE, RUNS_TITLE = "Transfer bottlenecks by stage", "Your runs: where the time went"


def all_stages(df: pd.DataFrame) -> bool:
    """Whether every row is one of the toolkit's own stages (the bundled report), not the user's runs."""
    return all(r["stage"].split("-")[0] in STAGE_NAMES or r["stage"] in STAGE_NAMES for r in df.to_dict("records"))


def report_title(df: pd.DataFrame) -> str:
    """The report's title: the bundled stages', or the user's runs' (a report of one's own programs is no stage table)."""
    return STAGES_TITLE if not len(df) or all_stages(df) else RUNS_TITLE


def results_markdown(df: pd.DataFrame) -> str:
    """The results table in Markdown (the first column says 'stage' when every row is one of the toolkit's)."""
    rows = df.to_dict("records")
    cols = [(h, f) for h, f in COLUMNS if h not in STAGE_ONLY or any(f(r) for r in rows)]
    stages = all_stages(df)
    heads = ["stage" if h == "trace" and stages else h for h, _ in cols]
    lines = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        lines.append("| " + " | ".join(str(f(r) or "") for _, f in cols) + " |")
    return "\n".join(lines)


def _cost(d: Finding) -> str:
    """A finding's severity and what it costs, as the analysis ordered them (a CPU-only line's share is of the main
    thread's loop, the set-up before it left out; any other's of the window)."""
    of = "the main thread's loop" if d.rule == "cpu-hotspot" else "the window"
    return (f"{d.severity}, {d.impact_ns / 1e6:,.1f} ms = {100 * d.impact_fraction:.0f}% of {of}"
            if d.impact_ns else d.severity)


def shown(findings: tuple[Finding, ...]) -> list[Finding]:
    """The findings a reader acts on (the analysis's order: by impact); low ones are counted, not listed."""
    return [d for d in findings if d.severity != "low"]


def _same(d: Finding) -> tuple:
    return d.rule, d.evidence, d.suggestion


def shared_findings(df: pd.DataFrame) -> list[tuple[Finding, list[str]]]:
    """The shown findings that two stages or more have word for word (a short capture's '3 steps captured'): each
    with its stages, said once instead of under every stage."""
    seen: dict[tuple, tuple[dict, list[str]]] = {}
    for r in df.to_dict("records"):
        for d in shown(r["diagnosis"]):
            seen.setdefault(_same(d), (d, []))[1].append(r["stage"])
    return [(d, stages) for d, stages in seen.values() if len(stages) > 1]


def _stages_of(stages: list[str], df: pd.DataFrame) -> str:
    return "every stage" if len(stages) == len(df) else f"{len(stages)} of {len(df)}: {', '.join(stages)}"


def diagnosis_markdown(df: pd.DataFrame) -> str:
    """Each stage's shown findings in Markdown, with their cost and fix; a finding several stages share word for
    word said once, first, with the stages it is in."""
    out = []
    shared = shared_findings(df)
    if shared:
        out.append("### In several stages")
        for d, stages in shared:
            out.append(f"- **{d.rule}** ({_stages_of(stages, df)}; {_cost(d)}): {d.evidence}.  \n"
                       f"  *Fix:* {d.suggestion}" + _buys_md(d))
        out.append("")
    common = {_same(d) for d, _ in shared}
    for r in df.to_dict("records"):
        out.append(f"### {r['stage']}")
        mine = [d for d in shown(r["diagnosis"]) if _same(d) not in common]
        also = [d.rule for d in shown(r["diagnosis"]) if _same(d) in common]
        if not mine and not also:
            out.append("No finding of note: nothing in this trace costs 2% of the window or more.")
        for d in mine:
            out.append(f"- **{d.rule}** ({_cost(d)}): {d.evidence}.  \n{_line_md(d)}  *Fix:* {d.suggestion}"
                       + _buys_md(d))
        if also:
            out.append(f"- also {', '.join(also)} (above, in several stages)")
        low = len(r["diagnosis"]) - len(shown(r["diagnosis"]))
        if low:
            out.append(f"- ({low} low-impact finding{'s' if low > 1 else ''} not listed: analyze-trace --all shows them)")
        out.append("")
    return "\n".join(out)


def results_note(df: pd.DataFrame) -> str:
    """Where the steps/s come from, and what some rows cannot give."""
    rows = df.to_dict("records")
    traced = [r["stage"] for r in rows if r["throughput_source"] != "bench (unprofiled)"]
    note = ("steps/s from the unprofiled bench (tracing slows the pipeline)" if not traced else
            "steps/s counted from the trace's own steps (a profiled run over its capture window, not the unprofiled bench: "
            "not comparable with the bench's figures) for " + ", ".join(traced)
            + ("; from the unprofiled bench for the others" if len(traced) < len(rows) else ""))
    note += ". Every other column comes from each trace."
    if any(r.get("loop_s") is not None for r in rows):
        note += (" loop: the program's loop by its own clock, first iteration to the end of its last output's work, "
                 "the figure `nsys-transfer verify` compares.")
    cpu = [r["stage"] for r in rows if NO_GPU in r.get("cannot_give", [])]
    if cpu and len(cpu) == len(rows):  # a report of CPU-only runs: its columns are theirs, said once
        note += (" No trace ran GPU work (captures on the CPU), so the GPU's columns are left out: set-up is the main "
                 "thread's before its loop (imports, model construction), top line the loop's costliest line of the "
                 "program, its role and share of the loop.")
    gaps = [f"{r['stage']}: {'; '.join(g for g in r['cannot_give'] if not (cpu and len(cpu) == len(rows) and g == NO_GPU))}"
            for r in rows if [g for g in r.get("cannot_give", []) if not (len(cpu) == len(rows) and g == NO_GPU)]]
    return note + ("  \nNot given (left empty): " + " | ".join(gaps) + "." if gaps else "")


def markdown(df: pd.DataFrame, charts: dict[str, str], sources: dict[str, str], note: str, gpus_md: str = "",
             gpu_charts: dict[str, str] | None = None, before_after: tuple[str, str | None] | None = None,
             captions: dict[str, str] | None = None, also: tuple[str, str] | None = None) -> str:
    """report.md: the note, the results table, the before/after comparison of two traces of one program, the
    charts (with their captions), each stage's diagnosis, the GPUs section and, with `also` (folder, its results
    table), the bundled report beside this one."""
    parts = [f"# {report_title(df)}", "", note, ""]
    if len(df):
        parts += ["## Results", "", results_markdown(df), "", results_note(df), ""]
    if before_after:
        text, chart = before_after
        parts += ["## Before and after", "", "```", text, "```", ""] + \
            ([f"![where the GPU's time went]({chart})", ""] if chart else [])
    for title, name in charts.items():
        parts += [f"## {title}", "", f"![{title}]({name})", ""]
        if (captions or {}).get(name):
            parts += [captions[name], ""]
    if len(df):
        parts += ["## Diagnosis", "", diagnosis_markdown(df)]
    if gpus_md:
        parts += ["## Several GPUs", "", gpus_md]
        for title, name in (gpu_charts or {}).items():
            parts += [f"![{title}]({name})", ""]
    if also:
        parts += ["## The bundled H200 stages", "", f"The toolkit's own stages on an H200, for comparison: the whole "
                  f"report in [{also[0]}/report.md]({also[0]}/report.md) ([HTML]({also[0]}/report.html)).", "",
                  also[1], ""]
    parts += ["## Traces", ""]
    parts += [f"- {s}: `{p}`" for s, p in sources.items()]
    return "\n".join(parts) + "\n"


NO_RUNS = ("No trace of yours in runs/ yet. `make trace PROG=\"my.py\" NAME=before` traces your program (README, "
           "\"Your own program\"); `make report` then reports every run in runs/ here, with the bundled H200 stages "
           "beside them.")


def no_runs_markdown(also: tuple[str, str] | None) -> str:
    """report.md without runs of the user's: how to make one, and the bundled report's table and place."""
    parts = ["# Your runs", "", NO_RUNS, ""]
    if also:
        parts += ["## The bundled H200 stages", "", f"The toolkit's own stages on an H200: the whole report in "
                  f"[{also[0]}/report.md]({also[0]}/report.md) ([HTML]({also[0]}/report.html)).", "", also[1], ""]
    return "\n".join(parts) + "\n"


def no_runs_html(also: tuple[str, str] | None) -> str:
    """report.html without runs of the user's (no_runs_markdown's content)."""
    bundled = ""
    if also:
        bundled = (f"<h2>The bundled H200 stages</h2><p>The toolkit's own stages on an H200: the whole report in "
                   f"<a href=\"{also[0]}/report.html\">{also[0]}/report.html</a>.</p>" + _table_html(also[1]))
    return ("<!doctype html><html><head><meta charset=\"utf-8\"><title>Your runs</title></head><body>"
            f"<h1>Your runs</h1><p>{html.escape(NO_RUNS).replace('`', '')}</p>" + bundled + "</body></html>")


def _finding_html(d: Finding, where: str = "") -> str:
    at = (f"<br><i>At:</i> <code>{html.escape(d.line.place)}  {html.escape(d.line.code)}</code> "
          f"({html.escape(d.line.role)})" if d.line else "")
    buys = f"<br><i>Buys:</i> {html.escape(str(d.prediction))}" if d.prediction else ""
    return (f"<li><b>{html.escape(d.rule)}</b> ({html.escape(where + _cost(d))}): {html.escape(d.evidence)}."
            f"{at}<br><i>Fix:</i> {html.escape(d.suggestion)}{buys}</li>")


def _buys_md(d: Finding) -> str:
    """What the finding's fix buys (its prediction, as analyze-trace prints it: str(Prediction)), where it has one."""
    return f"  \n  *Buys:* {d.prediction}" if d.prediction else ""


def _line_md(d: Finding) -> str:
    """The program's line behind a finding, where its trace had the Python stacks (`code` section)."""
    line = d.line
    return f"  *At:* `{line.place}  {line.code}` ({line.role})  \n" if line else ""


def _table_html(md_table: str) -> str:
    """A Markdown table as an HTML table."""
    lines = md_table.splitlines()
    if not lines:
        return ""
    cells = lambda line: [c.strip() for c in line.strip().strip("|").split("|")]  # noqa: E731
    head = "".join(f"<th>{html.escape(h)}</th>" for h in cells(lines[0]))
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells(line)) + "</tr>" for line in lines[2:])
    return f"<table><tr>{head}</tr>{body}</table>"


def html_page(md_table: str, df: pd.DataFrame, charts: dict[str, str], note: str, gpus_md: str = "",
              gpu_charts: dict[str, str] | None = None, before_after: tuple[str, str | None] | None = None,
              captions: dict[str, str] | None = None, also: tuple[str, str] | None = None) -> str:
    """report.html: the same report as one HTML page beside its PNGs, with the palette's colour key."""
    diag = []
    shared = shared_findings(df) if len(df) else []
    if shared:
        diag.append("<h3>In several stages</h3><ul>" + "".join(
            _finding_html(d, _stages_of(stages, df) + "; ") for d, stages in shared) + "</ul>")
    common = {_same(d) for d, _ in shared}
    for r in df.to_dict("records"):
        items = "".join(_finding_html(d) for d in shown(r["diagnosis"]) if _same(d) not in common)
        also_rules = [d.rule for d in shown(r["diagnosis"]) if _same(d) in common]
        if also_rules:
            items += f"<li>also {html.escape(', '.join(also_rules))} (above, in several stages)</li>"
        diag.append(f"<h3>{html.escape(r['stage'])}</h3><ul>{items or '<li>No finding of note.</li>'}</ul>")
    imgs = "".join(f"<h2>{html.escape(t)}</h2><img src='{n}' alt='{html.escape(t)}' style='max-width:100%'>"
                   + (f"<p>{html.escape(captions[n])}</p>" if (captions or {}).get(n) else "")
                   for t, n in charts.items())
    if charts:
        imgs = f"<p style='font-size:13px'>Colours, the same in every chart: {palette.html_key(list(KEY_SHOWN))}</p>" + imgs
    if before_after:
        imgs = (f"<h2>Before and after</h2><pre>{html.escape(before_after[0])}</pre>"
                + (f"<img src='{before_after[1]}' alt='where the GPU&#39;s time went' style='max-width:100%'>"
                   if before_after[1] else "")) + imgs
    bundled = ""
    if also:
        bundled = (f"<h2>The bundled H200 stages</h2><p>The toolkit's own stages on an H200, for comparison: the whole "
                   f"report in <a href='{also[0]}/report.html'>{also[0]}/report.html</a>.</p>" + _table_html(also[1]))
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{report_title(df)}</title>"
            "<style>body{font-family:sans-serif;max-width:1200px;margin:auto}table{border-collapse:collapse}"
            "td,th{border:1px solid #ccc;padding:3px 6px;font-size:13px}</style></head><body>"
            f"<h1>{report_title(df)}</h1><p>{html.escape(note)}</p>" + _table_html(md_table)
            + imgs + ("<h2>Diagnosis</h2>" + "".join(diag) if diag else "") + _gpus_html(gpus_md, gpu_charts or {})
            + bundled + "</body></html>")


def _plain(text: str) -> str:
    """Markdown emphasis and code marks dropped, for HTML text."""
    return text.strip().replace("**", "").replace("*", "").replace("`", "")


def _gpus_html(gpus_md: str, charts: dict[str, str]) -> str:
    """The Markdown section as HTML: its table as a table, its other lines as paragraphs."""
    if not gpus_md:
        return ""
    lines, out, table = gpus_md.splitlines(), [], []
    for line in lines + [""]:
        if line.startswith("|"):
            if not set(line) <= set("|-"):
                table.append(line)
            continue
        if table:
            head, *body = table
            cell = lambda tag, row: "".join(f"<{tag}>{html.escape(_plain(c))}</{tag}>" for c in row.strip("|").split("|"))  # noqa: E731
            out.append("<table><tr>" + cell("th", head) + "</tr>" + "".join(f"<tr>{cell('td', r)}</tr>" for r in body)
                       + "</table>")
            table = []
        if line.strip():
            out.append(f"<p>{html.escape(_plain(line.lstrip('- ')))}</p>")
    imgs = "".join(f"<img src='{n}' alt='{html.escape(t)}' style='max-width:100%'>" for t, n in charts.items())
    return "<h2>Several GPUs</h2>" + "".join(out) + imgs


def _cpu_load(c: dict | None) -> str:
    return f"{c['busy']:.0%} of {c['cpus']}" if c else "-"


def gpus_markdown(rows: list[dict], verdicts: dict[str, Finding], scaling: list[dict], probe_note: str) -> str:
    """The 'Several GPUs' section: scaling (unprofiled, the `make scaling` record's rows), one row per GPU
    (compare.gpu_rows), each run's limit (its ranks.limit)."""
    out = []
    if scaling:
        out += ["Unprofiled scaling (goal >= 0.9 x N x single):", "",
                "| stage | CPUs | 1 GPU steps/s | N GPUs steps/s | per rank | x N x single | host CPUs busy (1 GPU / N) "
                "| integrity | limit |", "|---|---|---|---|---|---|---|---|---|"]
        for sc in scaling:
            out.append("| " + " | ".join([
                str(sc["stage"]), sc["label"] or str(sc["cpus"]), f"{sc['single_steps_per_s']:.2f}",
                f"{sc['total_steps_per_s']:.2f} ({sc['gpus']} GPUs)",
                ", ".join(f"{x:.2f}" for x in sc["per_rank_steps_per_s"] or []), f"**{sc['efficiency']:.2f}**",
                f"{_cpu_load(sc['host_cpu_single'])} / {_cpu_load(sc['host_cpu'])}", "ok" if sc["integrity_ok"] else "FAILED",
                sc["limit"]["evidence"]]) + " |")
        out.append("")
    if probe_note:
        out += [probe_note, ""]
    if not rows:
        return "\n".join(out) + "\n"
    out += ["| run | GPU | steps/s (trace) | busy | kernels | DtoH GB/s | pinned | kernels wait in | host DtoH peak | "
            "copies while others copy | limit |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        wait = (f"{r['idle_mostly_in']} ({r['idle_share']:.0%})" if r["idle_mostly_in"] and (r["idle_share"] or 0) >= 0.2
                else "")
        out.append("| " + " | ".join([
            r["run"], r["gpu"], _f(r["steps_per_s"], "{:.2f}"), _f(r["utilization"], "{:.0%}"),
            _f(r["compute_utilization"], "{:.0%}"), _f(r["dtoh_gbps"], "{:.1f}"), _f(r["dtoh_pinned_share"], "{:.0%}"),
            wait, _f(r["host_peak_gbps"], "{:.0f} GB/s"), _f(r["slowdown"], "{:.2f} x solo"), r["limit"]]) + " |")
    out.append("")
    for run, lim in verdicts.items():
        out.append(f"- **{run}**: [{lim.rule}] {lim.evidence}.  \n  *Next:* {lim.suggestion}")
    return "\n".join(out) + "\n"
