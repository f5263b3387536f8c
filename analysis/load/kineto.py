"""A torch.profiler (Kineto) trace as an SQLite file in the part of Nsight Systems' export schema that the typed tables
read (load/device.py, calls.py, host.py), so that every section, rule, chart and verify runs on it unchanged.

    Kineto event (ph "X")               -> table (nsys's columns)
    cat kernel                          -> CUPTI_ACTIVITY_KIND_KERNEL  start, end, deviceId, streamId, correlationId,
                                                                       globalPid, shortName, demangledName
    cat gpu_memcpy "Memcpy DtoH (Device -> Pinned)" -> CUPTI_ACTIVITY_KIND_MEMCPY (copyKind, srcKind, dstKind, bytes)
    cat gpu_memset                      -> CUPTI_ACTIVITY_KIND_MEMSET
    cat cuda_runtime, cuda_driver       -> CUPTI_ACTIVITY_KIND_RUNTIME start, end, globalTid, correlationId, nameId
    cat user_annotation (record_function), ProfilerStep#N -> NVTX_EVENTS (push/pop ranges of their thread)
    cat python_function, cpu_op         -> KINETO_HOST_EVENTS (the program's call tree: load/kineto_stacks.py)

Every format torch.profiler has written is read (FORMATS): today's categories above (Kineto since November 2021,
PyTorch 1.11 on); the older ones of PyTorch 1.8-1.10 (`Kernel`, `Runtime`, `Memcpy`, `Memset`, `Operator`, flows
`async` or `async_gpu`), where a record_function range is an `Operator` event like the ops, told apart (_older_range)
by its name (an op is `aten::mm` or an identifier such as `AddmmBackward`; `ProfilerStep#5`, `Optimizer.step#SGD.step`
are ranges) or, for a range named like an identifier (`compute`), by its empty input shapes (record_shapes=True
writes `Input dims` for every event: [] for a range); with or without `schemaVersion`, and as a bare JSON array of events (libkineto's first
traces, 2020) as well as `{"traceEvents": [...]}`. export_chrome_trace writes `.json`, tensorboard_trace_handler
`.pt.trace.json` (`.pt.trace.json.gz` with use_gzip=True): the content decides, never the name.
    cudaStreamSynchronize & co.         -> CUPTI_ACTIVITY_KIND_SYNCHRONIZATION (which calls are waits: _waits)
    ph "M" thread_name                  -> ThreadNames;  deviceProperties -> TARGET_INFO_GPU
    baseTimeNanoseconds                 -> TARGET_INFO_SESSION_START_TIME (UTC of the trace's time 0)

What nsys records and Kineto does not is left out, never made up: no OSRT_API (OS runtime calls), no sampling tables
(CPU samples), no scheduling events; KINETO_TRACE marks the file, and the analysis says so once (Trace.capture_notes).

Times: Kineto writes microseconds with three decimals (ns resolution, as floats). Each start becomes round(ts * 1000)
and each end start + round(dur * 1000): a timestamp is within 1 ns of Kineto's, a duration within 0.5 ns. Time 0 is
the earliest event's start (nsys counts from its session start).

The JSON is streamed (ijson's C parser, a batch of rows at a time into SQLite): a 2 GB trace is never held whole. The
rows land in staging tables first and are copied into the final ones sorted by start, shifted to time 0, so that the
big tables are in start order as nsys writes them (the kernel digest then reads them a chunk at a time).
"""
from __future__ import annotations

import gzip
import re
import sqlite3
import zlib
from pathlib import Path

from ..common.errors import TraceError
from . import kineto_json

VERSION = "kineto-4"  # the conversion's version: the cache keys its files by it (load/cache.py)
MARKER_TABLE = "KINETO_TRACE"
HOST_EVENTS = "KINETO_HOST_EVENTS"
PYTHON, CPU_OP = 0, 1  # KINETO_HOST_EVENTS.kind
BATCH = 50_000
NVTX_PUSHPOP = 59
# CUPTI's codes, as nsys's ENUM tables and load/sql.py's fallbacks give them
COPY_KINDS = {"HtoD": 1, "DtoH": 2, "HtoA": 3, "AtoH": 4, "AtoA": 5, "AtoD": 6, "DtoA": 7, "DtoD": 8, "HtoH": 9,
              "PtoP": 10}
