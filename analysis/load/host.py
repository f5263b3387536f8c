"""What the host's threads did, as typed tables: NVTX ranges, thread names, time off the CPU, MPI calls."""
from __future__ import annotations

from functools import cached_property

import numpy as np
import pandas as pd

from . import sql, validate
from .frames import empty, nesting, pid_of, shared_text

TIMED = ["start_ns", "end_ns", "global_tid", "name"]


SAMPLE_DEPTH = 48  # frames of a CPU sample read from its innermost: enough to reach the library that owns the work


class HostTables:
    """The host side of one export but its OS runtime calls (load/osrt.py); trace: its load.trace.Trace."""

    def __init__(self, trace):
        self.trace = trace

    @cached_property
    def nvtx(self) -> pd.DataFrame:
        """NVTX push/pop and start/end ranges: name, domain, kind, global_tid, tid, depth, parent (row index or -1)."""
        t = self.trace
        cols = ["start_ns", "end_ns", "duration_ns", "name", "domain", "kind", "global_tid", "tid", "depth", "parent"]
        if not t.has("NVTX_EVENTS"):
            return empty(cols)
        text, join = sql.nvtx_text(t.columns("NVTX_EVENTS"))
        df = t.query(sql.NVTX.format(text=text, join=join))
        if df.empty:
            return empty(cols)
        df = t.checked(df, "NVTX", ("global_tid",))
        t.warnings += validate.unnamed(df["name"], "NVTX", "(unnamed)")
        df["name"] = shared_text(df["name"].fillna("(unnamed)").astype(str))  # an edited export may hold numbers there
        domains = dict(t.query(sql.NVTX_DOMAINS.format(text=text, join=join)).itertuples(index=False))
        df["domain"] = df.pop("domain_id").map(domains).astype(object).fillna("").astype(str)
        push = (df.pop("event_type") == sql.NVTX_PUSHPOP).to_numpy().astype(np.intp)
        df["kind"] = pd.Series(np.array(["StartEnd", "PushPop"], dtype=object)[push], index=df.index, dtype="str")
        df = df.sort_values(["global_tid", "start_ns", "end_ns"], ascending=[True, True, False],
                            kind="stable").reset_index(drop=True)
        df["tid"] = df["global_tid"] & 0xFFFFFF
        df["depth"], df["parent"] = nesting(df)
        return df

    @cached_property
    def threads(self) -> pd.DataFrame:
        """Thread names with their global_tid, tid and pid (the last name of each thread)."""
        t = self.trace
        if not t.has("ThreadNames"):
            return empty(["global_tid", "thread_name", "tid", "pid"])
        df = t.query(sql.THREAD_NAMES).drop_duplicates("global_tid", keep="last")
        df["tid"] = df["global_tid"] & 0xFFFFFF
        df["pid"] = pid_of(df["global_tid"].to_numpy())
        return df

    @cached_property
    def off_cpu(self) -> pd.DataFrame:
        """When each thread was off the CPU, from the scheduler's events (nsys --cpuctxsw): start_ns, end_ns,
        global_tid and the name '(off CPU)' (categories), one row from a switch out to the next switch in; empty
        without SCHED_EVENTS."""
        t = self.trace
        if not t.has("SCHED_EVENTS") or not {"start", "isSchedIn", "globalTid"} <= t.columns("SCHED_EVENTS"):
            return empty(TIMED)
        ev = t.reader.int_columns("SCHED_EVENTS", {"t": "start", "tid": "globalTid", "into": "isSchedIn"})
        ev = ev[(ev["t"] >= 0) & (ev["tid"] >= 0)].sort_values(["tid", "t"], kind="stable")
        at, tid, into = (ev[c].to_numpy() for c in ("t", "tid", "into"))
        out = np.flatnonzero((into[:-1] == 0) & (into[1:] != 0) & (tid[:-1] == tid[1:]))  # out, then back in
        return pd.DataFrame({"start_ns": at[out], "end_ns": at[out + 1], "global_tid": tid[out],
                             "name": pd.Categorical(["(off CPU)"] * out.size)})

    def samples(self, threads, depth: int = SAMPLE_DEPTH) -> pd.DataFrame:
        """The CPU samples of these threads (nsys --sample): time_ns, global_tid, and the innermost `depth` frames of
        each as one row a frame (sample id, depth, symbol, module: text), in time order; empty without them."""
        t = self.trace
        cols = pd.DataFrame(columns=["time_ns", "global_tid", "sample", "depth", "symbol", "module"])
        if not t.has("COMPOSITE_EVENTS") or not t.has("SAMPLING_CALLCHAINS") or not threads:
            return cols
        tids = ",".join(str(int(x)) for x in threads)
        ev = t.reader.int_columns("COMPOSITE_EVENTS", {"sample": "id", "time_ns": "start", "global_tid": "globalTid"},
                                  f"WHERE globalTid IN ({tids})")
        if ev.empty:
            return cols
        fr = t.reader.int_columns("SAMPLING_CALLCHAINS", {"sample": "id", "depth": "stackDepth", "symbol": "symbol",
                                                          "module": "module"}, f"WHERE stackDepth < {int(depth)}")
        fr = fr[fr["sample"].isin(ev["sample"])]
        texts = t.strings(int(i) for i in np.unique(np.concatenate([fr["symbol"].to_numpy(), fr["module"].to_numpy()])))
        fr = fr.assign(symbol=fr["symbol"].map(texts).fillna(""), module=fr["module"].map(texts).fillna(""))
        out = ev.merge(fr, on="sample").sort_values(["time_ns", "sample", "depth"], kind="stable", ignore_index=True)
        return out[list(cols.columns)]

    @cached_property
    def mpi_calls(self) -> pd.DataFrame:
        """The MPI calls nsys traced (--trace=mpi: the MPI_*_EVENTS tables): start_ns, end_ns, global_tid, name
        (categories); empty without them."""
        t = self.trace
        cols = {"start_ns": "start", "end_ns": '"end"', "global_tid": "globalTid", "name_id": "textId"}
        parts = [t.reader.int_columns(name, cols) for name in sorted(t.tables) if name.startswith("MPI_") and
                 name.endswith("_EVENTS") and {"start", "end", "globalTid", "textId"} <= t.columns(name)]
        parts = [p for p in parts if len(p)]
        if not parts:
            return empty(TIMED)
        df = t.checked(pd.concat(parts, ignore_index=True), "MPI call", ("global_tid",))
        df["name"] = t.names_of(df.pop("name_id"), "MPI call")
        return df[TIMED].sort_values("start_ns", ignore_index=True)
