"""Rules on the real H200 traces of every stage: stage N's diagnosis names the fix that stage N+1 applies."""
import pytest

from analysis.diagnosis import TRANSFER_RULES

NEXT_FIX = [("naive-input", "stage baseline"), ("baseline", "stage multiproc"), ("multiproc", "stage bufpool"),
            ("bufpool", "stage async"), ("async", "stage streams"), ("streams", "stage pinned")]


@pytest.mark.parametrize("stage,fix", NEXT_FIX)
def test_diagnosis_names_the_next_stage(analyzed, stage, fix):
    d = analyzed[stage].summary["diagnosis"]
    assert any(fix in f["suggestion"] for f in d), [f["suggestion"] for f in d]
    for f in d:
        assert f["rule"] and f["severity"] in ("high", "medium", "info") and f["evidence"] and f["suggestion"]


def test_specific_rules_fire_where_the_article_says(analyzed):
    rules = lambda s: {f["rule"] for f in analyzed[s].summary["diagnosis"]}  # noqa: E731
    base = analyzed["baseline"].summary["diagnosis"]
    idle = [f for f in base if f["rule"] == "gpu-idle-cpu-bound"]
    assert idle and "'process output'" in idle[0]["evidence"]
    assert "memory-mapping-in-gaps" in rules("multiproc")
    assert "sync-memcpy" in rules("bufpool") and "sync-memcpy" not in rules("async")
    assert "no-copy-compute-overlap" in rules("async")
    pageable = [f for f in analyzed["streams"].summary["diagnosis"] if f["rule"] == "pageable-memcpy"]
    assert pageable and "share_memory_()" in pageable[0]["suggestion"]


def test_final_stage_has_no_transfer_findings(analyzed):
    for stage in ("pinned", "pinned-long"):
        assert not {f["rule"] for f in analyzed[stage].summary["diagnosis"]} & set(TRANSFER_RULES)


def test_short_capture_only_on_short_captures(analyzed):
    assert "short-capture" in {f["rule"] for f in analyzed["pinned"].summary["diagnosis"]}
    assert "short-capture" not in {f["rule"] for f in analyzed["pinned-long"].summary["diagnosis"]}


def test_nvtx_missing(public_traces):
    from analysis import Trace
    from analysis.summary import analyze
    path = next(p for p in public_traces if p.name.startswith("ncar"))  # OpenACC trace without NVTX
    with Trace.open(path) as t:
        assert "nvtx-missing" in {f["rule"] for f in analyze(t).summary["diagnosis"]}


def test_pinned_stage_metrics_near_the_machine(analyzed):
    s = analyzed["pinned-long"].summary
    assert s["memcpy"]["dtoh"]["gbps"] > 0.95 * 55
    assert s["memcpy"]["dtoh"]["overlap_fraction"] > 0.5
    assert s["gpu"]["compute_utilization"] > 0.9


def test_host_dtoh_bandwidth_timeline(analyzed):
    """Host-side DtoH per 10 ms bin: at link speed inside the pinned copies, total bytes conserved."""
    for stage, lo, hi in (("pinned-long", 50, 56), ("baseline", 1.0, 1.6)):
        a = analyzed[stage]
        h = a.summary["memcpy"]["dtoh_host"]
        assert lo <= h["peak_gbps"] <= hi, (stage, h)
        t = a.tables["dtoh_host_timeline"]
        c = a.tables["memcpy"]
        assert abs(t["bytes"].sum() - c.loc[c["copy_kind"] == "DtoH", "bytes"].sum()) < 1e-6 * t["bytes"].sum()
        assert h["mean_gbps"] < h["peak_gbps"] and h["devices"] == [0]