MEM_KINDS = {"Pageable": 0, "Pinned": 1, "Device": 2, "Array": 3, "Managed": 4}
MEMCPY_NAME = re.compile(r"Memcpy (\w+) \((\w+) -> (\w+)\)")
# Kineto's categories, today's and PyTorch 1.8-1.10's, by what each becomes (module doc)
KERNEL, RUNTIME, MEMCPY, MEMSET, CPU_OP_CAT, ANNOTATION, PYTHON_CAT = (
    "kernel", "runtime", "memcpy", "memset", "cpu_op", "annotation", "python")
CATEGORIES = {"kernel": KERNEL, "Kernel": KERNEL, "cuda_runtime": RUNTIME, "cuda_driver": RUNTIME, "Runtime": RUNTIME,
              "gpu_memcpy": MEMCPY, "Memcpy": MEMCPY, "gpu_memset": MEMSET, "Memset": MEMSET, "cpu_op": CPU_OP_CAT,
              "Operator": CPU_OP_CAT, "user_annotation": ANNOTATION, "python_function": PYTHON_CAT}
OLDER = frozenset({"Kernel", "Runtime", "Memcpy", "Memset", "Operator"})  # the categories of PyTorch 1.8-1.10
# an op's name in the older format's `Operator` events (aten::mm, AddmmBackward, detach_); any other is a range
OP_NAME = re.compile(r"^([A-Za-z_][\w.]*::\w|[A-Za-z_]\w*$)")

SCHEMA = """
CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE ThreadNames (nameId INTEGER, priority INTEGER, globalTid INTEGER);
CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER, utcTime TEXT, localTime TEXT);
CREATE TABLE TARGET_INFO_SYSTEM_ENV (globalVid INTEGER, devStateName TEXT, name TEXT, nameEnum INTEGER, value TEXT);
CREATE TABLE TARGET_INFO_GPU (id INTEGER, name TEXT, chipName TEXT, totalMemory INTEGER, computeMajor INTEGER,
                              computeMinor INTEGER, smCount INTEGER);
CREATE TABLE META_DATA_EXPORT (name TEXT, value TEXT);
CREATE TABLE KINETO_TRACE (name TEXT, value TEXT);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, "end" INTEGER NOT NULL, deviceId INTEGER NOT NULL,
    streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, demangledName INTEGER NOT NULL,
    shortName INTEGER NOT NULL, gridX INTEGER, gridY INTEGER, gridZ INTEGER, blockX INTEGER, blockY INTEGER,
    blockZ INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER NOT NULL, "end" INTEGER NOT NULL, deviceId INTEGER NOT NULL,
    streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, bytes INTEGER NOT NULL,
    copyKind INTEGER NOT NULL, srcKind INTEGER, dstKind INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INTEGER NOT NULL, "end" INTEGER NOT NULL, deviceId INTEGER NOT NULL,
    streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, bytes INTEGER NOT NULL, memKind INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, "end" INTEGER NOT NULL, eventClass INTEGER,
    globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL, returnValue INTEGER);
CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, "end" INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER,
    category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, textId INTEGER,
    domainId INTEGER);
CREATE TABLE KINETO_HOST_EVENTS (start INTEGER NOT NULL, "end" INTEGER NOT NULL, globalTid INTEGER NOT NULL,
    kind INTEGER NOT NULL, pyId INTEGER, parentId INTEGER, nameId INTEGER NOT NULL, callFromId INTEGER);
"""
# staging: absolute times, in file order (the final tables take them sorted and shifted)
STAGED = {
    "CUPTI_ACTIVITY_KIND_KERNEL": ("start", '"end"', "deviceId", "streamId", "correlationId", "globalPid",
                                   "demangledName", "shortName", "gridX", "gridY", "gridZ", "blockX", "blockY",
                                   "blockZ"),
    "CUPTI_ACTIVITY_KIND_MEMCPY": ("start", '"end"', "deviceId", "streamId", "correlationId", "globalPid", "bytes",
                                   "copyKind", "srcKind", "dstKind"),
    "CUPTI_ACTIVITY_KIND_MEMSET": ("start", '"end"', "deviceId", "streamId", "correlationId", "globalPid", "bytes",
                                   "memKind"),
    "CUPTI_ACTIVITY_KIND_RUNTIME": ("start", '"end"', "globalTid", "correlationId", "nameId"),
    "NVTX_EVENTS": ("start", '"end"', "eventType", "text", "globalTid"),
    HOST_EVENTS: ("start", '"end"', "globalTid", "kind", "pyId", "parentId", "nameId", "callFromId"),
}
GPU_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")
WHAT_IS_MISSING = ("a torch.profiler trace holds no OS runtime calls and no CPU samples of other threads (Nsight "
                   "Systems records them): idle time they would explain (input waits, sleeps, memory mapping) is "
                   "said to be computing or waiting in the OS, unknown which")


