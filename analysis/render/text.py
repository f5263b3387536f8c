"""The human-readable summary of one analysis (text for the terminal). Pure: dict in, str out."""
from __future__ import annotations

import textwrap

from nsys_transfer.analysis.load.python_stacks import place_of
from nsys_transfer.analysis.rank_summary import STRAGGLER_BELOW, SUMMARISE_OVER, spread
from nsys_transfer.analysis.rules.capture import failed_run_evidence
from nsys_transfer.analysis.rules.facts import ProgramEnd
from nsys_transfer.analysis.rules.capture_checks import DOUBTFUL_PREFIX
from nsys_transfer.analysis.common.schema import own_findings
from nsys_transfer.analysis.comparison import finding_name


MS = "{:,.1f} ms"  # every duration the text prints, and the report's table and charts print beside it (one format)


def _ms(ns) -> str:
    return "-" if ns is None else MS.format(ns / 1e6)


def _gbps(x) -> str:
    """A rate, or n/a where nothing gives one (copies of zero length)."""
    return "n/a GB/s" if x is None else f"{x:.1f} GB/s"


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _sync_split(m: dict) -> str:
    """"3 sync / 5 async", and how many no CUDA API row tells apart (a damaged or API-less export)."""
    unknown = m["count"] - m["sync"] - m["async"]
    return f"{m['sync']} sync / {m['async']} async" + (f" / {unknown} unknown (no CUDA API row)" if unknown else "")


SHOWN = ("high", "medium", "info")


def finding_lines(findings: list[dict], show_all: bool = False) -> list[str]:
    """High and medium findings (and capture notes) with their cost; how many lower ones there are."""
    L, hidden = [], 0
    for d in findings:
        if not show_all and d["severity"] not in SHOWN:
            hidden += 1
            continue
        cost = f" ({_ms(d['impact_ns'])}, {100 * d['impact_fraction']:.0f}%)" if d["impact_ns"] else ""
        L.append(f"  [{d['severity']}] {d['rule']}{cost}: {d['evidence']}")
        L += code_line(d.get("line"))
        L.append(f"      -> {d['suggestion']}")
    if hidden:
        L.append(f"  ({hidden} lower-impact finding{'s' if hidden > 1 else ''} not shown; --all shows them)")
    return L


def site_place(site: dict) -> str:
    """A finding's or the code section's line (its JSON), as a person names it: `main.py:31`."""
    return place_of(site["file"], site["line"], site.get("function", ""))


def code_line(site: dict | None, indent: str = "      ") -> list[str]:
    """`at main.py:31  for x, y in loader`, and the way the work is reached from it, where a finding has its line."""
    if not site:
        return []
    place = site_place(site)
    out = [f"{indent}at {place}  {site['code']}  ({site['role']}, {100 * site['share']:.0f}% of the sampled time here)"]
    if len(site["path"]) > 1:
        out.append(f"{indent}   via " + " -> ".join(site["path"]))
    return out


def code_section_lines(code: dict | None, lined: set[str] = frozenset()) -> list[str]:
    """Where a CPU-only capture's time went, line by line; or one line on why no finding names its line. lined: the
    places a finding shows with its path (not repeated here)."""
    if not code:
        return []
    if code.get("missing"):
        return [f"program lines: {code['missing']}"]
    if not code.get("cpu") and not code.get("setup"):
        return []
    out = _setup_lines(code.get("setup"))
    loop = "in its loop" if code.get("setup") else ""
    out.append(f"where the main thread's time went{' ' + loop if loop else ''}, line by line ({code['source']}):")
    for site in code["cpu"]:
        out.append(f"  {_ms(site['ns'])} ({100 * site['share']:.0f}%)  {site_place(site)}  {site['code']}  "
                   f"[{site['role']}]")
        if site.get("growth_ms"):
            a, b = site["growth_ms"]
            out.append(f"      growing: {a:,.1f} ms a call at the start of the run, {b:,.1f} ms at the end")
        if len(site["path"]) > 1 and site_place(site) not in lined:
            out.append("      via " + " -> ".join(site["path"]))
    return out


