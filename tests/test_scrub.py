"""scrub-trace: the environment gone from every byte of the output, the output whole or not at all (an error, a
SIGTERM from `timeout`, Ctrl-C), an existing output replaced only with --force. Real public exports only."""
from __future__ import annotations

import lzma
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, SHARED_TRACES

SCRUB = ["-m", "nsys_transfer.analysis.cli.scrub"]
# a Colab capture: 105 environment variables, a working directory and the DeviceEnvironment block
COLAB = SHARED_TRACES / "nsightful_power_iteration_v2025.3.1.sqlite"
SECRETS = [b"COLAB_DEBUG_ADAPTER_MUX_PATH", b"/usr/local/bin/dap_multiplexer", b"NV_LIBNCCL_PACKAGE_VERSION"]


@pytest.fixture
def colab():
    if not COLAB.is_file():
        pytest.skip(f"{COLAB} not present (the public nsys exports live beside the checkout)")
    return COLAB


def _env(**extra):
    return {**os.environ, "PYTHONPATH": str(ROOT), **extra}


def scrub_cli(*args, env=None, **kw):
    return subprocess.run([sys.executable, *SCRUB, *map(str, args)], capture_output=True, text=True, timeout=300,
                          env=env or _env(), cwd=ROOT, **kw)


def _plain_bytes(path: Path) -> bytes:
    return lzma.decompress(path.read_bytes()) if path.name.endswith(".xz") else path.read_bytes()


@pytest.mark.parametrize("name", ["clean.sqlite", "clean.sqlite.xz"])
def test_no_environment_byte_left(colab, tmp_path, name):
    """Not just the rows: no byte of the output (free pages, overwritten cells) holds the environment."""
    raw = colab.read_bytes()
    assert all(s in raw for s in SECRETS)
    r = scrub_cli(colab, tmp_path / name)
    assert r.returncode == 0, r.stderr
    out = _plain_bytes(tmp_path / name)
    assert [s for s in SECRETS if s in out] == []
    (tmp_path / "plain.sqlite").write_bytes(out)
    with sqlite3.connect(tmp_path / "plain.sqlite") as con:
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert con.execute("SELECT COUNT(*) FROM META_DATA_CAPTURE WHERE name LIKE '%ENVIRONMENT_VARIABLE%'"
                           ).fetchone()[0] == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([name, "plain.sqlite"])  # no scratch file left


def test_python_lzma_when_no_xz_binary(colab, tmp_path, monkeypatch):
    """Without the xz binary the output is still a whole .xz (Python's lzma, one thread)."""
    from nsys_transfer.analysis.cli import scrub
    monkeypatch.setattr(scrub.shutil, "which", lambda name: None)
    scrub.scrub(colab, tmp_path / "clean.sqlite.xz")
    assert not [s for s in SECRETS if s in _plain_bytes(tmp_path / "clean.sqlite.xz")]
    assert [p.name for p in tmp_path.iterdir()] == ["clean.sqlite.xz"]


def test_existing_output_kept_without_force(colab, tmp_path):
    dst = tmp_path / "clean.sqlite"
    dst.write_bytes(b"someone's file")
    r = scrub_cli(colab, dst)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "--force" in r.stderr, r.stderr
    assert dst.read_bytes() == b"someone's file"
    r = scrub_cli(colab, dst, "--force")
    assert r.returncode == 0, r.stderr
    assert dst.read_bytes().startswith(b"SQLite format 3")
    assert [p.name for p in tmp_path.iterdir()] == ["clean.sqlite"]


def _stalling_xz(tmp_path: Path) -> Path:
    """A stand-in `xz` that writes part of an output and then waits: the moment a real one is stopped mid-write."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    xz = bin_dir / "xz"
    xz.write_text("#!/bin/sh\nprintf 'partial output' \nexec sleep 600\n")
    xz.chmod(0o755)
    return bin_dir


def _wait_for_partial(folder: Path, proc: subprocess.Popen) -> None:
    """Until the compressed scratch file holds bytes (a condition, not a duration: the limit only ends a hang)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        packed = [p for p in folder.glob("*.part") if not p.name.endswith(".sqlite.part")]
        if any(p.stat().st_size for p in packed):
            return
        time.sleep(0.05)
    pytest.fail(f"no partial output appeared (exit {proc.poll()})")