def short_name(name: str) -> str:
    """nsys's shortName of a demangled kernel name: 'void at::native::f<float, 4>(int, float*)' -> 'f'."""
    text = name[5:] if name.startswith("void ") else name
    depth, cut = 0, len(text)
    for i, ch in enumerate(text):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            cut = i
            break
    head = re.sub(r"<[^<>]*>", "", text[:cut])
    while "<" in head:  # nested templates, innermost first
        head = re.sub(r"<[^<>]*>", "", head)
    return head.rsplit("::", 1)[-1].strip() or name


class _Strings:
    """The StringIds table, made as the names come."""

    def __init__(self):
        self.ids: dict[str, int] = {}

    def id(self, text: str) -> int:
        got = self.ids.get(text)
        if got is None:
            got = self.ids[text] = len(self.ids) + 1
        return got


def _int(value, default: int = -1) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def global_tid(pid, tid) -> int:
    """nsys's globalTid: the OS pid in bits 24-47, the thread id in bits 0-23 (frames.pid_of reads it back)."""
    return ((_int(pid, 0) & 0xFFFFFF) << 24) | (_int(tid, 0) & 0xFFFFFF)


class _Converter:
    """Rows of each table from the events, written in batches."""

    def __init__(self, con: sqlite3.Connection):
        self.con = con
        self.strings = _Strings()
        self.rows: dict[str, list[tuple]] = {t: [] for t in STAGED}
        self.thread_names: dict[int, str] = {}
        self.cpu_pids: dict[int, int] = {}  # OS pid -> its threads seen: the process the profiler ran in
        self.tids: dict[tuple, int] = {}
        self.counts = {"events": 0, "skipped": 0}
        self.other: dict[str, int] = {}  # complete events of categories torch.profiler does not write, by category
        self.older = 0  # events in the categories of PyTorch 1.8-1.10 (Kernel, Runtime, Operator, ...)

    def add(self, e: dict) -> None:
        """One trace event. The host's calls come first: with with_stack=True they are most of a trace's events (the
        conversion's time is this function's, per event)."""
        self.counts["events"] += 1
        if e.get("ph") != "X":
            if e.get("ph") == "M" and e.get("name") == "thread_name" and isinstance(e.get("args"), dict):
                self.thread_names[global_tid(e.get("pid"), e.get("tid"))] = str(e["args"].get("name", ""))
            return
        try:
            start = round(float(e["ts"]) * 1000.0)
            end = start + max(round(float(e.get("dur", 0)) * 1000.0), 0)
        except (KeyError, TypeError, ValueError, OverflowError):
            self.counts["skipped"] += 1
            return
        cat, name, args, ids = e.get("cat"), e.get("name"), e.get("args") or {}, self.strings.ids
        kind = CATEGORIES.get(cat) if isinstance(cat, str) else None
        if kind is None:
            self.other[str(cat)] = self.other.get(str(cat), 0) + 1  # said when nothing else is found (convert)
            return
        if cat in OLDER:
            self.older += 1
        if not isinstance(name, str):
            name = str(name)
        name_id = ids.get(name) or self.strings.id(name)
        if kind is PYTHON_CAT:
            call_from = args.get("CallFrom")
            self._put(HOST_EVENTS, (start, end, self._tid(e), PYTHON, _int(args.get("Python id"), None),
                                    _int(args.get("Python parent id"), None), name_id,
                                    (ids.get(call_from) or self.strings.id(str(call_from))) if call_from else None))
        elif kind is CPU_OP_CAT:
            # ProfilerStep#N is a cpu_op before PyTorch 2.1, and every record_function range an `Operator` in the
            # older format: ranges, not ops
            if name.startswith("ProfilerStep#") or (cat == "Operator" and _older_range(name, args)):
                self._put("NVTX_EVENTS", (start, end, NVTX_PUSHPOP, name, self._tid(e)))
            else:
                self._put(HOST_EVENTS, (start, end, self._tid(e), CPU_OP, None, None, name_id, None))
        elif kind is KERNEL:
            self._put("CUPTI_ACTIVITY_KIND_KERNEL", (
                start, end, _int(args.get("device", e.get("pid"))), _int(args.get("stream", e.get("tid"))),
                _int(args.get("correlation")), None, name_id, self.strings.id(short_name(name)),
                *_dims(args.get("grid")), *_dims(args.get("block"))))
        elif kind is RUNTIME:
            self._put("CUPTI_ACTIVITY_KIND_RUNTIME", (start, end, self._tid(e), _int(args.get("correlation")),
                                                      name_id))
        elif kind is MEMCPY:
            m = MEMCPY_NAME.match(name)
            copy, src, dst = (m.group(1), m.group(2), m.group(3)) if m else ("Unknown", "Unknown", "Unknown")
            self._put("CUPTI_ACTIVITY_KIND_MEMCPY", (
                start, end, _int(args.get("device", e.get("pid"))), _int(args.get("stream", e.get("tid"))),
                _int(args.get("correlation")), None, _int(args.get("bytes"), 0), COPY_KINDS.get(copy, 0),
                MEM_KINDS.get(src, 7), MEM_KINDS.get(dst, 7)))
        elif kind is MEMSET:
            self._put("CUPTI_ACTIVITY_KIND_MEMSET", (
                start, end, _int(args.get("device", e.get("pid"))), _int(args.get("stream", e.get("tid"))),
                _int(args.get("correlation")), None, _int(args.get("bytes"), 0), 2))
        else:  # a record_function range
            self._put("NVTX_EVENTS", (start, end, NVTX_PUSHPOP, name, self._tid(e)))

    def _tid(self, e: dict) -> int:
        """The event's globalTid, made once per (pid, tid)."""
        key = (e.get("pid"), e.get("tid"))
        got = self.tids.get(key)
        if got is None:
            got = self.tids[key] = global_tid(*key)
            pid = _int(key[0], 0)
            self.cpu_pids[pid] = self.cpu_pids.get(pid, 0) + 1
        return got

    def _put(self, table: str, row: tuple) -> None:
        rows = self.rows[table]
        rows.append(row)
        if len(rows) >= BATCH:
            self.flush(table)

    def flush(self, table: str | None = None) -> None:
        """Write the rows held (of one table, or of all)."""
        for name in [table] if table else list(self.rows):
            rows = self.rows[name]
            if rows:
                cols = STAGED[name]
                self.con.executemany(f"INSERT INTO staged_{name} ({', '.join(cols)}) VALUES "
                                     f"({', '.join('?' * len(cols))})", rows)
                rows.clear()