def _setup_lines(setup: dict | None) -> list[str]:
    """A CPU-only capture's set-up before its loop (imports, model construction), apart from the loop's lines."""
    if not setup:
        return []
    kinds = ", ".join(f"{k} {_ms(v)}" for k, v in setup["by_kind"].items() if v)
    out = [f"set-up before the loop (until {setup['until']}; paid once a run, left out of the lines below): "
           f"{_ms(setup['ns'])}" + (f" ({kinds})" if kinds else "")]
    out += [f"  {_ms(site['ns'])}  {site_place(site)}  {site['code']}" for site in setup["lines"]]
    return out


def text_report(s: dict, show_all: bool = False) -> str:
    """The analysis summary as the plain-text report (all findings with show_all)."""
    t = s["trace"]
    failed = bool((t.get("program_end") or {}).get("failed"))
    L = _header_lines(t, failed)
    L += _window_lines(s["window"])
    if s.get("setup"):
        L += _setup_section_lines(s["setup"])
    g = s["gpu"]
    st = s["steps"]
    L += _gpu_lines(g, t)
    link = t.get("link") or {}
    if link.get("gbps"):
        L.append(f"host link: {link['gbps']:.1f} GB/s ({link['source']})")
    L += _steps_lines(st, bool(g and s["nvtx"]["count"]), failed=failed)
    if st.get("setup"):
        L.append(_setup_line(st["setup"]))
    gp = s["gaps"]
    if g:
        L.append(f"idle gaps >= {_ms(gp['threshold_ns'])}: {gp['count']}, total {_ms(gp['total_ns'])}")
        for c in gp["covered_by"][:3]:
            L.append(f"    {100 * c['share']:.0f}% of gap time inside {_range_word(s)} '{c['name']}' on the launching "
                     "thread")
    for key, label in (("dtoh", "DtoH"), ("htod", "HtoD")):
        m = s["memcpy"][key]
        if m["count"]:
            kinds = ", ".join(f"{k} {v}" for k, v in m["kinds"].items())
            L.append(f"{label}: {m['count']} copies, {m['bytes'] / 1e9:.2f} GB, total {_ms(m['total_ns'])}, "
                     f"max {_ms(m['max_ns'])}, {_gbps(m['gbps'])}; host memory: {kinds}; "
                     f"{_sync_split(m)}; overlapped kernels {_pct(m['overlap_fraction'])}")
    if s["memcpy"].get("unified"):
        L.append(_unified_line(s["memcpy"]["unified"]))
    h = s["memcpy"].get("dtoh_host")
    if h and s["memcpy"]["dtoh"]["count"] and h["peak_gbps"] is not None:
        L.append(f"host-side DtoH (all devices, {h['bin_ns'] / 1e6:g} ms bins): peak {h['peak_gbps']:.1f} GB/s, "
                 f"mean {h['mean_gbps']:.1f} GB/s over the window")
    k = s["kernels"]
    L += _kernel_lines(k)
    if s["nvtx"]["count"]:
        L.append(f"{_range_word(s)} ranges (total): " + ", ".join(f"{r['name']} {_ms(r['total_ns'])} x{r['count']}"
                                                     for r in s["nvtx"]["ranges"][:6]))
    findings = own_findings(s)  # the multi-GPU limit is ranks_report's
    L += code_section_lines(s.get("code"), {site_place(f["line"]) for f in findings if f.get("line")})
    if any(show_all or f["severity"] in SHOWN for f in findings):
        L.append("diagnosis (by what each costs):")
    L += finding_lines(findings, show_all)
    if g:  # what limits the program: the first thing read (after a warning that the trace is incomplete), and the last
        at = 1 + sum(1 for line in L[1:3] if line.startswith("!!"))  # after the failed-run and trust warnings
        L.insert(at, wrapped(verdict_line(s["diagnosis"], s["window"].get("source", ""),
                                          (s.get("ranks") or {}).get("limit"))))
        L.append(L[at])
    return "\n".join(L)


def _range_word(s: dict) -> str:
    """What the trace's ranges are: torch.profiler's record_function ranges, nsys's NVTX ranges."""
    return "record_function" if s["trace"].get("profiler") == "torch.profiler" else "NVTX"


