"""The analysis document's types (result.Document, read and written by analysis/common/typed_json.py) hold every
document exactly: every stored answer and fresh analyze-trace --json runs of each kind of trace read into the types
and write back to the same JSON; a key the types do not know fails loudly, naming where it is."""
from __future__ import annotations

import copy
import json
from dataclasses import dataclass, fields

import pytest

import golden_answers as answers
from nsys_transfer.analysis import facade
from nsys_transfer.analysis.common import schema
from nsys_transfer.analysis.common.typed_json import ABSENT, Absent, JsonShapeError, from_json, to_json
from nsys_transfer.analysis.result import Document, Result
from nsys_transfer.analysis.sections.base import section_keys

STORED = answers.load()
PLACE = "placeholder/path.sqlite"  # the stored answers hold no trace paths (golden_answers.without_paths)

# a fresh run of each kind of document: one GPU; pageable copies and the pairing method; a CPU-only capture with its
# Python stacks; a pipeline's teardown; managed memory; CUDA graphs; several GPUs in one trace; two rank traces;
# a torch.profiler trace; a torch.profiler run's cycles
FRESH = [("reports/data/h200/naive-input.sqlite.xz",),
         ("tests/data/programs/torchvision_loader_nsys2023.sqlite.xz",),
         ("tests/data/newcomer/seg_numpy_nsys2024.sqlite.xz",),
         ("tests/data/programs/hf_embed_fixed_close_nsys2024.sqlite.xz",),
         ("tests/data/programs/managed_memory_nsys2024.sqlite.xz",),
         ("tests/data/programs/cuda_graph_infer_nsys2024.sqlite.xz",),
         ("reports/data/h200x2/linkprobe.sqlite.xz",),
         answers.RANK_PAIR,
         ("tests/data/kineto/kineto_min_gpu.pt.trace.json.gz",),
         ("tests/data/kineto/strangers58_gpu/kineto_cycles",)]


def with_paths(stored: dict) -> dict:
    """A stored answer with a path where analyze-trace writes one (golden_answers.without_paths took them out)."""
    d = copy.deepcopy(stored)
    if d.get("trace"):
        d["trace"]["path"] = PLACE
    for t in (d.get("ranks") or {}).get("traces") or []:
        t["path"] = PLACE
    return d


@pytest.mark.parametrize("key", sorted(STORED))
def test_every_stored_answer_round_trips(key):
    """The stored answers are written with sorted keys (golden_answers.text), so they carry no key order: their keys
    and values come back exactly (the order is held by the fresh runs below)."""
    d = with_paths(STORED[key])
    assert json.dumps(to_json(Document.from_json(d)), sort_keys=True) == json.dumps(d, sort_keys=True)


@pytest.mark.parametrize("names", FRESH, ids=lambda k: " + ".join(k))
def test_a_fresh_document_round_trips_byte_for_byte(names, analyze_trace):
    _, d = analyze_trace(*names)
    assert json.dumps(to_json(Document.from_json(d)), sort_keys=False) == json.dumps(d, sort_keys=False)


def test_the_document_has_the_schemas_keys_in_order():
    in_json = tuple(f.name for f in fields(Document) if f.metadata.get("json", True))
    assert in_json == schema.keys(section_keys())


def test_a_renamed_key_fails_loudly_naming_its_path():
    d = with_paths(STORED["reports/data/h200/naive-input.sqlite.xz"])
    gpu = d["trace"]["gpus"][0]
    gpu["gpu_name"] = gpu.pop("name")
    with pytest.raises(JsonShapeError, match=r"\$\.trace\.gpus\[0\]: TraceGpu has no field 'gpu_name'"):
        Document.from_json(d)


