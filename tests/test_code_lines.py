"""The line in the program behind each finding, on real GPU captures of programs written by someone who had not read
the rules (tests/programs/strangers, their answer key KEY.md written before any analysis was read), captured on an
H100 (feature_export and threaded_serving: an H200) with `nsys-transfer run`'s defaults: the trace, its Python stacks
(BASE.pystacks.gz) and its run record. feature_export's and threaded_serving's exports are stored without their
CUDA_CALLCHAINS and OSRT_CALLCHAINS rows (nsys's own Python backtraces of each call, 95% of the file, which no part of
the analysis reads: its answers are the same with and without them); every other row is as exported."""
import golden_answers as answers
import pytest

from conftest import ROOT, run_cli

STRANGERS = ROOT / "tests" / "data" / "strangers"


@pytest.fixture(scope="module")
def summaries():
    """Each trace's analysis as stored (tests/test_same_answers.py holds the stored answers to analyze-trace's JSON of
    today, so reading them here tests the same figures without analysing the five traces again)."""
    stored = answers.load()
    return {name: stored[f"tests/data/strangers/{name}_nsys2024.sqlite.xz"]
            for name in ("audio_mel", "offload_layers", "layer_timing", "feature_export", "threaded_serving")}


def costed(summary):
    return [f for f in summary["diagnosis"] if f["severity"] != "info"]


def test_input_made_on_the_launching_thread_is_named_at_its_line_with_input_advice(summaries):
    """KEY: audio_mel.py:105 `feats = np.stack([log_mel(bank[k]) ...])`, numpy STFTs per clip, input prep. The gaps
    the STFT fills end in the batch's HtoD copy, so the numpy work is input, not output handling."""
    top = costed(summaries["audio_mel"])[0]
    line = top["line"]
    assert (line["file"].endswith("audio_mel.py"), line["line"], line["role"]) == (True, 46, "input")
    assert "np.fft.rfft" in line["code"] and line["path"][0].startswith("audio_mel.py:105  feats = np.stack")
    assert top["subject"] == "audio_mel.py:46"  # not the CPU samples' innermost numpy function
    assert "num_workers" in top["suggestion"] and "outputs" not in top["suggestion"]


def test_weights_moved_both_ways_every_step_get_weights_advice_not_an_output_pipeline(summaries):
    """KEY: offload_layers.py:33/35 `blk.to(device)` ... `blk.to("cpu")` every step: the same weights both ways.
    The pageable copies and the idle time at those lines are one job: one finding, carrying the costs."""
    found = costed(summaries["offload_layers"])
    top = found[0]
    assert top["line"]["role"] == "weights" and top["line"]["line"] in (33, 35)
    assert "keep the model on the GPU" in top["suggestion"] and "OutputPipeline" not in top["suggestion"]
    assert [f["line"]["role"] for f in found if f["line"]].count("weights") == 1
    assert "for the same weights work" in top["evidence"]


def test_a_table_grown_row_by_row_is_a_growing_accumulation_not_a_per_element_read(summaries):
    """KEY: feature_export.py:79 `summary.loc[len(summary)] = [...]` enlarges a DataFrame one row at a time (and :77
    concatenates the features each batch): the whole table is copied each time. The line also holds `int(f[j].argmax())`,
    a read of a host array, not of the GPU: its role is the accumulation, and its cost is said to grow."""
    top = costed(summaries["feature_export"])[0]
    assert top["line"]["line"] == 79 and top["line"]["role"] == "accumulation"
    assert "copies the whole accumulated array each time it grows" in top["suggestion"]
    assert "one element at a time" not in top["suggestion"]
    start, end = top["line"]["growth_ms"]
    assert end > 3 * start and "grows through the run" in top["evidence"]