def _header_lines(t: dict, failed: bool) -> list[str]:
    """The trace and its GPUs, then the warnings read before any figure: a failed run, an incomplete trace."""
    gpus = ", ".join(sorted({g.get("name") or "?" for g in t["gpus"]})) or "none listed"
    made_by = t["nsys_version"] if str(t["nsys_version"]).startswith("torch.profiler") else f"nsys {t['nsys_version']}"
    L = [f"{t['path']}  ({made_by}; GPUs: {gpus})"]
    integ = t.get("integrity") or {}
    if failed:
        L.append(failed_run_line(t["program_end"]))
    if integ.get("verdict") == "lossy":
        L.append(f"!! INCOMPLETE TRACE: {integ.get('evidence', 'the capture lost CUDA events')} The GPU figures below "
                 "count only what was recorded.")
    elif integ.get("verdict") == "doubtful":
        L.append(f"!! POSSIBLY INCOMPLETE TRACE: {integ.get('evidence', 'nsys questions the capture')} The figures "
                 "below count only what nsys recorded.")
    return L


WIDTH = 118  # a verdict longer than this goes on over indented lines, each cut between words


def wrapped(line: str) -> str:
    """A long line folded at WIDTH between words (never inside one: a path or a call stays whole), the lines after
    the first indented."""
    return textwrap.fill(line, WIDTH, subsequent_indent="    ", break_long_words=False, break_on_hyphens=False)


def verdict_line(findings: list[dict], source: str = "", limit: dict | None = None) -> str:
    """One line that says what limits the program (in its steady state, where the window is that): the costliest
    finding (the trust notes first), or that nothing costs a measurable share. With several GPUs the multi-GPU limit
    leads where it names the cause (schema.with_limit): said as what limits the GPUs, its cost being its own."""
    costed = [f for f in findings if f["severity"] != "info" or f["rule"] in ("failed-run", "incomplete-trace")]
    head = "verdict (steady state)" if source.startswith("steady state") else "verdict"
    if costed and ((costed[0].get("line") or {}).get("growth_ms")):
        head = "verdict (a cost that grows: no steady state)"
    if not costed:
        return (f"{head}: nothing costs as much as 0.1% of the GPUs' time, so the program keeps its GPU fed: leave its "
                "transfers as they are.")
    f = costed[0]
    if f["rule"] == "failed-run":
        return "verdict: the program failed: fix it and trace it again before reading any figure (see failed-run)"
    if f["rule"] == "incomplete-trace":
        what = ("nsys says the trace may be incomplete" if f["evidence"].startswith(DOUBTFUL_PREFIX)
                else "the trace is incomplete")
        return f"verdict: {what}: re-capture it before trusting any figure (see incomplete-trace)."
    if f is limit or f == limit:
        return f"{head}: {f['rule']} limits these GPUs (see limit below): {_first_clause(f['suggestion'])}."
    what = f" ({f['subject']})" if f["subject"] and f["subject"] not in ("the capture",) else ""
    return (f"{head}: {f['rule']}{what} limits this program, {100 * f['impact_fraction']:.0f}% of the GPUs' time: "
            f"{_first_clause(f['suggestion'])}.")


def _first_clause(text: str) -> str:
    """A suggestion's first clause, to its first semicolon, whole (its action: each rule's suggestion says what to
    do before its first semicolon); wrapped() folds it where it is long."""
    return text.split("; ")[0].rstrip(".")


def _window_lines(w: dict) -> list[str]:
    """The window's length and source, in trace ns and in ms from the capture's start (the origin `--window 1.5s:`
    counts from: the session start, or the first recorded event where the export records none)."""
    if "duration_ns" not in w:
        return []
    first = w.get("origin_ns", w.get("capture_start_ns"))
    rel = (f" = {(w['start_ns'] - first) / 1e6:,.1f} to {(w['end_ns'] - first) / 1e6:,.1f} ms from the "
           f"{w.get('origin') or 'capture start'}" if first is not None else "")
    lines = [f"window: {_ms(w['duration_ns'])} ({w['source']}; {w['start_ns']}:{w['end_ns']} ns{rel})"]
    if w.get("teardown_ns"):  # verify counts it: the program's clock runs through it
        lines.append(f"  then the output pipeline's close: {_ms(w['teardown_ns'])} past the window (its workers joined, "
                     "its buffers unpinned and unmapped), on the program's own clock")
    return lines


