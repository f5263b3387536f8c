"""What the analysis gives back (facade.analyze), whichever traces it read: one Result that the text and JSON renderers,
the charts, verify, the reports and the Python API (api.py) render; and the result types beside it (the GPUs side by
side, a side of verify, a finding with its line in the program and what its fix buys)."""
from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from .verify import NotComparable, Side
from .rank_summary import Ranks
from .rules.base import Finding
from .rules.prediction import Prediction
from .sections.code_lines import CodeSite

__all__ = ["Result", "Ranks", "Side", "NotComparable", "Finding", "Prediction", "CodeSite"]


@dataclass
class Result:
    """summary: the JSON document (docs/json-schema.md): one trace's, its `ranks` filled when it holds several GPUs,
    or several traces' comparison (schema.several_traces). tables: the DataFrames behind it, by name (--csv).
    gap_causes(device, spans) -> (cause, subject) of each idle span by the idle attribution's rules (for charts; one
    trace with an idle section, None otherwise). ranks: the GPUs side by side when there are several (None for one
    GPU). warnings: what a damaged export made the analysis drop or replace."""
    summary: dict
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    gap_causes: object = None
    ranks: Ranks | None = None
    warnings: list[str] = field(default_factory=list)
