"""The gap-calls read zone by zone (analysis/sections/os_calls.py, Trace.osrt.zones). With small zones most of a real trace's
zones are skipped (no gap in their time span) or filtered by the few gaps inside them; the answers must equal those
of one zone spanning the whole table, on real traces and on a real export damaged with sqlite3."""
from __future__ import annotations

import lzma
import shutil
import sqlite3
from pathlib import Path

import pytest

from nsys_transfer.analysis import Trace
from nsys_transfer.analysis.load import btree
from nsys_transfer.analysis.sections import os_calls
from nsys_transfer.analysis.load import osrt as osrt_module
from nsys_transfer.analysis.summary import analyze_sections

PROGRAMS = Path(__file__).resolve().parent / "data" / "programs"
WHOLE_TABLE = 10 ** 12


def _analyze(path: Path, zone_rows: int, monkeypatch) -> tuple[dict, list, list]:
    """The summary, the zones and what the gap-calls read did with each zone (None: skipped)."""
    monkeypatch.setattr(osrt_module, "ZONE_ROWS", zone_rows)
    conditions = []
    near_gaps = os_calls._near_gaps

    def recorded(*args):
        conditions.append(near_gaps(*args))
        return conditions[-1]
    monkeypatch.setattr(os_calls, "_near_gaps", recorded)
    with Trace.open(path) as t:
        return analyze_sections(t).summary, t.osrt.zones, conditions


@pytest.mark.parametrize("name", ["torchvision_loader_nsys2023", "lightning_predict_nsys2023"])
def test_small_zones_skip_most_of_the_table_and_give_the_same_answers(name, monkeypatch):
    path = PROGRAMS / f"{name}.sqlite.xz"
    whole, zones, _ = _analyze(path, WHOLE_TABLE, monkeypatch)
    assert len(zones) == 1
    small, zones, conditions = _analyze(path, 2048, monkeypatch)
    assert len(zones) > 50 and sum(z.rows for z in zones) == whole["trace"]["counts"]["osrt_calls"]
    skipped = sum(c is None for c in conditions)
    assert 0 < skipped < len(conditions)  # both paths taken: zones skipped, zones read
    assert small == whole


def test_a_damaged_zone_spans_all_time_and_changes_no_answer(h200, tmp_path, monkeypatch):
    path = tmp_path / "baseline.sqlite"
    with lzma.open(h200["baseline"]) as src, open(path, "wb") as dst:
        shutil.copyfileobj(src, dst)
    with sqlite3.connect(path) as con:  # floats as a zone's first start and last end, text, an end before its start
        con.execute("UPDATE OSRT_API SET start = start - 0.5 WHERE rowid = 1")
        con.execute('UPDATE OSRT_API SET "end" = "end" + 1e15 + 0.5 WHERE rowid = 700')
        con.execute("UPDATE OSRT_API SET start = 'x' WHERE rowid = 100")
        con.execute('UPDATE OSRT_API SET "end" = start - 10 WHERE rowid = 2000')
    whole, _, _ = _analyze(path, WHOLE_TABLE, monkeypatch)
    small, zones, _ = _analyze(path, 256, monkeypatch)
    damaged = [i for i, z in enumerate(zones) if z.start_ns is None]  # a float bound: the zone spans all time
    assert damaged == [0, 699 // 256] and all(zones[i].end_ns is None for i in damaged)
    assert any("OS runtime rows" in w for w in small["warnings"])
    assert small == whole


def test_a_damaged_row_far_from_the_gaps_is_reported_whatever_the_zones(tmp_path, monkeypatch):
    """The scoped reads see only rows near gaps: the table-wide count of unusable rows reports the others."""
    path = tmp_path / "lightning.sqlite"
    with lzma.open(PROGRAMS / "lightning_predict_nsys2023.sqlite.xz") as src, open(path, "wb") as dst:
        shutil.copyfileobj(src, dst)
    with sqlite3.connect(path) as con:
        con.execute('UPDATE OSRT_API SET "end" = start - 10 WHERE rowid = 522241')
    monkeypatch.setattr(btree, "MAX_SQL_INTERVALS", 2)  # a coarse SQL filter: the read shape differs most
    whole, _, _ = _analyze(path, WHOLE_TABLE, monkeypatch)
    small, _, _ = _analyze(path, 2048, monkeypatch)
    said = "1 OS runtime rows that end before they start, dropped"
    assert said in whole["warnings"] and said in small["warnings"]
    assert small == whole