def _setup_section_lines(s: dict) -> list[str]:
    """The set-up before the steady state (the `setup` section), which the verdict leaves out."""
    w = s["warmup"]
    warm = ""
    if w["count"]:
        durations = ", ".join(f"{d / 1e6:,.1f}" for d in w["durations_ns"][:4])
        unit = "step" if s["source"] == "steps" else "iteration"
        first = f"the first {unit}" if w["count"] == 1 else f"the first {w['count']} {unit}s"
        warm = (f"; warm-up: {first} "
                f"({durations} ms against a median of {w['median_step_ns'] / 1e6:,.1f} ms)")
    lines = [f"Set-up before the steady state (left out of the verdict): {s['duration_ns'] / 1e6:,.1f} ms, GPU busy "
             f"{s['gpu_busy_ns'] / 1e6:,.1f} ms ({s['kernels']:,} kernels){warm}"]
    lines += [f"  {c['cause']}: {c['ns'] / 1e6:,.1f} ms in {c['kind']} ({c['top']})" for c in s["causes"][:6]]
    cs = s.get("cpu_samples") or {}
    if cs.get("samples"):
        kinds = ", ".join(f"{k} {v:.0%}" for k, v in list(cs["kinds"].items())[:4])
        lines.append(f"  the launching thread's CPU samples in it ({cs['samples']:,}): {kinds}")
    return lines


def _gpu_lines(g: dict | None, t: dict) -> list[str]:
    """GPU busy and compute per device; without GPU work, what the OS calls took instead."""
    if g:
        return [f"GPU busy {_pct(g['utilization'])}, compute (kernels) {_pct(g['compute_utilization'])}"
                + ("".join(f"; device {d['device']}: {_pct(d['utilization'])} / {_pct(d['compute_utilization'])}"
                           for d in g["devices"]) if len(g["devices"]) > 1 else "")]
    L = [t["cpu_only"]["line"] if t.get("cpu_only") else "no GPU activity in this trace (NVTX / OS runtime only)"]
    if t.get("os_runtime"):
        L.append("OS runtime calls (total): " + ", ".join(f"{r['name']} {_ms(r['total_ns'])} x{r['count']}"
                                                        for r in t["os_runtime"][:6]))
    return L


def failed_run_line(end: dict) -> str:
    """The first thing said of a failed run: that it failed, how, and what to do."""
    return (f"!! FAILED RUN: {failed_run_evidence(ProgramEnd.of(end))}. The figures below are of a run that did not finish: fix the "
            "program, then trace it again.")


def _steps_lines(st: dict, say_none: bool, failed: bool = False) -> list[str]:
    """The steps found and their rate (of a failed run: said to be one); that none were found, where the trace has
    ranges they could have been."""
    if st["count"]:
        return [f"steps: {st['count']} matching {st['regex']!r} ({st.get('source', 'given')}), "
                f"{st['per_second']:.2f} steps/s{_period(st['per_second'])}, the step ranges {_ms(st['mean_ns'])} "
                "on average on the CPU"
                + (f", GPU idle {_ms(st['mean_gpu_idle_ns'])} per step" if st["mean_gpu_idle_ns"] is not None else "")
                + ("; a failed run: not its throughput (its last step may be the one it failed in)" if failed else "")]
    return ["steps: none found (no NVTX range recurs with a counter: --step-regex names one); no per-step figures"] \
        if say_none else []


def _period(per_second: float | None) -> str:
    """' (X ms a step)': the time per step that the steps/s says, from that one figure (a step range on the CPU may
    be much shorter than the period while the GPU works asynchronously)."""
    return f" ({_ms(1e9 / per_second)} a step)" if per_second else ""


def _setup_line(su: dict) -> str:
    """The set-up before the first step, what the GPU's idle time there went to, and that per-step costs leave it out."""
    idle = ", ".join(f"{k} {_ms(v)}" for k, v in sorted(su["idle_ns"].items(), key=lambda kv: -kv[1])[:3])
    calls = f"; {su['sync_calls']:,} synchronising calls" if su["sync_calls"] else ""
    return (f"set-up before the first step: {_ms(su['before_first_step_ns'])} (GPU idle there: {idle or 'none'}"
            f"{calls}); host-sync, launch and mapping costs count from the first step on")


