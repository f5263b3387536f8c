"""Never read a writer's uncommitted pages: a trace with a rollback journal or WAL beside it is read from a private
copy on which SQLite itself applies them.

Trace opens exports with `immutable=1` (no locks, no journal, nothing written), which also means SQLite ignores a
`-journal` or `-wal` file beside the export. A hot journal is what a writer that crashed, or is still writing, leaves:
the database file may already hold pages of a transaction that never committed, and only rolling the journal back
restores the committed state. A WAL holds committed pages not yet copied into the database file. Doing either on the
user's file would change it (and needs a writable folder), so both files are copied into the cache and SQLite opens
the copy normally; the user's files stay byte-identical.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import urllib.parse
from pathlib import Path

from ..common.errors import TraceError
from .cache import cache_dir

ROLLBACK_MAGIC = bytes.fromhex("d9d505f920a163d7")  # the first 8 bytes of a journal that still has work to undo
WAL_MAGIC = (bytes.fromhex("377f0682"), bytes.fromhex("377f0683"))


def pending_journal(db: Path) -> Path | None:
    """The journal beside `db` that SQLite would still apply: a rollback journal whose header is intact, or a WAL
    with frames. An empty or zeroed journal (what a finished transaction leaves in some journal modes) is none."""
    for suffix, magics in (("-journal", (ROLLBACK_MAGIC,)), ("-wal", WAL_MAGIC)):
        side = db.with_name(db.name + suffix)
        try:
            with open(side, "rb") as f:
                head = f.read(8)
        except OSError:
            continue
        if any(head.startswith(m) for m in magics):
            return side
    return None


def committed_copy(db: Path, source: str | None = None) -> tuple[Path, str | None]:
    """(path to read, note): `db` itself when nothing is pending beside it, else a private copy in the cache with the
    journal rolled back or the WAL applied, and a one-line note saying so. TraceError when SQLite cannot apply it or
    the files change while they are copied (a writer is still at work)."""
    if not db.is_file():
        return db, None
    journal = pending_journal(db)
    if journal is None:
        return db, None
    source = source or str(db)
    kind = "WAL" if journal.name.endswith("-wal") else "rollback journal"
    out = _copy_path(db, journal)
    if not out.exists():
        _apply_on_copy(db, journal, out, source, kind)
    what = ("its committed pages were read" if kind == "WAL" else
            "a crashed or unfinished write; it was rolled back and the last committed state read")
    return out, f"{journal.name} beside the trace ({kind}: {what}, on a private copy; your files are untouched)"


def _copy_path(db: Path, journal: Path) -> Path:
    """Where the applied copy of this database and journal state lives: keyed by both files' identity."""
    parts = [f"{p.resolve()}|{p.stat().st_size}|{p.stat().st_mtime_ns}" for p in (db, journal)]
    key = hashlib.sha1("||".join(parts).encode()).hexdigest()[:16]
    return cache_dir() / f"{db.name.split('.')[0]}-{key}.committed.sqlite"


def _apply_on_copy(db: Path, journal: Path, out: Path, source: str, kind: str) -> None:
    work = out.with_name(out.stem + ".part")
    work.mkdir(exist_ok=True)
    copy = work / "trace.sqlite"
    try:
        before = _identity(db, journal)
        # the database first, then the journal: a writer saves each page's old content in the journal before it
        # overwrites the page, so a journal copied later holds the old content of every page copied mid-write
        shutil.copyfile(db, copy)
        shutil.copyfile(journal, copy.with_name(copy.name + journal.name[len(db.name):]))
        if _identity(db, journal) != before:
            raise TraceError(f"{source}: is being written right now (it and its {kind} changed while being read); "
                             "wait until the writer (nsys export?) has finished, then run again")
        con = sqlite3.connect(copy, isolation_level=None)
        try:
            con.execute("SELECT count(*) FROM sqlite_master").fetchone()  # opening rolls a hot journal back
            con.execute("PRAGMA journal_mode=DELETE").fetchone()          # folds a WAL into the file, removes it
        finally:
            con.close()
        copy.replace(out)
    except sqlite3.DatabaseError as e:
        raise TraceError(f"{source}: has a {kind} beside it that SQLite cannot apply ({e}); re-export the trace "
                         "(`nsys export --type=sqlite REPORT.nsys-rep`)") from None
    except OSError as e:
        raise TraceError(f"{source}: has a {kind} beside it, and applying it on a private copy in {out.parent} "
                         f"failed ({e}); free space there or set NSYS_TRANSFER_CACHE to another folder") from None
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _identity(*paths: Path) -> list[tuple[int, int]]:
    return [(p.stat().st_size, p.stat().st_mtime_ns) for p in paths]


def lock_held(db: Path) -> str | None:
    """None when a reader can take SQLite's shared lock on db (what any reader but our immutable one needs); else who
    holds the lock against it, in words ('by process 123 (python3)'). A writer at work holds it while its changes are
    still in its own memory or in a journal beside the file (pending_journal reads those), so the file itself holds
    the last committed state: locked is not damaged."""
    uri = f"file:{urllib.parse.quote(str(Path(db).resolve()))}?mode=ro"
    try:
        con = sqlite3.connect(uri, uri=True, timeout=0.1)
    except sqlite3.Error:
        return None
    try:
        con.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.OperationalError as e:
        return holders_said(db) if "locked" in str(e).lower() or "busy" in str(e).lower() else None
    except sqlite3.Error:
        return None  # damaged: the read itself says so
    finally:
        con.close()
    return None


def holders(path: Path) -> list[tuple[int, str]]:
    """(pid, program name) of every process this user can see with `path` open (its /proc/PID/fd links): who holds a
    lock on an export, said by name rather than as SQLite's bare "database is locked"."""
    target = os.path.realpath(path)
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc") if os.path.isdir("/proc") else []):
        if int(pid) == os.getpid():
            continue
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
            if not any(os.path.realpath(f"/proc/{pid}/fd/{fd}") == target for fd in fds):
                continue
            with open(f"/proc/{pid}/comm") as f:
                found.append((int(pid), f.read().strip()))
        except OSError:  # another user's process, or one that ended meanwhile
            continue
    return found


def holders_said(path: Path) -> str:
    """'by process 123 (python3)', 'by processes 1 (a), 2 (b)', or 'by another process' when none can be seen."""
    procs = holders(path)
    if not procs:
        return "by another process"
    return f"by process{'es' if len(procs) > 1 else ''} " + ", ".join(f"{p} ({n})" for p, n in procs[:3])
