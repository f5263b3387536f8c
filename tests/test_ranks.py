"""Several GPUs, on real traces: a torchrun capture of 2 x H200 (one nsys, two ranks), the link probe traced on
both GPUs, and separate single-GPU traces put on one clock."""
import json
import sqlite3

import numpy as np
import pandas as pd
import pytest

from nsys_transfer.analysis import Trace
from nsys_transfer.analysis.load.inputs import resolve_input
from nsys_transfer.analysis.rank_summary import RankOptions, analyze_ranks, concurrent_fraction, session_offsets
from nsys_transfer.analysis.rules import ranks as rank_rules
from nsys_transfer.analysis import rank_summary as ranks_mod
from nsys_transfer.analysis.rules.ranks import RANK_RULES
from nsys_transfer.analysis.common.schema import SCHEMA, keys, trace_sections
from nsys_transfer.analysis.sections.base import section_keys
from conftest import ROOT, run_cli

X2 = ROOT / "reports" / "data" / "h200x2"
PROBE = json.loads((X2 / "probe.json").read_text())
KEYS, TRACE_SECTIONS = keys(section_keys()), trace_sections(section_keys())


@pytest.fixture(scope="module")
def x2():
    return {p.name.split(".")[0]: p for p in X2.glob("*.sqlite.xz")}


def _ranks(path, **kw):
    with Trace.open(path) as t:
        return analyze_ranks([t], RankOptions(**kw))


def test_copies_join_their_own_process_api_calls(x2):
    """Correlation ids repeat across the ranks' processes: each copy must meet its own call, once."""
    local, _ = resolve_input(x2["pinned-x2"])
    with sqlite3.connect(f"file:{local}?mode=ro", uri=True) as db:
        n_rows, n_ids = db.execute("SELECT count(*), count(DISTINCT correlationId) FROM CUPTI_ACTIVITY_KIND_MEMCPY").fetchone()
    assert n_ids < n_rows  # the trap is really in this trace
    from nsys_transfer.analysis.sections.copies import copy_table
    with Trace.open(x2["pinned-x2"]) as t:
        table = copy_table(t.device.memcpys, t.calls.memcpy_api, t.device.kernels)
        assert len(table) == n_rows
        assert table["api_name"].notna().all()
        assert ((table["api_global_tid"].to_numpy() >> 24) & 0xFFFFFF == table["pid"].to_numpy()).all()


def test_torchrun_capture_every_gpu_compute_bound(x2):
    r = _ranks(x2["pinned-x2"], probe=PROBE)
    d = r.devices
    assert list(d["device"]) == [0, 1] and d["pid"].nunique() == 2  # one rank per GPU
    assert (d["steps"] == 12).all() and (d["dtoh_pinned_share"] == 1.0).all()
    assert (d["compute_utilization"] > 0.9).all()
    assert r.summary["limit"]["rule"] == "gpu-compute"
    pinned = r.tables["contention"].set_index("memory").loc["Pinned"]
    assert 0.85 < pinned["slowdown"] < 1.05 and pinned["solo_source"] == "link probe"
    # two GPUs copying at once: the host sees more than one link's worth, never more than two
    h = r.summary["host_dtoh"]
    assert 60 < h["peak_gbps"] < 2 * 56 and h["capacity_source"].startswith("measured")


def test_article_streams_on_two_gpus_is_limited_inside_each_rank(x2):
    r = _ranks(x2["streams-x2"])
    assert r.summary["limit"]["rule"] == "rank-pipeline"
    assert (r.devices["idle_mostly_in"] == "copy to CPU").all() and (r.devices["dtoh_pinned_share"] == 0).all()
    assert "pin" in r.summary["limit"]["suggestion"]
    assert r.summary["host_dtoh"]["peak_gbps"] < 40  # pageable copies leave the shared bandwidth mostly unused


def test_link_probe_trace_measures_sharing_and_the_rule_follows_it(x2):
    r = _ranks(x2["linkprobe"])
    c = r.tables["contention"].set_index("memory")
    assert set(c.index) == {"Pinned", "Pageable"}
    assert (c["copies_together"] > 0).all() and c["gbps_alone"].notna().all()
    assert 50 < c.loc["Pinned", "gbps_alone"] < 60 and c.loc["Pageable", "gbps_alone"] < 20
    slow = c.loc["Pinned", "slowdown"]
    assert 0.85 < slow < 1.0  # a mild shared limit, measured from the copies themselves
    assert r.summary["limit"]["rule"] != "host-dtoh-bandwidth"
    strict = _ranks(x2["linkprobe"], slowdown_threshold=slow + 0.01)
    assert strict.summary["limit"]["rule"] == "host-dtoh-bandwidth"


