"""The JSON `analyze-trace --json` writes for every bundled trace and every public trace beside the checkout: the
answers a speed or loading change must not move (tests/test_same_answers.py compares them).

    python tests/golden_answers.py --update     # after a change that is meant to move them (say why in the commit)

Stored in tests/data/golden_answers.json.xz as {trace: summary}, without `trace.path` (where the file lay).
"""
from __future__ import annotations

import argparse
import json
import lzma
import tempfile
from pathlib import Path

from click.testing import CliRunner

from nsys_transfer.analysis.cli.analyze import main as analyze_trace

ROOT = Path(__file__).resolve().parents[1]
STORE = ROOT / "tests" / "data" / "golden_answers.json.xz"
SHARED_TRACES = ROOT.parent / "shared" / "traces"
RANK_PAIR = ("reports/data/h200x2/pinned-x2rank.rank0.sqlite.xz", "reports/data/h200x2/pinned-x2rank.rank1.sqlite.xz")


def bundled() -> list[str]:
    """Every trace the repository ships, relative to its root."""
    return sorted(str(p.relative_to(ROOT)) for d in ("tests/data", "reports/data") for p in (ROOT / d).rglob("*.sqlite*"))


def public() -> list[str]:
    """The public exports beside the checkout (absent on a bare clone)."""
    return sorted(f"shared/traces/{p.name}" for p in SHARED_TRACES.glob("*.sqlite")) if SHARED_TRACES.is_dir() else []


def answer(*names: str) -> dict:
    """analyze-trace's JSON for these traces (several: analysed together), without where they lay."""
    paths = [str(SHARED_TRACES / n.split("/")[-1]) if n.startswith("shared/") else str(ROOT / n) for n in names]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "s.json"
        result = CliRunner().invoke(analyze_trace, [*paths, "--json", str(out), "-q"])
        assert result.exit_code == 0, f"{names}: {result.output}"
        summary = json.loads(out.read_text())
    return _without_paths(summary)


def _without_paths(summary: dict) -> dict:
    if isinstance(summary.get("trace"), dict):
        summary["trace"].pop("path", None)
    for t in summary.get("traces") or []:
        t.pop("path", None)
    if isinstance(summary.get("ranks"), dict):
        for t in summary["ranks"].get("traces") or []:
            t.pop("path", None)
    return summary


def keys() -> list[tuple[str, ...]]:
    """Every case: each trace alone, and the two rank traces together."""
    return [(n,) for n in bundled() + public()] + [RANK_PAIR]


def load() -> dict[str, dict]:
    """The stored answers, keyed by the traces' names joined with ' + '."""
    return json.loads(lzma.decompress(STORE.read_bytes()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--update", action="store_true", help="recompute and store every answer")
    args = ap.parse_args()
    if not args.update:
        ap.error("nothing to do: --update recomputes and stores the answers")
    stored = load() if STORE.exists() else {}
    for k in keys():
        stored[" + ".join(k)] = answer(*k)
        print(f"stored {' + '.join(k)}")
    STORE.write_bytes(lzma.compress(json.dumps(stored, sort_keys=True).encode(), preset=9))


if __name__ == "__main__":
    main()
