"""Every SQL statement the analysis runs, in one place, built for the columns a given export has.

Exports from nsys 2020.3 to 2026.x differ: NVTX text lives in `text` or in StringIds via `textId`;
TARGET_INFO_GPU keys devices by `deviceId` (2020) or `id`; version metadata sits in no table (2020),
EXPORT_META_DATA (2021-2022) or META_DATA_EXPORT (2023+); ENUM_* tables exist from 2023 only.
"""
from __future__ import annotations

# Stable CUPTI/nsys codes, used when an export has no ENUM_* tables (before 2023).
COPY_KIND = {0: "Unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA",
             8: "DtoD", 9: "HtoH", 10: "PtoP", 11: "Unified HtoD", 12: "Unified DtoH", 13: "Unified DtoD"}
MEM_KIND = {0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed", 5: "Device Static",
            6: "Managed Static", 7: "Unknown"}
NVTX_PUSHPOP, NVTX_STARTEND = 59, 60

# CUPTI correlation ids are unique only within a process: in a multi-process (torchrun) trace every join of a GPU
# operation to its API call also matches the process. The OS pid sits in bits 24-47 of globalPid and globalTid.
PID_OF = "(({col} >> 24) & 16777215)"

# Big tables are read column by column (load.reader.ColumnReader.int_columns): output name -> SQL column.
KERNEL_COLUMNS = {"start_ns": "start", "end_ns": '"end"', "device": "deviceId", "stream": "streamId",
                  "correlation_id": "correlationId"}
MEMSET_COLUMNS = {"start_ns": "start", "end_ns": '"end"', "device": "deviceId", "stream": "streamId",
                  "correlation_id": "correlationId", "bytes": "bytes"}
OSRT_COLUMNS = {"start_ns": "start", "end_ns": '"end"', "global_tid": "globalTid", "name_id": "nameId"}


def null_as_missing(expr: str) -> str:
    """expr, with NULL read as -1: the fast form for big tables, whose values nsys writes as integers."""
    return f"IFNULL({expr}, -1)"


def int_or_missing(expr: str) -> str:
    """expr where it holds an integer, else -1 (NULL, text, a float): a damaged export's rows then read as numbers,
    exactly (pandas would turn a column with one NULL into lossy floats), and load.validate drops or flags them."""
    return f"CASE WHEN typeof({expr}) = 'integer' THEN {expr} ELSE -1 END"


# one row of a name: the scan stops at the first (a top kernel appears early), never the whole table
FULL_KERNEL_NAME = "SELECT demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE shortName = ? LIMIT 1"
OSRT_BY_NAME = """SELECT s.value AS name, COUNT(*) AS count, SUM(o."end" - o.start) AS total_ns FROM OSRT_API AS o
JOIN StringIds AS s ON s.id = o.nameId WHERE o."end" >= o.start GROUP BY o.nameId ORDER BY total_ns DESC LIMIT {top}"""
GRAPH_KERNELS = """SELECT COUNT(*), SUM("end" - start), COUNT(DISTINCT correlationId)
FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE graphNodeId IS NOT NULL"""
MEMCPYS = f"""
SELECT {int_or_missing("m.start")} AS start_ns, {int_or_missing('m."end"')} AS end_ns,
       {int_or_missing("m.deviceId")} AS device, {int_or_missing("m.streamId")} AS stream,
       {int_or_missing("m.correlationId")} AS correlation_id, {{pid}} AS pid, {int_or_missing("m.bytes")} AS bytes,
       m.copyKind AS copy_kind_id, m.srcKind AS src_kind_id, m.dstKind AS dst_kind_id,
       {{cause}} AS migration_cause
FROM CUPTI_ACTIVITY_KIND_MEMCPY AS m"""

# One scan of the runtime table for the calls behind the copies and the host waits. Several rows can share a
# (process, correlation id) (a call and a nested one, e.g. `cudaMemcpy` + `cudaMemcpy_v3020` in a 2022.2 export):
# Trace keeps the outermost one (trace.outermost_calls), so every GPU operation joins to one call.
API_ROWS = f"""
SELECT r.correlationId AS correlation_id, {PID_OF.format(col="r.globalTid")} AS pid,
       {int_or_missing("r.start")} AS api_start_ns, {int_or_missing('r."end"')} AS api_end_ns,
       {int_or_missing("r.globalTid")} AS api_global_tid, r.nameId AS api_name_id
FROM CUPTI_ACTIVITY_KIND_RUNTIME AS r
WHERE (r.nameId IS NULL OR r.nameId NOT IN ({{launches}}))  -- kernel launches (most rows) issue no copy or wait
  AND r.correlationId IN (SELECT correlationId FROM CUPTI_ACTIVITY_KIND_MEMCPY{{sync}})"""  # one probe per row

