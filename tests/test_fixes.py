"""The fixes library (nsys_transfer.fixes) on the CPU: the same code path as on a GPU minus CUDA. Every output shape
reaches process() exactly once with its bytes intact, back-pressure holds, and each fault ends the block within a
second or two with one error naming what failed, leaving no process and no shared memory behind."""
import collections
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from conftest import ROOT  # noqa: E402
from test_workload_faults import _alive, _children, _segments_of  # noqa: E402

from nsys_transfer.fixes import (GpuScalars, LayoutError, OutputPipeline, PipelineError, ProcessFailed,  # noqa: E402
                                 TerminatedBySignal, WorkerDied, prefetch)

Pair = collections.namedtuple("Pair", "scores labels")


def _batches(n_batches: int, rows: int = 4, scalar: bool = True):
    """Outputs of every kind: nested dict / tuple / list / named tuple, several dtypes, a 0-dim tensor (or, for
    split, one row per sample: every tensor must share dimension 0 to be cut into rows), a value."""
    g = torch.Generator().manual_seed(7)
    for i in range(n_batches):
        r = rows if i < n_batches - 1 else rows - 1  # a smaller last batch
        yield {"logits": torch.randn(r, 3, 5, generator=g),
               "half": torch.randn(r, 7, generator=g).to(torch.float16),
               "pair": Pair(torch.randint(0, 99, (r,), generator=g), torch.rand(r, generator=g) > 0.5),
               "extra": [torch.randint(0, 255, (r, 3), generator=g).to(torch.uint8),
                         torch.tensor(float(i)) if scalar else torch.full((r,), float(i))],
               "tag": f"batch-{i}"}


def _flat(out) -> list[np.ndarray]:
    return [np.asarray(out["logits"]), np.asarray(out["half"]), np.asarray(out["pair"].scores),
            np.asarray(out["pair"].labels), np.asarray(out["extra"][0]), np.asarray(out["extra"][1])]


class SaveTo:
    """process(): every array saved to a folder (works across processes), and the structure checked on the way."""

    def __init__(self, folder):
        self.folder = folder

    def __call__(self, batch_id, out, rows=None):
        assert isinstance(out["pair"], Pair) and isinstance(out["extra"], list) and out["tag"] == f"batch-{batch_id}"
        name = f"{batch_id}" if rows is None else f"{batch_id}-{rows.start}"
        np.savez(self.folder / f"{name}.npz", *[a.copy() for a in _flat(out)])


@pytest.mark.parametrize("threads,split", [(False, 1), (True, 1), (False, 3)], ids=["processes", "threads", "split"])
def test_every_output_shape_arrives_once_intact(threads, split, tmp_path):
    sent = {}
    with OutputPipeline(SaveTo(tmp_path), workers=2, threads=threads, split=split, verify=True) as pipe:
        for i, out in enumerate(_batches(5, scalar=split == 1)):
            sent[i] = [t.numpy().copy() for t in (out["logits"], out["half"], out["pair"].scores, out["pair"].labels,
                                                  out["extra"][0], out["extra"][1])]
            pipe.submit(i, out)
    report = pipe.report()
    assert report.ok and report.checked and report.processed == 5, report.as_dict()
    for i, arrays in sent.items():
        if split == 1:
            got = list(np.load(tmp_path / f"{i}.npz").values())
        else:  # rows of each slice, put back together in order
            parts = sorted(tmp_path.glob(f"{i}-*.npz"), key=lambda p: int(p.stem.split("-")[1]))
            loaded = [list(np.load(p).values()) for p in parts]
            assert len(loaded) == 3
            got = [np.concatenate([x[k] for x in loaded]) for k in range(6)]
        for a, b in zip(arrays, got):
            assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b), i


def test_tensors_mode_delivers_bfloat16_as_is():
    seen = []
    with OutputPipeline(lambda i, t: seen.append((i, t.dtype, t.float().sum().item())), workers=1, threads=True,
                        tensors=True, verify=True) as pipe:
        x = torch.arange(12, dtype=torch.float32).reshape(3, 4).to(torch.bfloat16)
        pipe.submit(0, x)
    assert seen == [(0, torch.bfloat16, 66.0)] and pipe.report().ok


def test_layout_errors_are_one_clear_line():
    with pytest.raises(LayoutError, match="bfloat16 outputs have no NumPy dtype: pass tensors=True"):
        with OutputPipeline(lambda *a: None, workers=1, threads=True) as pipe:
            pipe.submit(0, torch.zeros(2, dtype=torch.bfloat16))
    for odd, said in ((torch.zeros(2, dtype=torch.float8_e4m3fn), "float8_e4m3fn outputs have no NumPy dtype"),
                      (torch.eye(2).to_sparse(), "sparse_coo outputs have no plain bytes to copy")):
        with pytest.raises(LayoutError, match=said):
            with OutputPipeline(lambda *a: None, workers=1, threads=True) as pipe:
                pipe.submit(0, odd)
    with pytest.raises(LayoutError, match=r"larger than the first batch's \(4, 3\).*like="):
        with OutputPipeline(lambda *a: None, workers=1, threads=True) as pipe:
            pipe.submit(0, torch.zeros(4, 3))
            pipe.submit(1, torch.zeros(5, 3))
    with pytest.raises(LayoutError, match="not structured as the first batch's"):
        with OutputPipeline(lambda *a: None, workers=1, threads=True) as pipe:
            pipe.submit(0, (torch.zeros(4), torch.zeros(4)))
            pipe.submit(1, [torch.zeros(4), torch.zeros(4)])


