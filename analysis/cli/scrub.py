"""`scrub-trace SRC DST`: a copy of an nsys export without the profiled program's environment.

An export carries the whole environment (tokens, private paths) in TARGET_INFO_SYSTEM_ENV
(DeviceEnvironment), META_DATA_CAPTURE (PROCESS_n:ENVIRONMENT_VARIABLE, PROCESS_n:WORKING_DIR) and
NUL-separated blocks in StringIds. SRC is never modified; DST may be .sqlite or .sqlite.xz.

DST is written whole or not at all: everything goes to hidden `.DST-*.part` files in DST's folder, renamed onto
DST at the end; an error, Ctrl-C or SIGTERM (a `timeout` around it) at any point removes them and leaves DST as it
was. An existing DST is replaced only with --force. .xz is compressed by the `xz` binary on all cores where there is
one (Python's lzma has no threads: a 1 GB export took minutes at preset 9, docs/benchmarks.md), else by lzma.
"""
from __future__ import annotations

import lzma
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import urllib.parse
from contextlib import contextmanager
from pathlib import Path

import click

from ..render import outputs
from .options import OneLineCommand
from ..facade import Trace, TraceError, lock_held
from ...nsys_core.signals import STOPS, scratch_file

SCRUBBED = "(scrubbed)"
ENV_ASSIGN = re.compile(r"(?:^|[\x00;\n])[A-Za-z_][A-Za-z0-9_]*=")
# xz's fastest preset: on the 1 GB benchmark export 13x less CPU than xz's default 6 for a file 36% larger
# (docs/benchmarks.md, "scrub-trace on a 1 GB export"); --preset 6 or 9 where size matters more than minutes
XZ_PRESET = 0
PROGRESS_STEPS = 100_000  # SQLite VM steps between two looks at a pending stop (well under a millisecond)


class Stopped(Exception):
    """SIGINT or SIGTERM arrived while DST was being made."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class _Stops:
    """The stops, raised as Stopped, and remembered: Python runs a signal handler only between its own bytecodes, so a
    stop that lands inside a long SQLite statement is seen by the progress handler, which aborts the statement."""

    def __init__(self):
        self.signum: int | None = None

    def handler(self, signum, frame):
        self.signum = signum
        raise Stopped(signum)

    def progress(self) -> int:
        return 1 if self.signum is not None else 0  # non-zero: SQLite aborts the statement under way

    def raise_if_stopped(self) -> None:
        if self.signum is not None:
            raise Stopped(self.signum)


@contextmanager
def _stops_raised():
    """For the block, SIGINT and SIGTERM raise Stopped (in the main thread; elsewhere nothing changes)."""
    stops = _Stops()
    if threading.current_thread() is not threading.main_thread():
        yield stops
        return
    previous = {sig: signal.signal(sig, stops.handler) for sig in STOPS}
    try:
        yield stops
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _looks_like_environment(value: str) -> bool:
    return "\x00" in value or len(ENV_ASSIGN.findall(value)) >= 3


def check_output(src: Path, dst: Path, force: bool) -> None:
    """TraceError in one line unless dst can be written, is not src, and is new or may be replaced."""
    if dst.resolve() == Path(src).resolve():
        raise TraceError(f"{dst}: refusing to overwrite the input; give another output path")
    outputs.check_destination(dst, "DST", folder=False, inputs=[src])
    if dst.exists() and not force:
        raise TraceError(f"{dst}: exists; pass --force to replace it, or give another name")


def scrub(src: Path, dst: Path, force: bool = False, preset: int = XZ_PRESET) -> dict:
    """Write a scrubbed copy of src to dst, whole or not at all; return counts of what was removed. Stopped when a
    stop arrives (nothing is left behind then)."""
    check_output(src, dst, force)
    with Trace.open(src) as t:  # validates, decompresses, and applies a journal beside it on a private copy
        local = t.path
    held = lock_held(Path(local))  # another process writes it: its last committed state is read, as analyze-trace does
    created = outputs.first_missing(dst.parent)
    try:
        with _stops_raised() as stops:
            dst.parent.mkdir(parents=True, exist_ok=True)
            before = _identity(Path(local))
            counts = _write_scrubbed(Path(local), dst, stops, preset, immutable=held is not None)
            if held and _identity(Path(local)) != before:
                dst.unlink(missing_ok=True)
                raise TraceError(f"{src}: is locked {held}, which wrote to it while it was being copied; wait until "
                                 "that process has finished, then run again")
    except OSError as e:
        outputs.remove_created(created)
        raise TraceError(f"{dst}: cannot write it ({e.strerror or e}); choose a place you can write") from None
    except BaseException:
        outputs.remove_created(created)
        raise
    counts["locked_by"] = held
    return counts


def _identity(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_size, st.st_mtime_ns


def _write_scrubbed(local: Path, dst: Path, stops: _Stops, preset: int, immutable: bool = False) -> dict:
    """The scrubbed export into scratch files beside dst, the finished one renamed onto it (the scratch files are
    deleted however the block ends)."""
    folder, stem = dst.parent, f".{dst.name}-"
    with scratch_file(folder, stem, ".sqlite.part") as work:
        counts = _scrubbed_copy(local, work, stops, immutable)
        if not dst.name.endswith(".xz"):
            _publish(work, dst)
            return counts
        with scratch_file(folder, stem, ".part") as packed:
            compress(work, packed, preset)
            _publish(packed, dst)
    return counts


def _publish(part: Path, dst: Path) -> None:
    """part renamed onto dst (atomic: a reader sees the old dst or the new one), with the permissions a new file
    gets (scratch files are private to the user)."""
    umask = os.umask(0)
    os.umask(umask)
    part.chmod(0o666 & ~umask)
    part.replace(dst)


def _scrubbed_copy(local: Path, work: Path, stops: _Stops, immutable: bool = False) -> dict:
    """A compacted copy of local at work (VACUUM INTO: no free page of the original comes along), the environment
    then overwritten in it, with secure_delete zeroing the bytes it held. immutable: read without SQLite's shared lock
    (another process holds one against readers; the file holds its last committed state, journal.lock_held)."""
    uri = f"file:{urllib.parse.quote(str(local.resolve()))}?mode=ro" + ("&immutable=1" if immutable else "")
    src = sqlite3.connect(uri, uri=True)
    try:
        src.set_progress_handler(stops.progress, PROGRESS_STEPS)
        work.unlink()  # VACUUM INTO wants a new file (the scratch name stays reserved: a stop deletes what it finds)
        _execute(src, "VACUUM INTO ?", (str(work),), stops)
    finally:
        src.close()
    con = sqlite3.connect(work)
    try:
        con.set_progress_handler(stops.progress, PROGRESS_STEPS)
        con.text_factory = lambda b: b.decode("utf-8", "replace")
        con.execute("PRAGMA secure_delete=ON")
        con.execute("PRAGMA journal_mode=OFF")  # a scratch file: a failure deletes it, no rollback is needed
        counts = _remove_environment(con, stops)
        con.commit()
    finally:
        con.close()
    return counts


def _remove_environment(con: sqlite3.Connection, stops: _Stops) -> dict:
    counts = {"system_env": 0, "capture_meta": 0, "strings": 0}
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if "TARGET_INFO_SYSTEM_ENV" in tables:
        counts["system_env"] = _execute(con, "UPDATE TARGET_INFO_SYSTEM_ENV SET value=? WHERE name LIKE "
                                             "'%Environment%'", (SCRUBBED,), stops).rowcount
    if "META_DATA_CAPTURE" in tables:
        counts["capture_meta"] = _execute(con, "DELETE FROM META_DATA_CAPTURE WHERE name LIKE "
                                               "'%ENVIRONMENT_VARIABLE%'", (), stops).rowcount
        counts["capture_meta"] += _execute(con, "UPDATE META_DATA_CAPTURE SET value=? WHERE name LIKE '%WORKING_DIR%'",
                                           (SCRUBBED,), stops).rowcount
    ids = [i for i, v in _execute(con, "SELECT id, value FROM StringIds", (), stops).fetchall()
           if _looks_like_environment(str(v or ""))]
    con.executemany("UPDATE StringIds SET value=? WHERE id=?", [(SCRUBBED, i) for i in ids])
    counts["strings"] = len(ids)
    return counts


def _execute(con: sqlite3.Connection, sql: str, params: tuple, stops: _Stops) -> sqlite3.Cursor:
    """con.execute, but a statement the progress handler aborted for a stop raises Stopped, not "interrupted"."""
    try:
        return con.execute(sql, params)
    except sqlite3.OperationalError:
        stops.raise_if_stopped()
        raise


def compress(work: Path, packed: Path, preset: int = XZ_PRESET) -> None:
    """work xz-compressed into packed: by `xz -T0` (all cores) where it is installed, else by Python's lzma."""
    xz = shutil.which("xz")
    if xz:
        _xz_binary(xz, work, packed, preset)
    else:
        with open(work, "rb") as f, lzma.open(packed, "wb", preset=preset) as out:
            shutil.copyfileobj(f, out, 1 << 20)


