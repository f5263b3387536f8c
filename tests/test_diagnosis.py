"""The findings contract and the rules, on real traces: the H200 stages (their story: each stage's top finding names
the fix the next stage applies) and public exports of programs nobody here wrote."""
import re
from dataclasses import replace

import pandas as pd
import pytest

from nsys_transfer.analysis import Trace
from nsys_transfer.analysis.rules.base import HIGH_SHARE, MEDIUM_SHARE
from nsys_transfer.analysis.summary import Options, analyze_sections

TRANSFER_RULES = ("pageable-memcpy", "sync-memcpy", "no-copy-compute-overlap", "memory-mapping-in-gaps")

FIELDS = {"rule", "severity", "impact_ns", "impact_fraction", "subject", "evidence", "suggestion", "line", "prediction"}
NEXT_FIX = [("baseline", "stage multiproc"), ("multiproc", "stage bufpool"), ("bufpool", "stage async"),
            ("async", "stage streams"), ("streams", "stage pinned")]
STAGE_WORDS = ("stage ", "bufpool", "multiproc", "prefetcher", "(see stage")


@pytest.fixture(scope="module")
def publics(public_traces, summary_of):
    return {p.name.split("_")[0]: summary_of(p) for p in public_traces}


def top_cost(findings):
    return next(f for f in findings if f["severity"] != "info")


def check_contract(findings):
    """Every field; severity from the impact; after the capture notes the high and medium findings by what their fixes
    buy (rules/prediction.py; tests/test_predictions.py holds that order), then the low ones by impact."""
    costed = [f for f in findings if f["severity"] != "info" and f["rule"] != "incomplete-trace"]
    for f in findings:
        assert set(f) == FIELDS, f
        assert f["impact_ns"] >= 0 and 0 <= f["impact_fraction"] <= 1, f
    for f in costed:
        want = "high" if f["impact_fraction"] >= HIGH_SHARE else "medium" if f["impact_fraction"] >= MEDIUM_SHARE else "low"
        assert f["severity"] == want, f
    severities = [f["severity"] != "low" for f in costed]
    assert severities == sorted(severities, reverse=True)  # the low ones after
    impacts = [f["impact_ns"] for f in costed if f["severity"] == "low"]
    assert impacts == sorted(impacts, reverse=True)


@pytest.mark.parametrize("stage,fix", NEXT_FIX)
def test_top_finding_names_the_next_stage(analyzed, stage, fix):
    d = analyzed[stage]["diagnosis"]
    check_contract(d)
    assert fix in top_cost(d)["suggestion"], [(f["rule"], f["suggestion"]) for f in d]


def test_naive_input_names_the_input_fix_among_its_high_findings(analyzed):
    d = analyzed["naive-input"]["diagnosis"]
    assert any("stage baseline" in f["suggestion"] for f in d if f["severity"] == "high")


def test_specific_rules_fire_where_the_article_says(analyzed):
    rules = lambda s: {f["rule"] for f in analyzed[s]["diagnosis"]}  # noqa: E731
    top = top_cost(analyzed["baseline"]["diagnosis"])
    assert top["rule"] == "gpu-idle-cpu-bound" and top["subject"] == "process output"
    assert "memory-mapping-in-gaps" in rules("multiproc")
    assert "no-copy-compute-overlap" in rules("async")
    pageable = [f for f in analyzed["streams"]["diagnosis"] if f["rule"] == "pageable-memcpy"]
    assert pageable and "share_memory_()" in pageable[0]["suggestion"]


def test_final_stage_has_no_transfer_findings(analyzed):
    for stage in ("pinned", "pinned-long", "ceiling"):
        d = analyzed[stage]["diagnosis"]
        check_contract(d)
        assert not {f["rule"] for f in d if f["severity"] != "low"} & set(TRANSFER_RULES)
        # what limits them is their GPU work (the pinned stage runs at 96% of the ceiling): gpu-bound, nothing else
        assert d[0]["rule"] == "gpu-bound" and d[0]["severity"] == "high", d[0]
        assert all(f["severity"] in ("low", "info") for f in d[1:]), d


def test_short_capture_only_on_short_captures(analyzed):
    assert "short-capture" in {f["rule"] for f in analyzed["pinned"]["diagnosis"]}
    assert "short-capture" not in {f["rule"] for f in analyzed["pinned-long"]["diagnosis"]}


