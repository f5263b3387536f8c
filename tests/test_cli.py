"""analyze-trace end to end: output, JSON schema, CSV, plots, and one clear line for every kind of bad input."""
import json
import os
import re
import sqlite3

from nsys_transfer.analysis import Trace
from conftest import ROOT, run_cli, sha256


def test_summary_json_csv_plots(h200, tmp_path):
    out = tmp_path / "s.json"
    r = run_cli("-m", "nsys_transfer.analysis", str(h200["baseline"]), "--json", str(out), "--csv", str(tmp_path / "csv"),
                "--plots", str(tmp_path / "png"))
    assert r.returncode == 0, r.stderr
    assert "GPU busy" in r.stdout and "DtoH: 3 copies" in r.stdout and "process output" in r.stdout
    s = json.loads(out.read_text())
    assert 0 < s["gpu"]["utilization"] <= 1 and 0 < s["gpu"]["compute_utilization"] < s["gpu"]["utilization"]
    assert s["gaps"]["count"] == len(s["gaps"]["top"]) > 0
    for g in s["gaps"]["top"]:
        assert {"start_ns", "duration_ns", "cpu_ranges", "osrt"} <= set(g)
    assert s["memcpy"]["dtoh"]["count"] == 3 and s["memcpy"]["dtoh"]["kinds"] == {"Pageable": 3}
    assert s["memcpy"]["htod"]["kinds"] == {"Pinned": 2}
    assert s["kernels"]["count"] > 100 and s["kernels"]["total_ns"] > 0
    assert {r["name"] for r in s["nvtx"]["ranges"]} >= {"compute", "copy to CPU", "process output", "get batch"}
    assert s["steps"]["count"] == 3 and 0.2 < s["steps"]["per_second"] < 1.0
    assert [d["rule"] for d in s["diagnosis"]]
    assert {p.name for p in (tmp_path / "csv").iterdir()} >= {"gaps.csv", "memcpy.csv", "steps.csv", "nvtx_summary.csv"}
    pngs = sorted((tmp_path / "png").iterdir())
    assert [p.name for p in pngs] == ["baseline_breakdown.png", "baseline_dtoh.png", "baseline_gaps.png",
                                      "baseline_timeline.png"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 5000 for p in pngs)


def test_min_gap_and_window_options(h200, tmp_path):
    r1 = run_cli("-m", "nsys_transfer.analysis", str(h200["streams"]), "--json", str(tmp_path / "a.json"), "--min-gap-ms", "0.01", "-q")
    r2 = run_cli("-m", "nsys_transfer.analysis", str(h200["streams"]), "--json", str(tmp_path / "b.json"), "--min-gap-ms", "50", "-q")
    assert r1.returncode == r2.returncode == 0
    a, b = (json.loads((tmp_path / n).read_text()) for n in ("a.json", "b.json"))
    assert a["gaps"]["count"] > b["gaps"]["count"]
    lo = a["window"]["start_ns"]
    r3 = run_cli("-m", "nsys_transfer.analysis", str(h200["streams"]), "--json", str(tmp_path / "c.json"),
                 "--window", f"{lo}:{lo + 100_000_000}", "-q")
    assert r3.returncode == 0, r3.stderr
    c = json.loads((tmp_path / "c.json").read_text())
    assert c["window"]["duration_ns"] == 100_000_000 and c["window"]["source"] == f"user: --window {lo}:{lo + 100_000_000}"


