"""Several per-rank traces analysed one after the other (--jobs 1), in worker processes (--jobs 2) and on a local Dask
cluster of 2 workers give the same JSON, byte for byte; many ranks read at a glance: the spread, the straggler by name,
the rank x time heat map. The derived traces are benchmarks/build_rank_traces.py's (copies of the bundled pair with
per-rank variation, one rank slowed down)."""
from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT, run_cli

X2 = ROOT / "reports" / "data" / "h200x2"
PAIR = sorted(X2.glob("pinned-x2rank.rank*.sqlite.xz"))
RANKS, STRAGGLER = 10, 7
ANALYZE = ("-m", "nsys_transfer.analysis")
TIMEOUT = 180  # s: no run here should take a tenth of it


def _dask_or_skip():
    try:
        import distributed
    except ImportError:
        pytest.skip("dask[distributed] is not installed (pip install '.[dask]'; the dev extra installs it)")
    return distributed


@pytest.fixture(scope="module")
def derived(tmp_path_factory):
    spec = importlib.util.spec_from_file_location("build_rank_traces", ROOT / "benchmarks" / "build_rank_traces.py")
    builder = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(builder)
    return builder.build(tmp_path_factory.mktemp("ranks"), RANKS, straggler=STRAGGLER)


@pytest.fixture(scope="module")
def cluster():
    """A Dask cluster of 2 single-threaded worker processes on 127.0.0.1, closed again whatever happens."""
    distributed = _dask_or_skip()
    from nsys_transfer.analysis.executors.parallel import local_cluster_options
    c = distributed.LocalCluster(**local_cluster_options(2))
    try:
        yield c.scheduler_address
    finally:
        c.close()


