"""Idle time attributed once: interval set operations, and on real traces every idle nanosecond goes to one cause."""
import numpy as np
import pandas as pd
import pytest

from nsys_transfer.analysis import Trace
from nsys_transfer.analysis.common.interval_sets import intersect, subtract
from nsys_transfer.analysis.common.intervals import union
from nsys_transfer.analysis.sections.machine import host_link, pcie_generation
from nsys_transfer.analysis.sections.program import base_name, family
from nsys_transfer.analysis.summary import analyze_sections


def _mask(u, n):
    m = np.zeros(n, dtype=bool)
    for s, e in zip(*u):
        m[s:e] = True
    return m


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("na,nb", [(40, 40), (200, 3), (3, 200)])  # alike, and the paths for one small side
def test_intersect_and_subtract_match_a_bitmap(seed, na, nb):
    rng = np.random.default_rng(seed)
    a = union(*(lambda s: (s, s + rng.integers(0, 30, s.size)))(rng.integers(0, 500, na)))
    b = union(*(lambda s: (s, s + rng.integers(0, 30, s.size)))(rng.integers(0, 500, nb)))
    ma, mb = _mask(a, 600), _mask(b, 600)
    assert (_mask(intersect(a, b), 600) == (ma & mb)).all()
    assert (_mask(subtract(a, b), 600) == (ma & ~mb)).all()
    assert (_mask(intersect(b, a), 600) == (ma & mb)).all() and (_mask(subtract(b, a), 600) == (mb & ~ma)).all()


def test_every_idle_nanosecond_has_one_cause(h200, public_traces, summary_of):
    for path in [h200["baseline"], h200["pinned-long"], *public_traces]:
        s = summary_of(path)
        for dev, d in s["idle"]["devices"].items():
            given = sum(c["idle_ns"] for c in s["idle"]["causes"] if str(c["device"]) == dev)
            assert given == d["idle_ns"], (path.name, dev)
        busy = sum(x["busy_ns"] for x in s["gpu"]["devices"])
        assert busy + sum(d["idle_ns"] for d in s["idle"]["devices"].values()) == \
            s["window"]["duration_ns"] * len(s["gpu"]["devices"]), path.name


def test_pcie_generation_table():
    assert pcie_generation("GH100", "NVIDIA H200") == (5, "chip GH100")
    assert pcie_generation("AD104", "NVIDIA GeForce RTX 4070")[0] == 4
    assert pcie_generation("GA100", None)[0] == 4 and pcie_generation("GV100", None)[0] == 3
    assert pcie_generation(None, "Quadro RTX 8000")[0] == 3
    # 2020-era exports name the GPU only (no chipName): common boards still have a link
    for name in ("TITAN RTX", "NVIDIA TITAN Xp", "Tesla P100-PCIE-16GB", "Tesla K80", "GeForce GTX 1660"):
        assert pcie_generation(None, name) == (3, f"GPU name {name}"), name
    assert pcie_generation(None, "Mystery GPU") == (None, "unknown GPU Mystery GPU")


def test_unknown_gpu_without_pinned_copies_has_no_link():
    import pandas as pd
    link = host_link(pd.DataFrame({"name": ["Mystery GPU"], "chip": [None]}), pd.DataFrame())
    assert link.gbps is None and "unknown GPU" in link.source


def test_pytorch_counters_are_dropped():
    assert base_name("aten::mm, seq = 12, op_id = 34") == "aten::mm"
    assert base_name("aten::conv2d, sizes = [[64, 3, 224, 224]]") == "aten::conv2d"
    assert family("IO 190") == "IO N" and family("process output") == "process output"


@pytest.mark.parametrize("name", ["torchvision_loader_nsys2023", "lightning_predict_nsys2024", "hf_generate_nsys2024",
                                  "baseline", "async", "streams"])
def test_idle_attributed_in_time_segments_equals_one_segment(name, h200, monkeypatch):
    """attribute() cuts the window into segments of SEGMENT_INTERVALS busy intervals (memory on long captures): with
    about 30 segments, every cause, subject, figure and per-name time is the same as in one segment. Between them
    these traces give time to every cause: input, mapping, cpu-range, host-sync, launch and cpu."""
    from pathlib import Path
    from nsys_transfer.analysis.sections import idle
    path = h200.get(name) or Path(__file__).resolve().parent / "data" / "programs" / f"{name}.sqlite.xz"
    cuts, busy_intervals = [], []
    segments = idle._segments
    monkeypatch.setattr(idle, "_segments", lambda busy, window: busy_intervals.append(busy.s.size) or
                        cuts.append(segments(busy, window)) or cuts[-1])
    answers = []
    for size in (10 ** 12, None):
        monkeypatch.setattr(idle, "SEGMENT_INTERVALS", size or max(1, busy_intervals[0] // 30))
        with Trace.open(path) as t:
            a = analyze_sections(t)
        answers.append((a.summary["idle"], a.tables["idle"].to_dict("records")))
    assert len(cuts[0]) == 1 and len(cuts[-1]) >= 30
    assert answers[1] == answers[0]
    assert answers[0][0]["causes"]


def test_crossing_ranges_give_the_same_time_in_segments(monkeypatch):
    """Ranges of one thread that cross (x ends inside y, which outlives a segment cut) nest the same way in every
    segment as in the whole window: their nesting is worked out once, over all ranges (found in review)."""
    from nsys_transfer.analysis.sections import idle
    from nsys_transfer.analysis.common.intervals import Coverage
    busy = Coverage(np.array([0, 100, 200]), np.array([10, 110, 210]))
    nvtx = pd.DataFrame({"start_ns": [0, 20, 50], "end_ns": [300, 60, 150], "global_tid": 7,
                         "name": ["outer", "x", "y"], "event_type": 59, "domain_id": 0})
    none = pd.DataFrame({c: pd.Series(dtype="int64") for c in ("start_ns", "end_ns", "global_tid")}).assign(
        name=pd.Series(dtype=object))
    tables = []
    for size in (10 ** 12, 1):
        monkeypatch.setattr(idle, "SEGMENT_INTERVALS", size)
        table, details = idle.attribute(busy, (0, 300), {7}, none, nvtx, none, none, None, 5)
        tables.append((table.to_dict("records"), details))
    assert tables[1] == tables[0]
    assert {r["subject"]: r["idle_ns"] for r in tables[0][0]}["outer"] == 230