def _unified_line(u: dict) -> str:
    """The unified-memory migrations by direction, and how many the driver made on demand."""
    dirs = "; ".join(f"{label} {u[key]['count']:,} ({u[key]['bytes'] / 1e9:.2f} GB, {_ms(u[key]['total_ns'])}, "
                     f"{u[key]['on_demand']:,} on demand)" for key, label in (("htod", "HtoD"), ("dtoh", "DtoH"),
                                                                              ("dtod", "DtoD")) if key in u)
    od = u["on_demand"]
    return (f"unified-memory migrations: {dirs}; on demand: {_ms(od['gpu_ns'])} of GPU time, {_ms(od['kernel_overlap_ns'])} "
            "of it while kernels ran" + ("" if u["cause_recorded"] else " (the export records no causes)"))


def _kernel_lines(k: dict) -> list[str]:
    """The kernels' count, time and top names; the CUDA graphs they ran in."""
    L = []
    if k["count"] or k.get("graphs"):
        count = k["count"] if k["count"] or not k.get("graphs") else "none one by one (all inside CUDA graphs)"
        L.append(f"kernels: {count}, total {_ms(k['total_ns'])}; top: "
                 + "; ".join(f"{str(r.get('shown_name') or r['name'])[:60]} "
                             + ("n/a" if r["pct"] is None else f"{r['pct']:.0f}%") for r in k["top"][:3]))
    if k.get("graphs"):
        L.append(_graphs_line(k["graphs"]))
    return L


def _graphs_line(gr: dict) -> str:
    """How much GPU time ran inside CUDA graphs, and whether their kernels are in the trace."""
    how = ("traced as whole graphs (nsys --cuda-graph-trace=graph): the kernels inside are not in the trace; trace "
           "with --cuda-graph-trace=node to see them" if gr["traced_as"] == "graph" else
           f"traced node by node: {gr['kernels_inside']:,} kernels inside them")
    return (f"CUDA graphs: {gr['launches']:,} launches, {_ms(gr['gpu_ns'])} on the GPU "
            f"({_pct(gr['share_of_kernel_time'])} of kernel time); {how}")


def ranks_report(r: dict) -> str:
    """Several GPUs (the JSON's `ranks`): one line per GPU, the shared host-side DtoH load, the limit. GPUs on
    several hosts: a line per host too, and the host-side load of the worst (the limiting one)."""
    L = _clock_lines(r["traces"])
    if len(r["gpus"]) > SUMMARISE_OVER:
        L += gpu_spread_lines(r["gpus"])
    else:
        L.append(f"{len(r['gpus'])} GPUs, each over its own steps:")
        L += [_gpu_line(g) for g in r["gpus"]]
    hosts = r.get("hosts") or []
    L += host_lines(hosts)
    h = r["host_dtoh"]
    where = f" on {_host_name(h['host'])}, the worst of {len(hosts)} hosts" if hosts else ", all GPUs"
    L.append(f"host-side DtoH{where} ({h['bin_ns'] / 1e6:g} ms bins): peak {h['peak_gbps']:.1f} GB/s, mean "
             f"{h['mean_gbps']:.1f} GB/s; shared capacity {h['capacity_gbps']:.1f} GB/s ({h['capacity_source']})")
    for c in r["contention"]:
        if c["gbps_together"] is not None:
            L.append(f"  {c['memory']} copies while another GPU{' of the host' if hosts else ''} copies "
                     f"({c['copies_together']} of {c['copies']}): "
                     f"{c['gbps_together']:.1f} GB/s" + (f" = {c['slowdown']:.2f} x solo {c['solo_gbps']:.1f} GB/s "
                                                        f"({c['solo_source']})" if c["slowdown"] else ""))
    run = r.get("run")
    if run and run.get("steps_per_s"):
        cpu = run.get("host_cpu")
        L.append(f"run record ({'profiled' if run['profiled'] else 'unprofiled'}): {run['steps_per_s']:.2f} steps/s in "
                 f"total, drain included" + (f"; host CPUs {cpu['busy']:.0%} busy ({cpu['busy_cores']:.1f} of "
                                             f"{cpu['cpus']})" if cpu else ""))
    lim = r["limit"]
    L.append(f"limit: [{lim['rule']}] {lim['evidence']}")
    L.append(f"      -> {lim['suggestion']}")
    return "\n".join(L)