def test_public_programs_get_no_toolkit_advice_and_a_valid_contract(publics):
    for name, s in publics.items():
        check_contract(s["diagnosis"])
        assert not s["trace"]["program"]["toolkit"], name
        for f in s["diagnosis"]:
            assert not any(w in f["suggestion"] for w in STAGE_WORDS), (name, f)


def test_nvtx_missing_is_a_capture_note(publics):
    notes = [f for f in publics["ncar"]["diagnosis"] if f["rule"] == "nvtx-missing"]  # OpenACC, no NVTX
    assert notes and notes[0]["severity"] == "info" and notes[0]["impact_ns"] == 0
    assert "nvtx-missing" not in {f["rule"] for f in publics["nvtxex"]["diagnosis"]}


def test_host_sync_on_programs_that_synchronise_every_kernel(publics, analyzed):
    """OpenACC without async clauses (cuStreamSynchronize after every kernel) and CloverLeaf's cudaDeviceSynchronize
    after each kernel: the GPU drains and waits for the host each time. Where the host then works for longer than a
    sync's turnaround (miniWeather: 150 ms in gaps of 1 ms or more right after a wait, its CPU samples in the host
    code and the runtime's library look-ups), the GPU waits for that work: the sync only serialises it, so the
    finding is the CPU work, with the async clauses as its fix; the turnarounds themselves stay host-sync."""
    acc = top_cost(publics["ncar"]["diagnosis"])
    assert acc["rule"] == "gpu-idle-cpu-bound" and acc["severity"] == "high"
    assert "right after a synchronising call returned" in acc["evidence"] and "CPU samples" in acc["evidence"]
    assert publics["ncar"]["trace"]["program"]["framework"] == "openacc" and "async(" in acc["suggestion"]
    sync = [f for f in publics["ncar"]["diagnosis"] if f["rule"] == "host-sync"]
    assert sync and sync[0]["subject"] == "cuStreamSynchronize" and sync[0]["impact_ns"] < acc["impact_ns"]
    # CloverLeaf's kernels fill 87% of the steady state: gpu-bound is its verdict; its 1,044 syncs cost a turnaround
    # each (host-sync), and the host's 0.1-1 ms between its 5 us kernels is launch time
    clover = [f for f in publics["pipit"]["diagnosis"] if f["severity"] != "info"]
    assert clover[0]["rule"] == "gpu-bound" and clover[0]["severity"] == "high"
    assert {f["rule"] for f in clover[1:3]} == {"host-sync", "launch-bound"}
    assert next(f for f in clover if f["rule"] == "host-sync")["subject"] == "cudaDeviceSynchronize"
    for stage in ("pinned-long", "ceiling"):
        assert "host-sync" not in {f["rule"] for f in analyzed[stage]["diagnosis"]}


def test_one_finding_per_cause_in_nested_ranges(publics):
    """nsightful's power iteration: 'Loop' > 'Step N to M' > 'IO N'. The GPU idles in 'IO N' (the deepest range), which
    is reported once for all its numbered instances; the enclosing ranges are not reported again."""
    d = publics["nsightful"]["diagnosis"]
    idle = [f for f in d if f["rule"] == "gpu-idle-cpu-bound"]
    assert idle[0]["subject"] == "IO N" and idle[0]["severity"] == "high"
    assert not any(f["subject"] in ("Loop",) or (f["subject"] or "").startswith("Step") for f in d)


def test_link_is_the_traces_own(publics, analyzed):
    links = {n: s["trace"]["link"] for n, s in publics.items()}
    assert links["pipit"]["gbps"] == pytest.approx(26.8) and links["pipit"]["pcie_gen"] == 4      # A100 (GA100)
    assert links["nvtxex"]["gbps"] == pytest.approx(13.4) and "Quadro RTX 8000" in links["nvtxex"]["source"]
    assert links["ncar"]["pcie_gen"] == 3 and links["nsightful"]["pcie_gen"] == 3                  # GP100, TU104
    h200 = analyzed["pinned-long"]["trace"]["link"]  # gen5, raised to the fastest pinned copy seen
    assert h200["pcie_gen"] == 5 and 54 < h200["gbps"] < 57 and "fastest pinned copy" in h200["source"]
    for s in publics.values():
        for f in s["diagnosis"]:
            assert "55 GB/s" not in f["evidence"], f


