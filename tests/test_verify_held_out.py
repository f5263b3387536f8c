"""verify against the programs' own clocks (issue 48, item 4): three pairs of programs nobody on the project wrote, the
fix too (tests/programs/strangers, KEY.md), each side timed unprofiled twice or more, alternately, then captured as the
README asks for verify (`--sample none --python-backtrace none`), on 2026-12-05 (benchmarks/strangers.sh pair): two on
an H200, seg_numpy_post's on an H100 (with longer runs of both sides, on the same machine: their "gpu" field).
tests/data/held_out/RESULTS.txt holds each unprofiled run's own RESULT line, and each capture's console the profiled
run's: wall_s (the whole loop, warm-up included, to the last output), steady_batches_per_s (after its warm-up, to
the last output) and batches (the steady state's count: a longer run has more)."""
import json
import statistics

import pytest

from conftest import ROOT, run_cli

HELD_OUT = ROOT / "tests" / "data" / "held_out"
CLOSE = 0.15  # the bound: verify within 15% of the program's own clock


def clocks(kind: str, batches: int | None = None) -> dict[str, dict[str, float]]:
    """{program: {"wall_s", "steady"}}: the median of the unprofiled runs in RESULTS.txt ("plain"; of that many steady
    batches where given, else of the runs as long as the capture), or the profiled program's own clock, its RESULT
    line in the capture's console ("capture")."""
    runs: dict[str, list[dict]] = {}
    if kind == "plain":
        captured = {p: c["batches"] for p, c in _captured().items()}
        for line in (HELD_OUT / "RESULTS.txt").read_text().splitlines():
            name, _, result = line.split(" ", 2)
            run = json.loads(result)
            if run["batches"] == (batches or captured.get(name)):
                runs.setdefault(name, []).append(run)
    else:
        runs = {p: [c] for p, c in _captured().items()}
    return {p: {"wall_s": statistics.median(r["wall_s"] for r in rs),
                "steady": statistics.median(r["steady_batches_per_s"] for r in rs)} for p, rs in runs.items()}


def _captured() -> dict[str, dict]:
    """Each capture's own RESULT line (its console), by program."""
    out = {}
    for console in HELD_OUT.glob("*_nsys2024.console"):
        result = [x for x in console.read_text().splitlines() if x.startswith("RESULT ")][-1]
        out[console.name.removesuffix("_nsys2024.console")] = json.loads(result.removeprefix("RESULT "))
    return out


def verified(tmp_path, before: str, after: str) -> dict:
    out = tmp_path / "v.json"
    r = run_cli("-m", "nsys_transfer", "verify", str(HELD_OUT / f"{before}_nsys2024.sqlite.xz"),
                str(HELD_OUT / f"{after}_nsys2024.sqlite.xz"), "--json", str(out))
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    # a fix under a new name (offload_layers_fixed.py, seg_numpy_post_mpfix.py) is one program: no warning of two
    assert not [w for w in doc["warnings"] if "different programs" in w], doc["warnings"]
    return doc


def ratios(c: dict, before: str, after: str) -> tuple[float, float]:
    """The program's own speed-ups: the whole loop's (wall) and the steady state's."""
    return c[before]["wall_s"] / c[after]["wall_s"], c[after]["steady"] / c[before]["steady"]


def speedups(doc: dict) -> tuple[float, float]:
    """verify's speed-ups: the whole loop's (the headline) and the steady state's ('in a longer run')."""
    speed = next(m for m in doc["metrics"] if m["key"] == "throughput")
    return doc["loop"]["after"] / doc["loop"]["before"], speed["after"] / speed["before"]


def test_weights_kept_on_the_gpu_speed_up_as_the_program_says(tmp_path):
    """offload_layers moves 1 GB of weights to the GPU and back each step; its fix keeps them there. Neither side has
    steps, and the original has no warm-up to leave out, so the steady states compare by kernels a second: the two
    run the same kernels in the same shares (before, the speed was 'unknown')."""
    doc = verified(tmp_path, "offload_layers", "offload_layers_fixed")
    whole, steady = speedups(doc)
    wall, own_steady = ratios(clocks("plain"), "offload_layers", "offload_layers_fixed")
    assert doc["metrics"][0]["source"].startswith("the kernels each GPU ran a second")
    assert whole == pytest.approx(wall, rel=CLOSE) and steady == pytest.approx(own_steady, rel=CLOSE)
    assert doc["verdict"]["line"].startswith(f"{whole:.2f}x faster over the whole loop")


