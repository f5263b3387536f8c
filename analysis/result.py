"""What the analysis gives back (facade.analyze), whichever traces it read: one Result that the text and JSON renderers,
the charts, verify, the reports and the Python API (api.py) render; and the result types beside it (the GPUs side by
side, a side of verify, a finding with its line in the program and what its fix buys), with the document's typed
form (Document: the JSON of docs/json-schema.md as frozen dataclasses, read and written by common/typed_json.py)."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import pandas as pd

from .common.typed_json import to_json
from .document import Document
from .rank_summary import Ranks
from .verify import NotComparable, Side
from .rules.base import Finding
from .rules.prediction import Prediction
from .sections.code_lines import CodeSite

__all__ = ["Result", "Document", "Ranks", "Side", "NotComparable", "Finding", "Prediction", "CodeSite"]


@dataclass
class Result:
    """doc: the document (docs/json-schema.md), typed as the analysis made it (Document): one trace's, its `ranks`
    filled when it holds several GPUs, or several traces' comparison (schema.several_traces, read once:
    Document.made_as_json). summary: the same as JSON, written from doc at the edge (to_json, once). tables: the
    DataFrames behind it, by name (--csv). gap_causes(device, spans) -> (cause, subject) of each idle span by the
    idle attribution's rules (for charts; one trace with an idle section, None otherwise). ranks: the GPUs side by
    side when there are several (None for one GPU). warnings: what a damaged export made the analysis drop or
    replace."""
    doc: Document
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    gap_causes: object = None
    ranks: Ranks | None = None
    warnings: list[str] = field(default_factory=list)

    @cached_property
    def summary(self) -> dict:
        """The JSON document (common/typed_json.to_json of doc, once): what --json writes and the API's summary gives."""
        return to_json(self.doc)