def _xz_binary(xz: str, work: Path, packed: Path, preset: int) -> None:
    """`xz -T0` from work into packed; a stop here (raised while waiting) ends xz before the scratch files go."""
    with open(packed, "wb") as out:
        proc = subprocess.Popen([xz, "-T0", f"-{preset}", "-c", "--", str(work)], stdout=out,
                                stderr=subprocess.PIPE)
        try:
            _, err = proc.communicate()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    if proc.returncode != 0:
        last = (err.decode(errors="replace").strip().splitlines() or [f"exit code {proc.returncode}"])[-1]
        raise OSError(f"xz failed: {last}")


@click.command(cls=OneLineCommand, name="scrub-trace", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("src", type=click.Path(path_type=Path))
@click.argument("dst", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--force", is_flag=True, help="replace DST when it exists (default: refuse)")
@click.option("--preset", type=click.IntRange(0, 9), default=XZ_PRESET, show_default=True,
              help="xz preset for a .xz DST: 0 is fastest, 9 smallest")
def main(src, dst, force, preset):
    """Copy SRC to DST without the environment and working directory the export recorded. DST is written whole or
    not at all (.sqlite, or .sqlite.xz compressed with `xz -T0` where installed)."""
    try:
        counts = scrub(src, dst, force, preset)
    except Stopped as e:
        click.echo(f"scrub-trace: stopped ({e}); {dst} not written", err=True)
        sys.exit(128 + e.signum)
    except TraceError as e:
        click.echo(f"scrub-trace: {e}", err=True)
        sys.exit(2)
    except sqlite3.DatabaseError as e:
        click.echo(f"scrub-trace: {src}: the export is damaged ({e}); re-export it", err=True)
        sys.exit(2)
    if counts.get("locked_by"):
        click.echo(f"scrub-trace: {src} is locked {counts['locked_by']} (a writer at work): its last committed "
                   "state was copied", err=True)
    click.echo(f"{dst}: removed {counts['system_env']} system environment, {counts['capture_meta']} capture "
               f"metadata and {counts['strings']} string-table entries")


if __name__ == "__main__":
    main()
