"""Loading real exports of every nsys version we know (2020.3 to 2023.4 here; public ones up to 2025.3)."""
import sqlite3

import pytest

from nsys_transfer.analysis import Trace
from nsys_transfer.analysis.load.sql import NVTX_PUSHPOP, NVTX_STARTEND
from conftest import sha256

EXPECTED_VERSION = {"nvtxex_cudf_v2020": "2020.x", "ncar_miniweather": "2022.2.1", "pipit_cloverleaf": "2024.5.1",
                    "nsightful_power": "2025.3.1", "engpap_montecarlo": "2022.1.3", "zx3xyy_torch_compile": "2024.6.2",
                    "lucasgasparino_p2p": "2023.4.4"}  # the exporting nsys (lucasgasparino: captured with 2022.3)


def _raw_count(path, table, where=""):
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute(f"SELECT COUNT(*) FROM {table} {where}").fetchone()[0]
    except sqlite3.OperationalError:
        return 0
    finally:
        con.close()


def test_public_exports_load_with_every_count(public_traces):
    for path in public_traces:
        before = sha256(path)
        with Trace.open(path) as t:
            assert len(t.device.kernels) == _raw_count(path, "CUPTI_ACTIVITY_KIND_KERNEL")
            assert len(t.device.memcpys) == _raw_count(path, "CUPTI_ACTIVITY_KIND_MEMCPY")
            assert len(t.osrt.frame) == _raw_count(path, "OSRT_API")
            assert len(t.host.nvtx) == _raw_count(path, "NVTX_EVENTS", f'WHERE eventType IN ({NVTX_PUSHPOP}, {NVTX_STARTEND}) AND "end" IS NOT NULL')
            key = next(k for k in EXPECTED_VERSION if path.name.startswith(k))
            assert t.nsys_version.startswith(EXPECTED_VERSION[key])
            assert (t.device.kernels["duration_ns"] >= 0).all()
            if len(t.device.memcpys):
                assert set(t.device.memcpys["copy_kind"]) <= {"HtoD", "DtoH", "DtoD", "HtoH", "PtoP", "Unified HtoD", "Unified DtoH"}
                assert set(t.device.memcpys["dst_kind"]) <= {"Pageable", "Pinned", "Device", "Managed", "Unknown", "Array"}
                assert t.calls.memcpy_api["correlation_id"].isin(t.device.memcpys["correlation_id"]).all()
            assert len(t.device.gpus) >= 1
        assert sha256(path) == before, "the analysis must never modify the input"


def test_nvtx_text_from_string_table(public_traces):
    """nsys 2025 stores NVTX names only through textId; they must come back as names, not ids."""
    path = next(p for p in public_traces if p.name.startswith("nsightful"))
    with Trace.open(path) as t:
        names = set(t.host.nvtx["name"])
        assert "(unnamed)" not in names and all(isinstance(n, str) for n in names)
        assert any(n.startswith("Step") for n in names)
        assert t.host.nvtx["depth"].max() >= 1  # nested ranges are nested


def test_h200_traces_load_and_show_the_article(h200):
    with Trace.open(h200["baseline"]) as t:
        d = t.device.memcpys[t.device.memcpys["copy_kind"] == "DtoH"]
        assert len(d) == 3 and (d["bytes"] == 64 * 21 * 512 * 512 * 4).all()
        assert set(d["dst_kind"]) == {"Pageable"}
        assert d["gbps"].max() < 4  # a fresh .cpu() tensor: page faults at every copy
        n = t.host.nvtx
        assert {"get batch", "compute", "copy to CPU", "process output"} <= set(n["name"])
        compute = n[n["name"] == "compute"]
        parents = n.loc[compute["parent"], "name"]
        assert parents.str.match(r"Batch \d+").all() and (compute["depth"] == 1).all()
        assert t.device.gpus["name"].iloc[0] == "NVIDIA H200"
    with Trace.open(h200["pinned"]) as t:
        d = t.device.memcpys[t.device.memcpys["copy_kind"] == "DtoH"]
        assert set(d["dst_kind"]) == {"Pinned"}
        assert d["gbps"].min() > 0.95 * 55  # >= 95% of the 55 GB/s link
        api = t.calls.memcpy_api.set_index("correlation_id").loc[d["correlation_id"]]
        assert (~api["sync"]).all() and api["api_name"].str.contains("Async").all()


def test_xz_input_is_decompressed_to_cache_not_beside_it(h200, tmp_path, monkeypatch):
    monkeypatch.setenv("NSYS_TRANSFER_CACHE", str(tmp_path / "cache"))
    src = h200["streams"]
    before = sha256(src)
    with Trace.open(src) as t:
        assert t.path.parent == tmp_path / "cache"
        assert len(t.device.kernels) > 0
    assert sha256(src) == before


def _cache_env(monkeypatch, tmp_path, limit=None):
    monkeypatch.setenv("NSYS_TRANSFER_CACHE", str(tmp_path / "cache"))
    if limit is not None:
        monkeypatch.setenv("NSYS_TRANSFER_CACHE_MAX", limit)
    return tmp_path / "cache"


