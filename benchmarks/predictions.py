"""How well the findings' predictions (rules/prediction.py) hold against real fixes: for each before/after pair of
benchmarks/pairs.json, the before capture analysed as analyze-trace does, the prediction of the finding whose advice
the fix follows, beside the fixed program's own unprofiled clock (median of its runs). A pair is a hit where the
predicted range holds the measured speed-up, or its midpoint is within 20% of it (issue 56's measure). Also what the
top finding's idle share implies (1 / (1 - share)), the figure users read as the gain before predictions existed.

    python benchmarks/predictions.py [--pairs benchmarks/pairs.json] [--only NAME,...]
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from nsys_transfer.analysis.facade import analyze, options_for
from nsys_transfer.analysis.replay import fixes

ADVISED_WORKERS = fixes.DEFAULT_WORKERS
ROOT = Path(__file__).resolve().parents[1]
TOLERANCE = 0.20


def measured(p: dict, clock: str) -> float | None:
    """The pair's measured speed-up by one clock (steady: batches/s after over before; wall: s before over after),
    medians of each side's runs; or the listed per-call speed-ups' median."""
    if f"{clock}_x" in p:
        return statistics.median(p[f"{clock}_x"])
    runs = p.get(clock)
    if not runs:
        return None
    b, a = statistics.median(runs["before"]), statistics.median(runs["after"])
    return a / b if clock == "steady" else b / a


def chosen(findings: list[dict], rule: str) -> dict | None:
    """The finding the fix follows: the first of that rule, else (a merged finding) the first that carries it."""
    return next((f for f in findings if f["rule"] == rule), None) or \
        next((f for f in findings if rule in f["evidence"] and f.get("prediction")), None)


def hit(r: list[float] | None, m: float | None) -> str:
    """'hit', 'miss' or '-' for a range against a measured figure."""
    if not r or m is None:
        return "-"
    mid = (r[0] * r[1]) ** 0.5
    return "hit" if r[0] <= m <= r[1] or abs(mid / m - 1) <= TOLERANCE else "miss"


def one(p: dict) -> dict:
    """One pair's row; a fix made with other workers than the advice names ("workers") is predicted with those."""
    fixes.DEFAULT_WORKERS = p.get("workers", ADVISED_WORKERS)
    path = ROOT / p["before"]
    t0 = time.perf_counter()
    s = analyze(path, options_for(path)).summary
    took = time.perf_counter() - t0
    f = {"rule": "all", "prediction": (s.get("predicted") or {}).get("all_fixed")} if p["finding"] == "all" else \
        chosen(s["diagnosis"], p["finding"])
    pred = (f or {}).get("prediction") or {}
    if p.get("part"):  # the fix made one part of the advised one: that part's prediction
        pred = next((x for x in pred.get("parts") or () if x["part"].startswith(p["part"])), {})
    if p.get("route") == "gpu" and pred.get("on_gpu"):  # the advice's other route: the work done on the GPU
        pred = {**pred, **pred["on_gpu"]}
    costed = [x for x in s["diagnosis"] if x["severity"] in ("high", "medium")]
    share = costed[0]["impact_fraction"] if costed else 0.0
    steady, wall = measured(p, "steady"), measured(p, "wall")
    return {"name": p["name"], "card": p.get("card"), "rule": f["rule"] if f else None,
            "steady_pred": pred.get("steady_x"), "whole_pred": pred.get("whole_x"), "steady": steady, "wall": wall,
            "steady_hit": hit(pred.get("steady_x"), steady), "wall_hit": hit(pred.get("whole_x"), wall),
            "share_x": 1 / (1 - min(share, 0.99)), "why_not": pred.get("why_not"), "next": pred.get("next_limit"),
            "first": costed[0]["rule"] if costed else None, "analysis_s": took}


def fmt(r) -> str:
    return "-" if not r else f"{r[0]:.2f}-{r[1]:.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", default=str(ROOT / "benchmarks" / "pairs.json"))
    ap.add_argument("--only", default="")
    ap.add_argument("--json", help="write the rows here too")
    args = ap.parse_args()
    pairs = json.loads(Path(args.pairs).read_text())["pairs"]
    only = {x for x in args.only.split(",") if x}
    rows = [one(p) for p in pairs if not only or p["name"] in only]
    print(f"{'pair':22s} {'card':5s} {'finding':20s} {'steady pred':>12s} {'measured':>8s} {'':4s} {'whole pred':>12s} "
          f"{'measured':>8s} {'':4s} {'share-x':>7s}  next limit")
    for r in rows:
        st = f"{r['steady']:.2f}" if r["steady"] else "-"
        wa = f"{r['wall']:.2f}" if r["wall"] else "-"
        print(f"{r['name']:22s} {r['card'] or '-':5s} {r['rule'] or '-':20s} {fmt(r['steady_pred']):>12s} {st:>8s} "
              f"{r['steady_hit']:4s} {fmt(r['whole_pred']):>12s} {wa:>8s} {r['wall_hit']:4s} {r['share_x']:7.2f}  "
              f"{r['next'] or r['why_not'] or '-'}")
    for clock in ("steady", "wall"):
        judged = [r for r in rows if r[f"{clock}_hit"] != "-"]
        hits = sum(r[f"{clock}_hit"] == "hit" for r in judged)
        share_hits = sum(hit([r["share_x"]] * 2, r[clock]) == "hit" for r in judged)
        print(f"{clock}: {hits} of {len(judged)} predictions hold (the idle share's 1/(1-share): {share_hits})")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