COPY_AND_WAIT_IDS = "SELECT correlationId FROM CUPTI_ACTIVITY_KIND_MEMCPY{sync}"  # API_ROWS' subquery, alone
RUNTIME_FOR_CORRELATIONS = f"""
SELECT correlationId AS correlation_id, {PID_OF.format(col="globalTid")} AS pid, globalTid AS global_tid,
       start AS api_start_ns, "end" AS api_end_ns
FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE correlationId IN ({{ids}})"""

NVTX = f"""
SELECT {int_or_missing("n.start")} AS start_ns, {int_or_missing('n."end"')} AS end_ns, n.eventType AS event_type,
       {int_or_missing("n.globalTid")} AS global_tid, {{text}} AS name, n.domainId AS domain_id
FROM NVTX_EVENTS AS n {{join}}
WHERE n.eventType IN (59, 60) AND n."end" IS NOT NULL"""

NVTX_DOMAINS = """
SELECT n.domainId AS domain_id, {text} AS domain
FROM NVTX_EVENTS AS n {join}
WHERE n.eventType = 75"""

# Per thread and launch API name: how many kernel launches and how long they took (launching threads, launch
# overhead); only the launch names, which halves the scan's grouping work on millions of runtime rows.
API_BY_THREAD = """
SELECT globalTid AS global_tid, nameId AS name_id, COUNT(*) AS count, SUM("end" - start) AS total_ns
FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE nameId IN ({ids}) GROUP BY globalTid, nameId"""
API_BY_THREAD_DISTINCT = """
SELECT globalTid AS global_tid, nameId AS name_id, COUNT(*) AS count, SUM("end" - start) AS total_ns
FROM (SELECT DISTINCT start, "end", globalTid, correlationId, nameId FROM CUPTI_ACTIVITY_KIND_RUNTIME
      WHERE nameId IN ({ids}) AND "end" >= start) GROUP BY globalTid, nameId"""
LAUNCH_STATS = """
SELECT COUNT(*), SUM("end" - start) FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE globalTid IN ({tids}) AND nameId IN ({ids})"""
LAUNCH_STATS_DISTINCT = """
SELECT COUNT(*), SUM("end" - start) FROM (SELECT DISTINCT start, "end", globalTid, correlationId, nameId
FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE globalTid IN ({tids}) AND nameId IN ({ids}) AND "end" >= start)"""
# exports with CUDA backtraces (nsys --cudabacktrace) hold some calls twice under one correlation id (the call and
# a twin carrying its callchainId): counted once per call, the outermost (longest) row's
LAUNCH_STATS_PER_CALL = """
SELECT COUNT(*), SUM(d) FROM (SELECT MAX("end" - start) AS d FROM CUPTI_ACTIVITY_KIND_RUNTIME
WHERE globalTid IN ({tids}) AND nameId IN ({ids}) AND "end" >= start GROUP BY globalTid, correlationId)"""
API_BY_THREAD_PER_CALL = """
SELECT global_tid, name_id, COUNT(*) AS count, SUM(d) AS total_ns FROM (
  SELECT globalTid AS global_tid, nameId AS name_id, MAX("end" - start) AS d FROM CUPTI_ACTIVITY_KIND_RUNTIME
  WHERE nameId IN ({ids}) AND "end" >= start GROUP BY globalTid, correlationId) GROUP BY global_tid, name_id"""
HAS_CALLCHAINS = "SELECT 1 FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE callchainId IS NOT NULL LIMIT 1"
LAUNCH_NAME_IDS = "SELECT id, value FROM StringIds WHERE value LIKE 'cu%Launch%'"
NO_COPY_NAME_IDS = "SELECT id, value FROM StringIds WHERE value LIKE 'cu%Launch%' OR value LIKE 'cuKernelGet%'"
SYNC_NAME_IDS = "SELECT id, value FROM StringIds WHERE value LIKE '%Synchronize%'"
SYNC_CALLS = """
SELECT start AS start_ns, "end" AS end_ns, globalTid AS global_tid, correlationId AS correlation_id, nameId AS name_id
FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE nameId IN ({ids})"""
SETUP_CALLS = """
SELECT start AS start_ns, "end" AS end_ns, globalTid AS global_tid, nameId AS name_id
FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE nameId IN ({ids}) OR (nameId IN ({launches}) AND "end" - start >= {slow})"""
SETUP_NAME_IDS = "SELECT id, value FROM StringIds WHERE value LIKE 'cu%'"
# OS runtime calls are read in parts (Trace.osrt.chunks): a rowid range and a condition, never the whole table.
# two subqueries: SQLite reads MIN or MAX of the rowid from the b-tree's ends only when it is a query's one aggregate;
# `SELECT MIN(rowid), MAX(rowid)` scans the whole table (1.4 s on 22 M rows)
ROWID_RANGE = "SELECT (SELECT MIN(rowid) FROM {table}), (SELECT MAX(rowid) FROM {table})"