def _clock_lines(traces: list[dict]) -> list[str]:
    """How several traces were put on one clock; the first few of many (the JSON's ranks.traces has every one)."""
    if len(traces) < 2:
        return []
    shown = traces if len(traces) <= SUMMARISE_OVER else traces[:3]
    line = "traces on one clock (session start): " + ", ".join(
        f"{t['label']}={t['path']} (+{t['clock_offset_ns'] / 1e9:.3f} s)" for t in shown)
    if len(shown) < len(traces):
        offsets = [t["clock_offset_ns"] / 1e9 for t in traces]
        line += (f", and {len(traces) - len(shown)} more ({len(traces)} traces, clock offsets +{min(offsets):.3f} to "
                 f"+{max(offsets):.3f} s)")
    return [line]


HOSTS_SHOWN = SUMMARISE_OVER  # host lines at most, the worst first; the rest counted


def host_lines(hosts: list[dict]) -> list[str]:
    """GPUs on several hosts (the JSON's `ranks.hosts[]`, the worst first): one line per host, its GPUs' steps/s, its
    least busy GPU's kernel share and its own DtoH load against its capacity; none with one host."""
    if not hosts:
        return []
    L = [f"{len(hosts)} hosts, each host's DtoH judged alone (the worst first):"]
    for i, h in enumerate(hosts[:HOSTS_SHOWN]):
        d = h["host_dtoh"]
        slow = "unmeasured" if h["slowdown"] is None else f"{h['slowdown']:.2f} x solo"
        L.append(f"  {_host_name(h['host'])}: {len(h['gpus'])} GPUs, {h['total_steps_per_s']:.2f} steps/s, kernels >= "
                 f"{_pct(h.get('compute_min'))} of their steps; DtoH peak "
                 f"{d['peak_gbps']:.1f} of {d['capacity_gbps']:.1f} GB/s ({_pct(h['peak_share'])}), mean "
                 f"{d['mean_gbps']:.1f} GB/s; copies while another of its GPUs copies: {slow}"
                 + ("  <- worst" if i == 0 else ""))
    if len(hosts) > HOSTS_SHOWN:
        L.append(f"  and {len(hosts) - HOSTS_SHOWN} more hosts (--json lists every one)")
    return L


def _host_name(name: str | None) -> str:
    return name or "the unnamed host"


def _gpu_line(g: dict) -> str:
    idle = (f"; kernels wait mostly in '{g['idle_mostly_in']}' ({_pct(g['idle_share'])} of their gaps)"
            if g.get("idle_mostly_in") and (g.get("idle_share") or 0) >= 0.2 else "")
    rate = f"{g['steps_per_s']:.2f} steps/s" if g.get("steps_per_s") else "no steps"
    dtoh = (f"DtoH {g['dtoh_bytes'] / 1e9:.1f} GB at {g['dtoh_gbps']:.1f} GB/s "
            f"({_pct(g['dtoh_pinned_share'])} pinned)" if g.get("dtoh_gbps") else "no DtoH")
    where = f", {_host_name(g['host'])}" if "host" in g else ""
    return (f"  {g['gpu']} (pid {g['pid']}{where}): {rate}; busy {_pct(g['utilization'])}, kernels "
            f"{_pct(g['compute_utilization'])}, {g['idle_gaps']} idle gaps ({_ms(g['idle_gap_ns'])}); {dtoh}{idle}")


SPREAD_ROWS = (("steps/s", "steps_per_s", "{:.2f}"), ("busy", "utilization", "pct"),
               ("DtoH GB/s", "dtoh_gbps", "{:.1f}"), ("idle in gaps", "idle", "pct"))
SLOWEST_NAMED = 10  # stragglers named at most; the rest counted