def test_separate_traces_share_one_clock(h200):
    with Trace.open(h200["pinned"]) as a, Trace.open(h200["streams"]) as b:
        starts = [a.session_start_utc_ns, b.session_start_utc_ns]
        r = analyze_ranks([a, b], labels=["pinned", "streams"])
    offsets = [t["clock_offset_ns"] for t in r.summary["traces"]]
    assert offsets == session_offsets(starts) and min(offsets) == 0 and max(offsets) == abs(starts[0] - starts[1])
    assert list(r.devices["gpu"]) == ["pinned:GPU 0", "streams:GPU 0"]
    assert not r.summary["concurrent"] and r.summary["limit"]["rule"] == "not-concurrent"
    assert (r.copies["concurrent_fraction"] == 0).all()


def test_concurrent_fraction_counts_only_other_gpus():
    copies = pd.DataFrame({"gpu": ["a", "a", "b"], "start_ns": [0, 100, 50], "end_ns": [100, 200, 150]})
    assert np.allclose(concurrent_fraction(copies), [0.5, 0.5, 1.0])


def test_cli_several_gpus_and_several_traces(tmp_path, x2, h200):
    r = run_cli("-m", "nsys_transfer.analysis", str(x2["pinned-x2"]), "--probe", str(X2 / "probe.json"), "--json",
                str(tmp_path / "a.json"), "--plots", str(tmp_path / "p"))
    assert r.returncode == 0, r.stderr[-2000:]
    assert "limit: [gpu-compute]" in r.stdout and "GPU 1 (pid" in r.stdout
    s = json.loads((tmp_path / "a.json").read_text())
    assert s["schema"] == SCHEMA and list(s) == list(KEYS) and len(s["ranks"]["gpus"]) == 2
    # the limit names what limits the GPUs: it leads, so the verdict says what the limit line says
    assert s["diagnosis"][0] == s["ranks"]["limit"] and s["ranks"]["limit"]["subject"] in ("GPU 0", "GPU 1")
    assert r.stdout.splitlines()[1].startswith("verdict: gpu-compute limits these GPUs")
    assert (tmp_path / "p" / "pinned-x2_gpus.png").stat().st_size > 10_000
    r = run_cli("-m", "nsys_transfer.analysis", str(h200["pinned"]), str(h200["streams"]), "--json", str(tmp_path / "b.json"))
    assert r.returncode == 0, r.stderr
    s = json.loads((tmp_path / "b.json").read_text())  # several traces: the same schema, the one-trace sections null
    assert s["schema"] == SCHEMA and list(s) == list(KEYS) and all(s[k] is None for k in TRACE_SECTIONS)
    assert [f["rule"] for f in s["diagnosis"]] == ["not-concurrent"] == [s["ranks"]["limit"]["rule"]]
    assert [t["label"] for t in s["ranks"]["traces"]] == ["pinned", "streams"] and s["diagnosis"][0]["severity"] == "info"
    bad = tmp_path / "probe.json"
    bad.write_text("{}")
    for args in ([str(x2["pinned-x2"]), "--probe", str(bad)], [str(h200["pinned"]), str(h200["streams"]), "--window", "1:2"]):
        r = run_cli("-m", "nsys_transfer.analysis", *args)
        assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) <= 3, r.stderr


def test_per_rank_traces_recorded_by_nsys_line_up_on_one_clock(nsys, tmp_path):
    """torchrun starts one nsys per rank (profile_per_rank); each rank marks a wall-clock instant with NVTX. After
    session_offsets the marks sit as far apart in the traces as they were on the wall clock."""
    import os
    import sys

    from nsys_transfer.profiling.runner import ProfileRequest, profile_per_rank
    req = ProfileRequest([sys.executable, str(ROOT / "tests" / "programs" / "rank_marks.py"), str(tmp_path)],
                         tmp_path / "marks", trace="nvtx,osrt", capture_range=False, env=dict(os.environ))
    rec = profile_per_rank(nsys, req, 2, echo=lambda b: None)
    files = [r["sqlite"] for r in rec["files"]["ranks"]]
    assert [os.path.basename(f) for f in files] == ["marks.rank0.sqlite", "marks.rank1.sqlite"]
    traces = [Trace.open(f) for f in files]
    try:
        offsets = session_offsets([t.session_start_utc_ns for t in traces])
        marks = [int(t.host.nvtx.loc[t.host.nvtx["name"] == "mark", "start_ns"].iloc[0]) + o for t, o in zip(traces, offsets)]
        assert len({t.host.nvtx["global_tid"].iloc[0] >> 24 for t in traces}) == 2  # two processes, one per trace
    finally:
        for t in traces:
            t.close()
    walls = [int((tmp_path / f"rank{r}.ns").read_text()) for r in range(2)]
    assert walls[1] - walls[0] > 200e6  # the program spaced the marks ~0.3 s apart
    assert abs((marks[1] - marks[0]) - (walls[1] - walls[0])) < 2e6  # aligned to better than 2 ms