SHORT_STRINGS = "SELECT id, value FROM StringIds WHERE length(value) <= 40"
# usable times and thread: NULL, text (greater than any number in SQLite) and negative values fail BETWEEN, cheaply
_INT64_MAX = 9223372036854775807
USABLE_TIMES = (f'start BETWEEN 0 AND {_INT64_MAX} AND "end" BETWEEN start AND {_INT64_MAX} '
                f"AND globalTid BETWEEN 0 AND {_INT64_MAX}")
OSRT_SPAN = f'SELECT MIN(start), MAX("end") FROM OSRT_API WHERE {USABLE_TIMES} AND ({{where}})'
# Trace.osrt.zones: a rowid range's row count, time span (MIN and MAX skip NULL; text sorts above numbers) and
# its rows with unusable times or thread: the scoped reads see only some rows, so a damaged row is found here,
# wherever it lies (in the same scan: 0.7 CPU-s less than a scan of its own on 22 M rows)
ZONE = (f'SELECT COUNT(*), MIN(start), MAX("end"), SUM(CASE WHEN {USABLE_TIMES} THEN 0 ELSE 1 END) FROM OSRT_API '
        "WHERE rowid > {lo} AND rowid <= {hi}")


def touches_any(starts, ends, start_col: str = "start", end_col: str = '"end"') -> str:
    """The condition 'the row's [start, end) overlaps one of these disjoint sorted intervals', as a binary search
    compiled into nested CASEs: SQLite then drops the rows far from them without handing them over.

        intervals  [s0 e0)    [s1 e1)    [s2 e2)
        row             [start  end)        -> the last interval starting before `end` is s1: overlap iff e1 > start
    """
    def last_end_before(lo: int, hi: int) -> str:  # e[k-1], k = the number of starts before end_col, in [lo, hi]
        if lo == hi:
            return str(int(ends[lo - 1])) if lo > 0 else "-1"
        mid = (lo + hi + 1) // 2
        return (f"CASE WHEN {end_col} > {int(starts[mid - 1])} THEN {last_end_before(mid, hi)} "
                f"ELSE {last_end_before(lo, mid - 1)} END")
    return f"({last_end_before(0, len(starts))}) > {start_col}" if len(starts) else "0"


# ColumnReader.int_columns: one scan, each column as one text (group_concat) parsed by numpy; chunks by rowid range.
INT_COLUMNS = "SELECT {select} FROM {table} {where}"
ROWID_CHUNK = "WHERE rowid > {lo} AND rowid <= {hi} AND ({where})"
# sections/capture_figures.py: which runtime calls launch GPU work, and how many of each kind (one scan, counts packed in two sums)
CUDA_CALL_NAMES = "SELECT id, value FROM StringIds WHERE value LIKE 'cu%'"  # LIKE is case-blind: cu, cuda
PACKED_CALL_COUNTS = "SELECT {first}, {second}, COUNT(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME"
PACKED_SUM = "SUM(CASE nameId {whens} ELSE 0 END)"
DIAGNOSTICS = "SELECT severity, text, {pid} AS pid FROM DIAGNOSTIC_EVENT ORDER BY timestamp"
DRIVER_VERSION = "SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'CudaDriverVersion'"


STRINGS_FOR = "SELECT id, value FROM StringIds WHERE id IN ({ids})"
THREAD_NAMES = "SELECT t.globalTid AS global_tid, s.value AS thread_name FROM ThreadNames AS t JOIN StringIds AS s ON s.id = t.nameId"
SESSION_START = "SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME"
HOSTNAME = "SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'Hostname' AND value != '' LIMIT 1"
GPUS = "SELECT {id_col} AS device, name, {chip} AS chip FROM TARGET_INFO_GPU"
ENUM = "SELECT id, {col} AS name FROM {table}"
TABLES = "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')"
COLUMNS = "SELECT name FROM pragma_table_info(?)"
ANY_ROW = "SELECT 1 FROM {table} LIMIT 1"
TABLE_ROOT = "SELECT rootpage, sql FROM sqlite_master WHERE type = 'table' AND name = ?"  # btree.Pages
RECORD_FIELDS = "SELECT name, hidden FROM pragma_table_xinfo(?) ORDER BY cid"  # btree.Pages: the record's field order
META = "SELECT name, value FROM {table}"


def nvtx_text(columns: set[str]) -> tuple[str, str]:
    """The NVTX name expression and join for this export's columns."""
    if "textId" in columns:
        return "COALESCE(n.text, s.value)", "LEFT JOIN StringIds AS s ON s.id = n.textId"
    return "n.text", ""
