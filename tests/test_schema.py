"""One JSON schema for one trace and for several, defined once (analysis/common/schema.py) and documented in
docs/json-schema.md."""
import re

from nsys_transfer.analysis.common.schema import SCHEMA, keys, one_trace, several_traces, trace_sections
from nsys_transfer.analysis.sections.base import section_keys
from conftest import ROOT

DOC = ROOT / "docs" / "json-schema.md"
KEYS, TRACE_SECTIONS = keys(section_keys()), trace_sections(section_keys())


def documented_top_level_keys() -> list[str]:
    """The keys of the doc's 'Top-level keys' table, in order."""
    text = DOC.read_text()
    section = text.split("## Top-level keys", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `([a-z_]+)` \|", section, flags=re.M)


def test_doc_lists_exactly_the_top_level_keys():
    assert documented_top_level_keys() == list(KEYS)
    assert f"`{SCHEMA}`" in DOC.read_text().splitlines()[0]


def test_one_trace_document_has_every_key(h200, summary_of):
    s = summary_of(h200["baseline"])
    assert list(s) == list(KEYS) and s["schema"] == SCHEMA and s["ranks"] is None
    assert one_trace(s, section_keys()) == s


def test_several_traces_document_has_every_key():
    ranks = {"traces": [], "limit": {"rule": "not-concurrent"}}
    doc = several_traces(ranks, ["a.sqlite: w"], section_keys())
    assert list(doc) == list(KEYS) and all(doc[k] is None for k in TRACE_SECTIONS)
    assert doc["diagnosis"] == [ranks["limit"]] and doc["ranks"] is ranks and doc["warnings"] == ["a.sqlite: w"]