def test_back_pressure_keeps_at_most_the_buffers_in_flight():
    done = []
    in_flight = []

    def slow(i, a):
        time.sleep(0.05)
        done.append(i)

    with OutputPipeline(slow, workers=1, buffers=2, threads=True) as pipe:
        for i in range(8):
            pipe.submit(i, torch.full((16,), float(i)))
            in_flight.append(pipe.submitted - len(done))
    assert sorted(done) == list(range(8))
    # a buffer is free only once its batch was processed: never more than 2 submitted and unprocessed
    assert max(in_flight) <= 2 and in_flight[-1] >= 1, in_flight


def test_the_pace_names_the_side_that_sets_it(capfd, monkeypatch):
    """process() of 50 ms a batch on one worker behind a loop that submits at once: the loop waits for buffers and
    the drain, the outputs set the pace (at most 20 batches/s, the worker polls between batches, against a loop faster than that), and the line that
    NSYS_TRANSFER_VERIFY=1 prints says so; a process() that keeps up leaves the pace to the loop."""
    monkeypatch.setenv("NSYS_TRANSFER_VERIFY", "1")
    with OutputPipeline(lambda i, a: time.sleep(0.05), workers=1, buffers=2, threads=True) as pipe:
        for i in range(8):
            pipe.submit(i, torch.full((16,), float(i)))
    pace = pipe.pace.as_dict()
    assert pace["paced_by"] == "outputs" and pace["batches"] == 8
    assert 4 < pace["outputs_per_s"] < 22 and pace["loop_per_s"] > 1.5 * pace["outputs_per_s"], pace
    assert pace["buffer_wait_s"] > 0.2 and pace["drain_s"] > 0.05, pace
    err = capfd.readouterr().err
    assert "all 8 batches arrived exactly once, intact" in err and "pace: set by the outputs" in err
    with OutputPipeline(lambda i, a: None, workers=2, buffers=4, threads=True) as fast:
        for i in range(8):
            fast.submit(i, torch.full((16,), float(i)))
            time.sleep(0.02)  # the loop's own work per batch
    assert fast.pace.as_dict()["paced_by"] == "loop", fast.pace.as_dict()


def test_the_pace_says_what_the_workers_can_take_and_the_trace_gets_it(monkeypatch):
    """Two workers of 50 ms a batch can take about 40 batches/s: report() and the pace say so, and the drain leaves
    the same figures in an NVTX range whose name the analysis reads back (contracts.pipeline_pace)."""
    from nsys_transfer.fixes import pipeline as pipeline_module
    from nsys_transfer.nsys_core.contracts import PIPELINE_PACE, pipeline_pace
    names = []
    monkeypatch.setattr(pipeline_module, "nvtx_range", lambda name: names.append(name) or contextlib.nullcontext())
    with OutputPipeline(lambda i, a: time.sleep(0.05), workers=2, threads=True) as pipe:
        for i in range(6):
            pipe.submit(i, torch.zeros(8))
    pace = pipe.report().pace
    assert pace["workers"] == 2 and 50 <= pace["work_ms_per_batch"] < 80 and 25 < pace["workers_per_s"] <= 40, pace
    marks = [pipeline_pace(n) for n in names if pipeline_pace(n)]
    assert len(marks) == 1 and marks[0][0] == 2 and marks[0][1] == pytest.approx(pace["work_ms_per_batch"], abs=0.1)
    assert pipeline_pace("output pipeline: drain") is None and pipeline_pace(PIPELINE_PACE.format(
        workers=3, ms_per_batch=1.25)) == (3, 1.2)


def test_auto_workers_grow_with_the_backlog_and_touch_few_buffers(monkeypatch):
    """workers="auto": two workers first; a process() slower than the loop adds workers, up to the spare cores (6
    here, whatever this machine has); a process() that keeps up stays at two; only the lowest free buffers are
    handed out."""
    from nsys_transfer.fixes import pipeline as pipeline_module
    monkeypatch.setattr(pipeline_module, "spare_cores", lambda: 6)
    spare_cores = pipeline_module.spare_cores
    with OutputPipeline(lambda i, a: time.sleep(0.2), workers="auto", threads=True) as slow:
        for i in range(20):  # room to grow on a loaded machine too (the hand-overs lag the loop's thread there)
            slow.submit(i, torch.zeros(8))
    assert len(slow._pool.workers) == spare_cores() and slow.n_buffers == spare_cores() + 2
    used = []

    def recording(pool):
        real = pool.get_free
        pool.get_free = lambda **kw: used.append(real(**kw)) or used[-1]
    with OutputPipeline(lambda i, a: None, workers="auto", threads=True) as fast:
        for i in range(12):
            fast.submit(i, torch.zeros(8))
            if i == 0:
                recording(fast._pool)
            time.sleep(0.02)
    assert len(fast._pool.workers) == min(2, spare_cores()) and max(used) <= 2, used
    with pytest.raises(ValueError, match="a number or 'auto'"):
        OutputPipeline(lambda i, a: None, workers="many")


def test_worker_processes_are_forked_two_first_then_one_a_batch():
    """workers=4: two processes forked with the buffers, then one per batch on the loop's thread (no one submit pays
    every fork), and every batch processed; split=3 forks three first; threads all start at once."""
    counts = []
    with OutputPipeline(lambda i, a: None, workers=4, verify=True) as pipe:
        for i in range(5):
            pipe.submit(i, torch.arange(8) + i)
            counts.append(len(pipe._pool.workers))
    assert counts == [2, 3, 4, 4, 4] and pipe.report().ok and pipe.report().processed == 5
    assert pipe.report().pace["workers"] == len(pipe.pace.added) == 4
    with OutputPipeline(lambda i, a, rows: None, workers=4, split=3) as split:
        split.submit(0, torch.zeros(6, 2))
        assert len(split._pool.workers) == 3
    with OutputPipeline(lambda i, a: None, workers=4, threads=True) as threads:
        threads.submit(0, torch.zeros(8))
        assert len(threads._pool.workers) == 4