def _older_range(name: str, args: dict) -> bool:
    """Whether an `Operator` event of the older format is a record_function range, not an op (module doc)."""
    if not OP_NAME.match(name):
        return True
    return "::" not in name and args.get("Input dims") == []


def _dims(value) -> tuple:
    return tuple(value[:3]) if isinstance(value, list) and len(value) >= 3 else (None, None, None)


def convert(path: Path, out: Path) -> None:
    """Write the Kineto trace at path as an SQLite file at out (a new file); TraceError on bad input."""
    source = str(path)
    if not kineto_json.STREAMS:
        raise TraceError(f"{source}: {kineto_json.NO_IJSON}")
    try:
        header, has_events = kineto_json.header(path)
        if not has_events:
            raise TraceError(f"{source}: JSON, but not a torch.profiler (Kineto) trace (no traceEvents); give the "
                             "file that torch.profiler's export_chrome_trace or tensorboard_trace_handler wrote")
        con = sqlite3.connect(out)
        try:
            _write(con, path, header)
        finally:
            con.close()
    except kineto_json.BAD_JSON as e:
        raise TraceError(f"{source}: not readable JSON ({_short(e)}): the file is cut short or damaged; record or "
                         "copy the trace again") from None
    except (EOFError, zlib.error, gzip.BadGzipFile) as e:
        raise TraceError(f"{source}: damaged gzip ({_short(e)}: cut short or corrupted); copy the trace "
                         "again") from None
    except OSError as e:
        raise TraceError(f"{source}: cannot read it ({_short(e)})") from None