def test_cache_holds_one_entry_per_content_and_is_private(h200, tmp_path, monkeypatch):
    cache = _cache_env(monkeypatch, tmp_path)
    copies = [tmp_path / f"{name}.sqlite.xz" for name in ("a", "b", "c")]
    for c in copies:
        c.write_bytes(h200["streams"].read_bytes())  # the same trace under three names
    for c in copies:
        with Trace.open(c) as t:
            assert t.source == str(c) and len(t.device.kernels) > 0
    entries = list(cache.glob("*.sqlite"))
    assert len(entries) == 1 and not list(cache.glob(".*"))
    assert cache.stat().st_mode & 0o777 == 0o700 and entries[0].stat().st_mode & 0o077 == 0


def test_cache_is_bounded_oldest_first(h200, tmp_path, monkeypatch):
    import os
    cache = _cache_env(monkeypatch, tmp_path, "1")  # 1 byte: only the trace in use stays
    for name in ("streams", "pinned"):
        with Trace.open(h200[name]):
            pass
    assert len(list(cache.glob("*.sqlite"))) == 1
    monkeypatch.setenv("NSYS_TRANSFER_CACHE_MAX", "4G")
    with Trace.open(h200["streams"]):
        pass
    first = next(p for p in cache.glob("*.sqlite") if p.stat().st_size)
    os.utime(first, (1, 1))  # used long ago
    monkeypatch.setenv("NSYS_TRANSFER_CACHE_MAX", str(first.stat().st_size + 1))
    with Trace.open(h200["baseline"]):
        pass
    assert first not in set(cache.glob("*.sqlite")) and len(list(cache.glob("*.sqlite"))) <= 2


def test_a_cut_xz_leaves_nothing_and_names_the_users_file(h200, tmp_path, monkeypatch):
    from nsys_transfer.analysis.common.errors import TraceError
    cache = _cache_env(monkeypatch, tmp_path)
    cut = tmp_path / "cut.sqlite.xz"
    data = h200["pinned"].read_bytes()
    cut.write_bytes(data[: len(data) // 3])
    try:
        Trace.open(cut)
        raise AssertionError("a cut .xz opened")
    except TraceError as e:
        assert str(e).startswith(str(cut)) and str(cache) not in str(e)
    assert not list(cache.iterdir())  # no entry, no temporary file


def test_a_fifo_is_not_a_regular_file(tmp_path):
    import os
    from conftest import run_cli
    fifo = tmp_path / "trace.sqlite"
    os.mkfifo(fifo)
    r = run_cli("-m", "nsys_transfer.analysis", str(fifo), timeout=60)
    assert r.returncode == 2 and "not a regular file" in r.stderr and len(r.stderr.strip().splitlines()) == 1


STOPPED_MID_WRITE = """
import sys, time
from pathlib import Path
from nsys_transfer.analysis.load.cache import cached

def make(tmp: Path):
    tmp.write_bytes(b"half an export")  # as the decompression or nsys export leaves it mid-way
    print("writing", flush=True)
    time.sleep(60)

if sys.argv[2:] == ["worker"]:  # as a --jobs worker process: the pool's initializer, and an item's exception
    from nsys_transfer.analysis.executors.parallel import _worker_setup  # sent back as its result (concurrent.futures)
    _worker_setup()
    try:
        cached(Path(sys.argv[1]), make)
    except BaseException as e:
        print(f"sent back {e!r}; went on", flush=True)
else:
    cached(Path(sys.argv[1]), make)
"""


@pytest.mark.alone  # timed: each step waits at most 30 s for the child, which a busy machine has overrun
def test_a_stop_mid_write_leaves_nothing_in_the_cache(tmp_path):
    """SIGTERM (as Ctrl-C) while a cache entry is written: the process ends with 143 and its .part file is gone (a
    stale one would stay for a day, and a full one would be taken for a trace). In a --jobs worker too: there the
    SystemExit went back to the pool as the trace's result, and the worker went on to the next trace."""
    import os
    import signal
    import subprocess
    import sys
    cache, src = tmp_path / "cache", tmp_path / "x.sqlite.xz"
    src.write_bytes(b"\xfd7zXZ\x00 any bytes: the key is taken from them")
    # Python re-raises an uncaught Ctrl-C
    for sig, code, mode in ((signal.SIGTERM, 143, "main"), (signal.SIGINT, -signal.SIGINT, "main"),
                            (signal.SIGTERM, 143, "worker")):
        p = subprocess.Popen([sys.executable, "-c", STOPPED_MID_WRITE, str(src), mode], stdout=subprocess.PIPE,
                             text=True, stderr=subprocess.PIPE, env={**os.environ, "NSYS_TRANSFER_CACHE": str(cache)})
        assert p.stdout.readline().strip() == "writing", p.stderr.read()
        assert len(list(cache.glob(".*.part"))) == 1
        p.send_signal(sig)
        assert p.wait(timeout=30) == code, p.stderr.read()
        assert list(cache.iterdir()) == [], list(cache.iterdir())