def test_per_rank_gpu_traces_of_one_run(x2):
    """`make profile GPUS=2 PER_RANK=1` on 2 x H200: one nsys per rank. Their captures began 54 ms apart (each
    rank's cudaProfilerStart waits for its own nsys), so the ranks ran out of phase and their copies interleaved:
    on one clock no copy overlaps another GPU's and each runs at the full solo rate."""
    paths = sorted(X2.glob("pinned-x2rank.rank*.sqlite.xz"))
    from nsys_transfer.analysis.rank_summary import trace_labels
    traces = [Trace.open(p) for p in paths]
    try:
        r = analyze_ranks(traces, RankOptions(probe=PROBE), trace_labels([p.name for p in paths]))
    finally:
        for t in traces:
            t.close()
    assert r.summary["concurrent"] and list(r.devices["gpu"]) == ["rank0:GPU 0", "rank1:GPU 1"]
    offsets = [t["clock_offset_ns"] for t in r.summary["traces"]]
    assert 10e6 < max(offsets) < 1e9 and min(offsets) == 0
    assert (r.copies["concurrent_fraction"] == 0).all() and (r.copies["gbps"] > 54).all()
    assert r.summary["host_dtoh"]["peak_gbps"] < 60 and r.summary["limit"]["rule"] == "gpu-compute"
    # without the offsets the copies would seem to overlap: the alignment is what separates them
    shift = r.copies["trace"].map({t["label"]: t["clock_offset_ns"] for t in r.summary["traces"]})
    unaligned = r.copies.assign(start_ns=r.copies["start_ns"] - shift, end_ns=r.copies["end_ns"] - shift)
    assert (concurrent_fraction(unaligned) > 0.3).sum() >= 12


def test_steps_of_a_multi_rank_trace_are_measured_against_their_own_gpu(x2):
    """Each rank's step ranges get its own GPU's busy time and its own copies, never the other rank's."""
    from nsys_transfer.analysis.summary import analyze_sections
    with Trace.open(x2["pinned-x2"]) as t:
        st = analyze_sections(t).tables["steps"]
    assert st.groupby("pid").size().tolist() == [12, 12]
    with_copy = st[st["dtoh_bytes"] > 0]
    assert (with_copy["dtoh_bytes"] == 1409286144).all() and len(with_copy) >= 12  # one output per step, not two
    assert st["gpu_idle_ns"].notna().all()


def test_output_backlog_and_saturated_host_cpus(x2):
    """`pinned` on both GPUs confined to 8 cores (taskset): the GPUs finish their steps while every rank's output
    workers are several steps behind; the run record beside the trace says the 8 cores were saturated."""
    path = x2["pinned-cpu8-x2gpu"]
    run = json.loads((X2 / "pinned-cpu8-x2gpu.workload.json").read_text())
    assert run["host_cpu"]["cpus"] == 8 and run["host_cpu"]["busy"] >= 0.9
    r = _ranks(path, run=run)
    d = r.devices
    assert (d["drain_source"] == "NVTX 'drain outputs'").all() and (d["backlog_steps"] >= 2).all()
    assert (d["compute_utilization"] > 0.9).all()  # over its steps the GPU looks fine: the backlog is what tells
    assert r.summary["limit"]["rule"] == "host-cpu" and r.summary["run"]["host_cpu"]["cpus"] == 8
    assert _ranks(path).summary["limit"]["rule"] == "output-backlog"  # no run record: the CPUs are not known
    idle = dict(run, host_cpu={"cpus": 8, "busy": 0.5, "busy_cores": 4.0})
    assert _ranks(path, run=idle).summary["limit"]["rule"] == "output-backlog"
    # with all 32 cores the backlog is under one step and the GPUs are the limit
    full = _ranks(x2["pinned-x2"])
    assert (full.devices["backlog_steps"] < 1).all() and full.summary["limit"]["rule"] == "gpu-compute"


def test_drain_reported_once_per_gap_across_ranks(x2):
    """Both ranks sit in 'drain outputs' at once: the share of idle time it covers stays a share (<= 100%)."""
    from nsys_transfer.analysis.summary import analyze_sections
    with Trace.open(x2["pinned-cpu8-x2gpu"]) as t:
        s = analyze_sections(t).summary
    drain = next(c for c in s["gaps"]["covered_by"] if c["name"] == "drain outputs")
    assert 0.3 < drain["share"] <= 1.0
    # the idle time inside it is the ranks' wait for their output workers: output-bound, never input
    finding = next(f for f in s["diagnosis"] if f["rule"] == "output-bound")
    assert "output workers" in finding["suggestion"] and finding["impact_fraction"] <= 1
    assert "input-bound" not in {f["rule"] for f in s["diagnosis"]}