def test_the_profilers_cost_is_said_where_one_side_makes_far_more_calls(tmp_path):
    """per_sample_metrics reads four scalars per sample (230,000 traced CUDA calls), its fix one copy per batch
    (16,000): nsys slows the original more, so the steady state's 2.8x overstates the program's own 2.3x. verify says
    by how much, and the figure without that cost is within 15% of the clock; the whole loop is within 15% as it is."""
    doc = verified(tmp_path, "per_sample_metrics", "per_sample_metrics_fixed")
    whole, steady = speedups(doc)
    wall, own_steady = ratios(clocks("plain"), "per_sample_metrics", "per_sample_metrics_fixed")
    cost = doc["loop"]["profiler_cost"]
    assert whole == pytest.approx(wall, rel=CLOSE)
    assert steady > own_steady * (1 + CLOSE)  # what the trace alone says is off...
    assert cost["said"] and "larger than unprofiled" in cost["said"] and cost["bias"] > 0.10  # ...and verify says why
    assert steady / (1 + cost["bias"]) == pytest.approx(own_steady, rel=CLOSE)


def test_a_torch_multiprocessing_pool_whose_workers_start_after_the_loop(tmp_path):
    """seg_numpy_post_mpfix hands 176 MB of logits a batch to six spawned worker processes through a
    torch.multiprocessing queue (the article's pattern, no marks of this library). Spawned, each worker imports torch
    and torchvision again: about 8 s on this machine, longer than the 10 batches' loop, so the queue fills and the
    workers do all of it at the end. That wait is set-up, not a backlog: the steady state leaves it out and takes the
    workers' pace once started, or the loop's where that is slower. verify's 'in a longer run' is then the speed-up
    a run of 120 batches measured unprofiled (steady state after 40), within 15%, where counting the wait as a backlog
    said the fix was slower. The whole loop is the profiled program's own clock; unprofiled, on that machine, the short run
    was less slower (the workers started faster: 7.8-8.2 s of wall against 10.5-10.7 profiled; on a second H100 the
    plain runs took 9.4-10.7 s), a cost the trace cannot measure, which verify says."""
    doc = verified(tmp_path, "seg_numpy_post", "seg_numpy_post_mpfix")
    whole, steady = speedups(doc)
    wall, _ = ratios(clocks("capture"), "seg_numpy_post", "seg_numpy_post_mpfix")
    short_wall, _ = ratios(clocks("plain"), "seg_numpy_post", "seg_numpy_post_mpfix")
    _, long_steady = ratios(clocks("plain", batches=80), "seg_numpy_post", "seg_numpy_post_mpfix")
    assert whole == pytest.approx(wall, rel=CLOSE) and steady == pytest.approx(long_steady, rel=CLOSE)
    assert whole < short_wall < 1 < long_steady  # slower in a short run, less so unprofiled; faster in a long one
    assert doc["verdict"]["line"].startswith(f"{100 * (1 - whole):.0f}% slower over the whole loop (in a longer run: "
                                             f"up to {steady:.2f}x faster)")
    after = doc["loop"]["sides"]["after"]
    workers = after["workers_start"]
    assert workers["processes"] == 6 and workers["working"] >= 5  # one may still be importing when the work runs out
    assert doc["loop"]["sides"]["before"]["workers_start"] is None
    assert workers["first_ready_ns"] > after["gpu_end_ns"] and 0 < after["workers_wait_ms"] < after["drain_ms"]
    source = doc["metrics"][0]["source"]
    assert "output worker processes were still starting (importing)" in source and "a backlog" not in source
    assert doc["metrics"][0]["bounded"] == ["after"] and "reaches this pace at most" in source
    assert "waiting for its 6 output worker processes to finish starting" in doc["loop"]["why"]
    assert "that the profiler can lengthen" in doc["loop"]["why"]
    ends = {label: side["end_from"] for label, side in doc["loop"]["sides"].items()}
    assert ends == {"before": "the launching thread's last Python stack in the program's own code",
                    "after": "the launching thread's last Python stack in the program's own code"}