def gpu_spread_lines(gpus: list[dict]) -> list[str]:
    """Many GPUs (more than SUMMARISE_OVER): the spread of their figures (ranks.spread) and the slowest by name,
    in place of a line per GPU."""
    sp = spread(gpus)
    on = {g["gpu"]: f" on {_host_name(g['host'])}" for g in gpus if "host" in g}  # GPUs on several hosts
    L = [f"{len(gpus)} GPUs, each over its own steps (the spread; --json and --csv list every GPU):",
         f"  {'':<14}" + "".join(f"{q:>9}" for q in ("median", "min", "p10", "p90", "max"))]
    for label, key, fmt in SPREAD_ROWS:
        q = sp[key]
        cells = ["-"] * 5 if q is None else [_pct(q[k]) if fmt == "pct" else fmt.format(q[k])
                                             for k in ("median", "min", "p10", "p90", "max")]
        L.append(f"  {label:<14}" + "".join(f"{c:>9}" for c in cells))
    L.append("  (idle in gaps: time in idle gaps over the GPU's steps; busy: any GPU operation)")
    slow = sp["slowest"]
    if slow:
        named = ", ".join(f"{g['gpu']}{on.get(g['gpu'], '')} {g['steps_per_s']:.2f} ({_pct(g['below'])} below)"
                          for g in slow[:SLOWEST_NAMED])
        more = f", and {len(slow) - SLOWEST_NAMED} more" if len(slow) > SLOWEST_NAMED else ""
        L.append(f"slowest by steps/s (median {sp['steps_per_s']['median']:.2f}): {named}{more}")
        late = [g["gpu"] + on.get(g["gpu"], "") for g in slow if g["straggler"]]
        L.append(f"stragglers (more than {STRAGGLER_BELOW:.0%} below the median): "
                 + (", ".join(late[:SLOWEST_NAMED]) + (f", and {len(late) - SLOWEST_NAMED} more"
                                                       if len(late) > SLOWEST_NAMED else "") if late else "none"))
    return L


def _verify_cell(v, unit: str) -> str:
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    return f"{v:,.1f}{'%' if unit == '%' else ''}" if abs(v) >= 10 or unit == "%" else f"{v:,.3g}"


def verify_report(doc: dict) -> str:
    """The comparison as text: the verdict first and last, the figures, then the findings."""
    v = doc["verdict"]
    lines = [wrapped(f"VERDICT: {v['line']}"), f"before: {doc['before']['path']}", f"after:  {doc['after']['path']}"]
    lines += [f"warning: {w}" for w in doc["warnings"]]
    lines.append(f"\n{'figure':<28} {'before':>14} {'after':>14} {'change':>13}")
    for m in doc["metrics"]:
        unit = f" ({m['unit']})" if m["unit"] and m["unit"] != "%" else ""
        lines.append(f"{(m['label'] + unit)[:28]:<28} {_verify_cell(m['before'], m['unit']):>14} {_verify_cell(m['after'], m['unit']):>14} "
                     f"{_verify_change(m):>13}")
        if m.get("note"):
            lines.append(f"  ({m['note']})")
    lines.append(f"  throughput from {doc['metrics'][0]['source']}")
    loop = doc.get("loop")
    if loop:  # the headline's loop: why it differs from the steady state, and nsys's own cost where it can bias it
        lines.append(f"  the verdict's speed-up: {loop['why']}")
        if loop["profiler_cost"].get("said"):
            lines.append(f"  profiler's cost: {loop['profiler_cost']['said']}")
    lines.append(f"\n{'finding':<44} {'before':>10} {'after':>10}  status   (cost: {_verify_cost_unit(doc)})")
    for f in doc["findings"]:
        # the verdict's `new:` names the high and medium ones; a low one is said to be low here, not left to contradict it
        status = f"{f['status']} (low)" if f["status"] == "new" and f.get("after_severity") == "low" else f["status"]
        lines.append(f"{finding_name(f)[:44]:<44} {_ms(f['before_ns']):>10} {_ms(f['after_ns']):>10}  {status}")
    if not doc["findings"]:
        lines.append("(no costed finding on either side)")
    for reason in doc["gates"]["failed"]:
        lines.append(f"GATE FAILED: {reason}")
    lines.append(lines[0])
    return "\n".join(lines)


def _verify_change(m: dict) -> str:
    """A figure's change: in percent where the ratio means something (a factor from 10x up), else in its own unit
    (points for a percentage: 47.4% -> 99.6% is +52.2 pts; a figure that grew from near zero: +1,322.4 ms)."""
    if m["change"] is not None:  # ten times or more as a factor, as the verdict's '16.70x faster': +1570% reads badly
        return f"{1 + m['change']:.1f}x" if m["change"] >= 9 else f"{100 * m['change']:+.0f}%"
    if m.get("delta") is None:
        return ""
    unit = {"%": " pts", "": ""}.get(m["unit"], f" {m['unit']}")
    return f"{m['delta']:+,.1f}{unit}" if abs(m["delta"]) >= 0.1 or not m["delta"] else f"{m['delta']:+.2g}{unit}"


def _verify_cost_unit(doc: dict) -> str:
    units = {f["cost_unit"] for f in doc["findings"]}
    return units.pop().replace("ns", "ms") if len(units) == 1 else "ms"

