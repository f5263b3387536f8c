"""Build N per-rank traces from the two real per-rank H200 captures (for benchmarks and tests only; never called real
data).

usage: build_rank_traces.py --ranks N --out DIR [--straggler RANK --slow 1.25] [--seed 0] [--name NAME] [--hosts K]
Rank i is a copy of the bundled rank (i % 2) capture (reports/data/h200x2/pinned-x2rank.rank{0,1}.sqlite.xz), as
DIR/NAME.rank{i}.sqlite, with per-rank variation made in SQLite (as build_large_trace.py replicates a capture):
  - its clock: the session start (TARGET_INFO_SESSION_START_TIME) moved by up to 20 ms, as ranks start apart;
  - its speed: every timestamp stretched by a factor in [0.985, 1.015] (a slower or faster GPU and host), and
    the straggler's by --slow (default 1.25: 20% fewer steps/s, a 25% lower DtoH rate);
  - its GPU: device ids moved so rank i drives GPU (i % 8), as eight ranks to a node do;
  - with --hosts K, its machine: the ranks in K consecutive blocks of ceil(N / K), block k on host `node{k}`
    (TARGET_INFO_SYSTEM_ENV's Hostname row, added with the table where a copy lacks them, as nsys lays them out),
    rank i driving GPU (its place in the block % 8), as torchrun's ranks fill one node after the other. Without it
    every copy keeps the capture's own host name: one host.
"""
from __future__ import annotations

import argparse
import random
import shutil
import sqlite3
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from nsys_transfer.analysis.load.inputs import resolve_input  # noqa: E402

sys.path.insert(0, str(ROOT / "benchmarks"))
import build_large_trace  # noqa: E402

SOURCES = [ROOT / "reports/data/h200x2" / f"pinned-x2rank.rank{r}.sqlite.xz" for r in (0, 1)]
TIMED = ["CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
         "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "NVTX_EVENTS", "OSRT_API",
         "PROFILER_OVERHEAD"]
DEVICE_COLUMNS = {"CUPTI_ACTIVITY_KIND_KERNEL": ["deviceId"], "CUPTI_ACTIVITY_KIND_MEMCPY": ["deviceId"],
                  "CUPTI_ACTIVITY_KIND_MEMSET": ["deviceId"], "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": ["deviceId"],
                  "CUPTI_ACTIVITY_KIND_CUDA_EVENT": ["deviceId"], "TARGET_INFO_CUDA_CONTEXT_INFO": ["deviceId"],
                  "TARGET_INFO_GPU": ["id", "cuDevice"]}
GPUS_PER_NODE = 8
# TARGET_INFO_SYSTEM_ENV as the nsys 2022-2025 exports lay it out, and the Hostname row of their local target
SYSTEM_ENV = """CREATE TABLE TARGET_INFO_SYSTEM_ENV (
    globalVid                   INTEGER,                               -- Serialized GlobalId.
    devStateName                TEXT      NOT NULL,                    -- Device state name.
    name                        TEXT      NOT NULL,                    -- Property name.
    nameEnum                    INTEGER   NOT NULL,                    -- Property enum value.
    value                       TEXT      NOT NULL                     -- Property value.
)"""
HOSTNAME_ENUM, LOCAL_TARGET = 619, (281474976710656, "Local (CLI)")