def test_bad_inputs_for_several_traces_get_one_line(tmp_path, h200):
    for args in ([str(h200["pinned"]), str(tmp_path / "missing.sqlite")],
                 [str(h200["pinned"]), "--run", str(tmp_path / "missing.json")]):
        r = run_cli("-m", "nsys_transfer.analysis", *args)
        assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_waiting_gpus_with_saturated_cpus_name_the_cores(x2):
    """The article's streams on 2 GPUs waits inside each rank; what the run record says of the shared CPUs decides
    between the rank's own pipeline and the host's cores."""
    def with_cpu(busy):
        return {"throughput": {"steps_per_s": 4.3}, "host_cpu": {"cpus": 32, "busy": busy, "busy_cores": 32 * busy}}
    assert _ranks(x2["streams-x2"], run=with_cpu(0.95)).summary["limit"]["rule"] == "host-cpu"
    assert _ranks(x2["streams-x2"], run=with_cpu(0.40)).summary["limit"]["rule"] == "rank-pipeline"


def test_exactly_one_multi_gpu_rule_fires(x2, monkeypatch):
    """The multi-GPU rules exclude one another: whatever the thresholds and the run record, one names the limit, as a
    Finding whose impact is the limiting GPU's compute idle time over its window."""
    contexts = []
    original = rank_rules.limit
    monkeypatch.setattr(ranks_mod, "limit", lambda ctx: contexts.append(ctx) or original(ctx))
    cpu = {"throughput": {"steps_per_s": 1.0}, "host_cpu": {"cpus": 8, "busy": 0.95, "busy_cores": 7.6}}
    for kw in ({}, {"run": cpu}, {"slowdown_threshold": 0.99}, {"busy_threshold": 0.99, "run": cpu}):
        r = _ranks(x2["streams-x2"], **kw)
        ctx = contexts[-1]
        assert sum(len(rule.check(ctx)) for rule in RANK_RULES) == 1
        lim, idlest = r.summary["limit"], r.devices.sort_values("compute_utilization").iloc[0]
        assert lim["subject"] == idlest["gpu"] and lim["impact_ns"] == idlest["compute_idle_ns"]
        assert lim["impact_fraction"] == round(idlest["compute_idle_ns"] / idlest["window_ns"], 4)


def test_scaling_verdict_is_a_finding():
    """The bundled `make scaling` record of 2 x H200: 32 cores scale, 8 cores saturate; without a CPU reading the
    verdict points at the traces."""
    from nsys_transfer.analysis.rules.scaling import scaling_row
    record = json.loads((X2 / "scaling.json").read_text())
    rows = [scaling_row(s) for s in record["scenarios"]]
    assert [round(r["efficiency"], 2) for r in rows] == [1.0, 0.71, 1.03, 0.83]
    assert [r["limit"]["rule"] for r in rows] == ["scales", "host-cpu", "scales", "host-cpu"]
    assert rows[0]["limit"]["severity"] == "info" and rows[0]["limit"]["evidence"] == "scales (>= 0.9 x N x single)"
    assert rows[1]["limit"]["evidence"] == "host CPU cores: 7.8 of 8 busy (98%) with 2 GPUs"
    assert rows[1]["limit"]["impact_fraction"] == round(1 - rows[1]["efficiency"], 4)
    no_cpu = dict(record["scenarios"][1], all={k: v for k, v in record["scenarios"][1]["all"].items() if k != "host_cpu"})
    lim = scaling_row(no_cpu)["limit"]
    assert lim["rule"] == "not-host-cpu" and lim["evidence"] == "not the host CPUs (no CPU reading): see the traces' per-GPU rows"


def test_copy_overlap_from_the_device_pass_on_two_gpus(x2):
    """Two devices in one trace: each device's kernel time at its own copies gives the overlap built from the rows."""
    from nsys_transfer.analysis.sections.copies import copy_table
    from nsys_transfer.analysis.sections.gpu import analysis_window, device_pass, gpu_ops
    with Trace.open(x2["pinned-x2"]) as t:
        ops = gpu_ops(t.device.kernels, t.device.memcpys, t.device.memsets)
        passed = device_pass(ops, analysis_window(ops), 1_000_000)
        own = copy_table(t.device.memcpys, t.calls.memcpy_api, t.device.kernels)
        handed = copy_table(t.device.memcpys, t.calls.memcpy_api, t.device.kernels, passed.kernels_at_copies)
    assert sorted(passed.kernels_at_copies) == [0, 1] and own["overlap_ns"].sum() > 0
    assert handed["overlap_ns"].tolist() == own["overlap_ns"].tolist()
