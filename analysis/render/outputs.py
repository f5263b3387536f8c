"""Where results go: checked before any work (a minutes-long analysis must not end in "permission denied"), written
with one line on failure, and a folder a failed run created removed again.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from ..common.errors import TraceError


def check_destination(path: Path | None, flag: str, folder: bool, inputs=()) -> None:
    """TraceError in one line unless `path` (a file, or a folder when `folder`) can be created and written, and is
    none of the `inputs` (writing a summary over the trace it came from would destroy the trace)."""
    if path is None:
        return
    path = Path(path)
    if path.exists() and any(Path(i).exists() and path.samefile(i) for i in inputs):
        raise TraceError(f"{flag} {path}: is an input; give another name, the input stays as it is")
    if path.exists():
        if folder and not path.is_dir():
            raise TraceError(f"{flag} {path}: is a file, not a folder; give a folder")
        if not folder and path.is_dir():
            raise TraceError(f"{flag} {path}: is a folder; give a file name")
    home = path if folder and path.is_dir() else _existing_ancestor(path.parent if not folder else path)
    if not home.is_dir():
        raise TraceError(f"{flag} {path}: {home} is a file, so nothing can be created under it; choose another place")
    if not os.access(home, os.W_OK | os.X_OK):
        raise TraceError(f"{flag} {path}: cannot write into {home} (permission denied or read-only); "
                         "choose a place you can write")
    _try_writing(path, home, flag, folder)


def _try_writing(path: Path, home: Path, flag: str, folder: bool) -> None:
    """Create (and remove) a file where the output goes: os.access answers yes for root on /proc and /sys, on a
    read-only mount and on a full disk, where the write at the end of the analysis then fails. An existing output
    file is opened for appending (which changes nothing in it)."""
    try:
        if not folder and path.is_file():
            with open(path, "ab"):
                pass
            return
        fd, probe = tempfile.mkstemp(dir=home, prefix=".nsys-transfer-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise TraceError(f"{flag} {path}: cannot write into {home if not path.is_file() else path} "
                         f"({e.strerror or e}); choose a place you can write") from None


def make_folder(path: Path, flag: str) -> None:
    """Create an output folder (and its parents); a TraceError naming flag when it cannot."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise TraceError(f"{flag} {path}: cannot create it ({e.strerror or e}); choose a place you can write") from None


def _existing_ancestor(path: Path) -> Path:
    """The path itself or its nearest ancestor that exists (absolute, so '.' and a bare name resolve)."""
    path = Path(os.path.abspath(path))
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def first_missing(path: Path) -> Path | None:
    """The outermost folder of `path` that does not exist yet: what creating it creates, and what to remove when
    the run that created it fails."""
    path = Path(os.path.abspath(path))
    missing = None
    while not path.exists() and path != path.parent:
        missing, path = path, path.parent
    return missing


def remove_created(created: Path | None) -> None:
    """Remove a folder tree this run created (first_missing() before it), after a failure."""
    if created is not None and created.is_dir():
        shutil.rmtree(created, ignore_errors=True)


def write_json(path: Path, data, flag: str = "--json") -> None:
    """Write data as indented JSON, creating the folder; a TraceError naming flag when it cannot."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=2))
    except OSError as e:
        raise TraceError(f"{flag} {path}: cannot write it ({e.strerror or e})") from None


def write_tables(folder: Path, tables: dict, flag: str = "--csv") -> None:
    """Write each table as NAME.csv into folder; a TraceError naming flag when it cannot."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for name, df in tables.items():
            df.to_csv(folder / f"{name}.csv", index=False)
    except OSError as e:
        raise TraceError(f"{flag} {folder}: cannot write into it ({e.strerror or e})") from None
