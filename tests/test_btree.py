"""The fast reader (analysis/load/btree.py, analysis/load/_btree.c) reads what SQLite reads: on every bundled and public trace,
table by table, column by column, in random rowid ranges and with every filter; on damaged copies of a real export it
never crashes and never gives an answer SQLite contradicts; where it cannot read, SQLite answers the same."""
from __future__ import annotations

import random
import shutil
import subprocess
import sys
import sqlite3
from pathlib import Path

import numpy as np
import pytest

import golden_answers as answers
from nsys_transfer.analysis import Trace
from nsys_transfer.analysis.load import btree
from nsys_transfer.analysis.load.btree import Bits, In, Touches, Usable
from nsys_transfer.analysis.load.inputs import resolve_input
from nsys_transfer.analysis.summary import analyze_sections

ROOT = Path(__file__).resolve().parents[1]
TABLES = {"CUPTI_ACTIVITY_KIND_KERNEL": ["start", "end", "deviceId", "streamId", "correlationId", "globalPid",
                                         "shortName"],
          "CUPTI_ACTIVITY_KIND_RUNTIME": ["start", "end", "globalTid", "correlationId", "nameId"],
          "CUPTI_ACTIVITY_KIND_MEMSET": ["start", "end", "deviceId", "streamId", "correlationId", "bytes"],
          "OSRT_API": ["start", "end", "globalTid", "nameId"]}
PROGRAM = ROOT / "tests" / "data" / "programs" / "torchvision_loader_nsys2024.sqlite.xz"

pytestmark = pytest.mark.skipif(btree._btree is None, reason="the fast reader is not built (no C compiler at install)")


def _traces() -> list[str]:
    return answers.bundled() + answers.public()


def _path(name: str, tmp_path: Path) -> Path:
    """A plain SQLite file of a bundled (.xz) or public trace: a bundled one's is this test's own copy of it as the
    analysis decompresses it (into its cache, once for every test and analysis that reads it)."""
    src = answers.path_of(name)
    if src.suffix != ".xz":
        return src
    dst = tmp_path / src.name.removesuffix(".xz")
    shutil.copyfile(resolve_input(src)[0], dst)
    return dst


def _sqlite(con: sqlite3.Connection, table: str, columns: list[str], lo: int, hi: int, where: str = "1") -> list:
    select = ", ".join(f'"{c}"' for c in columns)
    return con.execute(f"SELECT {select} FROM {table} WHERE rowid > {lo} AND rowid <= {hi} AND ({where})").fetchall()


def _rows(got: dict[str, np.ndarray]) -> list[tuple]:
    return list(zip(*(v.tolist() for v in got.values()))) if got else []


def _pages(path: Path, con: sqlite3.Connection) -> btree.Pages:
    pages = btree.Pages.open(path, lambda: con)
    assert pages is not None
    assert isinstance(pages.source, str) == (path.stat().st_size > btree.MAP_WHOLE_BYTES)
    return pages


@pytest.mark.parametrize("mapped", [True, False], ids=["mapped", "page by page"])
@pytest.mark.parametrize("name", _traces())
def test_every_table_reads_as_sqlite_reads_it(name, mapped, tmp_path, monkeypatch):
    monkeypatch.setattr(btree, "MAP_WHOLE_BYTES", btree.MAP_WHOLE_BYTES if mapped else 0)
    path = _path(name, tmp_path)
    rng = random.Random(name)
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as con:
        pages = _pages(path, con)
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        for table in sorted(tables & set(TABLES)):
            have = {r[1] for r in con.execute(f"PRAGMA table_info({table})")}
            columns = [c for c in TABLES[table] if c in have]
            last = con.execute(f"SELECT MAX(rowid) FROM {table}").fetchone()[0] or 0
            ranges = [(0, last)] + [tuple(sorted(rng.sample(range(-1, last + 2), 2))) for _ in range(5)]
            for lo, hi in ranges:
                got = pages.read(table, {c: c for c in reversed(columns)}, lo, hi)
                assert got is not None, f"{table}: the fast reader gave up on a real export"
                expect = _sqlite(con, table, list(reversed(columns)), lo, hi)
                assert _rows(got) == expect, (table, lo, hi)


@pytest.mark.parametrize("name", ["tests/data/programs/hf_generate_nsys2023.sqlite.xz",
                                  "tests/data/programs/lightning_predict_nsys2024.sqlite.xz",
                                  "reports/data/h200/baseline.sqlite.xz"])
