"""The span a user asked for (`--window`, `--steps`), as given: the one value every layer may hold. cli/window.py
parses it from the command line, sections/window.py turns it into trace ns (once, in the facade); summary.py names
it in the `window` section's `source`."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Spec:
    """What the user asked for: trace ns (relative False), ns from the capture start (relative True), or steps;
    `flag` and `text` as given (`--window`, `1200ms:4500ms`)."""
    text: str
    flag: str
    start: float | None
    end: float | None
    relative: bool = False
    steps: bool = False
