"""The JSON `analyze-trace --json` writes for every bundled trace and every public trace beside the checkout: the
answers a speed or loading change must not move (tests/test_same_answers.py compares them).

    python tests/golden_answers.py --update     # after a change that is meant to move them (say why in the commit)

Stored as text, one file per case in tests/data/golden/: the summary without `trace.path` (where the file lay),
pretty-printed with sorted keys, so a moved answer reads as a diff. A file is named after its case: the trace's path
with `/` as `__` and `.sqlite` as `_sqlite` (no name under tests/data may look like a trace), several traces joined
with `+`; tests/data/golden/reports__data__h200__async_sqlite.xz.json holds reports/data/h200/async.sqlite.xz.
"""
from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from click.testing import CliRunner

from nsys_transfer.analysis.cli.analyze import main as analyze_trace

ROOT = Path(__file__).resolve().parents[1]
STORE = ROOT / "tests" / "data" / "golden"
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
    return without_paths(run(*names, quiet=True)[1])


def path_of(name: str) -> Path:
    """Where a bundled (relative to the checkout) or public (shared/traces/NAME) trace lies."""
    return SHARED_TRACES / name.split("/")[-1] if name.startswith("shared/") else ROOT / name


def run(*names: str, quiet: bool = False) -> tuple[str, dict]:
    """One run of analyze-trace --json on these traces (in this process): what it says on stdout (the text report;
    nothing with quiet, its -q) and its JSON."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "s.json"
        args = [*map(str, map(path_of, names)), "--json", str(out), *(["-q"] if quiet else [])]
        result = CliRunner().invoke(analyze_trace, args)
        assert result.exit_code == 0, f"{names}: {result.output}"
        return result.stdout, json.loads(out.read_text())


def without_paths(summary: dict) -> dict:
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


def file_name(key: str) -> str:
    """The file that holds the answer for this case (a key of load())."""
    name = key.replace(" + ", "+").replace("/", "__").replace(".sqlite", "_sqlite") + ".json"
    assert key_of(name) == key and ".sqlite" not in name and "/" not in name, f"no file name for {key!r}"
    return name


def key_of(name: str) -> str:
    """The case a file in STORE holds (file_name reversed)."""
    return name.removesuffix(".json").replace("_sqlite", ".sqlite").replace("__", "/").replace("+", " + ")


def text(summary: dict) -> str:
    """How an answer is stored: keys sorted, two spaces a level, a newline at the end."""
    return json.dumps(summary, sort_keys=True, indent=2) + "\n"


def load() -> dict[str, dict]:
    """The stored answers, keyed by the traces' names joined with ' + '."""
    return {key_of(p.name): json.loads(p.read_text(encoding="utf-8")) for p in sorted(STORE.glob("*.json"))}


def _kept(key: str) -> bool:
    """Whether a stored case that is not computed here stays: it names a public trace and the public traces are not
    beside this checkout (a bare clone), so nothing says it is gone."""
    return not SHARED_TRACES.is_dir() and any(n.startswith("shared/") for n in key.split(" + "))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--update", action="store_true", help="recompute and store every answer")
    args = ap.parse_args()
    if not args.update:
        ap.error("nothing to do: --update recomputes and stores the answers")
    STORE.mkdir(parents=True, exist_ok=True)
    current = {" + ".join(k) for k in keys()}
    changed = same = 0
    for k in keys():
        path = STORE / file_name(" + ".join(k))
        new = text(answer(*k))
        old = path.read_text(encoding="utf-8") if path.exists() else None
        if new == old:
            same += 1
        else:
            path.write_text(new, encoding="utf-8")
            changed += 1
            print(f"{'changed' if old is not None else 'added'} {path.relative_to(ROOT)}")
    for path in sorted(STORE.glob("*.json")):
        key = key_of(path.name)
        if key in current:
            continue
        if _kept(key):
            print(f"kept {path.relative_to(ROOT)} (its public trace is not beside this checkout)")
        else:
            path.unlink()
            changed += 1
            print(f"removed {path.relative_to(ROOT)} (no such case now)")
    print(f"{STORE.relative_to(ROOT)}: {changed} changed (added, rewritten or removed), {same} unchanged")


if __name__ == "__main__":
    main()
