"""compare-traces on the bundled real H200 traces (the README's main job on a machine without a GPU)."""
import json

from conftest import H200, ROOT, run_cli, sha256

CHARTS = ["dtoh.png", "gaps.png", "overlap.png", "throughput.png", "timelines.png", "utilization.png"]


def test_bundled_report(tmp_path):
    before = {p.name: sha256(p) for p in H200.iterdir()}
    r = run_cli("-m", "nsys_transfer.reports", "--out", str(tmp_path / "rep"), timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    out = tmp_path / "rep"
    for c in CHARTS:
        data = (out / c).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000, c
    md = (out / "report.md").read_text()
    for stage in ["naive-input", "baseline", "multiproc", "bufpool", "async", "streams", "pinned", "ceiling"]:
        assert f"| {stage} |" in md and f"### {stage}" in md
    assert "stage multiproc" in md and "stage pinned" in md  # the diagnosis is in the report
    html = (out / "report.html").read_text()
    assert all(f"src='{c}'" in html for c in CHARTS)
    rows = {r["stage"]: r for r in json.loads((out / "results.json").read_text())}
    bench = {r.get("label") or r["stage"]: r for r in json.loads((H200 / "bench.json").read_text())["records"]}
    # throughput comes from the unprofiled bench, the rest from the trace
    assert rows["pinned"]["steps_per_s"] == bench["pinned"]["throughput"]["steps_per_s"]
    assert rows["pinned"]["of_ceiling"] >= 0.9 and rows["pinned"]["dtoh_memory"] == "Pinned"
    assert rows["streams"]["dtoh_memory"] == "Pageable" and rows["baseline"]["dtoh_gbps"] < 4
    assert {p.name: sha256(p) for p in H200.iterdir()} == before
    # several GPUs: the bundled 2 x H200 runs, each GPU side by side and the limit named
    assert "## Several GPUs" in md and "| **1.00** |" in md
    assert "| **0.71** |" in md and "host CPU cores: 7.8 of 8 busy" in md  # the 8-core run: the shared cores saturate
    assert "| pinned-x2 | GPU 1 |" in md and "[gpu-compute]" in md and "[rank-pipeline]" in md
    assert (out / "gpus_pinned-x2.png").read_bytes()[:4] == b"\x89PNG" and "src='gpus_streams-x2.png'" in html
    gpus = json.loads((out / "gpus.json").read_text())
    assert [round(x["efficiency"], 2) for x in gpus["scaling"]] == [1.0, 0.71, 1.03, 0.83]
    assert set(gpus["runs"]) == {"pinned-x2", "streams-x2", "pinned-x2rank", "pinned-cpu8-x2gpu"}
    assert gpus["runs"]["pinned-cpu8-x2gpu"]["limit"]["rule"] == "host-cpu"  # its workload record lies beside it
    assert "| pinned-x2rank | rank1:GPU 1 |" in md  # per-rank traces of one run, grouped


def test_report_from_run_folder_and_bad_paths(tmp_path, h200):
    runs = tmp_path / "runs"
    for stage in ("baseline", "pinned"):
        (runs / stage).mkdir(parents=True)
        (runs / stage / f"{stage}.sqlite.xz").write_bytes(h200[stage].read_bytes())
    (runs / "pinned" / "pinned-2.sqlite.xz").write_bytes(h200["pinned-long"].read_bytes())  # newer numbered run wins
    r = run_cli("-m", "nsys_transfer.reports", str(runs), "--out", str(tmp_path / "o"))
    assert r.returncode == 0, r.stderr[-2000:]
    rows = {r["stage"]: r for r in json.loads((tmp_path / "o" / "results.json").read_text())}
    assert set(rows) == {"baseline", "pinned"} and rows["pinned"]["captured_steps"] == 12
    assert rows["pinned"]["throughput_source"] == "trace"
    # a multi-GPU run from `make profile GPUS=2` gets the GPU section, not a stage row
    (runs / "pinned-x2gpu").mkdir()
    (runs / "pinned-x2gpu" / "pinned-x2gpu.sqlite.xz").write_bytes((ROOT / "reports/data/h200x2/pinned-x2.sqlite.xz").read_bytes())
    r = run_cli("-m", "nsys_transfer.reports", str(runs), "--out", str(tmp_path / "o2"))
    assert r.returncode == 0, r.stderr[-2000:]
    assert {r["stage"] for r in json.loads((tmp_path / "o2" / "results.json").read_text())} == {"baseline", "pinned"}
    md = (tmp_path / "o2" / "report.md").read_text()
    assert "| pinned-x2gpu | GPU 0 |" in md and "Link probe" not in md  # no bundled figures mixed into a user's runs
    r = run_cli("-m", "nsys_transfer.reports", str(tmp_path / "nothing-here"))
    assert r.returncode == 2 and "no such file" in r.stderr and "Traceback" not in r.stderr
    listed = tmp_path / "bench-list.json"  # a bare list of bench records is read as well as {"records": [...]}
    listed.write_text(json.dumps(json.loads((H200 / "bench.json").read_text())["records"]))
    r = run_cli("-m", "nsys_transfer.reports", str(runs), "--bench", str(listed), "--out", str(tmp_path / "o3"))
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads((tmp_path / "o3" / "results.json").read_text())[0]["throughput_source"] == "bench (unprofiled)"
    r = run_cli("-m", "nsys_transfer.reports", str(runs), "--bench", str(tmp_path / "missing.json"))
    assert r.returncode == 2 and "bench" in r.stderr


def test_a_trace_without_kernels_says_what_it_cannot_give(tmp_path, h200):
    """Two traces of one program, one exported without its kernel table (dropped with sqlite3): its compute and
    overlap cells stay empty and the note says why, instead of 0% computed from nothing."""
    import lzma
    import sqlite3
    a, b = tmp_path / "before.sqlite", tmp_path / "after.sqlite"
    for p in (a, b):
        p.write_bytes(lzma.decompress(h200["pinned"].read_bytes()))
    con = sqlite3.connect(b)
    con.execute("DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL")
    con.commit()
    con.close()
    r = run_cli("-m", "nsys_transfer.reports", str(a), str(b), "--out", str(tmp_path / "rep"))
    assert r.returncode == 0, r.stderr
    res = {row["stage"]: row for row in json.loads((tmp_path / "rep" / "results.json").read_text())}
    assert res["after"]["compute_utilization"] is None and res["after"]["dtoh_overlap"] is None
    assert res["before"]["compute_utilization"] > 0.9
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "Not given (left empty): after: no kernel table: compute and overlap" in md


def _cpu_runs(folder):
    """runs/before and runs/after as `make trace NAME=...` leaves them: the newcomer's two CPU captures (issue 57)."""
    import lzma
    import shutil
    data = ROOT / "tests" / "data" / "newcomer"
    for name, stem in (("before", "cpu_roll_nsys2024"), ("after", "cpu_roll_fixed_nsys2024")):
        d = folder / "runs" / name
        d.mkdir(parents=True)
        with lzma.open(data / f"{stem}.sqlite.xz") as f, open(d / f"{name}.sqlite", "wb") as out:
            shutil.copyfileobj(f, out)
        for ext in ("pystacks.gz", "run.json"):
            shutil.copyfile(data / f"{stem}.{ext}", d / f"{name}.{ext}")
    return folder / "runs"


def test_a_report_of_cpu_runs_gives_their_own_figures_and_compares_them(tmp_path):
    """issue 57, item 8: the report of two CPU-only runs is no table of empty GPU cells: each run's loop time (the
    figure verify compares: the newcomer's item 15), its set-up and its loop's costliest line, and before against
    after as verify says it (the README's names sort `after` first), under a title of the user's runs."""
    runs = _cpu_runs(tmp_path)
    r = run_cli("-m", "nsys_transfer.reports", str(runs), "--out", str(tmp_path / "rep"), timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    md = (tmp_path / "rep" / "report.md").read_text()
    assert md.startswith("# Your runs: where the time went\n") and "by stage" not in md.split("## Results")[0]
    assert "<h1>Your runs: where the time went</h1>" in (tmp_path / "rep" / "report.html").read_text()
    assert "| trace | steps/s | loop | set-up | top line |" in md and "GPU busy" not in md.split("## Before and after")[0]
    v = run_cli("-m", "nsys_transfer", "verify", str(runs / "before"), str(runs / "after"), "--json",
                str(tmp_path / "v.json"), "-q")
    assert v.returncode == 0, v.stderr[-2000:]
    sides = json.loads((tmp_path / "v.json").read_text())["loop"]["sides"]
    for name in ("before", "after"):  # the same loop as verify's, to its last digit shown
        assert f"| {name} | " in md and f" | {sides[name]['duration_ns'] / 1e9:,.2f} s | " in md.split(f"| {name} | ")[1]
    res = {row["stage"]: row for row in json.loads((tmp_path / "rep" / "results.json").read_text())}
    assert res["before"]["loop_s"] == sides["before"]["duration_ns"] / 1e9
    assert "| before | " in md and "cpu_roll.py:28 input, 51% |" in md
    assert "VERDICT: 1.87x faster over the whole loop; resolved: cpu-hotspot (cpu_roll.py:28)" in md
    assert "before: " in md and "runs/before/before.sqlite" in md.split("after:  ")[0]
    assert "% of the main thread's loop" in md


def test_the_bundled_report_has_one_place_with_runs_or_without(tmp_path):
    """issue 57, item 8: `make report` (--bundled) puts the bundled H200 report in OUT/bundled/ whether or not there
    are runs; without runs OUT/report.md says how to make one, with the bundled table and where its report is."""
    r = run_cli("-m", "nsys_transfer.reports", "--bundled", "--out", str(tmp_path / "rep"), timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    rep = tmp_path / "rep"
    assert (rep / "bundled" / "report.md").is_file() and (rep / "bundled" / "throughput.png").is_file()
    md = (rep / "report.md").read_text()
    assert md.startswith("# Your runs") and "make trace PROG=" in md and "| pinned | 6.63 |" in md
    assert "bundled/report.md" in md and not (rep / "throughput.png").exists()
    assert "the bundled H200 report: " in r.stdout.strip().splitlines()[-1]