def test_link_given_by_the_user(h200):
    with Trace.open(h200["streams"]) as t:
        s = analyze_sections(t, Options(link_gbps=25.0)).summary
    link = s["trace"]["link"]
    assert (link["gbps"], link["pcie_gen"]) == (25.0, None) and link["source"].startswith("--link-gbps")
    # its pinned input copies ran at 55 GB/s: the given figure is kept, and the trace's contradiction said beside it
    assert re.search(r"fastest pinned copy ran at 5\d\.\d GB/s, faster$", link["source"]), link["source"]
    assert any("of the 25 GB/s link" in f["evidence"] for f in s["diagnosis"])


def test_steps_detected_in_anyones_program(publics, analyzed):
    assert publics["nsightful"]["steps"]["regex"] == r"^Step \d+ to \d+$" and publics["nsightful"]["steps"]["count"] == 44
    assert publics["nsightful"]["steps"]["source"] == "detected"
    assert publics["nvtxex"]["steps"]["count"] == 0 and publics["nvtxex"]["steps"]["source"] == "none found"
    st = analyzed["baseline"]["steps"]
    assert st["regex"] == r"^Batch \d+$" and st["count"] == 3 and st["source"] == "detected"


def test_mpi_waits_are_communication_not_cpu_work(publics):
    """4 ranks of OpenACC + MPI (nsys --trace=mpi): the GPUs idle while each rank sits in MPI_Recv / MPI_Send. That
    is a wait on its peers (comm-wait, overlap advice), not CPU work and not the sync before it."""
    d = publics["lucasgasparino"]["diagnosis"]
    check_contract(d)
    top = top_cost(d)
    assert top["rule"] == "comm-wait" and top["subject"] == "MPI_Recv" and top["severity"] == "high"
    assert "MPI_Isend" in top["suggestion"] and "MPI_Send" in top["evidence"]
    # between the waits the host works right after a sync returns: CPU work the sync serialises, never above MPI's
    cpu = [f for f in d if f["rule"] == "gpu-idle-cpu-bound"]
    assert all(f["impact_ns"] < top["impact_ns"] for f in cpu)


def test_gpu_bound_is_a_verdict_with_the_kernels_named(analyzed):
    """The pinned stage's kernels fill 97% of its window: the verdict is its GPU work, named by its top kernels as
    their demangled names say them (a CUTLASS TF32 convolution, not nsys's short `Kernel`)."""
    s = analyzed["pinned-long"]
    f = s["diagnosis"][0]
    assert f["rule"] == "gpu-bound" and f["impact_ns"] == s["gpu"]["compute_ns"]
    top = s["kernels"]["top"][0]
    assert top["name"] == "Kernel" and "cutlass" in top["shown_name"] and (top["precision"], top["library"]) == \
        ("TF32", "CUTLASS")
    assert "TF32, CUTLASS" in f["evidence"] and "autocast" in f["suggestion"]
    from nsys_transfer.analysis.document import Document
    from nsys_transfer.analysis.render.text import text_report
    last = last_verdict(text_report(Document.from_json(s)))
    assert last.startswith("verdict: gpu-bound") and "97% of the GPUs' time" in last


def last_verdict(text: str) -> str:
    """The verdict that ends a report: its last line starting with 'verdict' and the indented lines it wraps onto."""
    return text[text.rindex("\nverdict") + 1:]


def test_every_trace_ends_in_a_verdict(analyzed, publics):
    from nsys_transfer.analysis.document import Document
    from nsys_transfer.analysis.render.formats import WIDTH
    from nsys_transfer.analysis.render.text import text_report
    for name, s in [*analyzed.items(), *publics.items()]:
        text = text_report(Document.from_json(s))
        verdict = last_verdict(text)
        steady = s["window"]["source"].startswith("steady state")  # the verdict says which window it is about
        assert verdict.startswith("verdict (steady state): " if steady else "verdict: "), name
        head = text.split("\n", 1)[1]
        assert head.startswith(verdict + "\n") or head.split("\n", 1)[1].startswith(verdict + "\n"), name  # first, last
        # a whole sentence that ends with its action, folded between words, never cut: no '...', no line over WIDTH
        costed = [f for f in s["diagnosis"] if f["severity"] != "info"]
        action = " ".join(costed[0]["suggestion"].split("; ")[0].split()) if costed else "leave its transfers"
        assert verdict.endswith(".") and action in " ".join(verdict.split()), (name, verdict)
        assert all(len(x) <= WIDTH or " " not in x.strip() for x in verdict.splitlines()), (name, verdict)
        assert "diagnosis (by what each costs):\n  (" not in text, name  # no empty section header