def _bad(tmp_path, h200, tmp_copy):
    cases = {}
    cases["missing"] = tmp_path / "nope.sqlite"
    d = tmp_path / "adir"
    d.mkdir()
    cases["directory"] = d
    (tmp_path / "empty.sqlite").write_bytes(b"")
    cases["empty"] = tmp_path / "empty.sqlite"
    (tmp_path / "random.sqlite").write_bytes(os.urandom(4096))
    cases["random"] = tmp_path / "random.sqlite"
    from nsys_transfer.analysis.load.inputs import resolve_input
    real, _ = resolve_input(h200["baseline"])
    data = real.read_bytes()
    (tmp_path / "truncated.sqlite").write_bytes(data[: len(data) // 3])
    cases["truncated"] = tmp_path / "truncated.sqlite"
    con = sqlite3.connect(tmp_path / "other.sqlite")
    con.execute("CREATE TABLE t (a INTEGER)")
    con.commit()
    con.close()
    cases["not-nsys"] = tmp_path / "other.sqlite"
    (tmp_path / "bad.sqlite.xz").write_bytes(b"\xfd7zXZ\x00" + os.urandom(200))
    cases["bad-xz"] = tmp_path / "bad.sqlite.xz"
    bare = tmp_path / "no-activity.sqlite"  # a real export with its activity tables dropped
    bare.write_bytes(data)
    con = sqlite3.connect(bare)
    for t in [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table' AND "
                                        "(name LIKE 'CUPTI%' OR name IN ('NVTX_EVENTS', 'OSRT_API'))")]:
        con.execute(f"DROP TABLE {t}")
    con.commit()
    con.close()
    cases["no-activity"] = bare
    return cases


EXPECT = {"missing": "no such file", "directory": "is a directory", "empty": "empty", "random": "not an SQLite",
          "truncated": "truncated", "not-nsys": "not an Nsight Systems export", "bad-xz": "damaged .xz",
          "no-activity": "no CUDA, NVTX or OS runtime tables"}


def test_bad_input_one_line_no_traceback_input_untouched(tmp_path, h200, tmp_copy, monkeypatch):
    env = {**os.environ, "NSYS_TRANSFER_CACHE": str(tmp_path / "cache")}
    for kind, path in _bad(tmp_path, h200, tmp_copy).items():
        before = sha256(path) if path.is_file() else None
        r = run_cli("-m", "nsys_transfer.analysis", str(path), env=env)
        assert r.returncode == 2, (kind, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in r.stderr, (kind, r.stderr)
        assert EXPECT[kind] in lines[0], (kind, lines[0])
        if before:
            assert sha256(path) == before, kind


def test_bad_options_are_one_line(h200):
    r = run_cli("-m", "nsys_transfer.analysis", str(h200["pinned"]), "--step-regex", "(")
    assert r.returncode == 2 and "not a valid regular expression" in r.stderr and "Traceback" not in r.stderr
    r = run_cli("-m", "nsys_transfer.analysis", str(h200["pinned"]), "--window", "5:1")
    assert r.returncode == 2 and "END must be after START" in r.stderr


def test_nvtx_only_export_is_valid(tmp_path, h200):
    """A trace without CUDA tables (what nsys records on a machine without a GPU) still analyses."""
    from nsys_transfer.analysis.load.inputs import resolve_input
    real, _ = resolve_input(h200["baseline"])
    dst = tmp_path / "nocuda.sqlite"
    dst.write_bytes(real.read_bytes())
    con = sqlite3.connect(dst)
    for t in [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table' AND name LIKE 'CUPTI%'")]:
        con.execute(f"DROP TABLE {t}")
    con.commit()
    con.close()
    r = run_cli("-m", "nsys_transfer.analysis", str(dst), "--json", str(tmp_path / "o.json"))
    assert r.returncode == 0, r.stderr
    s = json.loads((tmp_path / "o.json").read_text())
    assert s["gpu"] is None and s["nvtx"]["count"] > 0 and s["memcpy"]["dtoh"]["count"] == 0


def test_window_in_ms_and_steps_agree_with_the_ns_form(h200, tmp_path):
    """--steps 1: and the same span given in ms from the capture's start, and in trace ns, analyse the same window;
    every count in it is the window's (11 of the 12 steps)."""
    runs = {}
    for name, args in (("steps", ["--steps", "1:"]),):
        out = tmp_path / f"{name}.json"
        r = run_cli("-m", "nsys_transfer.analysis", str(h200["pinned-long"]), "--json", str(out), "-q", *args)
        assert r.returncode == 0, r.stderr
        runs[name] = json.loads(out.read_text())
    w = runs["steps"]["window"]
    assert w["source"] == "user: --steps 1:" and runs["steps"]["steps"]["count"] == 11
    first = w["origin_ns"]
    ms = f"{(w['start_ns'] - first) / 1e6}ms:{(w['end_ns'] - first) / 1e6}ms"
    for name, args in (("ms", ["--window", ms]), ("ns", ["--window", f"{w['start_ns']}:{w['end_ns']}"])):
        out = tmp_path / f"{name}.json"
        r = run_cli("-m", "nsys_transfer.analysis", str(h200["pinned-long"]), "--json", str(out), *args)
        assert r.returncode == 0, r.stderr
        runs[name] = json.loads(out.read_text())
        assert abs(runs[name]["window"]["start_ns"] - w["start_ns"]) <= 1000, name  # ms printed to the microsecond
        assert runs[name]["steps"]["count"] == 11 and "ms from the session start" in r.stdout
    assert "warmup-in-capture" not in {f["rule"] for f in runs["steps"]["diagnosis"]}
    # the kernels, copies and ranges counted are the window's, not the whole capture's
    with Trace.open(h200["pinned-long"]) as t:
        k, m = t.device.kernels, t.device.memcpys
        inside = lambda df: int(((df["end_ns"] > w["start_ns"]) & (df["start_ns"] < w["end_ns"])).sum())  # noqa: E731
        assert runs["steps"]["kernels"]["count"] == inside(k) < len(k)
        assert runs["steps"]["trace"]["counts"]["memcpys"] == inside(m) < len(m)
        assert runs["steps"]["nvtx"]["count"] == inside(t.host.nvtx) < len(t.host.nvtx)


def test_window_times_count_from_the_session_start(tmp_path):
    """hf_generate's export records its session start (trace time 0, as nsys's timeline shows it); its first GPU
    operation came 14.3 s later. `--window 15s:` is 15 s into the session, the header says which origin, and a
    window outside the activity is refused with a window of this trace to try."""
    trace = ROOT / "tests" / "data" / "programs" / "hf_generate_nsys2024.sqlite.xz"
    out = tmp_path / "w.json"
    r = run_cli("-m", "nsys_transfer.analysis", str(trace), "--window", "15s:16s", "--json", str(out))
    assert r.returncode == 0, r.stderr
    w = json.loads(out.read_text())["window"]
    assert (w["start_ns"], w["end_ns"]) == (15_000_000_000, 16_000_000_000)
    assert w["origin_ns"] == 0 and w["origin"] == "session start"
    assert w["capture_start_ns"] == 14_306_342_690  # the first GPU operation, as before
    assert "= 15,000.0 to 16,000.0 ms from the session start" in r.stdout
    for asked, said in (("1s:2s", "no GPU activity inside it"), ("25s:", "starts after this trace's last"),
                        (":1s", "ends before this trace's first")):
        r = run_cli("-m", "nsys_transfer.analysis", str(trace), "--window", asked, "-q")
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
        assert f"--window {asked}: {said}" in lines[0] and "ms from the session start" in lines[0], lines[0]
        suggested = re.search(r"\(--window (\S+) covers them\)", lines[0]).group(1)
        r = run_cli("-m", "nsys_transfer.analysis", str(trace), "--window", suggested, "--json", str(out), "-q")
        assert r.returncode == 0, (suggested, r.stderr)  # the window the error suggests is this trace's
        assert json.loads(out.read_text())["kernels"]["count"] > 9000


def test_window_times_without_a_recorded_session_start_count_from_the_first_event(public_traces, tmp_path):
    """nsys 2020.3 recorded no session start: times count from the first GPU operation or NVTX range, and the header
    says so."""
    trace = next(p for p in public_traces if p.name.startswith("nvtxex_cudf"))
    out = tmp_path / "w.json"
    r = run_cli("-m", "nsys_transfer.analysis", str(trace), "--window", "1s:", "--json", str(out))
    assert r.returncode == 0, r.stderr
    w = json.loads(out.read_text())["window"]
    assert w["origin"] == "first GPU operation or NVTX range" and w["origin_ns"] == w["capture_start_ns"] > 0
    assert w["start_ns"] == w["origin_ns"] + 1_000_000_000
    assert "ms from the first GPU operation or NVTX range" in r.stdout


ONE_LINE_GROUP = """
import click
from nsys_transfer.analysis.cli.options import OneLineGroup

@click.group(cls=OneLineGroup, name="tool")
def main():
    pass

@main.command()
def boom():
    raise RuntimeError("a bug\\n  and what the library printed after it")

main()
"""


def test_a_bug_or_a_usage_error_is_one_line_in_every_command():
    """nsys-transfer's subcommands (verify, run, ...) as analyze-trace: an error nobody foresaw is one line with exit 3
    (NSYS_TRANSFER_DEBUG=1 shows its traceback), a usage error one line naming the subcommand, with exit 2."""
    env = {k: v for k, v in os.environ.items() if k not in ("NSYS_TRANSFER_DEBUG", "ANALYZE_TRACE_DEBUG")}
    r = run_cli("-c", ONE_LINE_GROUP, "boom", env=env)
    assert (r.returncode, r.stderr) == (3, "tool: internal error: RuntimeError: a bug (set NSYS_TRANSFER_DEBUG=1 for "
                                           "details)\n")
    r = run_cli("-c", ONE_LINE_GROUP, "boom", env={**env, "NSYS_TRANSFER_DEBUG": "1"})
    assert r.returncode == 1 and "Traceback" in r.stderr and "RuntimeError: a bug" in r.stderr
    r = run_cli("-c", ONE_LINE_GROUP, "boom", "--nope", env=env)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr  # click's own words vary with its version
    assert r.stderr.startswith("tool boom: No such option") and r.stderr.endswith("(see tool boom --help)\n")
    r = run_cli("-m", "nsys_transfer", "verify", "--nope", env=env)
    assert r.returncode == 2 and r.stderr.startswith("nsys-transfer verify: No such option") and r.stderr.count("\n") == 1
    r = run_cli("-m", "nsys_transfer", env=env)  # bare: the group's help as it is, not a usage line wrapped round it
    help_text = r.stdout + r.stderr
    assert help_text.startswith("Usage: ") and "Commands:" in help_text and "(see" not in help_text, help_text


def test_the_help_texts_say_what_the_readme_says():
    """issue 57, item 10: the commands' own help names the torch.profiler traces analyze-trace reads, `run` as the
    user's command, and what each side of verify needs (as README.md says them)."""
    analyze = run_cli("-m", "nsys_transfer.analysis", "--help").stdout
    assert "torch.profiler trace (Kineto JSON, .json or .json.gz" in " ".join(analyze.split())
    top = " ".join(run_cli("-m", "nsys_transfer", "--help").stdout.split())
    assert "Trace your program" in top and "run -o runs/x/x --analyze -- python my.py" in top and "verify" in top
    assert "Profile the workloads" not in top
    verify = " ".join(run_cli("-m", "nsys_transfer", "verify", "--help").stdout.split())
    assert "Each side:" in verify and "both without GPU work (then the loops are compared by their time" in verify
    assert "--sample none --python-backtrace none" in verify
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert "torch.profiler" in readme and "verify" in readme
