"""Per-rank traces of several machines: each host's DtoH is judged alone, since the GPUs of one node share its host
memory and PCIe, not another node's. The traces are benchmarks/build_rank_traces.py's (copies of the bundled pair,
`hosts=K` naming K machines in TARGET_INFO_SYSTEM_ENV), some made twins of another rank here: the same capture on
the same clock, so their copies run at the very same times, as if the two ranks copied at once."""
from __future__ import annotations

import importlib.util
import json
import shutil
import sqlite3

import numpy as np
import pytest

from conftest import ROOT, run_cli

from nsys_transfer.analysis import Trace
from nsys_transfer.analysis.rank_summary import RankOptions, merge_parts, part_of_path, trace_labels

ANALYZE = ("-m", "nsys_transfer.analysis")
TIMEOUT = 180
WAITING = RankOptions(busy_threshold=0.99)  # the derived GPUs run kernels 98% of their steps: not compute-bound here


@pytest.fixture(scope="module")
def builder():
    spec = importlib.util.spec_from_file_location("build_rank_traces", ROOT / "benchmarks" / "build_rank_traces.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _edit(path, sql: str = "", host: str | None = None, builder=None):
    con = sqlite3.connect(path)
    if sql:
        con.execute(sql)
    if host is not None:
        builder.set_host(con, host)
    con.commit()
    con.close()


def _twin(builder, src, dst, host: str, byte_share: float = 1.0):
    """dst: a copy of rank trace src on the same clock, on `host`; its DtoH copies carry byte_share of the bytes in
    the same time (a slower link)."""
    shutil.copyfile(src, dst)
    _edit(dst, f"UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET bytes = CAST(bytes * {byte_share!r} AS INTEGER) "
               "WHERE copyKind = 2" if byte_share != 1.0 else "", host, builder)


def _merge(paths, opts=None):
    labels = trace_labels([p.name for p in paths])
    return merge_parts([part_of_path(p, lb, opts or RankOptions()) for p, lb in zip(paths, labels)], opts)


def _analyze(paths, out, *args):
    r = run_cli(*ANALYZE, *map(str, paths), "--json", str(out), *args, timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr[-3000:]
    return r


def test_the_host_name_is_read_and_written_as_nsys_lays_it_out(builder, tmp_path):
    """Trace.hostname reads TARGET_INFO_SYSTEM_ENV's Hostname row; set_host replaces it, or adds the row (and the
    table) where an export has none; an export without them names no host."""
    path = builder.build(tmp_path, 1)[0]
    with Trace.open(path) as t:
        assert t.hostname == "vm"  # the H200 captures' machine
    _edit(path, host="node7", builder=builder)
    with Trace.open(path) as t:
        assert t.hostname == "node7"
    _edit(path, "DELETE FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'Hostname'")
    with Trace.open(path) as t:
        assert t.hostname is None
    _edit(path, host="node8", builder=builder)
    with sqlite3.connect(path) as con:
        rows = con.execute("SELECT globalVid, devStateName, nameEnum, value FROM TARGET_INFO_SYSTEM_ENV "
                           "WHERE name = 'Hostname'").fetchall()
    assert rows == [(281474976710656, "Local (CLI)", 619, "node8")]  # as the capture's other rows
    _edit(path, "DROP TABLE TARGET_INFO_SYSTEM_ENV")
    with Trace.open(path) as t:
        assert t.hostname is None
    _edit(path, host="node9", builder=builder)
    with Trace.open(path) as t:
        assert t.hostname == "node9"


def test_the_builder_fills_the_hosts_one_after_the_other(builder, tmp_path):
    paths = builder.build(tmp_path, 5, hosts=2)
    seen = []
    for p in paths:
        with sqlite3.connect(p) as con:  # the GPU its kernels ran on
            (device,), = con.execute("SELECT DISTINCT deviceId FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchall()
        with Trace.open(p) as t:
            seen.append((t.hostname, device))
    assert seen == [("node0", 0), ("node0", 1), ("node0", 2), ("node1", 0), ("node1", 1)]


def test_one_host_gives_the_same_json_and_text(builder, tmp_path):
    """One host named, another one named, none named: the same document and report, byte for byte, with no host
    keys in them."""
    paths = builder.build(tmp_path, 10, straggler=3)
    outs = []
    for step in ("as captured", "renamed", "unnamed"):
        if step == "renamed":
            for p in paths:
                _edit(p, host="node0", builder=builder)
        elif step == "unnamed":
            for p in paths:
                _edit(p, "DELETE FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'Hostname'")
        r = _analyze(paths, tmp_path / f"{step}.json")
        outs.append(((tmp_path / f"{step}.json").read_bytes(), r.stdout))
    assert outs[1] == outs[0] and outs[2] == outs[0]
    doc = json.loads(outs[0][0])["ranks"]
    assert "hosts" not in doc and "host" not in doc["host_dtoh"] and all("host" not in g for g in doc["gpus"])
    assert "hosts, each host's DtoH" not in outs[0][1] and " on node" not in outs[0][1]


@pytest.fixture()
def two_hosts(builder, tmp_path):
    """rank0, rank1 on node0 (their copies never overlap each other's); rank2, rank3 on node1, twins of rank0 and
    rank1 whose copies carry half the bytes in the same time (a slower node). Summed over both hosts, every copy
    runs while its twin copies, and node1's slow ones look like contention."""
    paths = builder.build(tmp_path, 4, hosts=2)
    _twin(builder, paths[0], paths[2], "node1", 0.5)
    _twin(builder, paths[1], paths[3], "node1", 0.5)
    return paths


def test_each_host_is_judged_alone(builder, two_hosts):
    r = _merge(two_hosts, WAITING)
    s = r.summary
    assert [h["host"] for h in s["hosts"]] == ["node0", "node1"]  # neither slowed: the higher peak share first
    for h in s["hosts"]:
        assert len(h["gpus"]) == 2 and h["slowdown"] is None
        assert [c["copies_together"] for c in h["contention"]] == [0]  # the twins are on the other host
        assert h["host_dtoh"]["capacity_source"] == "nominal: 2 x 55 GB/s"
    assert s["limit"]["rule"] == "rank-pipeline", s["limit"]  # nothing shared is slowed
    assert [g["host"] for g in s["gpus"]] == ["node0", "node0", "node1", "node1"] and len(s["gpus"]) == 4
    assert (r.copies["concurrent_fraction"] < 0.1).all()
    # the same traces wrongly taken for one host: the twins' copies overlap, node1's slow rate reads as a slowdown
    for p in two_hosts:
        _edit(p, host="node0", builder=builder)
    wrong = _merge(two_hosts, WAITING).summary
    assert "hosts" not in wrong and wrong["limit"]["rule"] == "host-dtoh-bandwidth", wrong["limit"]
    assert wrong["contention"][0]["slowdown"] == pytest.approx(0.75, abs=0.02)
    assert wrong["host_dtoh"]["peak_gbps"] > s["host_dtoh"]["peak_gbps"] * 1.3  # the hosts' loads summed


def test_the_limiting_host_is_named(builder, two_hosts, tmp_path):
    """node1's two ranks copy at once (rank3 a twin of rank2): node1 saturates, node0 does not, and the verdict,
    the figures, the text and the per-host summary say which."""
    _twin(builder, two_hosts[2], two_hosts[3], "node1")
    s = _merge(two_hosts, WAITING).summary
    top, other = s["hosts"]
    assert top["host"] == "node1" and top["slowdown"] < 0.85 and other["slowdown"] is None
    assert s["host_dtoh"] == {"host": "node1", **top["host_dtoh"]} and s["contention"] == top["contention"]
    lim = s["limit"]
    assert lim["rule"] == "host-dtoh-bandwidth" and lim["subject"] in top["gpus"], lim
    assert lim["evidence"].startswith("the GPUs on node1 share the host's DtoH bandwidth and it saturates")
    assert any(f.startswith("host-side DtoH on node1 (the worst of 2 hosts): peak") for f in s["figures"])
    r = _analyze(two_hosts, tmp_path / "r.json", "--jobs", "2")
    lines = r.stdout.splitlines()
    head = lines.index("2 hosts, each host's DtoH judged alone (the worst first):")
    assert lines[head + 1].startswith("  node1: 2 GPUs") and lines[head + 1].endswith("<- worst")
    assert lines[head + 2].startswith("  node0: 2 GPUs") and "copies while another of its GPUs copies: unmeasured" \
        in lines[head + 2]
    assert any(ln.startswith("host-side DtoH on node1, the worst of 2 hosts") for ln in lines)
    assert ", node1): " in next(ln for ln in lines if ln.startswith("  rank3:GPU "))  # each GPU's line names its host
    _analyze(two_hosts, tmp_path / "seq.json", "--jobs", "1", "-q")  # worker processes carry the host too
    assert (tmp_path / "seq.json").read_bytes() == (tmp_path / "r.json").read_bytes()


def test_many_ranks_over_hosts_name_each_host(builder, tmp_path):
    paths = builder.build(tmp_path, 16, straggler=5, hosts=2)
    r = _analyze(paths, tmp_path / "r.json")
    out = r.stdout
    assert "stragglers (more than 10% below the median): rank5:GPU 5 on node0" in out
    assert "2 hosts, each host's DtoH judged alone" in out and "  node0: 8 GPUs" in out and "  node1: 8 GPUs" in out
    doc = json.loads((tmp_path / "r.json").read_text())["ranks"]
    assert len(doc["gpus"]) == 16 and sorted(h["host"] for h in doc["hosts"]) == ["node0", "node1"]
    assert all(h["host_dtoh"]["capacity_source"] == "nominal: 8 x 55 GB/s" for h in doc["hosts"])


def test_traces_without_a_host_name_beside_named_ones_are_one_host(builder, tmp_path):
    paths = builder.build(tmp_path, 3, hosts=3)
    _edit(paths[2], "DELETE FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'Hostname'")
    r = _merge(paths)
    assert sorted(str(h["host"]) for h in r.summary["hosts"]) == ["None", "node0", "node1"]
    assert r.summary["gpus"][2]["host"] is None
    assert r.warnings == ["1 of the 3 traces name no host (no Hostname row in TARGET_INFO_SYSTEM_ENV) while the others "
                          "do: their GPUs count as one host, the unnamed host"]


HALVE_KERNELS = 'UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "end" = start + ("end" - start) / 2'


def _waiting_and_bound(builder, tmp_path, node1_share: float | None):
    """rank0, rank1 on node0: compute-bound (kernels 98% of their steps), rank1 a twin of rank0 whose copies carry 0.3
    of the bytes, so node0's copies run well below their solo rate. rank2, rank3 on node1: their kernels cut to half
    their length, so these GPUs wait half their steps; rank3 a twin of rank2 carrying node1_share of the bytes (node1
    slowed, less than node0), or with None rank3 as built (node1's copies never slowed)."""
    paths = builder.build(tmp_path, 4, hosts=2)
    _twin(builder, paths[0], paths[1], "node0", 0.3)
    _edit(paths[2], HALVE_KERNELS)
    if node1_share is None:
        _edit(paths[3], HALVE_KERNELS)
    else:
        _twin(builder, paths[2], paths[3], "node1", node1_share)
    return paths


def test_a_host_whose_gpus_wait_is_judged_before_a_compute_bound_one(builder, tmp_path):
    """The gate is per host: node0 is compute-bound, its slowed copies hidden behind its compute; node1's GPUs wait
    while its own copies are slowed. The limit is node1's DtoH, not node0's (which is the slower, but costs node0
    nothing), and the cluster is not compute-bound. With every host compute-bound the cluster is, and the slowed
    copies named hidden are the slowest host's."""
    paths = _waiting_and_bound(builder, tmp_path, 0.6)
    s = _merge(paths).summary
    top, other = s["hosts"]
    assert top["host"] == "node1" and top["compute_min"] < 0.6 and other["compute_min"] > 0.95
    assert other["slowdown"] < top["slowdown"] < 0.85  # node0 the slower: the limiting host before the per-host gate
    lim = s["limit"]
    assert lim["rule"] == "host-dtoh-bandwidth" and lim["subject"] in top["gpus"], lim
    assert lim["evidence"].startswith("the GPUs on node1 share the host's DtoH bandwidth and it saturates"), lim
    assert lim["evidence"].endswith("kernels run only 49% of the time"), lim
    assert s["host_dtoh"]["host"] == "node1" and s["contention"] == top["contention"]
    assert any(f.startswith("host-side DtoH on node1 (the worst of 2 hosts)") for f in s["figures"])
    bound = builder.build(tmp_path / "bound", 4, hosts=2)  # both hosts compute-bound, both slowed
    _twin(builder, bound[0], bound[1], "node0", 0.3)
    _twin(builder, bound[2], bound[3], "node1", 0.6)
    s = _merge(bound).summary
    assert [h["host"] for h in s["hosts"]] == ["node0", "node1"] and min(h["compute_min"] for h in s["hosts"]) > 0.95
    assert s["limit"]["rule"] == "gpu-compute", s["limit"]
    assert "DtoH copies on node0 are slowed to 0.6" in s["limit"]["evidence"] and "hidden behind compute" in \
        s["limit"]["evidence"]


def test_a_compute_bound_hosts_slowed_copies_take_no_blame_for_another_hosts_wait(builder, tmp_path):
    """node0 compute-bound with slowed copies, node1's GPUs waiting with copies never slowed: what limits is inside
    node1's ranks (rank-pipeline, its idlest GPU named with its host), not node0's DtoH bandwidth; the text's host
    lines give each host's least busy GPU, the waiting host first."""
    paths = _waiting_and_bound(builder, tmp_path, None)
    r = _analyze(paths, tmp_path / "r.json", "--jobs", "1")
    s = json.loads((tmp_path / "r.json").read_text())["ranks"]
    top, other = s["hosts"]
    assert top["host"] == "node1" and (top["slowdown"] is None or top["slowdown"] >= 0.85), top
    assert other["host"] == "node0" and other["slowdown"] < 0.85
    lim = s["limit"]
    assert lim["rule"] == "rank-pipeline" and lim["subject"] in top["gpus"], lim
    assert lim["evidence"].startswith(f"{lim['subject']} on node1 runs kernels 49% of the time"), lim
    assert s["host_dtoh"]["host"] == "node1"
    lines = r.stdout.splitlines()
    head = lines.index("2 hosts, each host's DtoH judged alone (the worst first):")
    assert lines[head + 1].startswith("  node1: 2 GPUs") and "kernels >= 49.0% of their steps" in lines[head + 1]
    assert lines[head + 2].startswith("  node0: 2 GPUs") and "kernels >= 98.0% of their steps" in lines[head + 2]
    assert f"limit: [rank-pipeline] {lim['subject']} on node1 runs kernels 49%" in r.stdout


def test_host_rows_and_order():
    from nsys_transfer.analysis.render.many_gpus import host_order, host_rows
    assert host_rows(["a", "a", "b", "b", "b", None]) == [("a", 0, 2), ("b", 2, 5), (None, 5, 6)]
    assert host_rows(["a"]) == [("a", 0, 1)] and host_rows([]) == []
    assert host_rows(["a", "b", "a"]) == [("a", 0, 1), ("b", 1, 2), ("a", 2, 3)]  # runs, as the rows come
    assert sorted(["node10", None, "node2", "node1"], key=host_order) == ["node1", "node2", "node10", None]


def _heatmap_figure(ranks, path, monkeypatch):
    """plot_rank_heatmap's figure, kept open to read its artists."""
    from nsys_transfer.analysis.render import plots, rank_plots
    kept = []
    monkeypatch.setattr(plots, "save", lambda fig, p: kept.append(fig) or p)
    rank_plots.plot_rank_heatmap(ranks, path)
    return kept[0]


def _separators(ax) -> list[float]:
    """The y of the horizontal lines across an axes (axhline: x from 0 to 1 in axes coordinates)."""
    return sorted({float(ln.get_ydata()[0]) for ln in ax.lines if list(ln.get_xdata()) == [0, 1]})


def test_the_heat_map_groups_the_rows_by_host_and_marks_each_host(builder, tmp_path, monkeypatch):
    """Hosts that do not follow the rank order: the rows come host by host (node2 before node10), by rank within
    each, a line between two hosts' rows in both panels and each host named; one host: no line, no name."""
    import matplotlib.pyplot as plt

    from nsys_transfer.analysis.render.many_gpus import time_grid
    paths = builder.build(tmp_path, 6, straggler=4, hosts=3)
    for p, host in zip(paths, ["node1", "node0", "node1", "node0", "node10", "node2"]):
        _edit(p, host=host, builder=builder)
    r = _merge(paths)
    g = time_grid(r, columns=100)
    assert [x.split(":")[0] for x in g.gpus] == ["rank1", "rank3", "rank0", "rank2", "rank5", "rank4"]
    assert g.hosts == [("node0", 0, 2), ("node1", 2, 4), ("node2", 4, 5), ("node10", 5, 6)]
    assert (~np.isnan(g.busy)).sum(axis=1).argmax() == 5  # rows keep their GPU's numbers: rank4's last longest
    fig = _heatmap_figure(r, tmp_path / "h.png", monkeypatch)
    for ax in fig.axes[:2]:  # the two panels (then their colour bars)
        assert _separators(ax) == [2.0, 4.0, 5.0]
        assert [t.get_text() for t in ax.texts] == ["node0", "node1", "node2", "node10"]
    plt.close(fig)
    one = _merge(builder.build(tmp_path / "one", 3))
    assert time_grid(one).hosts == []
    fig = _heatmap_figure(one, tmp_path / "one.png", monkeypatch)
    assert all(_separators(ax) == [] and not ax.texts for ax in fig.axes)
    plt.close(fig)
