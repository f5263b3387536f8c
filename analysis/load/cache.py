"""The cache of decompressed (.sqlite.xz) and exported (.nsys-rep) traces: one entry per input's content, written
whole or not at all, bounded in size, readable by the user alone (a trace carries its program's environment).

    entry name: <key>.sqlite, key = sha1 of the input's size and its first and last MiB (the same trace copied
                under three names is one entry; a changed file is a new one)
    writing:    into a private temporary file beside it, renamed into place only once complete: a failed or
                interrupted decompression or export leaves nothing behind
    size:       at most NSYS_TRANSFER_CACHE_MAX (default 4G; K, M, G suffixes; 0 keeps only the entry in use): the
                entries used longest ago are deleted first, never the one just made or opened
    where:      $NSYS_TRANSFER_CACHE, else $XDG_CACHE_HOME/nsys-transfer, else ~/.cache/nsys-transfer (mode 0700)
"""
from __future__ import annotations

import hashlib
import os
import re
import time
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path

from ..common.errors import TraceError
from ...nsys_core.signals import scratch_file, sigterm_raising

DEFAULT_MAX = 4 << 30
EDGE = 1 << 20  # bytes read from each end of an input for its key
UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def cache_dir() -> Path:
    """The cache folder, made private to the user where it is made."""
    root = Path(os.environ.get("NSYS_TRANSFER_CACHE") or
                Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "nsys-transfer")
    try:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as e:
        raise TraceError(f"{root}: cannot make the cache folder ({e.strerror}); set NSYS_TRANSFER_CACHE to a "
                         "folder you can write") from None
    return root


def max_bytes() -> int:
    """NSYS_TRANSFER_CACHE_MAX in bytes (a TraceError for a value that is no size)."""
    text = os.environ.get("NSYS_TRANSFER_CACHE_MAX", "").strip()
    if not text:
        return DEFAULT_MAX
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?", text, re.IGNORECASE)
    if not m:
        raise TraceError(f"NSYS_TRANSFER_CACHE_MAX={text!r} is not a size; give bytes or e.g. 500M, 4G (0 keeps only "
                         "the trace in use)")
    return int(float(m.group(1)) * UNITS[m.group(2).upper()])


def content_key(src: Path, salt: str = "") -> str:
    """A key of the input's content that reads at most 2 MiB of it: its size and its first and last MiB (and the
    salt: the version of a conversion, so that a changed converter never serves an older entry)."""
    size = src.stat().st_size
    h = hashlib.sha1(str(size).encode() + salt.encode())
    with open(src, "rb") as f:
        h.update(f.read(EDGE))
        if size > EDGE:
            f.seek(max(EDGE, size - EDGE))
            h.update(f.read(EDGE))
    return h.hexdigest()[:16]


def cached(src: Path, make: Callable[[Path], None], salt: str = "") -> Path:
    """The cache entry for src, made by make(temporary path) where it is missing; the rest of the cache trimmed to
    its bound afterwards. make raises TraceError (or anything) to say it failed: nothing is kept then. salt: see
    content_key."""
    root = cache_dir()
    out = root / f"{content_key(src, salt)}.sqlite"
    if out.exists():
        os.utime(out)  # used now: evicted last
    else:
        # a failure or an interrupt (Ctrl-C, SIGTERM; in a --jobs worker, SIGTERM ends it) leaves nothing
        with sigterm_raising(), scratch_file(root, f".{out.stem}-", ".part") as tmp:
            make(tmp)
            tmp.replace(out)
    trim(root, keep=out)
    return out


def trim(root: Path, keep: Path) -> None:
    """Delete the entries used longest ago until the cache is within max_bytes(); never `keep`."""
    limit = max_bytes()
    entries = []
    for p in root.glob("*.sqlite"):
        with suppress(OSError):  # another run may delete it meanwhile
            st = p.stat()
            entries.append((st.st_mtime, st.st_size, p))
    for p in root.glob(".*.part"):  # left by a run killed outright (SIGKILL): a day is longer than any write
        with suppress(OSError):
            if time.time() - p.stat().st_mtime > 86400:
                p.unlink()
    total = sum(size for _, size, _ in entries)
    for _, size, p in sorted(entries):
        if total <= limit:
            break
        if p != keep:
            with suppress(OSError):
                p.unlink()
                total -= size