def _analyze(paths, out, *args, env=None):
    r = run_cli(*ANALYZE, *map(str, paths), "--json", str(out), *args, timeout=TIMEOUT, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    return r


@pytest.mark.parametrize("which", ["pair", "derived"])
def test_processes_and_dask_give_the_sequential_json(which, derived, cluster, tmp_path):
    paths = PAIR if which == "pair" else derived
    _analyze(paths, tmp_path / "seq.json", "--jobs", "1", "-q")
    _analyze(paths, tmp_path / "proc.json", "--jobs", "2", "-q")
    _analyze(paths, tmp_path / "dask.json", "--dask", cluster, "-q")
    if which == "pair":  # the scheduler named by the environment, as Dask's own clients read it
        env = {k: v for k, v in os.environ.items() if k != "DASK_SCHEDULER_ADDRESS"}
        _analyze(paths, tmp_path / "env.json", "-q", env={**env, "DASK_SCHEDULER_ADDRESS": cluster})
        # one trace runs here: a scheduler address the environment sets for other runs is not read (refused when it
        # did not parse), where --dask on the command line would be
        _analyze(paths[:1], tmp_path / "one.json", "-q", env={**env, "DASK_SCHEDULER_ADDRESS": "bogus"})
    seq = (tmp_path / "seq.json").read_bytes()
    for name in ("proc", "dask", "env")[:3 if which == "pair" else 2]:
        assert (tmp_path / f"{name}.json").read_bytes() == seq, f"{name} differs from the sequential run"
    doc = json.loads(seq)
    assert len(doc["ranks"]["gpus"]) == len(paths)  # the JSON keeps every rank
    assert [t["path"] for t in doc["ranks"]["traces"]] == [str(p) for p in paths]


def test_a_local_dask_cluster_started_by_the_command(tmp_path):
    """--dask local:2 starts its own 2 workers on 127.0.0.1 and stops them: the same JSON."""
    _dask_or_skip()
    _analyze(PAIR, tmp_path / "seq.json", "--jobs", "1", "-q")
    _analyze(PAIR, tmp_path / "local.json", "--dask", "local:2", "-q")
    assert (tmp_path / "local.json").read_bytes() == (tmp_path / "seq.json").read_bytes()


def _session(sid: int) -> dict[int, str]:
    """The processes of session `sid`, zombies too: pid -> state (R, S, Z, ...)."""
    found = {}
    for entry in os.listdir("/proc"):
        try:
            stat = Path(f"/proc/{entry}/stat").read_text() if entry.isdigit() else ""
        except OSError:  # ended meanwhile
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 3 and int(fields[3]) == sid:
            found[int(entry)] = fields[0]
    return found


def _reading_a_trace(sid: int) -> bool:
    """A process of the session other than its leader (a Dask worker) has a trace open: the analysis is under way."""
    for pid in set(_session(sid)) - {sid}:
        try:
            if any(os.readlink(f"/proc/{pid}/fd/{fd}").endswith(".sqlite") for fd in os.listdir(f"/proc/{pid}/fd")):
                return True
        except OSError:
            continue
    return False


def _spawning_a_worker(sid: int) -> bool:
    """A process of the session is a worker that multiprocessing spawned (spawn_main): a local cluster starts."""
    for pid in set(_session(sid)) - {sid}:
        try:
            if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return True
        except OSError:
            continue
    return False


def _stopped(paths, where: tuple[str, ...], stop: str, ready=_reading_a_trace, after: float = 0.0):
    """analyze-trace over `paths` `where` (--jobs N, --dask local:N), stopped by `stop` (SIGINT-group, SIGTERM-group:
    to its process group; SIGTERM: to its main process alone) `after` seconds from when `ready` (by default: once a
    worker has a trace open): its exit code, stderr, seconds from the signal to its end, and the processes of its
    session left then."""
    # its own session, to signal the group and find what it leaves; SIGINT's default back (`make test &` ignores it)
    p = subprocess.Popen([sys.executable, *ANALYZE, *map(str, paths), *where, "-q"], cwd=ROOT,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.time() + TIMEOUT
        while not ready(p.pid) and p.poll() is None and time.time() < deadline:
            time.sleep(0.02)
        time.sleep(after)
        assert p.poll() is None, f"the analysis ended before it could be stopped: {p.stderr.read()[-2000:]}"
        sig = signal.SIGINT if stop.startswith("SIGINT") else signal.SIGTERM
        t0 = time.time()
        os.killpg(p.pid, sig) if stop.endswith("group") else os.kill(p.pid, sig)
        p.wait(timeout=30)
        took = time.time() - t0
        left = _session(p.pid)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        for pid in _session(p.pid):  # what it left, not left to outlive the test
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    return p.returncode, p.stderr.read(), took, left


def _assert_a_clean_stop(stop, rc, err, took, left):
    """The house standard: the one line of a Ctrl-C (none for SIGTERM), 130 / 143, within seconds, nothing left."""
    sigint = stop.startswith("SIGINT")
    assert rc == (130 if sigint else 143), (rc, err[-3000:])
    assert "Traceback" not in err and err.strip().splitlines() == (
        ["analyze-trace: interrupted"] if sigint else []), err[-3000:]
    assert took < 6, f"{stop}: {took:.1f} s to stop"  # about 1 s; a loaded CI machine doubles it
    assert not left, f"{stop}: left behind {left}"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the processes from /proc")
@pytest.mark.parametrize("stop", ["SIGINT-group", "SIGTERM-group", "SIGTERM"])
@pytest.mark.alone  # timed: stopped within 6 s (_assert_a_clean_stop)
def test_a_stop_ends_a_local_dask_cluster_promptly_and_leaves_nothing(stop, derived):
    """Ctrl-C (SIGINT to the process group) or SIGTERM (to the group or the process) while the local cluster's workers
    analyse: the one line of the --jobs path (none for SIGTERM), its exit code, within seconds, and no process of the
    session left behind, zombie or not (the workers and multiprocessing's resource tracker joined)."""
    _dask_or_skip()
    _assert_a_clean_stop(stop, *_stopped(derived * 4, ("--dask", "local:2"), stop))


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the processes from /proc")
@pytest.mark.parametrize("stop", ["SIGINT-group", "SIGTERM-group"])
@pytest.mark.alone  # timed: stopped within 6 s (_assert_a_clean_stop)
def test_a_stop_while_the_local_dask_cluster_starts_is_as_clean(stop, derived):
    """The same while the cluster's worker processes are still starting (Python, distributed and the preload being
    imported, not yet set to ignore a stop): a Ctrl-C then raised KeyboardInterrupt in each worker's imports, a
    traceback from each and the nanny's, and the exit waited seconds for the broken start. At several moments from the
    first worker's spawn, as a Ctrl-C just after starting the command meets them."""
    _dask_or_skip()
    for after in (0.1, 0.3, 0.6):
        _assert_a_clean_stop(f"{stop} {after} s into the start",
                             *_stopped(derived, ("--dask", "local:2"), stop, _spawning_a_worker, after))


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the processes from /proc")
@pytest.mark.parametrize("stop", ["SIGINT-group", "SIGTERM-group", "SIGTERM"])
@pytest.mark.alone  # timed: stopped within 6 s (_assert_a_clean_stop)
def test_a_stop_ends_the_worker_processes_promptly_and_leaves_nothing(stop, derived):
    """The same for --jobs 2; SIGTERM to the main process alone (a service manager's, `kill PID`) ends its workers too
    (they were left running, orphans, and the process was killed by the signal)."""
    _assert_a_clean_stop(stop, *_stopped(derived * 4, ("--jobs", "2"), stop))


@pytest.mark.parametrize("bad", ["text", "truncated"])
def test_a_bad_input_on_a_local_dask_cluster_is_the_one_line_of_jobs(bad, derived, tmp_path):
    """A path that is no nsys export (a text file named .sqlite, a truncated export): --dask local:2 says what --jobs 2
    says, one line and its exit code, without the worker's "Compute Failed" log and the task's traceback."""
    _dask_or_skip()
    path = tmp_path / f"{bad}.sqlite"
    if bad == "text":
        path.write_text("rank 3's notes, not a trace\n")
    else:
        path.write_bytes(derived[1].read_bytes()[:200_000])
    paths = [derived[0], path, derived[2]]
    jobs = run_cli(*ANALYZE, *map(str, paths), "--jobs", "2", "-q", timeout=TIMEOUT)
    dask = run_cli(*ANALYZE, *map(str, paths), "--dask", "local:2", "-q", timeout=TIMEOUT)
    assert jobs.returncode == 2 and len(jobs.stderr.splitlines()) == 1 and str(path) in jobs.stderr, jobs.stderr
    assert (dask.returncode, dask.stdout, dask.stderr) == (jobs.returncode, jobs.stdout, jobs.stderr), dask.stderr[-3000:]


def test_the_dask_executor_listens_on_localhost_and_keeps_the_order():
    """The executor itself: results in the items' order, the first failing item's own error, closed on leaving."""
    _dask_or_skip()
    from nsys_transfer.analysis.executors import parallel
    with parallel.executor(dask="local:2") as ex:
        info = ex._client.scheduler_info()
        assert ex._cluster.scheduler_address.startswith("tcp://127.0.0.1:") and len(info["workers"]) == 2
        assert all(a.startswith("tcp://127.0.0.1:") for a in info["workers"])
        _order_and_first_error(ex)
    assert ex._client is None and ex._cluster is None


def test_worker_processes_keep_the_order_and_raise_the_first_error():
    from nsys_transfer.analysis.executors import parallel
    with parallel.executor(jobs=2, items=3) as ex:
        assert isinstance(ex, parallel.Processes) and ex.workers == 2
        _order_and_first_error(ex)
    assert isinstance(parallel.executor(jobs=4, items=1), parallel.Sequential)
    assert isinstance(parallel.executor(jobs=1, items=9), parallel.Sequential)


def _order_and_first_error(ex):
    from nsys_transfer.analysis.common.errors import TraceError
    from nsys_transfer.analysis.rank_summary import RankOptions, part_of_path
    assert ex.map(pow, [(3, k) for k in range(5)]) == [1, 3, 9, 27, 81]
    opts = RankOptions()
    parts = ex.map(part_of_path, [(PAIR[1], "b", opts), (PAIR[0], "a", opts)])
    assert [p.label for p in parts] == ["b", "a"] and [p.source for p in parts] == [str(PAIR[1]), str(PAIR[0])]
    with pytest.raises(TraceError, match="missing-1"):  # the first failing item in the given order, a TraceError
        ex.map(part_of_path, [(PAIR[0], "a", opts), ("/nonexistent/missing-1.sqlite", "b", opts),
                              ("/nonexistent/missing-2.sqlite", "c", opts)])


def test_many_ranks_are_summarised_and_the_straggler_named(derived, tmp_path):
    r = _analyze(derived, tmp_path / "r.json", "--plots", str(tmp_path / "plots"))
    out = r.stdout
    assert f"{RANKS} GPUs, each over its own steps (the spread" in out
    assert "(pid " not in out  # no line per GPU
    for figure in ("steps/s", "busy", "DtoH GB/s", "idle in gaps"):
        assert f"\n  {figure}" in out
    straggler = f"rank{STRAGGLER}:GPU {STRAGGLER % 8}"
    line = next(ln for ln in out.splitlines() if ln.startswith("stragglers"))
    assert line.endswith(f": {straggler}"), line  # the one made slow, and only it
    slowest = next(ln for ln in out.splitlines() if ln.startswith("slowest"))
    assert slowest.split(": ", 1)[1].startswith(straggler) and slowest.count("below)") == 3
    png = tmp_path / "plots" / "gpus_heatmap.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
    assert (tmp_path / "plots" / "gpus.png").exists()


def test_the_heat_map_numbers(derived):
    """time_grid: one row per GPU in rank order, busy only inside each GPU's steps, DtoH where the copies are."""
    from nsys_transfer.analysis.rank_summary import RankOptions, merge_parts, part_of_path, trace_labels
    from nsys_transfer.analysis.render.many_gpus import time_grid
    labels = trace_labels([p.name for p in derived])
    r = merge_parts([part_of_path(p, lb, RankOptions()) for p, lb in zip(derived, labels)])
    g = time_grid(r, columns=200)
    assert g.gpus == [f"rank{i}:GPU {i % 8}" for i in range(RANKS)]
    assert g.busy.shape == g.dtoh_gbps.shape == (RANKS, len(g.edges_ns) - 1) and g.busy.shape[1] <= 200
    inside = ~np.isnan(g.busy)
    assert inside.sum(axis=1).argmax() == STRAGGLER  # the slow rank's steps last longest
    assert (g.busy[inside] >= 0).all() and (g.busy[inside] <= 1 + 1e-9).all() and np.nanmedian(g.busy) > 0.9
    rows = r.devices.set_index("gpu")
    width = g.edges_ns[1] - g.edges_ns[0]
    for i, gpu in enumerate(g.gpus):  # the GB/s per bin add up to the bytes of the data-carrying copies
        moved = g.dtoh_gbps[i].sum() * width
        assert moved == pytest.approx(r.copies.loc[r.copies["gpu"] == gpu, "bytes"].sum(), rel=1e-6)
        assert moved >= rows.loc[gpu, "dtoh_bytes"] * 0.99


def test_two_ranks_are_listed_as_before(tmp_path):
    r = _analyze(PAIR, tmp_path / "r.json", "--plots", str(tmp_path / "plots"))
    assert "2 GPUs, each over its own steps:" in r.stdout and r.stdout.count("(pid ") == 2
    assert (tmp_path / "plots" / "gpus_heatmap.png").read_bytes()[:4] == b"\x89PNG"


def test_dask_without_the_extra_is_one_line_and_exit_2(tmp_path):
    """distributed cannot be imported (sys.modules entry None): one line, exit 2, before any work."""
    code = ("import sys; sys.modules['distributed'] = None; sys.modules['dask'] = None\n"
            "from nsys_transfer.analysis.cli.analyze import entry\n"
            f"sys.argv = ['analyze-trace', {str(PAIR[0])!r}, {str(PAIR[1])!r}, '--dask', 'local:2']\n"
            "entry()\n")
    r = run_cli("-c", code, timeout=TIMEOUT)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == "analyze-trace: --dask needs the dask extra: pip install 'nsys-transfer[dask]'\n"
    code = code.replace("nsys_transfer.analysis.cli.analyze import entry", "nsys_transfer.reports.compare_command import main as entry")
    code = code.replace("'analyze-trace'", "'compare-traces'").replace("'local:2'", f"'local:2', '--out', {str(tmp_path / 'o')!r}")
    r = run_cli("-c", code, timeout=TIMEOUT)
    assert r.returncode == 2 and r.stderr.strip().endswith("--dask needs the dask extra: pip install 'nsys-transfer[dask]'")
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_the_base_install_never_imports_dask():
    r = run_cli("-c", "import sys, nsys_transfer.analysis.cli.analyze, nsys_transfer.reports.compare_command, "
                      "nsys_transfer.analysis.executors.parallel; print(sorted({'dask', 'distributed'} & set(sys.modules)))",
                timeout=TIMEOUT)
    assert r.stdout.strip() == "[]", r.stderr


def test_help_says_what_workers_cost():
    for module in ("nsys_transfer.analysis", "nsys_transfer.reports"):
        text = " ".join(run_cli("-m", module, "--help", timeout=TIMEOUT).stdout.split())
        assert "N workers need N x the memory of one trace's analysis" in text, module
        assert "--dask" in text and "DASK_SCHEDULER_ADDRESS" in text and "127.0.0.1" in text


def test_compare_traces_in_worker_processes_and_on_dask(cluster, tmp_path):
    """compare-traces with per-rank traces: its multi-GPU section is the same whichever way they are analysed."""
    args = ("-m", "nsys_transfer.reports", *map(str, PAIR))
    outs = {}
    for name, where in (("seq", ("--jobs", "1")), ("proc", ("--jobs", "2")), ("dask", ("--dask", cluster))):
        r = run_cli(*args, "--out", str(tmp_path / name), *where, timeout=TIMEOUT)
        assert r.returncode == 0, r.stderr[-3000:]
        outs[name] = [(tmp_path / name / f).read_bytes() for f in ("gpus.json", "report.md")]
    assert outs["proc"] == outs["seq"] and outs["dask"] == outs["seq"]


def test_bad_choices_are_one_line():
    for args, said in ((("--jobs", "0"), "--jobs 0: give at least 1"),
                       (("--dask", "local:none"), "give local:N"),
                       (("--jobs", "2", "--dask", "local:2"), "give one")):
        r = run_cli(*ANALYZE, *map(str, PAIR), *args, timeout=TIMEOUT)
        assert r.returncode == 2 and said in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))


BUSY_IN_C = """
import time
from nsys_transfer.analysis.executors.parallel import Processes

def busy():
    return sum(range(10 ** 13))  # one C call: a Python signal handler waits for it to return

t0 = time.monotonic()
try:
    with Processes(1) as ex:
        ex._pool.submit(busy)
        time.sleep(1)
        raise RuntimeError("abandoned")
except RuntimeError:
    pass
print(f"{time.monotonic() - t0:.1f}")
"""


@pytest.mark.alone  # timed: the abandoned pool is gone within 5 s
def test_abandoned_workers_busy_in_one_c_call_are_killed_after_the_grace():
    """A --jobs worker deletes its half-written cache file on SIGTERM, in a Python handler that runs only once its C
    call returns (one sqlite query can take seconds): a worker still running a second later is killed, so leaving
    the pool on a stop does not wait for the query."""
    r = run_cli("-c", BUSY_IN_C, timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    assert float(r.stdout.strip()) < 5, r.stdout
