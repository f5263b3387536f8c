"""What the analysis gives back (facade.analyze), whichever traces it read: one Result that the text and JSON renderers,
the charts, verify, the reports and the Python API (api.py) render; and the result types beside it (the GPUs side by
side, a side of verify, a finding with its line in the program and what its fix buys), with the document's typed
form (Document: the JSON of docs/json-schema.md as frozen dataclasses, read and written by common/typed_json.py)."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import pandas as pd

from .document import Document
from .rank_summary import Ranks
from .verify import NotComparable, Side
from .rules.base import Finding
from .rules.prediction import Prediction
from .sections.code_lines import CodeSite

__all__ = ["Result", "Document", "Ranks", "Side", "NotComparable", "Finding", "Prediction", "CodeSite"]


@dataclass
class Result:
    """summary: the JSON document (docs/json-schema.md): one trace's, its `ranks` filled when it holds several GPUs,
    or several traces' comparison (schema.several_traces). doc: the same, typed (Document; read from summary when
    first asked for, for now: a toy section declared beside the analysis, tests/test_extension_points.py, is in the
    summary and not in Document's fields, and only doc fails on it). tables: the DataFrames behind it, by name (--csv). gap_causes(device, spans) -> (cause, subject) of
    each idle span by the idle attribution's rules (for charts; one trace with an idle section, None otherwise).
    ranks: the GPUs side by side when there are several (None for one GPU). warnings: what a damaged export made the
    analysis drop or replace."""
    summary: dict
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    gap_causes: object = None
    ranks: Ranks | None = None
    warnings: list[str] = field(default_factory=list)

    @cached_property
    def doc(self) -> Document:
        """The document, typed (Document.from_json of summary, once)."""
        return Document.from_json(self.summary)
