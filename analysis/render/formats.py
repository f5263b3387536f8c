"""How the text prints its numbers (durations, rates, shares) and folds its long lines: one format for each, read
by every text report and by the reports' tables and charts."""
from __future__ import annotations

import textwrap


MS = "{:,.1f} ms"  # every duration the text prints, and the report's table and charts print beside it (one format)


def ms(ns) -> str:
    """A duration in ns as the text prints it (MS), or - where there is none."""
    return "-" if ns is None else MS.format(ns / 1e6)


def gbps(x) -> str:
    """A rate, or n/a where nothing gives one (copies of zero length)."""
    return "n/a GB/s" if x is None else f"{x:.1f} GB/s"


def pct(x) -> str:
    """A share (0-1) as a percentage, or - where there is none."""
    return "-" if x is None else f"{100 * x:.1f}%"


WIDTH = 118  # a verdict longer than this goes on over indented lines, each cut between words


def wrapped(line: str) -> str:
    """A long line folded at WIDTH between words (never inside one: a path or a call stays whole), the lines after
    the first indented."""
    return textwrap.fill(line, WIDTH, subsequent_indent="    ", break_long_words=False, break_on_hyphens=False)