def _short(e: Exception) -> str:
    """The parser's or gzip's message, its first line (ijson's goes on to quote the damaged bytes)."""
    return " ".join(str(e).strip().split("\n")[0].split())[:120] or type(e).__name__


def _write(con: sqlite3.Connection, path: Path, header: dict) -> None:
    con.executescript("PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; PRAGMA cache_size=-65536;" + SCHEMA)
    for name in STAGED:
        con.execute(f"CREATE TEMP TABLE staged_{name} AS SELECT * FROM {name} WHERE 0")
    conv = _Converter(con)
    for e in kineto_json.events(path):
        if isinstance(e, dict):
            conv.add(e)
    conv.flush()
    found = sum(con.execute(f"SELECT COUNT(*) FROM staged_{t}").fetchone()[0] for t in STAGED)
    if not found:
        raise TraceError(f"{path}: {_nothing_read(conv)}")
    origin = min(v for t in STAGED for (v,) in [con.execute(f"SELECT MIN(start) FROM staged_{t}").fetchone()]
                 if v is not None)
    last = max(v for t in STAGED for (v,) in [con.execute(f'SELECT MAX("end") FROM staged_{t}').fetchone()]
               if v is not None)
    pid = max(conv.cpu_pids, key=conv.cpu_pids.get) if conv.cpu_pids else 0
    for name, cols in STAGED.items():
        shifted = ", ".join(f"{c} - {origin}" if c in ("start", '"end"') else
                            f"{pid << 24}" if c == "globalPid" else c for c in cols)
        # in start order, an enclosing range before the ranges it holds (nsys's order; load/kineto_stacks.py reads on it)
        con.execute(f"INSERT INTO {name} ({', '.join(cols)}) SELECT {shifted} FROM staged_{name} "
                    'ORDER BY start, "end" DESC')
        con.execute(f"DROP TABLE staged_{name}")
        if con.execute(f"SELECT 1 FROM {name} LIMIT 1").fetchone() is None:
            con.execute(f"DROP TABLE {name}")  # as nsys leaves out a table it has no rows for
    _metadata(con, conv, header, origin, pid, last - origin)
    _waits(con)
    con.commit()


def _nothing_read(conv: _Converter) -> str:
    """What a Chrome trace with no event torch.profiler writes holds, and what is missing, in one sentence."""
    seen = sorted(conv.other.items(), key=lambda kv: -kv[1])
    held = (f"{sum(conv.other.values()):,} complete events, of categories " +
            ", ".join(f"{c} ({n:,})" for c, n in seen[:4]) + (", ..." if len(seen) > 4 else "")) if seen else \
        f"{conv.counts['events']:,} events, none of them complete ones (ph X) with a time"
    return (f"a Chrome trace with {held}, but none of those torch.profiler writes (kernel, cuda_runtime, gpu_memcpy, "
            "cpu_op, user_annotation, python_function; before PyTorch 1.11 Kernel, Runtime, Memcpy, Operator): no GPU "
            "work, CUDA call, op, record_function range or Python function to analyse; record the program with "
            "torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) and give the file "
            "its export_chrome_trace or tensorboard_trace_handler wrote")