def test_a_model_run_in_turn_by_request_threads_is_advised_to_batch_the_requests(summaries):
    """KEY: threaded_serving.py:56-59 `with self.lock: logits = self.model(x, mask)`, batch size 1, on 8 request
    threads. The GPU is idle 94% of the time in gaps under 1 ms between tiny kernels: launch-bound. While one thread
    holds the lock and launches, the other seven wait in sem_wait; those waits are not the GPU's (it was input-bound,
    93%, with DataLoader advice, before the waits of several launching threads counted only where all of them wait)."""
    found = costed(summaries["threaded_serving"])
    top = found[0]
    assert top["rule"] == "launch-bound" and top["impact_fraction"] > 0.7
    assert top["line"]["threads"] == 8 and top["line"]["role"] == "model"
    assert "batch the requests" in top["suggestion"] and "threaded_serving.py:58" in top["suggestion"]
    assert "CUDA graph" not in top["suggestion"] and "DataLoader" not in top["suggestion"]
    assert all(f["rule"] != "input-bound" or f["impact_fraction"] < 0.05 for f in found)


def test_a_sync_to_time_each_layer_is_host_sync_with_events_advice_not_cuda_graphs(summaries):
    """KEY: layer_timing.py:47-50 `sync(); s = time.time(); out = fn(*a); sync()` around each piece of the forward.
    The short gaps follow those syncs: host-sync, named at torch.cuda.synchronize() in sync(), reached from timed()."""
    found = costed(summaries["layer_timing"])
    top = next(f for f in found if f["rule"] == "host-sync")
    assert top["severity"] == "high" and top["impact_fraction"] == max(f["impact_fraction"] for f in found)
    if found[0] is not top:  # ranked by what the fixes buy: the ranking says why the other leads (issue 56)
        assert "host-sync (layer_timing.py:43)" in summaries["layer_timing"]["predicted"]["rank_note"]
    assert top["line"]["role"] == "timing sync"
    assert top["line"]["code"] == "torch.cuda.synchronize()" and "sync (layer_timing.py:43)" in top["line"]["path"]
    assert "torch.cuda.Event" in top["suggestion"] and "CUDA graph" not in top["suggestion"]
    assert not [f for f in costed(summaries["layer_timing"]) if f["rule"] == "launch-bound"]


def test_the_text_shows_each_findings_line_and_path():
    out = run_cli("-m", "nsys_transfer.analysis", str(STRANGERS / "audio_mel_nsys2024.sqlite.xz")).stdout
    assert "      at audio_mel.py:46  spec = np.abs(np.fft.rfft(frames * WINDOW, axis=1)) ** 2" in out
    assert "via audio_mel.py:105  feats = np.stack([log_mel(bank[k]) for k in idx])" in out


def test_a_trace_without_stacks_names_no_line_and_says_how_to_get_them(h200, summary_of):
    s = summary_of(h200["baseline"])
    assert s["code"]["missing"].startswith("no Python stacks beside this trace")
    assert all(f["line"] is None for f in s["diagnosis"])


def test_a_cost_is_called_growing_only_where_it_rises_along_a_line():
    """The growth test itself (code_lines._growth), on the ms a step a line costs: a copy of an array that grows by
    one batch each step rises linearly; a constant cost with noise, or one outlier, does not."""
    import numpy as np
    from nsys_transfer.analysis.sections.code_lines import _growth
    steps = np.arange(30, dtype=float)
    rising = 2.0 + 1.5 * steps + np.random.default_rng(0).normal(0, 2, 30)
    start, end = _growth(rising)
    assert start == pytest.approx(2.0, abs=2.5) and end == pytest.approx(2.0 + 1.5 * 29, rel=0.1)
    assert _growth(20 + np.random.default_rng(1).normal(0, 3, 30)) is None
    assert _growth(np.r_[np.full(29, 10.0), 200.0]) is None  # one slow step is an outlier, not growth
    assert _growth(rising[:5]) is None  # too few steps to tell


def test_the_report_names_each_findings_line(tmp_path):
    runs = tmp_path / "runs" / "audio"
    runs.mkdir(parents=True)
    for f in STRANGERS.glob("audio_mel_nsys2024.*"):
        (runs / f.name).write_bytes(f.read_bytes())
    r = run_cli("-m", "nsys_transfer.reports", str(tmp_path / "runs"), "--out", str(tmp_path / "out"), timeout=600)
    assert r.returncode == 0, r.stderr[-1000:]
    md = (tmp_path / "out" / "report.md").read_text()
    assert "*At:* `audio_mel.py:46  spec = np.abs(np.fft.rfft(frames * WINDOW, axis=1)) ** 2" in md
    assert "<i>At:</i> <code>audio_mel.py:46" in (tmp_path / "out" / "report.html").read_text()