def test_a_missing_key_and_a_wrong_type_fail_loudly():
    d = with_paths(STORED["reports/data/h200/naive-input.sqlite.xz"])
    del d["kernels"]["median_ns"]
    with pytest.raises(JsonShapeError, match=r"\$\.kernels: KernelsPart's key 'median_ns' is missing"):
        Document.from_json(d)
    d = with_paths(STORED["reports/data/h200/naive-input.sqlite.xz"])
    d["gpu"]["busy_ns"] = "12"
    with pytest.raises(JsonShapeError, match=r"\$\.gpu\.busy_ns: '12' is not a int"):
        Document.from_json(d)


def test_a_renamed_key_in_a_finding_its_line_or_its_prediction_fails_loudly():
    d = with_paths(STORED["reports/data/h200/naive-input.sqlite.xz"])
    finding = next(f for f in d["diagnosis"] if f["prediction"])
    finding["prediction"]["steady"] = finding["prediction"].pop("steady_x")
    with pytest.raises(JsonShapeError, match="Prediction"):
        Document.from_json(d)
    d = with_paths(STORED["reports/data/h200/naive-input.sqlite.xz"])
    d["diagnosis"][0]["impact"] = d["diagnosis"][0].pop("impact_ns")
    with pytest.raises(JsonShapeError, match=r"\$\.diagnosis\[0\]: Finding has no field 'impact'"):
        Document.from_json(d)


@dataclass(frozen=True, kw_only=True)
class _Toy:
    """A key sometimes absent, one after a Python keyword, an open map, a fixed pair."""
    start_ns: int | Absent = ABSENT
    async_: int
    kinds: dict[str, float]
    pair: tuple[float, float] | None


def test_the_rules_absent_keys_keywords_maps_and_pairs():
    d = {"async": 3, "kinds": {"Pinned": 1, "Pageable": 0.5}, "pair": [1.0, 2]}
    toy = from_json(_Toy, d)
    assert toy.start_ns is ABSENT and toy.async_ == 3 and toy.pair == (1.0, 2)
    assert json.dumps(to_json(toy)) == json.dumps(d)  # the absent key stays out, the int under float stays an int
    assert to_json(from_json(_Toy, {"start_ns": 5, **d}))["start_ns"] == 5
    with pytest.raises(JsonShapeError, match=r"\$\.pair: 3 items"):
        from_json(_Toy, {**d, "pair": [1, 2, 3]})


def test_a_result_holds_its_document_typed():
    summary = with_paths(STORED["reports/data/h200/naive-input.sqlite.xz"])
    result = Result(Document.from_json(summary))
    assert isinstance(result.doc, Document)
    assert result.doc.kernels.count == summary["kernels"]["count"]
    assert result.doc.diagnosis[0].rule == summary["diagnosis"][0]["rule"]
    assert to_json(result.doc) == summary
    fresh = facade.analyze(answers.ROOT / "tests/data/programs/cuda_graph_infer_nsys2024.sqlite.xz")  # the API's door
    assert json.dumps(to_json(fresh.doc)) == json.dumps(fresh.summary) and fresh.doc.kernels.graphs.traced_as


MADE = ["tests/data/programs/seg_logits_fixed_nsys2024.sqlite.xz",        # one GPU, set-up and idle causes
        "tests/data/newcomer/seg_numpy_nsys2024.sqlite.xz",               # CPU-only, Python stacks
        "tests/data/programs/managed_memory_nsys2024.sqlite.xz",          # unified memory
        "tests/data/kineto/kineto_min_gpu.pt.trace.json.gz",              # torch.profiler: `profiler` present
        "reports/data/h200x2/linkprobe.sqlite.xz"]                        # several GPUs in one trace: `ranks`


@pytest.mark.parametrize("name", MADE)
def test_the_document_made_is_the_document_read(name):
    """The sections build the document typed (summary.analyze_sections) and the JSON is written of it once
    (Result.summary): reading that JSON back gives the same document, value for value, so that what a renderer reads
    of result.doc is what it read of the JSON (the rounded shares and speed-ups included)."""
    made = facade.analyze(answers.ROOT / name)
    assert Document.from_json(made.summary) == made.doc