def _waits(con: sqlite3.Connection) -> None:
    """CUPTI_ACTIVITY_KIND_SYNCHRONIZATION from the synchronize calls: of that table the loaders read only which
    correlation ids are waits (load/calls.py: a copy followed by a wait is a synchronous one), and Kineto records a
    wait as its CUDA call (cudaStreamSynchronize, cudaDeviceSynchronize, ...), whose times and ids these rows are."""
    if "CUPTI_ACTIVITY_KIND_RUNTIME" not in {r[0] for r in con.execute("SELECT name FROM sqlite_master")}:
        return
    con.execute('CREATE TABLE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION (start INTEGER NOT NULL, "end" INTEGER NOT NULL, '
                "correlationId INTEGER, globalPid INTEGER)")
    con.execute('INSERT INTO CUPTI_ACTIVITY_KIND_SYNCHRONIZATION SELECT r.start, r."end", r.correlationId, '
                "(r.globalTid >> 24) << 24 FROM CUPTI_ACTIVITY_KIND_RUNTIME AS r JOIN StringIds AS s "
                "ON s.id = r.nameId WHERE s.value LIKE 'cu%Synchronize%'")
    if con.execute("SELECT 1 FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION LIMIT 1").fetchone() is None:
        con.execute("DROP TABLE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")


def _metadata(con: sqlite3.Connection, conv: _Converter, header: dict, origin: int, pid: int, end: int) -> None:
    """The string table, thread names, GPUs, session start and the marker."""
    threads = [(conv.strings.id(name), 0, tid) for tid, name in conv.thread_names.items()
               if (tid >> 24) in conv.cpu_pids]
    con.executemany("INSERT INTO StringIds (id, value) VALUES (?, ?)",
                    ((i, v) for v, i in conv.strings.ids.items()))
    con.executemany("INSERT INTO ThreadNames (nameId, priority, globalTid) VALUES (?, ?, ?)", threads)
    base = header.get("baseTimeNanoseconds")
    # newer Kineto: ts counts from baseTimeNanoseconds (UTC); older (PyTorch 2.0): ts is the Unix time in us
    utc0 = int(base) + origin if isinstance(base, (int, float)) else origin if origin > 10 ** 17 else None
    if utc0 is not None:
        con.execute("INSERT INTO TARGET_INFO_SESSION_START_TIME (utcEpochNs) VALUES (?)", (utc0,))
    for gpu in header.get("deviceProperties") or []:
        if isinstance(gpu, dict):
            con.execute("INSERT INTO TARGET_INFO_GPU (id, name, chipName, totalMemory, computeMajor, computeMinor, "
                        "smCount) VALUES (?, ?, NULL, ?, ?, ?, ?)",
                        (_int(gpu.get("id"), 0), str(gpu.get("name", "?")), _int(gpu.get("totalGlobalMem"), None),
                         _int(gpu.get("computeMajor"), None), _int(gpu.get("computeMinor"), None),
                         _int(gpu.get("numSms"), None)))
    if header.get("host_name"):
        con.execute("INSERT INTO TARGET_INFO_SYSTEM_ENV (name, value) VALUES ('Hostname', ?)",
                    (str(header["host_name"]),))
    version = f"torch.profiler ({trace_format(header, conv.older)})"
    con.execute("INSERT INTO META_DATA_EXPORT (name, value) VALUES ('EXPORT_PRODUCT_VERSION', ?)", (version,))
    dist = header.get("distributedInfo") if isinstance(header.get("distributedInfo"), dict) else {}
    con.executemany(f"INSERT INTO {MARKER_TABLE} (name, value) VALUES (?, ?)",
                    [("schemaVersion", str(header.get("schemaVersion", ""))), ("origin_ns", str(origin)),
                     ("pid", str(pid)), ("end_ns", str(end)), ("rank", str(dist.get("rank", ""))),
                     ("world_size", str(dist.get("world_size", ""))),
                     ("with_stack", str(header.get("with_stack", ""))), ("events", str(conv.counts["events"])),
                     ("skipped", str(conv.counts["skipped"])), ("older_events", str(conv.older))])


def trace_format(header: dict, older: int) -> str:
    """The Kineto format, as the header line names it: `Kineto schemaVersion 1`, with `PyTorch 1.8-1.10 categories`
    where its events are of the older kind, and `no schemaVersion` where the file has none."""
    version = header.get("schemaVersion")
    said = f"Kineto schemaVersion {version}" if version is not None else "Kineto, no schemaVersion"
    return f"{said}, PyTorch 1.8-1.10 categories" if older else said
