"""A torch.profiler trace as a file (kineto.py converts it): whether a file is JSON or gzip-compressed JSON by its first
bytes, whether it is a Chrome trace (its events, an array or a traceEvents key), its header (the keys Kineto writes
before the events) and its events, streamed by ijson's C parser, never held whole."""
from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator
from pathlib import Path

try:
    import ijson
except ImportError:  # only a torch.profiler trace needs it: nsys captures and their analysis run without it
    ijson = None

STREAMS = ijson is not None  # whether a torch.profiler trace can be read here
NO_IJSON = ("reading a torch.profiler trace needs the ijson package, which is not installed; install it (`pip install "
            "ijson`, or `make install`) and run again")
# what the parser raises on JSON cut short or damaged (none without it: nothing is parsed then)
BAD_JSON: tuple[type[Exception], ...] = (ijson.IncompleteJSONError, ijson.JSONError) if ijson is not None else ()
GZIP_MAGIC = b"\x1f\x8b"
NAMES = (".json", ".json.gz", ".json.gzip")  # how torch.profiler's traces are named (the content decides, not this)


def is_json(head: bytes) -> bool:
    """Whether a file's first bytes (after a gzip header's decompression) begin a JSON object (`{"` or `{}`) or
    array (`[{`, `[]`, `["`, `[1`): two characters, so that random bytes are seldom taken for JSON."""
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    rest = text[1:].lstrip(b" \t\r\n")[:1]
    if text[:1] == b"{":
        return rest in (b'"', b"}")
    return text[:1] == b"[" and (rest in (b"{", b"[", b'"', b"]", b"-", b"t", b"f", b"n") or rest.isdigit())


NSYS_NAMES = (".sqlite", ".sqlite.xz", ".nsys-rep", ".qdrep")  # named as an nsys trace: read as one, whatever it holds


def looks_like_json(path: Path) -> bool:
    """Whether the file is JSON or gzip-compressed JSON, by its first bytes (never by its name alone); a file named as
    an nsys trace is one (its checks then word what is wrong with it)."""
    if path.name.endswith(NSYS_NAMES):
        return False
    with open(path, "rb") as f:
        head = f.read(64)
    if head.startswith(GZIP_MAGIC):
        try:
            with gzip.open(path, "rb") as g:
                return is_json(g.read(64))
        except (OSError, EOFError, zlib.error):
            return path.name.endswith(NAMES)  # a damaged one: convert() words it
    return is_json(head)


def _open(path: Path):
    with open(path, "rb") as f:
        gz = f.read(2) == GZIP_MAGIC
    return gzip.open(path, "rb") if gz else open(path, "rb")


def has_trace_events(path: Path) -> bool:
    """Whether a JSON file is a Chrome trace (its events, an array or a traceEvents key), read no further than that;
    False for other JSON (a run record) and for files that are not JSON at all."""
    if ijson is None or not looks_like_json(path):
        return False
    try:
        return header(path)[1]
    except (*BAD_JSON, OSError, EOFError, zlib.error):
        return False


def _is_array(path: Path) -> bool:
    """Whether the JSON is a bare array of events (libkineto's first traces, 2020), not an object."""
    with _open(path) as f:
        head = f.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")
    return head[:1] == b"["


def header(path: Path) -> tuple[dict, bool]:
    """The top-level keys Kineto writes before traceEvents (schemaVersion, deviceProperties, baseTimeNanoseconds,
    distributedInfo, ...), read without reading the events; and whether a traceEvents key (or a bare array of
    events) was found."""
    if _is_array(path):
        return {}, True
    out: dict = {}
    with _open(path) as f:
        builder, key = None, None
        for prefix, event, value in ijson.parse(f, use_float=True):
            if prefix == "" and event == "map_key":
                if value == "traceEvents":
                    return out, True
                key, builder = value, ijson.ObjectBuilder()
            elif builder is not None:
                builder.event(event, value)
                if prefix == key and event != "map_key" and event not in ("start_map", "start_array"):
                    out[key], builder = builder.value, None
    return out, False


def events(path: Path) -> Iterator[dict]:
    """The trace's events, streamed one by one (a bare array's items, or traceEvents'), never held whole."""
    with _open(path) as f:
        yield from ijson.items(f, "item" if _is_array(path) else "traceEvents.item", use_float=True)