@pytest.mark.parametrize("workers_ms, severity, subject", [((8, 1000.0), "high", "OutputPipeline workers"),
                                                           ((8, 150.0), "low", "OutputPipeline drain")])
def test_output_bound_weighs_what_the_workers_can_take(workers_ms, severity, subject):
    """seg_logits_fixed on the H200 (8 batches in its steady window, 20.1 batches/s of GPU time, a 519 ms drain).
    The capture predates the pipeline's pace range, so the row the library now writes at its drain is added to its
    NVTX summary: 8 workers that can take 8 batches/s are the pace (output-bound, both rates named); 8 that can take
    53/s keep up, and the drain is the last outputs' tail, a low finding."""
    from nsys_transfer.analysis.rules.base import Context
    from nsys_transfer.analysis.rules.facts import Facts
    from nsys_transfer.analysis.rules.output import OutputBound
    from nsys_transfer.nsys_core.contracts import PIPELINE_PACE
    from conftest import ROOT
    with Trace.open(str(ROOT / "tests/data/programs/seg_logits_fixed_nsys2024.sqlite.xz")) as t:
        a = analyze_sections(t, Options())
    ns = a.tables["nvtx_summary"]
    row = ns.iloc[:1].assign(name=PIPELINE_PACE.format(workers=workers_ms[0], ms_per_batch=workers_ms[1]),
                             count=1, total_ns=0)
    tables = {**a.tables, "nvtx_summary": pd.concat([ns, row], ignore_index=True)}
    (f,) = OutputBound().check(Context(Facts.of(a.doc, tables)))
    assert (f.severity, f.subject) == (severity, subject), f
    assert "20.1 batches/s of GPU time" in f.evidence
    assert f"{workers_ms[0]} workers at {workers_ms[1]:,.0f} ms of work a batch can take" in f.evidence


def test_the_pipelines_back_pressure_is_its_pace_however_many_ranges_the_loop_names():
    """issue 57, item 11: a loop blocked in submit() (in `copy to CPU`, every output buffer busy) waits on the
    OutputPipeline's workers: output-bound, the pipeline's pace, never input-bound's "raise num_workers". A loop that
    names each step (`step 0` .. `step 39`, as the README shows) has more range names than the JSON's top 20, and the
    pipeline's small drain range falls out of them. seg_logits_fixed (H200, real) with 40 such step ranges added to its
    NVTX summary, the JSON's list cut to the top 20 as the section cuts it, and its drain's waits moved into `copy to
    CPU` (as back-pressure leaves them: no capture without a GPU can record it)."""
    from nsys_transfer.analysis.rules.base import Context
    from nsys_transfer.analysis.rules.diagnosis import diagnose
    from nsys_transfer.analysis.common.schema import rows_as
    from nsys_transfer.analysis.rules.facts import Facts
    from nsys_transfer.analysis.sections.window import NvtxRange
    from nsys_transfer.nsys_core.contracts import COPY_TO_CPU, PIPELINE_DRAIN
    from conftest import ROOT
    with Trace.open(str(ROOT / "tests/data/programs/seg_logits_fixed_nsys2024.sqlite.xz")) as t:
        a = analyze_sections(t, Options())
    ns = a.tables["nvtx_summary"]
    steps = pd.concat([ns.iloc[:1].assign(name=f"step {i}", count=1, total_ns=10**9 + i) for i in range(40)])
    ns = pd.concat([ns, steps], ignore_index=True).sort_values("total_ns", ascending=False, ignore_index=True)
    shown = rows_as(NvtxRange, ns.head(20))
    assert PIPELINE_DRAIN not in {r.name for r in shown}
    idle = a.tables["idle"]
    waits = (idle["cause"] == "input") & (idle["subject"] == PIPELINE_DRAIN)
    assert waits.any()
    idle = idle.assign(subject=idle["subject"].where(~waits, COPY_TO_CPU))
    doc = replace(a.doc, nvtx=replace(a.doc.nvtx, ranges=shown))
    found, _ = diagnose(Context(Facts.of(doc, {**a.tables, "nvtx_summary": ns, "idle": idle})))
    rules = [f.rule for f in found]
    assert rules[0] == "output-bound" and "input-bound" not in rules, rules
    assert "for a free output buffer in submit()" in found[0].evidence