@pytest.mark.parametrize("stop, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_stopped_mid_write_leaves_nothing(colab, tmp_path, stop, code):
    """`timeout` (SIGTERM) or Ctrl-C (SIGINT) while xz writes: no DST, no scratch file, xz ended, one line."""
    out = tmp_path / "out"
    out.mkdir()
    env = _env(PATH=f"{_stalling_xz(tmp_path)}{os.pathsep}{os.environ['PATH']}")
    proc = subprocess.Popen([sys.executable, *SCRUB, str(colab), str(out / "clean.sqlite.xz")], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for_partial(out, proc)
        proc.send_signal(stop)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == code, err
    assert len(err.strip().splitlines()) == 1 and "not written" in err, err
    assert list(out.iterdir()) == []


def test_failing_xz_one_line_nothing_left(colab, tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "xz").write_text("#!/bin/sh\nprintf 'half'\necho 'xz: (stdout): No space left on device' >&2\nexit 1\n")
    (bin_dir / "xz").chmod(0o755)
    out = tmp_path / "out"
    r = scrub_cli(colab, out / "clean.sqlite.xz", env=_env(PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}"))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "No space left on device" in r.stderr
    assert not out.exists()  # the folder this run created went too


def test_stop_inside_a_long_sqlite_statement(tmp_path):
    """A stop that lands while SQLite works (a VACUUM of 1 GB runs for seconds) aborts the statement at once: Python
    alone would run the signal's handler only after it."""
    from nsys_transfer.analysis.cli import scrub
    stops = scrub._Stops()
    con = sqlite3.connect(tmp_path / "x.sqlite")
    con.set_progress_handler(stops.progress, scrub.PROGRESS_STEPS)
    stops.signum = signal.SIGTERM  # as its handler leaves it when the exception it raised is swallowed by SQLite
    with pytest.raises(scrub.Stopped):
        scrub._execute(con, "WITH RECURSIVE n(k) AS (SELECT 1 UNION ALL SELECT k + 1 FROM n WHERE k < 20000000) "
                            "SELECT COUNT(*) FROM n", (), stops).fetchall()


HOLD_LOCK = """
import sqlite3, sys, time
con = sqlite3.connect(sys.argv[1], isolation_level=None)
con.execute("BEGIN EXCLUSIVE")  # a writer at work: readers that take SQLite's shared lock are refused
con.execute("CREATE TABLE uncommitted(x)")
print("LOCKED", flush=True)
time.sleep(120)
"""


def test_a_locked_export_is_read_and_its_holder_named(colab, tmp_path, tmp_copy):
    """issue 57, item 12: an export another process holds locked for writing is no damaged export: its last committed
    state is scrubbed (as analyze-trace reads it), the holder is named, the source is left as it was."""
    src = tmp_copy(colab, "held.sqlite")
    before = src.read_bytes()
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(src)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "LOCKED"
        r = scrub_cli(src, tmp_path / "clean.sqlite")
    finally:
        holder.kill()
        holder.wait()
    assert r.returncode == 0, r.stderr
    said = r.stderr.strip().splitlines()
    assert len(said) == 1 and said[0].startswith(f"scrub-trace: {src} is locked by process {holder.pid} (python"), said
    assert said[0].endswith("(a writer at work): its last committed state was copied"), said
    assert "damaged" not in r.stderr and src.read_bytes() == before
    with sqlite3.connect(tmp_path / "clean.sqlite") as con:
        names = {n for (n,) in con.execute("SELECT name FROM sqlite_master")}
        assert "StringIds" in names and "uncommitted" not in names
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