def test_filters_keep_what_their_sql_keeps(name, tmp_path):
    path = _path(name, tmp_path)
    rng = np.random.default_rng(7)
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as con:
        pages = _pages(path, con)
        for table in ("OSRT_API", "CUPTI_ACTIVITY_KIND_RUNTIME"):
            cols = ["start", "end", "globalTid", "nameId"]
            names = [r[0] for r in con.execute(f"SELECT DISTINCT nameId FROM {table}")]
            tids = [r[0] for r in con.execute(f"SELECT DISTINCT globalTid FROM {table}")]
            lo_t, hi_t = con.execute(f'SELECT MIN(start), MAX("end") FROM {table}').fetchone()
            cuts = np.sort(rng.integers(lo_t, hi_t, 200))
            gaps = Touches(cuts[0::2], cuts[1::2])
            last = con.execute(f"SELECT MAX(rowid) FROM {table}").fetchone()[0]
            for filters in [(In("nameId", tuple(names[::3])),), (In("nameId", tuple(names[::2]), negate=True),),
                            (In(Bits("globalTid"), (tids[0] >> 24 & 0xFFFFFF,)), gaps), (gaps,), (Usable(),),
                            (In("nameId", ()),), (In("globalTid", tuple(tids)), In("nameId", tuple(names[1::2])))]:
                for lo, hi in [(0, last), (last // 3, last // 2)]:
                    got = pages.read(table, {c: c for c in cols}, lo, hi, filters)
                    assert got is not None
                    assert _rows(got) == _sqlite(con, table, cols, lo, hi, btree.where(filters)), (table, filters)


def test_a_damaged_export_never_crashes_and_never_contradicts_sqlite(tmp_path):
    """Bytes of the big tables' pages overwritten at random, 300 times: the fast reader gives SQLite's rows or
    gives up (None); where SQLite itself fails on the damage, anything but a crash will do."""
    clean = _path(str(PROGRAM.relative_to(ROOT)), tmp_path)
    data = clean.read_bytes()
    with sqlite3.connect(clean) as con:
        roots = dict(con.execute("SELECT name, rootpage FROM sqlite_master WHERE type = 'table'"))
        page_size = con.execute("PRAGMA page_size").fetchone()[0]
        owned = {t: [r[0] for r in con.execute("SELECT pageno FROM dbstat WHERE name = ?", (t,))]
                 for t in ("OSRT_API", "CUPTI_ACTIVITY_KIND_KERNEL")} if _has_dbstat(con) else {}
    rng = random.Random(12)
    gave_up = agreed = 0
    for i in range(300):
        table = rng.choice(["OSRT_API", "CUPTI_ACTIVITY_KIND_KERNEL"])
        page = rng.choice(owned.get(table) or [roots[table]])
        damaged = bytearray(data)
        for _ in range(rng.choice([1, 1, 2, 8])):
            at = (page - 1) * page_size + rng.randrange(page_size)
            damaged[at] = rng.randrange(256)
        path = tmp_path / f"damaged{i % 4}.sqlite"
        path.write_bytes(damaged)
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as con:
            cols = TABLES[table][:4]
            got = _pages(path, con).read(table, {c: c for c in cols}, 0, 10 ** 6)
            try:
                expect = _sqlite(con, table, cols, 0, 10 ** 6)
            except sqlite3.DatabaseError:
                continue
        if got is None:
            gave_up += 1
            continue
        agreed += 1
        assert _rows(got) == expect, f"mutation {i} of page {page} ({table})"
    assert gave_up and agreed  # both ways were taken


def _has_dbstat(con: sqlite3.Connection) -> bool:
    try:
        con.execute("SELECT 1 FROM dbstat LIMIT 1")
        return True
    except sqlite3.OperationalError:
        return False


def test_where_the_fast_reader_gives_up_sqlite_answers_the_same(tmp_path, monkeypatch):
    """NULL, a float and text in the columns read: every read of such a chunk goes to SQLite, and the analysis
    (warnings included) equals the one read through SQLite alone."""
    path = _path(str(PROGRAM.relative_to(ROOT)), tmp_path)
    with sqlite3.connect(path) as con:
        con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET correlationId = NULL WHERE rowid = 3")
        con.execute("UPDATE OSRT_API SET start = start + 0.5 WHERE rowid = 10")
        con.execute("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET globalTid = 'x' WHERE rowid = 7")
    fast = _analysis(path)
    monkeypatch.setenv(btree.SQLITE_ONLY, "1")
    assert _analysis(path) == fast


def test_the_analysis_of_a_real_trace_reads_every_big_table_through_the_fast_reader(monkeypatch):
    read, gave_up = btree.Pages.read, []

    def recorded(self, table, columns, lo, hi, filters=()):
        got = read(self, table, columns, lo, hi, filters)
        gave_up.extend([table] if got is None else [])
        return got
    monkeypatch.setattr(btree.Pages, "read", recorded)
    with Trace.open(ROOT / "tests" / "data" / "programs" / "hf_generate_nsys2023.sqlite.xz") as t:
        analyze_sections(t)
    assert gave_up == []


@pytest.mark.parametrize("name", ["tests/data/programs/hf_generate_nsys2023.sqlite.xz",
                                  "reports/data/h200/streams.sqlite.xz"])
def test_sqlite_alone_gives_the_stored_answers(name, monkeypatch):
    monkeypatch.setenv(btree.SQLITE_ONLY, "1")
    stored = answers.load()
    assert answers.answer(name) == stored[name]


def _analysis(path: Path) -> dict:
    with Trace.open(path) as t:
        a = analyze_sections(t)
        return {"summary": a.summary, "warnings": sorted(t.warnings)}


def test_a_mapped_file_cut_short_under_the_reader_gives_up_instead_of_crashing(tmp_path):
    """Another program truncating the export while it is mapped: the pages past the end raise SIGBUS, which the
    reader turns into 'cannot read' (SQLite then says what is wrong). In a child process: a crash must not take
    the test run with it."""
    path = _path("tests/data/programs/hf_generate_nsys2023.sqlite.xz", tmp_path)
    script = f"""
import os, sqlite3
from nsys_transfer.analysis.load import btree
con = sqlite3.connect({str(path)!r})
pages = btree.Pages.open({str(path)!r}, lambda: con)
assert pages.source is not None and not isinstance(pages.source, str)
assert pages.read("OSRT_API", {{"s": "start"}}, 0, 10 ** 6) is not None
os.truncate({str(path)!r}, 50 * 4096)
print(pages.read("OSRT_API", {{"s": "start"}}, 0, 10 ** 6))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "None"
