"""What ran on the GPUs, as typed tables: kernels (and their digest), CUDA graph launches, copies, memsets, the GPUs."""
from __future__ import annotations

import sqlite3
from functools import cached_property

import numpy as np
import pandas as pd

from ...nsys_core.contracts import gbps

from . import kernel_digest, ops_store, sql, validate
from .btree import Bits, Touches
from .frames import empty, pid_column, pid_expr, short_copy_kind, timed

KERNEL_TABLE = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMSET_TABLE = "CUPTI_ACTIVITY_KIND_MEMSET"
GRAPH_TABLE = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"  # nsys --cuda-graph-trace=graph (its default): one row a graph launch
UNIFIED_KINDS = ("Unified HtoD", "Unified DtoH", "Unified DtoD")  # managed-memory migrations (copyKind 11-13)
KERNEL_COLUMNS = ["start_ns", "end_ns", "duration_ns", "device", "stream", "correlation_id", "pid", "name"]


class DeviceTables:
    """The GPU side of one export (trace: its load.trace.Trace)."""

    def __init__(self, trace):
        self.trace = trace

    @cached_property
    def kernels(self) -> pd.DataFrame:
        """start_ns, end_ns, duration_ns, device, stream, correlation_id, pid (of the launching process), name."""
        t = self.trace
        if not t.has(KERNEL_TABLE):
            t.warnings += validate.no_kernel_table(t.tables)
            return empty(KERNEL_COLUMNS)
        df = t.reader.table_columns(KERNEL_TABLE, self._kernel_columns())
        df = t.checked(df, "kernel", ("device", "stream"))
        df["name"] = t.names_of(df.pop("name_id"), "kernel")
        return df

    def full_kernel_names(self, names: list[str]) -> dict[str, str]:
        """{short name: demangled name} for a few kernel names (the top kernels'); empty where the export has no
        demangled names."""
        t = self.trace
        if not names or not t.has(KERNEL_TABLE) or "demangledName" not in t.columns(KERNEL_TABLE) or \
                "shortName" not in t.columns(KERNEL_TABLE):
            return {}
        con = t.connection()
        ids = con.execute(f"SELECT id, value FROM StringIds WHERE value IN ({','.join('?' * len(names))})",
                          names).fetchall()
        try:
            full = {str(v): con.execute(sql.FULL_KERNEL_NAME, (i,)).fetchone() for i, v in ids}
        except sqlite3.DatabaseError:
            return {}
        texts = t.strings(f[0] for f in full.values() if f)
        return {short: texts[f[0]] for short, f in full.items() if f and f[0] in texts}

    def graph_kernels(self) -> tuple[int, int, int]:
        """(kernels, their GPU ns, graph launches they ran under) of the kernels traced inside CUDA graphs
        (`--cuda-graph-trace=node`: graphNodeId set, the launch's correlation id); zeros where none is, or where the
        export records no graphs (the kernel table is then not scanned)."""
        graphs = {"CUDA_GRAPH_EVENTS", "CUDA_GRAPH_NODE_EVENTS"} & self.trace.tables
        if not graphs or "graphNodeId" not in self.trace.columns(KERNEL_TABLE):
            return 0, 0, 0
        n, ns, launches = self.trace.one_row(sql.GRAPH_KERNELS)
        return int(n or 0), int(ns or 0), int(launches or 0)

    def kernels_touching(self, lo: int, hi: int) -> pd.DataFrame:
        """The kernels overlapping [lo, hi) (`kernels`' columns but the name): a filtered read, so that a chart of a
        few steps of a long capture does not load its whole kernel table. Damaged rows are dropped silently (the
        analysis says what it drops)."""
        graphs = self.graph_runs.drop(columns=["name", "graph_id"])
        if not self.trace.has(KERNEL_TABLE):
            df = pd.concat([self.kernels.drop(columns="name"), graphs], ignore_index=True)
        else:
            columns = {k: v for k, v in self._kernel_columns().items() if k != "name_id"}
            df = self.trace.reader.table_columns(KERNEL_TABLE, columns, (Touches(np.array([lo]), np.array([hi])),))
            df = pd.concat([timed(validate.clean(df, "kernel", ("device", "stream"))[0]), graphs], ignore_index=True)
        df = df.sort_values("start_ns", kind="stable")
        return df[(df["end_ns"] > lo) & (df["start_ns"] < hi)].reset_index(drop=True)  # the SQL form: a superset

    def _kernel_columns(self) -> dict[str, str | Bits]:
        cols = self.trace.columns(KERNEL_TABLE)
        name_col = "shortName" if "shortName" in cols else "demangledName"
        return {**sql.KERNEL_COLUMNS, "pid": pid_column(cols), "name_id": name_col}

    @cached_property
    def kernel_digest(self) -> kernel_digest.KernelDigest:
        """The kernels as the analysis keeps them (load.kernel_digest): from one chunked pass where the table is
        clean and in start order, so that it is never held whole; else from the whole table (`kernels`). A graph
        launch traced as a whole (`graph_runs`) counts as one kernel-like operation named after its graph: its GPU
        time is compute like its kernels', and nsys recorded nothing finer."""
        if len(self.graph_runs):
            return digest_of(self.kernels, self.graph_runs)
        digest = self._chunked_kernel_digest() if self.trace.has(KERNEL_TABLE) else None
        return digest if digest is not None else kernel_digest.of_frame(self.kernels)

    @cached_property
    def graph_runs(self) -> pd.DataFrame:
        """CUDA graph launches traced as a whole (CUPTI_ACTIVITY_KIND_GRAPH_TRACE): `kernels`' columns, the name
        'CUDA graph N' (N: nsys's graphId), and graph_id; empty where the capture traced graphs node by node (their
        kernels are in the kernel table, under the graph launch's correlation id) or used none."""
        t = self.trace
        cols = [*KERNEL_COLUMNS, "graph_id"]
        if not t.has(GRAPH_TABLE):
            return empty(cols)
        have = t.columns(GRAPH_TABLE)
        columns = {**sql.KERNEL_COLUMNS, "pid": pid_expr(have), "graph_id": "graphId" if "graphId" in have else "-1"}
        df = t.checked(t.reader.int_columns(GRAPH_TABLE, columns), "CUDA graph", ("device", "stream"))
        df["name"] = pd.Categorical([f"CUDA graph {g}" if g >= 0 else "CUDA graph" for g in df["graph_id"]])
        return df[cols]

    def kernel_digest_from(self, since: int) -> kernel_digest.KernelDigest:
        """kernel_digest of the kernels (and graph launches traced whole) that end after `since`: the steady state's,
        read in the same chunked pass, so that a long capture's table is never held whole."""
        if len(self.graph_runs):
            return digest_of(_ending_after(self.kernels, since), _ending_after(self.graph_runs, since))
        digest = self._chunked_kernel_digest(since) if self.trace.has(KERNEL_TABLE) else None
        return digest if digest is not None else kernel_digest.of_frame(_ending_after(self.kernels, since))

    def kernel_sequence(self, limit: int) -> tuple[np.ndarray, np.ndarray]:
        """Start times and name ids of the first `limit` kernels (graph launches traced whole: by graph) of the GPU that
        ran most of them, in start order: the loop's repeating part is found in it (sections/steady.py)."""
        if len(self.graph_runs):
            k = self.kernels
            names = pd.concat([k["name"].astype(str), self.graph_runs["name"].astype(str)], ignore_index=True)
            df = pd.DataFrame({"start_ns": np.concatenate([k["start_ns"].to_numpy(), self.graph_runs["start_ns"]]),
                               "device": np.concatenate([k["device"].to_numpy(), self.graph_runs["device"]]),
                               "name_id": pd.factorize(names)[0]}).sort_values("start_ns", kind="stable")
            df = df.head(limit)
        elif self.trace.has(KERNEL_TABLE):
            cols = self._kernel_columns()
            df = self.trace.reader.int_columns(KERNEL_TABLE, {"start_ns": "start", "device": "deviceId",
                                                              "name_id": cols["name_id"]},
                                               f"WHERE rowid <= {int(limit)}")
            df = df.sort_values("start_ns", kind="stable")
        else:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        if df.empty:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        mine = df[df["device"].to_numpy() == df["device"].value_counts().idxmax()]
        return mine["start_ns"].to_numpy(np.int64), mine["name_id"].to_numpy(np.int64)

    def _chunked_kernel_digest(self, since: int | None = None) -> kernel_digest.KernelDigest | None:
        t = self.trace
        ranges = t.reader.rowid_ranges(KERNEL_TABLE, t.reader.chunk_rows)
        others = sum(hi - lo for name in ("CUPTI_ACTIVITY_KIND_MEMCPY", MEMSET_TABLE) if t.has(name)
                     for lo, hi in t.reader.rowid_ranges(name, 1 << 62))  # at least the copies and memsets: room
        builder = kernel_digest.Builder(sum(hi - lo for lo, hi in ranges), others)
        chunks = t.reader.int_column_ranges(KERNEL_TABLE, self._kernel_columns(), [(lo, hi, ()) for lo, hi in ranges])
        for chunk in chunks:
            if since is not None and builder.ops.accepts(chunk):  # judged whole: the same warnings as the whole pass
                chunk = chunk[chunk["end_ns"].to_numpy() > since]
            if not builder.add(chunk):
                chunks.close()  # waits for the reads in flight
                return None
        got = builder.done(t.strings)
        if got is None:
            return None
        t.warnings += got[1]
        return got[0]

    @cached_property
    def memcpys(self) -> pd.DataFrame:
        """One row per copy: timing, bytes, copy_kind (HtoD, DtoH, ...), src_kind/dst_kind (Pageable, Pinned, Device,
        ...), gbps, migration_cause (a unified-memory migration's CUPTI cause: 1 a user prefetch, 2 a page fault, 3
        the driver's prefetch on a fault, 4 an eviction; -1 for other copies or where the export does not say)."""
        t = self.trace
        cols = ["start_ns", "end_ns", "duration_ns", "device", "stream", "correlation_id", "pid", "bytes", "copy_kind",
                "src_kind", "dst_kind", "gbps", "migration_cause"]
        if not t.has("CUPTI_ACTIVITY_KIND_MEMCPY"):
            return empty(cols)
        have = t.columns("CUPTI_ACTIVITY_KIND_MEMCPY")
        cause = "COALESCE(m.migrationCause, -1)" if "migrationCause" in have else "-1"  # unified memory's, -1: none
        df = t.checked(t.query(sql.MEMCPYS.format(pid=pid_expr(have, "m.globalPid"), cause=cause)), "memcpy",
                       ("device", "stream", "bytes"))
        copy_kind = {k: short_copy_kind(v) for k, v in t.enum("ENUM_CUDA_MEMCPY_OPER", sql.COPY_KIND).items()}
        mem_kind = t.enum("ENUM_CUDA_MEM_KIND", sql.MEM_KIND)
        t.warnings += validate.uncoded(df, ("copy_kind_id", "src_kind_id", "dst_kind_id"), "memcpy")
        df["copy_kind"] = df.pop("copy_kind_id").map(copy_kind).fillna("Unknown")
        df["src_kind"] = df.pop("src_kind_id").map(mem_kind).fillna("Unknown")
        df["dst_kind"] = df.pop("dst_kind_id").map(mem_kind).fillna("Unknown")
        df["gbps"] = gbps(df["bytes"], df["duration_ns"].where(df["duration_ns"] > 0)).astype(float)
        return df

    @cached_property
    def memsets(self) -> pd.DataFrame:
        """The CUDA memsets as the device pass and integrity read them: start_ns, end_ns, device, correlation_id, pid
        (in narrow types: kernel_digest.narrow_ops; millions of rows in a long capture); empty without the table."""
        t = self.trace
        if not t.has(MEMSET_TABLE):
            return empty(list(kernel_digest.OPS))
        columns = {**sql.MEMSET_COLUMNS, "pid": pid_column(t.columns(MEMSET_TABLE))}
        spilled = self._spilled_memsets(columns)
        if spilled is not None:
            return spilled
        return kernel_digest.narrow_ops(t.checked(t.reader.table_columns(MEMSET_TABLE, columns), "memset",
                                                  ("device", "stream")))

    def _spilled_memsets(self, columns: dict) -> ops_store.SpilledOps | None:
        """A long capture's memsets (ops_store.SPILL_ROWS and more) in temporary files, read a chunk at a time; None
        for a shorter table, or one a chunk of which is not clean and in start order (it is then read whole)."""
        t = self.trace
        ranges = t.reader.rowid_ranges(MEMSET_TABLE, t.reader.chunk_rows)
        rows = sum(hi - lo for lo, hi in ranges)
        if rows < ops_store.SPILL_ROWS:
            return None
        writer = ops_store.OpsWriter(rows, spill=True)
        chunks = t.reader.int_column_ranges(MEMSET_TABLE, columns, [(lo, hi, ()) for lo, hi in ranges])
        for chunk in chunks:
            if not writer.accepts(chunk):
                chunks.close()
                writer.done().close()
                return None
            writer.add(chunk)
        return writer.done()

    @cached_property
    def gpus(self) -> pd.DataFrame:
        """The GPUs the export lists: device, name and chip (one row per device)."""
        t = self.trace
        if not t.has("TARGET_INFO_GPU"):
            return empty(["device", "name", "chip"])
        cols = t.columns("TARGET_INFO_GPU")
        id_col = "id" if "id" in cols else "deviceId"
        chip = "chipName" if "chipName" in cols else "NULL"  # 2020 exports have no chip name
        return t.query(sql.GPUS.format(id_col=id_col, chip=chip)).drop_duplicates("device")


def _ending_after(df: pd.DataFrame, since: int) -> pd.DataFrame:
    keep = df["end_ns"].to_numpy() > since
    return df if keep.all() else df[keep].reset_index(drop=True)


def digest_of(kernels: pd.DataFrame, graphs: pd.DataFrame) -> kernel_digest.KernelDigest:
    """The digest of these kernels and graph launches traced whole (`graph_runs`' rows), in start order."""
    both = pd.concat([kernels, graphs.drop(columns="graph_id")], ignore_index=True)
    return kernel_digest.of_frame(both.sort_values("start_ns", kind="stable", ignore_index=True),
                                  graph_runs=len(graphs))
