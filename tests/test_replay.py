"""The replay behind the predictions (analysis/replay): the captured timeline replayed as it ran takes what the
capture took, a fix's Edit moves it the way the fix would, and no fix takes it below its kernels' own time. Real
captures only: the bundled H200/H100 traces."""
from __future__ import annotations

import numpy as np
import pytest

from nsys_transfer.analysis import Trace
from nsys_transfer.analysis.replay.edits import NONE, Edit
from nsys_transfer.analysis.replay import engine
from nsys_transfer.analysis.replay.engine import replay
from nsys_transfer.analysis.summary import analyze_sections

from conftest import ROOT

CASES = {  # host-bound with syncs, CPU work and pageable copies, the GPU ahead of the host
    "per_sample_metrics": "tests/data/held_out/per_sample_metrics_nsys2024.sqlite.xz",
    "hf_embed": "tests/data/programs/hf_embed_nsys2024.sqlite.xz",
    "pinned": "reports/data/h200/pinned.sqlite.xz",
}


@pytest.fixture(scope="module")
def timelines():
    out = {}
    for name, rel in CASES.items():
        with Trace.open(ROOT / rel) as t:
            out[name] = analyze_sections(t).timeline
    return out


def own_gpu_end(t) -> int:
    """Where the span's work ends in the capture: the host's last gap, or the GPU's last operation of its calls."""
    mine = t.op_call >= 0
    return max(t.hi, int(t.op_end[mine].max()) if mine.any() else t.hi)


@pytest.mark.parametrize("name", list(CASES))
def test_the_capture_replayed_as_it_ran_takes_what_it_took(timelines, name):
    t = timelines[name]
    assert t is not None and t.call_start.size > 100
    r = replay(t)
    assert r.duration_ns == pytest.approx(own_gpu_end(t) - t.lo, rel=0.005)


@pytest.mark.parametrize("name", list(CASES))
def test_less_host_work_is_never_slower(timelines, name):
    t = timelines[name]
    base = replay(t).duration_ns
    rng = np.random.default_rng(0)
    for share in (0.25, 0.5, 1.0):
        cut = t.cpu_ns * (rng.random(t.cpu_ns.size) < share)
        assert replay(t, Edit(host_removed=cut)).duration_ns <= base * 1.0001


@pytest.mark.parametrize("name", list(CASES))
def test_no_fix_goes_below_the_kernels_own_time(timelines, name):
    t = timelines[name]
    kernels = t.op_kind == "kernel"
    everything = Edit(host_removed=t.gap_ns.astype(float), free_calls=np.ones(t.call_start.size, bool),
                      no_wait=np.ones(t.call_start.size, bool), op_ns=np.where(kernels, t.op_end - t.op_start, 0.0))
    r = replay(t, everything)
    own = (t.op_end - t.op_start)[kernels & (t.op_call >= 0)]
    assert r.duration_ns >= own.sum() * 0.999  # one stream: its kernels one after the other
    assert r.duration_ns <= replay(t).duration_ns


def test_dropped_per_element_reads_take_their_calls_away(timelines):
    t = timelines["per_sample_metrics"]
    syncs = t.call_kind == "sync"
    assert syncs.sum() > 1000  # the per-element .item() reads: a copy and a sync each
    base, without = replay(t), replay(t, Edit(dropped=syncs))
    assert without.duration_ns < 0.8 * base.duration_ns


def test_a_pinned_copy_on_a_side_stream_stops_holding_the_host(timelines):
    t = timelines["hf_embed"]
    dtoh = (t.op_kind == "copy") & (t.op_copy == "DtoH") & (t.op_host_memory == "Pageable")
    assert dtoh.sum() >= 5  # each batch's hidden states, .cpu() into fresh pageable memory
    calls = np.zeros(t.call_start.size, bool)
    calls[t.op_call[dtoh]] = True
    faster = np.where(dtoh, t.op_bytes / 50.0, t.op_end - t.op_start)
    pinned_sync = replay(t, Edit(op_ns=faster))
    overlapped = replay(t, Edit(op_ns=faster, side_stream=dtoh, no_wait=calls))
    base = replay(t)
    assert overlapped.duration_ns <= pinned_sync.duration_ns < base.duration_ns


def test_the_moved_works_pace_is_a_floor(timelines):
    t = timelines["hf_embed"]
    r = replay(t, Edit(host_removed=t.cpu_ns, pace_ns=10 * t.duration_ns))
    assert r.duration_ns == 10 * t.duration_ns and r.limit == "pace"


def test_edits_combine_as_both_fixes_made():
    a = Edit(host_removed=np.array([5.0, 0.0]), dropped=np.array([True, False]), pace_ns=3.0)
    b = Edit(host_removed=np.array([1.0, 7.0]), dropped=np.array([False, False]), no_wait=np.array([False, True]),
             pace_ns=4.0)
    c = a.combine(b)
    assert c.host_removed.tolist() == [5.0, 7.0] and c.dropped.tolist() == [True, False]
    assert c.no_wait.tolist() == [False, True] and c.pace_ns == 7.0
    assert NONE.combine(a).host_removed is a.host_removed and NONE.combine(a).pace_ns == a.pace_ns


def test_the_profilers_cost_taken_out_makes_the_loop_faster_not_the_gpu(timelines):
    t = timelines["per_sample_metrics"]
    captured, unprofiled = replay(t), replay(t, profiler_ns=2000, cpu_share=0.9)
    assert unprofiled.duration_ns < captured.duration_ns
    assert unprofiled.gpu_ns == pytest.approx(captured.gpu_ns, rel=0.01)


@pytest.mark.skipif(engine._engine is None, reason="the replay's C loop is not built (no C compiler at install)")
@pytest.mark.parametrize("name", list(CASES))
def test_the_compiled_loop_replays_as_the_python_one(timelines, name):
    t = timelines[name]
    rng = np.random.default_rng(1)
    n, m = t.call_start.size, t.op_start.size
    edits = [NONE, Edit(host_removed=t.cpu_ns * 0.5, pace_ns=1e6), Edit(dropped=rng.random(n) < 0.3),
             Edit(no_wait=rng.random(n) < 0.5, free_calls=rng.random(n) < 0.5),
             Edit(op_ns=(t.op_end - t.op_start) * 0.5, side_stream=(t.op_kind == "copy"))]
    for e in edits:
        for prof in (0.0, 2000.0):
            c = replay(t, e, prof, 2700.0, 0.9, compiled=True)
            p = replay(t, e, prof, 2700.0, 0.9, compiled=False)
            assert c.duration_ns == pytest.approx(p.duration_ns, rel=1e-9, abs=1.0)
            assert c.host_ns == pytest.approx(p.host_ns, rel=1e-9, abs=1.0)
            assert c.gpu_ns == pytest.approx(p.gpu_ns, rel=1e-9, abs=1.0)
    assert m > 0