def test_with_like_every_worker_is_forked_at_enter():
    """like=: the set-up is done before the loop (nothing to overlap there), every worker forked at __enter__."""
    with OutputPipeline(lambda i, a: None, workers=4, like=torch.zeros(8)) as pipe:
        assert len(pipe._pool.workers) == 4
        pipe.submit(0, torch.zeros(8))
    assert pipe.report().processed == 1
    with OutputPipeline(lambda i, a: None, workers="auto", like=torch.zeros(8)) as auto:
        assert len(auto._pool.workers) == min(2, auto.n_workers)  # auto: the backlog sizes it, like= or not


def _mask(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        return int(next(x.split()[1] for x in f if x.startswith(field + ":")), 16)


@pytest.mark.alone  # polls /proc for 5 s for the forked workers' signal masks: a busy machine starts them later
def test_a_worker_is_forked_with_stops_held_and_lets_them_in_once_started(tmp_path, monkeypatch):
    """A stop landing between the fork and the worker's own handlers would print its traceback: the worker starts
    with SIGINT and SIGTERM held back, then ignores SIGINT and lets SIGTERM in; the loop's thread has them back."""
    from nsys_transfer.fixes import workers as workers_module
    bits = (1 << (signal.SIGINT - 1)) | (1 << (signal.SIGTERM - 1))
    started = workers_module.worker_started

    def recording(parent_pid, name):  # in the child, before it changes anything
        (tmp_path / str(os.getpid())).write_text(str(_mask(os.getpid(), "SigBlk")))
        started(parent_pid, name)
    monkeypatch.setattr(workers_module, "worker_started", recording)
    with OutputPipeline(lambda i, a: None, workers=2) as pipe:
        pipe.submit(0, torch.zeros(8))
        pipe.flush()
        pids = [w.pid for w in pipe._pool.workers]
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not all(
                (tmp_path / str(p)).exists() and _mask(p, "SigIgn") & (1 << (signal.SIGINT - 1))
                and not _mask(p, "SigBlk") & bits for p in pids):
            time.sleep(0.05)
        assert all(int((tmp_path / str(p)).read_text()) & bits == bits for p in pids)
        assert all(_mask(p, "SigBlk") & bits == 0 for p in pids)
        assert all(_mask(p, "SigIgn") & (1 << (signal.SIGINT - 1)) for p in pids)
    assert not set(signal.pthread_sigmask(signal.SIG_BLOCK, [])) & {signal.SIGINT, signal.SIGTERM}


@pytest.mark.alone  # the Ctrl-C must land within the 0.2 s after the fork: a busy machine misses it
def test_a_stop_during_a_fork_is_raised_once_the_worker_is_recorded(monkeypatch):
    """Ctrl-C while a worker is forked: raised after the worker is in the pool's list, so the pool still stops it
    (raised between the fork and the record, the worker would be left running). A pool whose constructor fails
    stops the workers it had forked (the caller never gets it to close)."""
    import multiprocessing.process
    from nsys_transfer.fixes.lifetime import StopSignals
    from nsys_transfer.fixes.workers import WorkerPool
    start = multiprocessing.process.BaseProcess.start

    elsewhere = threading.Event()
    other = threading.Thread(target=elsewhere.wait, daemon=True)  # a thread that takes the signal: this one holds it
    other.start()

    def start_then_ctrl_c(self):
        start(self)
        signal.pthread_kill(other.ident, signal.SIGINT)  # Python runs the handler on this thread at once
        time.sleep(0.2)
    stops = StopSignals().install()
    pool = WorkerPool(lambda *a: None, 1, slots=1, grow=2)
    try:
        monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", start_then_ctrl_c)
        with pytest.raises(KeyboardInterrupt):
            pool.grow(backlog_only=False)
            time.sleep(1)  # not reached: the stop is raised by grow itself
        assert len(pool.workers) == 2 and pool.workers[1].pid
    finally:
        monkeypatch.undo()
        pool.close(graceful=False)
        stops.restore()
        elsewhere.set()
    assert not any(w.is_alive() for w in pool.workers)
    forked = []

    def first_only(self):
        if forked:
            raise OSError("fork refused")  # the second fork fails: the pool is never handed back
        start(self)
        forked.append(self)
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", first_only)
    with pytest.raises(OSError, match="fork refused"):
        WorkerPool(lambda *a: None, 2, slots=1)
    monkeypatch.undo()
    assert len(forked) == 1 and not forked[0].is_alive()  # the pool stopped the one it had forked


def test_workers_asked_to_stop_exit_while_the_caller_frees_its_side():
    """close() tells the workers to end before it unpins and unmaps its buffers and joins them after: asked, they
    exit on their own (code 0) with nobody waiting; with one of them dead, the rest are not asked but stopped."""
    from nsys_transfer.fixes.workers import WorkerPool
    pool = WorkerPool(lambda *a: None, 2, slots=1)
    assert pool.ask_to_stop() is True and pool.ask_to_stop() is True  # told once
    deadline = time.monotonic() + 10
    while any(w.is_alive() for w in pool.workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [w.exitcode for w in pool.workers] == [0, 0]
    pool.close()
    assert pool.closed
    pool = WorkerPool(lambda *a: None, 2, slots=1)
    os.kill(pool.workers[0].pid, signal.SIGKILL)
    pool.workers[0].join(timeout=5)
    assert pool.ask_to_stop() is False
    pool.close()
    assert not any(w.is_alive() for w in pool.workers) and pool.workers[1].exitcode != 0


def test_close_frees_the_buffers_while_the_workers_exit(monkeypatch):
    """close(): the workers are told to end before this process unpins and unmaps its buffers, and joined after
    (one after the other, the two were 0.11 and 0.29 s of seg_logits_fixed's close on the H200)."""
    from nsys_transfer.fixes.slots import HostSlots
    original, seen = HostSlots.close, []

    def close(self):
        seen.append((pipe._pool._asked, pipe._pool.closed))
        original(self)
    monkeypatch.setattr(HostSlots, "close", close)
    with OutputPipeline(lambda *a: None, workers=2) as pipe:
        pipe.submit(0, torch.ones(4))
    assert seen == [(True, False)] and not any(w.is_alive() for w in pipe._pool.workers)
    assert [w.exitcode for w in pipe._pool.workers] == [0, 0]  # asked, they ended on their own


def test_a_second_ctrl_c_while_close_waits_for_the_workers_still_stops_them():
    """close() waits up to 5 s for busy workers to finish; a Ctrl-C in that wait ends it, and the workers are
    stopped all the same (they were left running until the interpreter's exit)."""
    from nsys_transfer.fixes.workers import WorkerPool
    with _default_stop_handlers():
        pool = WorkerPool(lambda *a: time.sleep(60), 1, slots=1)
        pool.put(0, 0)
        time.sleep(0.3)  # the worker is in its batch
        old = signal.signal(signal.SIGALRM, lambda *a: os.kill(os.getpid(), signal.SIGINT))
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        try:
            with pytest.raises(KeyboardInterrupt):
                pool.close()
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
    assert pool.closed and not pool.workers[0].is_alive()


def test_the_pace_counts_each_worker_from_its_start():
    """Workers forked a few at a time: their busy share is over the seconds each could work, not the final count times
    the span (2 from 0 s and 1 from 5 s of a 10 s span: 25 worker-seconds; 16 s busy is 64%, saturated, so a
    loop that waited on them is paced by the outputs; over 3 x 10 s it would read 53% and blame the loop)."""
    from nsys_transfer.fixes.pace import Pace
    now = [0.0]
    pace = Pace(_clock=lambda: now[0])
    pace.started()
    pace.add_workers(2)
    now[0] = 5.0
    pace.add_workers(1)
    since = pace.started()
    now[0] = 7.0
    pace.waited(since)
    now[0] = 10.0
    pace.drained(10.0)
    pace.batches, pace.processed, pace.busy_s = 10, 10, 16.0
    assert pace.worker_s() == 25.0 and pace.workers == 3
    assert pace.as_dict()["paced_by"] == "outputs"


def test_the_analysis_reads_the_latest_pace_of_a_growing_pool():
    """A warm-up flush before the pool has all its workers leaves a mark with fewer: the one with most is the latest."""
    import types
    import pandas as pd
    from nsys_transfer.analysis.rules.output import pace_in_trace
    from nsys_transfer.nsys_core.contracts import PIPELINE_PACE
    names = [PIPELINE_PACE.format(workers=3, ms_per_batch=100.0), "copy to CPU",
             PIPELINE_PACE.format(workers=8, ms_per_batch=120.0)]
    ctx = types.SimpleNamespace(facts=types.SimpleNamespace(nvtx_names=pd.Series(names)))  # rules/facts.Facts
    assert pace_in_trace(ctx) == (8, 120.0)


class Corrupting(OutputPipeline):
    """A buffer overwritten between the copy and the worker (what a copy that has not landed looks like)."""

    def _start(self, leaves, tree):
        super()._start(leaves, tree)
        copy = self._copier.copy

        def copy_then_flip(slot, leaves, views, bounds, verify):
            copy(slot, leaves, views, bounds, verify)
            if self.submitted == 2:
                views[0].view(torch.uint8).reshape(-1)[5] ^= 0xFF
        self._copier.copy = copy_then_flip


def test_verify_catches_a_buffer_changed_in_transit():
    with Corrupting(lambda *a: None, workers=2, verify=True) as pipe:
        for i in range(5):
            pipe.submit(i, torch.randn(8, 9))
    r = pipe.report()
    assert not r.ok and r.mismatched == [2] and r.processed == 5, r.as_dict()


def _raise_on_3(i, a):
    if i == 3:
        raise ValueError("bad row")


@pytest.mark.parametrize("threads", [False, True], ids=["processes", "threads"])
def test_process_raising_names_the_batch_the_error_and_where(threads):
    t0 = time.time()
    with pytest.raises(ProcessFailed) as e:
        with OutputPipeline(_raise_on_3, workers=2, threads=threads) as pipe:
            for i in range(50):
                pipe.submit(i, torch.randn(4, 4))
                time.sleep(0.01)
    text = str(e.value)
    assert "output worker" in text and "failed on batch 3: ValueError: bad row (at " in text, text
    assert "test_fixes.py:" in text and time.time() - t0 < 5


def test_an_exception_in_the_loop_stops_the_workers_at_once():
    earlier = set(_children(os.getpid()))  # the test process's other children (another test's, in a shared worker)
    with pytest.raises(KeyError):
        with OutputPipeline(lambda *a: time.sleep(0.5), workers=2) as pipe:
            pipe.submit(0, torch.zeros(4))
            kids = [k for k in _children(os.getpid()) if k not in earlier]
            raise KeyError("in the loop")
    assert kids and not _alive(kids) and not _segments_of([os.getpid(), *kids])


def test_prefetch_on_the_cpu_passes_batches_and_errors_through():
    loader = [{"x": torch.full((2,), float(i)), "ids": (torch.tensor([i]), "keep")} for i in range(5)]
    got = list(prefetch(loader, "cpu"))
    assert [b["x"][0].item() for b in got] == [0, 1, 2, 3, 4] and got[3]["ids"][1] == "keep"

    def failing():
        yield torch.zeros(1)
        raise OSError("disk gone")
    with pytest.raises(OSError, match="disk gone"):
        list(prefetch(failing(), "cpu"))


def test_a_cuda_device_without_a_gpu_is_one_clear_error():
    """OutputPipeline(device="cuda") and prefetch(.., "cuda") where torch sees no GPU: one line saying so and what
    to pass (NoGpu), not torch's driver traceback chained under it."""
    from nsys_transfer.fixes import NoGpu
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(NoGpu, match=r"^OutputPipeline\(device='cuda'\): torch sees no CUDA GPU .*device='cpu'") as e:
        OutputPipeline(lambda *a: None, workers=1, device="cuda")
    assert e.value.__cause__ is None and e.value.__suppress_context__
    with pytest.raises(NoGpu, match=r"^prefetch\(device='cuda:0'\)"):
        next(prefetch([torch.zeros(1)], "cuda:0"))
    assert OutputPipeline(lambda *a: None, workers=1, device="cpu").device.type == "cpu"


def test_prefetch_pinning_thread_forwards_errors_and_stops_on_break():
    from nsys_transfer.fixes.prefetch import _pinning
    before = threading.active_count()

    def source():
        for _ in range(1000):
            yield torch.zeros(3)
    it = _pinning(iter(source()), depth=2, pin=lambda t: t + 0)  # pin_memory() itself needs a GPU
    next(it)
    it.close()  # the loop broke out: the thread stops within a poll
    deadline = time.time() + 2
    while threading.active_count() > before and time.time() < deadline:
        time.sleep(0.05)
    assert threading.active_count() <= before  # an earlier test's thread may end meanwhile: fewer is no failure


def test_gpu_scalars_read_every_n_steps():
    s = GpuScalars(every=3)
    seen = []
    for i in range(7):
        s.add(loss=torch.tensor(i / 2), correct=torch.tensor(i))
        seen += s.ready()
    assert [r["correct"] for r in seen] == [0, 1, 2, 3, 4, 5]  # two blocks of 3 landed, the last row is pending
    assert s.values() == {"loss": [i / 2 for i in range(7)], "correct": list(range(7))}
    with pytest.raises(ValueError, match="the first step gave"):
        s.add(loss=torch.tensor(1.0))


# a program using the pipeline the documented way; it prints READY once its workers are busy
LONG_PROGRAM = """
import sys, time, torch
from nsys_transfer.fixes import OutputPipeline
def process(i, a):
    time.sleep(0.02)
with OutputPipeline(process, workers=3) as outputs:
    for i in range(100000):
        outputs.submit(i, torch.randn(64, 64))
        if i == 5:
            print("READY", flush=True)
"""


def _start_program():
    # SIGINT's default back: a shell's background job (`make test &`) runs with it ignored, and so would the program
    p = subprocess.Popen([sys.executable, "-c", LONG_PROGRAM], cwd=ROOT, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)},
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert p.stdout.readline().strip() == "READY", p.stderr.read()
    kids = _children(p.pid)
    assert sorted(kids.values()) == ["output-worker-0", "output-worker-1", "output-worker-2"], kids
    return p, kids


@pytest.mark.alone  # timed: the program ends within 3 s of the fault
@pytest.mark.parametrize("fault", ["worker-killed", "SIGTERM", "SIGTERM-group", "SIGINT-group"])
def test_program_faults_end_promptly_and_leave_nothing(fault):
    p, kids = _start_program()
    t0 = time.time()
    if fault == "worker-killed":
        os.kill(next(iter(kids)), signal.SIGKILL)
    elif fault == "SIGTERM":
        os.kill(p.pid, signal.SIGTERM)
    else:
        os.killpg(p.pid, getattr(signal, fault.split("-")[0]))
    try:
        _, err = p.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        p.kill()
        pytest.fail(f"{fault}: the program went on for 15 s")
    took = time.time() - t0
    assert took < 3, (fault, took)
    if fault == "worker-killed":
        assert p.returncode == 1 and err.count("Traceback") == 1, err
        assert err.strip().splitlines()[-1].startswith("nsys_transfer.fixes.errors.WorkerDied: output worker "), err
        assert "was killed by SIGKILL while batches were pending" in err
    elif fault.startswith("SIGTERM"):
        assert p.returncode == 143 and "Traceback" not in err, err
        assert err.strip().splitlines() == [err.strip().splitlines()[-1]] and "stopped by SIGTERM after" in err, err
    else:  # Ctrl-C: the program's own KeyboardInterrupt, and nothing from the workers
        assert err.count("Traceback") == 1 and err.strip().endswith("KeyboardInterrupt"), err
    deadline = time.time() + 5
    while _alive(kids) and time.time() < deadline:
        time.sleep(0.1)
    assert not _alive(kids), f"{fault}: workers left alive"
    assert not _segments_of([p.pid, *kids]), f"{fault}: shared memory left behind"


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the dropped exception is the premise
def test_a_ctrl_c_lost_in_a_destructor_is_raised_again():
    """Python prints and drops an exception raised inside __del__; a Ctrl-C landing there (a tensor or a queue freed)
    let the documented loop run on for 15 s once under load: the pipeline keeps the stop and raises it again."""
    from nsys_transfer.fixes.lifetime import StopSignals
    outer = signal.signal(signal.SIGINT, signal.default_int_handler)  # Python's default, even under `make test &`
    stops = StopSignals().install()
    try:
        class Dropper:
            def __del__(self):
                signal.raise_signal(signal.SIGINT)
        Dropper()  # its KeyboardInterrupt is printed as "Exception ignored" and dropped
        with pytest.raises(KeyboardInterrupt):
            stops.raise_if_stopped()
    finally:
        stops.restore()
        restored = signal.getsignal(signal.SIGINT)
        signal.signal(signal.SIGINT, outer)
    assert restored is signal.default_int_handler


PACED_PROGRAM = """
import time, torch
from nsys_transfer.fixes import OutputPipeline
with OutputPipeline(lambda i, a: time.sleep(0.05), workers=2) as outputs:
    for i in range(8):
        outputs.submit(i, torch.zeros(64))
"""


def test_the_pipeline_leaves_its_pace_in_a_real_trace(nsys, tmp_path):
    """Recorded by real nsys (NVTX and OS runtime, no GPU): the drain leaves the workers' figures in an NVTX range
    that the analysis reads back through the one contract (nsys_core.contracts.pipeline_pace), and never takes for
    a step; 2 workers at 50 ms a batch."""
    import json
    from conftest import run_cli
    from nsys_transfer.nsys_core.contracts import pipeline_pace
    prog = tmp_path / "paced.py"
    prog.write_text(PACED_PROGRAM)
    env = {**os.environ, "NSYS": nsys.path, "PYTHONPATH": str(ROOT)}
    r = run_cli("-m", "nsys_transfer.profiling", "run", "-o", str(tmp_path / "paced"), "--trace", "nvtx,osrt",
                "--sample", "none", "--", sys.executable, str(prog), env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    r = run_cli("-m", "nsys_transfer.analysis", str(tmp_path / "paced.sqlite"), "--json", str(tmp_path / "a.json"),
                "-q", env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads((tmp_path / "a.json").read_text())
    marks = [pipeline_pace(x["name"]) for x in doc["nvtx"]["ranges"] if pipeline_pace(x["name"])]
    assert len(marks) == 1 and marks[0][0] == 2 and 50 <= marks[0][1] < 120, doc["nvtx"]["ranges"]
    assert not doc["steps"]["count"], doc["steps"]


def test_a_loop_waiting_on_the_gpu_is_not_paced_by_the_outputs(monkeypatch):
    """A copier standing in for a GPU that takes 50 ms a batch (its copies land one after another), a loop that
    never syncs and 1 ms workers: the loop waits for buffers whose copies have not landed, which is the GPU's time,
    not the outputs' (the workers were idle most of the span): the pace says so and gives no workers advice."""
    from nsys_transfer.fixes import pipeline as pipeline_module
    from nsys_transfer.fixes.copier import CpuCopier

    class SlowGpu(CpuCopier):
        free_at = 0.0

        def __init__(self, n):
            super().__init__(n)
            self.lands = {}

        def copy(self, slot, leaves, views, bounds, verify):
            super().copy(slot, leaves, views, bounds, verify)
            SlowGpu.free_at = max(time.monotonic(), SlowGpu.free_at) + 0.05
            self.lands[slot] = SlowGpu.free_at

        def wait(self, slot):
            time.sleep(max(0.0, self.lands[slot] - time.monotonic()))
    monkeypatch.setattr(pipeline_module, "CpuCopier", SlowGpu)
    with OutputPipeline(lambda i, a: time.sleep(0.001), workers=4) as pipe:
        for i in range(20):
            pipe.submit(i, torch.zeros(64))
    pace = pipe.pace.as_dict()
    assert pace["buffer_wait_s"] > 0.3 and pace["paced_by"] == "loop", pace
    assert "more workers" not in pipe.pace.line()


def test_a_failure_while_entering_leaves_no_handler_behind(monkeypatch):
    """__enter__ with like= makes the buffers and forks the workers; when that fails (here the fork, simulated),
    __exit__ never runs, so __enter__ itself stops what it started: the program's SIGTERM handling is back."""
    from nsys_transfer.fixes import pipeline as pipeline_module
    before = signal.getsignal(signal.SIGTERM)

    def no_fork(*args, **kwargs):
        raise OSError("fork failed (simulated)")
    monkeypatch.setattr(pipeline_module, "WorkerPool", no_fork)
    with pytest.raises(OSError, match="simulated"):
        with OutputPipeline(lambda i, a: None, workers=2, like=torch.zeros(8)):
            pass
    assert signal.getsignal(signal.SIGTERM) == before


@contextlib.contextmanager
def _default_stop_handlers():
    """SIGINT and SIGTERM as a foreground program has them (a background `make test &` ignores SIGINT), then back."""
    outer = {sig: signal.signal(sig, default) for sig, default in
             ((signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, signal.SIG_DFL))}
    try:
        yield
    finally:
        for sig, handler in outer.items():
            signal.signal(sig, handler)


def test_a_stop_while_the_monitor_starts_is_the_stop_and_stops_the_workers(monkeypatch):
    """Ctrl-C landing as the first submit() starts the monitor thread: the loop gets its KeyboardInterrupt (not
    'cannot join thread before it is started' from the cleanup, which then skipped stopping the workers)."""
    start = threading.Thread.start

    def start_after_a_stop(self):
        if self.name.endswith("-monitor"):
            signal.raise_signal(signal.SIGINT)  # Python raises it here, before the thread starts
        return start(self)
    pipe = OutputPipeline(lambda *a: None, workers=2)
    with _default_stop_handlers():
        monkeypatch.setattr(threading.Thread, "start", start_after_a_stop)
        with pytest.raises(KeyboardInterrupt):
            with pipe:
                pipe.submit(0, torch.ones(4, 4))
        monkeypatch.undo()
    assert len(pipe._pool.workers) == 2 and not any(w.is_alive() for w in pipe._pool.workers)


def test_sigterm_while_entering_says_what_was_stopped(monkeypatch, capfd):
    """SIGTERM during __enter__ with like= (its buffers and workers made before the loop): the same one line as a
    SIGTERM in the loop, since __exit__ never runs for it."""
    from nsys_transfer.fixes import pipeline as pipeline_module

    def terminated(*args, **kwargs):
        raise TerminatedBySignal(143)  # what the pipeline's SIGTERM handler raises
    monkeypatch.setattr(pipeline_module, "WorkerPool", terminated)
    with pytest.raises(TerminatedBySignal):
        with OutputPipeline(lambda i, a: None, workers=2, like=torch.zeros(8)):
            pass
    assert capfd.readouterr().err == ("output workers: stopped by SIGTERM after 0 of 0 batches were processed; "
                                      "workers stopped, buffers freed\n")


def test_sigterm_in_a_close_inside_the_block_is_said_once(capfd):
    """pipe.close() called inside the `with` block and a SIGTERM in its drain: close() says it, and __exit__ (which
    then sees the same stop) does not say it again."""
    def terminated(*args, **kwargs):
        raise TerminatedBySignal(143)  # what the pipeline's SIGTERM handler raises in the drain's wait
    with pytest.raises(TerminatedBySignal):
        with OutputPipeline(lambda *a: None, workers=1, threads=True) as pipe:
            pipe.submit(0, torch.ones(2))
            pipe._pool.wait = terminated
            pipe.close()
    assert capfd.readouterr().err.count("stopped by SIGTERM") == 1


def test_each_batch_in_flight_needs_its_own_id():
    """The results, the slices of a split batch and the checksums are told apart by the batch id: a repeated one in
    flight merged two batches' slices (flush() returned early). It is refused; once its batch is done it may return."""
    release = threading.Event()
    with pytest.raises(ValueError, match="batch id 0 was submitted before and is still being processed"):
        with OutputPipeline(lambda *a: release.wait(10), workers=2, threads=True, split=2) as pipe:
            pipe.submit(0, torch.ones(4))
            pipe.submit(0, torch.ones(4))
    release.set()
    seen = []
    with OutputPipeline(lambda b, out: seen.append(b), workers=1, threads=True, verify=True) as pipe:
        for i in range(4):
            pipe.submit(i % 2, torch.full((4,), float(i)))
            pipe.flush()
    assert seen == [0, 1, 0, 1]
    # the checksums too: each arrival of an id against its own submission (keyed by id, the second of each looked
    # duplicated and changed)
    assert pipe.report().verdict() == "all 4 batches arrived exactly once, intact (checksums checked)"
    from nsys_transfer.fixes.checksums import compare
    bad = compare([(0, 10), (1, 11), (0, 12)], [(0, 10), (1, 11), (0, 13), (1, 11)])
    assert (bad.mismatched, bad.duplicated, bad.missing, bad.expected_batches) == ([0], [1], [], 3)
    bad = compare({5: 100}, [(5, 100), (5, 999)])  # an arrival past the submissions is checked too
    assert (bad.mismatched, bad.duplicated) == ([5], [5])
    # ids of any type, in the order they came (sorting them raised TypeError in report(), hence in close())
    with OutputPipeline(lambda *a: None, workers=1, threads=True, verify=True) as pipe:
        pipe.submit("warm-up", torch.ones(2))
        pipe.submit(0, torch.ones(2))
    assert pipe.report().ok and compare([("a", 1), (0, 2)], [(0, 2)]).missing == ["a"]


def test_split_calls_process_with_rows_for_every_batch():
    """split=k: process(batch_id, outputs, rows) for every batch, also one that goes whole (an empty last batch: no
    rows; tensors that differ in dimension 0: rows=None), never a two-argument call."""
    calls = []
    with OutputPipeline(lambda b, out, rows: calls.append((b, rows)), workers=2, threads=True, split=2) as pipe:
        pipe.submit(0, torch.ones(4, 3))
        pipe.submit(1, torch.ones(0, 3))
    assert sorted(calls, key=str) == [(0, range(0, 2)), (0, range(2, 4)), (1, range(0, 0))]
    calls.clear()
    with OutputPipeline(lambda b, out, rows: calls.append((b, rows)), workers=2, threads=True, split=2) as pipe:
        pipe.submit(0, (torch.ones(4), torch.ones(3)))
    assert calls == [(0, None)]


def test_a_closed_pipeline_says_so():
    pipe = OutputPipeline(lambda *a: None, workers=1, threads=True)
    with pipe:
        pipe.submit(0, torch.ones(2))
    for use in (lambda: pipe.submit(1, torch.ones(2)), pipe.__enter__):
        with pytest.raises(PipelineError, match="is closed: it serves one `with` block; make a new one"):
            use()


def test_an_open_pipeline_is_not_entered_again():
    """`with pipe:` inside `with pipe:` is refused: entered twice, its stop handler was what it handed back to, and
    the next Ctrl-C looped in it for ever; the outer block still closes and gives the default handler back."""
    with _default_stop_handlers():
        pipe = OutputPipeline(lambda *a: None, workers=1, threads=True)
        with pipe:
            with pytest.raises(PipelineError, match="is already open: one `with` block at a time"):
                with pipe:
                    pass
            pipe.submit(0, torch.ones(2))
        assert pipe.processed == 1 and signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_the_stops_stay_handled_while_any_pipeline_is_open_and_a_programs_own_handler_stays():
    """Two pipelines closed in the order they were opened (not nested): the second still turns SIGTERM into its
    cleanup after the first closed, and the default is back after both. A handler the program installs inside the
    block is its own: close() leaves it."""
    def own(signum, frame):
        pass
    with _default_stop_handlers():
        a = OutputPipeline(lambda *x: None, workers=1, threads=True).__enter__()
        b = OutputPipeline(lambda *x: None, workers=1, threads=True).__enter__()
        a.__exit__(None, None, None)
        assert signal.getsignal(signal.SIGTERM) == b._stops._raise
        b.__exit__(None, None, None)
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
        assert signal.getsignal(signal.SIGINT) == signal.default_int_handler
        with OutputPipeline(lambda *x: None, workers=1, threads=True) as pipe:
            pipe.submit(0, torch.ones(2))
            signal.signal(signal.SIGTERM, own)
        assert signal.getsignal(signal.SIGTERM) == own


def test_a_submit_waiting_on_stuck_workers_gives_up_after_timeout_s():
    """Every worker stuck in process(): submit() waits for a free buffer as long as the drain would, then says so."""
    release = threading.Event()
    started = time.monotonic()
    with pytest.raises(WorkerDied, match=r"freed no buffer in 1 s \(0 batches processed\); they are stuck"):
        with OutputPipeline(lambda *a: release.wait(30), workers=1, buffers=1, threads=True, timeout_s=1) as pipe:
            pipe.submit(0, torch.ones(2))
            pipe.submit(1, torch.ones(2))
    release.set()
    assert time.monotonic() - started < 10


def test_the_drain_gives_up_only_on_workers_that_finish_nothing():
    """timeout_s bounds the wait for the next result, not the whole drain: 5 batches of 0.5 s on one worker (2.5 s)
    drain within timeout_s=1.5; a worker stuck in its batch is reported after it."""
    with OutputPipeline(lambda *a: time.sleep(0.5), workers=1, buffers=5, threads=True, timeout_s=1.5) as pipe:
        for i in range(5):
            pipe.submit(i, torch.ones(2))
    assert pipe.processed == 5
    release = threading.Event()
    with pytest.raises(WorkerDied, match=r"finished nothing in 1.5 s \(1 of 2 batches processed\); they are stuck"):
        with OutputPipeline(lambda b, x: b and release.wait(30), workers=1, threads=True, timeout_s=1.5) as pipe:
            pipe.submit(0, torch.ones(2))
            pipe.submit(1, torch.ones(2))
    release.set()


# workers that do nothing but create shared-memory segments (torch names each `torch_<pid>_...` in /dev/shm, maps it
# and unlinks the name at once): a death at a random instant lands between the two about half the time
SEGMENT_MAKERS = """
import os, sys, time, multiprocessing as mp
import torch
from nsys_transfer.fixes.lifetime import die_with_parent
def make(parent):
    die_with_parent(parent, "segment-maker")
    while True:
        torch.empty(16).share_memory_()
kids = [mp.get_context("fork").Process(target=make, args=(os.getpid(),), daemon=True) for _ in range(2)]
for k in kids:
    k.start()
print(*[k.pid for k in kids], flush=True)
time.sleep(60)
"""


def test_workers_killed_with_their_parent_leave_no_shared_memory():
    """issue 57, item 13: a SIGKILL of the main process ends its workers by the parent-death signal. Ended by SIGKILL,
    a worker creating a segment left its name in /dev/shm in 8 of 15 such runs; ended by SIGTERM from a Python handler
    (fixes/lifetime.py), it finishes the C call first, and removes what the dead parent may have left."""
    for _ in range(10):
        p = subprocess.Popen([sys.executable, "-c", SEGMENT_MAKERS], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
        kids = [int(x) for x in p.stdout.readline().split()]
        time.sleep(0.3)
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        deadline = time.time() + 5
        while _alive(kids) and time.time() < deadline:
            time.sleep(0.05)
        assert not _alive(kids), "workers outlived their parent"
        assert not _segments_of([p.pid, *kids]), _segments_of([p.pid, *kids])


def _make_segments(batch_id, payload, part, parts, extra):
    while True:
        torch.empty(16).share_memory_()


def test_a_worker_killed_while_it_made_shared_memory_leaves_none_once_the_pool_is_closed():
    """A worker SIGKILLed (the OOM killer, a user) in the middle of making a segment: the pool that outlives it removes
    what its pid names when it closes (without that, 7 of 30 such kills left a name)."""
    from nsys_transfer.fixes.workers import WorkerPool
    for _ in range(20):
        pool = WorkerPool(_make_segments, 1)
        try:
            pool.put(0, "work")
            time.sleep(0.2)
            victim = pool.workers[0].pid
            os.kill(victim, signal.SIGKILL)
            pool.workers[0].join(timeout=5)
        finally:
            pool.close(graceful=False)
        assert not _segments_of([victim]), _segments_of([victim])