def build(out_dir: Path, ranks: int, straggler: int | None = None, slow: float = 1.25, seed: int = 0,
          name: str = "derived", copies: int = 1, hosts: int | None = None) -> list[Path]:
    """Write the N traces; return their paths in rank order. copies > 1: each source capture first replicated that
    many times in time (build_large_trace.py), for ranks of a longer run. hosts: spread the ranks over that many
    host names (host_of)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    local = [resolve_input(s)[0] for s in SOURCES]  # decompressed once, into the toolkit's cache
    if copies > 1:
        longer = [out_dir / f".source{k}-x{copies}.sqlite" for k in range(len(local))]
        for src, dst in zip(SOURCES, longer):
            if not dst.exists():
                build_large_trace.build(src, dst, copies)
        local = longer
    rng = random.Random(seed)
    paths = []
    for i in range(ranks):
        src = i % len(local)
        stretch = slow if i == straggler else 1.0 + rng.uniform(-0.015, 0.015)
        shift_ns = rng.randrange(0, 20_000_000)
        out = out_dir / f"{name}.rank{i}.sqlite"
        shutil.copyfile(local[src], out)
        host, local_rank = host_of(i, ranks, hosts) if hosts else (None, i)
        vary(out, stretch, shift_ns, device_shift=(local_rank % GPUS_PER_NODE) - src, host=host)
        paths.append(out)
    return paths


def host_of(rank: int, ranks: int, hosts: int) -> tuple[str, int]:
    """The host of a rank when `ranks` fill `hosts` machines in consecutive blocks, and its place on it."""
    per = -(-ranks // hosts)
    return f"node{rank // per}", rank % per


def vary(path: Path, stretch: float, shift_ns: int, device_shift: int, host: str | None = None) -> None:
    """One rank's variation, in place: stretch the timestamps, move the session start and the device ids, and name
    its host (when given)."""
    con = sqlite3.connect(path)
    con.execute("PRAGMA journal_mode=OFF")
    con.execute("PRAGMA synchronous=OFF")
    timed = [t for t in TIMED if _has(con, t) and {"start", "end"} <= set(_cols(con, t))]
    # about the first time at or after the session start: a time before it (an NVTX range opened before the capture,
    # negative) stays where it is, so the map keeps every time's order and sign
    t0 = min(con.execute(f"SELECT MIN(start) FROM {t} WHERE start >= 0").fetchone()[0] or 1 << 62 for t in timed)
    for t in timed:
        con.execute(f'UPDATE {t} SET start = {_stretched("start", t0, stretch)}, '
                    f'"end" = {_stretched(chr(34) + "end" + chr(34), t0, stretch)}')
    if _has(con, "ANALYSIS_DETAILS"):
        con.execute(f"UPDATE ANALYSIS_DETAILS SET duration = CAST(duration * {stretch!r} AS INTEGER), "
                    f"stopTime = startTime + CAST((stopTime - startTime) * {stretch!r} AS INTEGER)")
    if _has(con, "TARGET_INFO_SESSION_START_TIME"):
        con.execute(f"UPDATE TARGET_INFO_SESSION_START_TIME SET utcEpochNs = utcEpochNs + {shift_ns}")
    for table, cols in DEVICE_COLUMNS.items():
        if _has(con, table):
            sets = ", ".join(f"{c} = ({c} + {device_shift} + {GPUS_PER_NODE}) % {GPUS_PER_NODE}"
                             for c in cols if c in _cols(con, table))
            con.execute(f"UPDATE {table} SET {sets}")
    if host is not None:
        set_host(con, host)
    con.commit()
    con.close()


def set_host(con: sqlite3.Connection, host: str) -> None:
    """The export's Hostname (TARGET_INFO_SYSTEM_ENV), in an open copy: the row replaced, or added (with the table
    where the export has none) for the target its other rows describe."""
    if not _has(con, "TARGET_INFO_SYSTEM_ENV"):
        con.execute(SYSTEM_ENV)
    if con.execute("UPDATE TARGET_INFO_SYSTEM_ENV SET value = ? WHERE name = 'Hostname'", (host,)).rowcount:
        return
    target = (con.execute("SELECT globalVid, devStateName FROM TARGET_INFO_SYSTEM_ENV LIMIT 1").fetchone()
              or LOCAL_TARGET)
    con.execute("INSERT INTO TARGET_INFO_SYSTEM_ENV (globalVid, devStateName, name, nameEnum, value) "
                "VALUES (?, ?, 'Hostname', ?, ?)", (*target, HOSTNAME_ENUM, host))


def _stretched(col: str, t0: int, stretch: float) -> str:
    """SQL for a time column stretched about t0 (times before t0 kept)."""
    return f"CASE WHEN {col} < {t0} THEN {col} ELSE {t0} + CAST(({col} - {t0}) * {stretch!r} AS INTEGER) END"


def _has(con, table: str) -> bool:
    return con.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (table,)).fetchone() is not None


def _cols(con, table):
    return [r[1] for r in con.execute(f"PRAGMA table_info({table})")]


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--straggler", type=int, default=None, help="the rank to slow down (default: none)")
    ap.add_argument("--slow", type=float, default=1.25, help="the straggler's time stretch")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--name", default="derived")
    ap.add_argument("--copies", type=int, default=1, help="replicate each source capture this many times in time first")
    ap.add_argument("--hosts", type=int, default=None,
                    help="spread the ranks over K host names node0..node{K-1}, in consecutive blocks (default: the "
                         "capture's own, one host)")
    a = ap.parse_args()
    if a.hosts is not None and a.hosts < 1:
        ap.error(f"--hosts {a.hosts}: give at least 1")
    t = time.time()
    made = build(a.out, a.ranks, a.straggler, a.slow, a.seed, a.name, a.copies, a.hosts)
    print(f"{len(made)} traces in {a.out} ({sum(p.stat().st_size for p in made) / 1e6:.0f} MB, "
          f"{time.time() - t:.1f} s)", file=sys.stderr)
