"""Build a large trace by replicating a real GPU trace in time (for benchmarks only; never called real data).

usage: build_large_trace.py SRC OUT --copies N
Every time-stamped table is copied N times, each copy shifted by the source span (+1 ms), with correlation
ids shifted so copies and kernels still join to their own runtime calls. From our 3-step H200 `baseline`
capture, N=2000 gives ~1.7 M kernels, 3.4 M CUDA runtime rows and 5.5 M OS runtime rows (~0.6 GB).
"""
from __future__ import annotations

import argparse
import shutil
import sqlite3
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from nsys_transfer.analysis.load.inputs import resolve_input

TABLES = ["CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
          "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "CUPTI_ACTIVITY_KIND_CUDA_EVENT",
          "NVTX_EVENTS", "OSRT_API"]


def build(src: Path, out: Path, copies: int) -> None:
    local, _ = resolve_input(src)
    shutil.copyfile(local, out)
    con = sqlite3.connect(out)
    con.execute("PRAGMA journal_mode=OFF")
    con.execute("PRAGMA synchronous=OFF")
    present = [t for t in TABLES if con.execute("SELECT 1 FROM sqlite_master WHERE name=?", (t,)).fetchone()
               and "start" in _cols(con, t)]
    lo = min(con.execute(f"SELECT MIN(start) FROM {t}").fetchone()[0] or 1 << 62 for t in present)
    hi = max(con.execute(f'SELECT MAX("end") FROM {t}').fetchone()[0] or 0 for t in present)
    span = hi - lo + 1_000_000
    corr = max(con.execute(f"SELECT MAX(correlationId) FROM {t}").fetchone()[0] or 0
               for t in present if "correlationId" in _cols(con, t)) + 1
    for t in present:
        cols = _cols(con, t)
        exprs = []
        for c in cols:
            if c in ("start", "end"):
                exprs.append(f'"{c}" + n.k * {span}')
            elif c == "correlationId":
                exprs.append(f"correlationId + n.k * {corr}")
            else:
                exprs.append(f'"{c}"')
        t0 = time.time()
        con.execute(f"CREATE TEMP TABLE orig AS SELECT * FROM {t}")
        con.execute(f"""INSERT INTO {t} ({', '.join(f'"{c}"' for c in cols)})
            WITH RECURSIVE n(k) AS (SELECT 1 UNION ALL SELECT k + 1 FROM n WHERE k < {copies - 1})
            SELECT {', '.join(exprs)} FROM n, temp.orig""")
        con.execute("DROP TABLE temp.orig")
        con.commit()
        print(f"{t}: {con.execute(f'SELECT COUNT(*) FROM {t}').fetchone()[0]:,} rows ({time.time() - t0:.1f} s)",
              file=sys.stderr)
    con.close()


def _cols(con, table):
    return [r[1] for r in con.execute(f"PRAGMA table_info({table})")]


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("src", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--copies", type=int, default=2000)
    a = ap.parse_args()
    build(a.src, a.out, a.copies)
    print(f"{a.out}: {a.out.stat().st_size / 1e9:.2f} GB", file=sys.stderr)
