#!/usr/bin/env bash
# Which clock do per-rank traces share? tests/programs/rank_marks.py --cuda under one nsys per rank, with the
# cudaProfilerApi capture range (each rank starts its capture 0.3 s x rank later), and without it. Prints, per
# rank, the trace's session start (UTC), ANALYSIS_DETAILS.startTime, the raw NVTX mark and the mark's wall clock.
set -u
. benchmarks/device_env.sh
mkdir -p "$OUT" /tmp/clk
python3 - <<'PY' 2>&1 | tee "$OUT/clock.log"
import os, sqlite3, sys
from pathlib import Path
from profiling.locate import find_nsys
from profiling.runner import ProfileRequest, profile_per_rank
n = find_nsys()
for capture in (True, False):
    out = Path(f"/tmp/clk/{int(capture)}"); out.mkdir(parents=True, exist_ok=True)
    req = ProfileRequest([sys.executable, "tests/programs/rank_marks.py", str(out), "--cuda"], out / "m",
                         trace="cuda,nvtx,osrt", capture_range=capture, env=dict(os.environ))
    rec = profile_per_rank(n, req, 2, echo=lambda b: None)
    for r, f in enumerate(rec["files"]["ranks"]):
        db = sqlite3.connect(f["sqlite"])
        utc = db.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()[0]
        st = db.execute("SELECT startTime FROM ANALYSIS_DETAILS").fetchone()[0]
        mark = db.execute("SELECT n.start FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId "
                          "WHERE COALESCE(n.text, s.value) = 'mark'").fetchone()[0]
        kmin = db.execute("SELECT min(start) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
        wall = int((out / f"rank{r}.ns").read_text())
        print(f"capture_range={capture} rank{r}: utc {utc} startTime {st} mark {mark} kernel0 {kmin} wall {wall} "
              f"| wall-(utc+mark) {(wall - utc - mark) / 1e6:.3f} ms, wall-(utc+startTime+mark) "
              f"{(wall - utc - st - mark) / 1e6:.3f} ms")
PY
