"""Shared fixtures: real traces only (public exports, our H200 captures, traces nsys records during the run).

`make test` runs the suite in two processes (pytest-xdist: `-n 2 --dist loadgroup`); a plain `pytest` runs it in one.
Three things keep two processes as fast as they can be and as sound as one:
- what several tests read of one analysis is made once per test run, by whichever process asks first (`once`): the
  golden answers, every in-process summary of a bundled trace (`summary_of`, `analyzed`), a command's output that
  several tests read (tests/test_one_figure.py);
- the tests of a module that share a module-scoped fixture (a capture nsys records, a report, a Dask cluster) run in
  one process (ONE_PROCESS_MODULES, pytest_xdist_make_scheduler), so that fixture is made once;
- a test marked `alone` (it reads machine-wide state such as /dev/shm, or times how fast processes stop) runs while
  no other test of the run does, from its fixtures' set-up to their teardown."""
from __future__ import annotations

import compileall
import contextlib
import fcntl
import hashlib
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
H200 = ROOT / "reports" / "data" / "h200"
SHARED_TRACES = ROOT.parent / "shared" / "traces"
STAGES = ["naive-input", "baseline", "multiproc", "bufpool", "async", "streams", "pinned", "ceiling"]
LAYERS = ["nsys_core", "fixes", "workloads", "profiling", "analysis", "reports", "nsys_transfer"]
WORKER = os.environ.get("PYTEST_XDIST_WORKER")  # gw0, gw1, ... in an xdist worker; None in a run of one process


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


# --- one test run, several processes ------------------------------------------------------------------------------

def pytest_configure(config):
    """Where Python writes no bytecode (PYTHONDONTWRITEBYTECODE), each of the few hundred Python processes the tests
    start would compile the toolkit's modules again: compiled once here instead, into their __pycache__ (git ignores
    it), as Python itself writes them elsewhere. Python checks each file against its source before using it."""
    if not WORKER and sys.dont_write_bytecode:
        for layer in LAYERS:
            compileall.compile_dir(ROOT / layer, quiet=2)


def run_folder(tmp_path_factory) -> Path:
    """A folder every process of this test run shares: the xdist workers' base temps' parent, else the base temp."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if WORKER else base


class Once:
    """Values made once per test run: the first process to ask makes one and stores its pickle, holding a lock on the
    key meanwhile; every ask (that one's too) gets a fresh copy read back from the pickle, so that no test sees what
    another changed. A value that fails to be made is not stored: each ask makes it again, and fails as the first."""

    def __init__(self, folder: Path):
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)

    def __call__(self, key: str, make):
        name = hashlib.sha256(key.encode()).hexdigest()[:40]
        stored = self.folder / f"{name}.pickle"
        with open(self.folder / f"{name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # let go when closed
            if not stored.exists():
                part = stored.with_suffix(".part")
                part.write_bytes(pickle.dumps(make(), protocol=pickle.HIGHEST_PROTOCOL))
                part.replace(stored)
            return pickle.loads(stored.read_bytes())


@pytest.fixture(scope="session")
def once(tmp_path_factory) -> Once:
    return Once(run_folder(tmp_path_factory) / "once")


@pytest.fixture(scope="session")
def summary_of(once):
    """summary_of(path, opts=None): the summary `summary.analyze_sections` gives of that trace, analysed once per test
    run."""
    def summary(path, opts=None) -> dict:
        def make():
            from nsys_transfer.analysis import Trace
            from nsys_transfer.analysis.summary import analyze_sections
            with Trace.open(path) as t:
                return analyze_sections(t, opts).summary
        return once(f"summary {Path(path).resolve()} {opts!r}", make)
    return summary


@pytest.fixture(scope="session")
def analyze_trace(once):
    """analyze_trace(*names): what one run of analyze-trace --json says on stdout and its JSON, for these traces
    (named as tests/golden_answers.py names them: relative to the checkout, or shared/traces/NAME), made once per test
    run: the stored answers' test and tests/test_one_figure.py read the same run."""
    import golden_answers

    def run(*names: str) -> tuple[str, dict]:
        return once(f"analyze-trace {' + '.join(names)} --json: text and JSON", lambda: golden_answers.run(*names))
    return run


# The tests of each of these modules share a module-scoped fixture that takes seconds to make (a capture nsys records,
# a report, a Dask cluster): they run in one process, where it is made once.
ONE_PROCESS_MODULES = {"test_api", "test_charts", "test_extension_points", "test_failed_runs", "test_kineto",
                       "test_kineto_gpu", "test_kineto_runs", "test_one_figure", "test_parallel_ranks", "test_python_stacks",
                       "test_recorded", "test_replay", "test_verify_cpu"}


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """`--dist loadgroup` with each of ONE_PROCESS_MODULES one group, every other test spread on its own. (An
    `xdist_group` mark is not used for that: pytest-xdist 3.8 tells its groups to the scheduler by renaming the tests,
    which pytest 9.2's test ids ignore, so that the marks group nothing: pytest-dev/pytest-xdist#1386.)"""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class ByModule(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return module if Path(module).stem in ONE_PROCESS_MODULES else super()._split_scope(nodeid)
    return ByModule(config, log)


def _locked(path: Path, how: int):
    f = open(path, "a")
    fcntl.flock(f, how)
    return f


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """A test marked `alone` starts once the other processes' tests have ended, and none starts until it has ended
    (set-up and teardown of its fixtures included); the others share the machine. A readers-writer lock of two
    files: each test takes the turnstile on its way in, and an `alone` test holds it until it has ended, so that the
    other processes' next tests never overtake one that waits."""
    if not WORKER:
        yield
        return
    folder = Path(item.config.option.basetemp).parent  # xdist gives each worker BASETEMP/popen-gwN
    alone = item.get_closest_marker("alone") is not None
    with contextlib.ExitStack() as held:
        turnstile = held.enter_context(_locked(folder / "turnstile.lock", fcntl.LOCK_EX))
        held.enter_context(_locked(folder / "room.lock", fcntl.LOCK_EX if alone else fcntl.LOCK_SH))
        if not alone:
            turnstile.close()
        yield


# --- the traces ---------------------------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def h200():
    """Our real GPU captures (3 steps of each stage on an H200, plus a 12-step `pinned`)."""
    assert H200.is_dir(), f"{H200} is missing: the repository ships the H200 traces"
    return {p.name.split(".")[0]: p for p in H200.glob("*.sqlite.xz")}


@pytest.fixture(scope="session")
def public_traces():
    if not SHARED_TRACES.is_dir():
        pytest.skip(f"{SHARED_TRACES} not present (the public nsys exports live beside the checkout)")
    return sorted(SHARED_TRACES.glob("*.sqlite"))


@pytest.fixture(scope="session")
def nsys():
    from nsys_transfer.nsys_core.nsys import NsysNotFound, find_nsys
    try:
        return find_nsys()
    except NsysNotFound as e:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run with real nsys (make test installs it): {e}")
        pytest.skip(str(e))


@pytest.fixture(scope="session")
def analyzed(h200, summary_of):
    """The summary of every H200 trace's analysis, made once per test run."""
    return {name: summary_of(path) for name, path in h200.items()}


def run_cli(*args, check=False, timeout=300, env=None, cwd=None):
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout,
                          env=env, cwd=cwd or ROOT, check=check)


@pytest.fixture
def tmp_copy(tmp_path):
    def copy(src: Path, name: str | None = None) -> Path:
        dst = tmp_path / (name or Path(src).name)
        shutil.copyfile(src, dst)
        return dst
    return copy
