"""Shared fixtures: real traces only (public exports, our H200 captures, traces nsys records during the run)."""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
H200 = ROOT / "reports" / "data" / "h200"
SHARED_TRACES = ROOT.parent / "shared" / "traces"
STAGES = ["naive-input", "baseline", "multiproc", "bufpool", "async", "streams", "pinned", "ceiling"]


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


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
def analyzed(h200):
    """analysis of every H200 trace, computed once."""
    from nsys_transfer.analysis import Trace
    from nsys_transfer.analysis.summary import analyze_sections
    out = {}
    for name, path in h200.items():
        with Trace.open(path) as t:
            out[name] = analyze_sections(t)
    return out


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
