"""nsys's own warnings and errors in the run record, `--strict`, and nsys against the CUDA driver.

The warnings are real: nsys run by a user without root privileges, asked for system-wide sampling, prints
"WARNING: --sample=system-wide requires root privileges ..." and goes on. Where the tests run as root, nsys is
started through `setpriv` as the `nobody` user (our Python stays root and reads its output).
"""
import json
import os
import shutil
import sqlite3
import tempfile
from pathlib import Path

import pytest

from conftest import ROOT, run_cli

CPU_PROGRAM = ["/bin/sh", "-c", "echo hello from the program"]


@pytest.fixture
def unprivileged_nsys(nsys):
    """(NSYS path that runs as an unprivileged user, a folder that user can write)."""
    if os.geteuid() != 0:
        if int(Path("/proc/sys/kernel/perf_event_paranoid").read_text()) <= 0:
            pytest.skip("perf_event_paranoid <= 0: nsys allows system-wide sampling, so it does not warn")
        d = Path(tempfile.mkdtemp(prefix="nsys-msg-"))
        yield nsys.path, d
        shutil.rmtree(d, ignore_errors=True)
        return
    if not shutil.which("setpriv"):
        pytest.skip("running as root without setpriv: cannot start nsys unprivileged")
    d = Path(tempfile.mkdtemp(prefix="nsys-msg-", dir="/tmp"))  # /tmp: a folder `nobody` can reach
    d.chmod(0o777)
    wrapper = d / "nsys"
    wrapper.write_text(f"#!/bin/sh\nexec setpriv --reuid=65534 --regid=65534 --clear-groups env HOME={d} "
                       f"{nsys.path} \"$@\"\n")
    wrapper.chmod(0o755)
    yield str(wrapper), d
    shutil.rmtree(d, ignore_errors=True)


def _run(nsys_path, out, *extra, env_extra=None):
    env = {**os.environ, "NSYS": nsys_path, **(env_extra or {})}
    return run_cli("-m", "nsys_transfer.profiling", "run", "-o", str(out), "--trace", "nvtx,osrt", "--no-capture-range", *extra,
                   "--", *CPU_PROGRAM, env=env, timeout=300)


def test_nsys_warnings_are_kept_printed_and_strict_fails(unprivileged_nsys):
    nsys_path, d = unprivileged_nsys
    sampling = ["--sample", "system-wide", "--cpuctxsw", "system-wide"]
    r = _run(nsys_path, d / "warned", *sampling)
    assert r.returncode == 0, r.stderr[-2000:]
    rec = json.loads((d / "warned.run.json").read_text())
    texts = [m["text"] for m in rec["nsys_messages"]]
    assert any(t.startswith("WARNING: --sample=system-wide requires root privileges") for t in texts), texts
    assert any(t.startswith("WARNING: --cpuctxsw=system-wide") for t in texts), texts
    assert {(m["stage"], m["kind"]) for m in rec["nsys_messages"]} == {("capture", "warning")}
    assert not any("hello from the program" in t for t in texts), "the program's own output is not nsys's"
    # printed at the end of the run, after nsys's progress and the program's output
    tail = r.stderr[r.stderr.rindex("hello from the program"):]
    assert "run: nsys warning (capture): WARNING: --sample=system-wide" in tail
    assert "2 warnings" in tail and "--strict" in tail

    r = _run(nsys_path, d / "strict", *sampling, "--strict")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("run: --strict: nsys reported 2 warnings") and "strict.run.json" in last
    assert json.loads((d / "strict.run.json").read_text())["nsys_messages"], "the record is written before failing"


def test_clean_run_has_no_messages_and_passes_strict(nsys, tmp_path):
    # without CPU samples (run's default): where the kernel allows no sampling, nsys warns about that (test_profiling)
    r = _run(nsys.path, tmp_path / "clean", "--strict", "--sample", "none")
    assert r.returncode == 0, r.stderr[-2000:]
    rec = json.loads((tmp_path / "clean.run.json").read_text())
    assert rec["nsys_messages"] == []
    assert rec["integrity"][0]["verdict"] in ("complete", None)
    assert "run: nsys" not in r.stderr


def test_strict_is_an_option_of_stage(nsys):
    r = run_cli("-m", "nsys_transfer.profiling", "stage", "--help")
    assert r.returncode == 0 and "--strict" in r.stdout


# --- nsys against the CUDA driver -------------------------------------------------------------------------------

def _recorded_driver(path):
    """The driver's CUDA version an export recorded (TARGET_INFO_SYSTEM_ENV.CudaDriverVersion): real driver data."""
    from nsys_transfer.analysis.load.inputs import resolve_input
    local, _ = resolve_input(Path(path))
    con = sqlite3.connect(f"file:{local}?mode=ro", uri=True)
    try:
        return con.execute("SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'CudaDriverVersion'").fetchone()[0]
    finally:
        con.close()


def test_bundled_cupti_says_what_this_nsys_traces(nsys):
    from nsys_transfer.nsys_core.driver import bundled_cupti
    newest = bundled_cupti(nsys.path)
    assert newest is not None and newest[0] >= 10
    if nsys.version.startswith("2023.4."):
        assert newest == (12, 4)


def test_driver_newer_than_nsys_warns_with_the_way_out(nsys, h200):
    """The H200 machine's driver, as its traces recorded it (CUDA 13.0), against the nsys here."""
    from nsys_transfer.nsys_core.driver import check, compare, parse_cuda
    h200_driver = parse_cuda(_recorded_driver(h200["baseline"]))
    assert h200_driver == (13, 0)
    c = compare(nsys.version, nsys.year_release, h200_driver, nsys.path, "trace")
    if nsys.year_release < (2025, 3):
        assert c["older_than_driver"] and "NSYS=" in c["warning"] and "nvidia.com" in c["warning"]
        assert "CUDA 13.0" in c["warning"]
    # this machine: the comparison runs, and warns only when a driver here is newer than nsys
    here = check(nsys)
    assert here["warning"] is None or here["older_than_driver"]


def test_driver_not_newer_does_not_warn(nsys, public_traces):
    from nsys_transfer.nsys_core.driver import compare, parse_cuda
    for p in public_traces:
        if not p.name.startswith("nsightful"):
            continue
        driver = parse_cuda(_recorded_driver(p))  # CUDA 12.4
        assert driver == (12, 4)
        assert compare("2023.4.4", (2023, 4), driver)["warning"] is None
        assert compare("2022.2.1", (2022, 2), (13, 0))["older_than_driver"]
        assert compare("2026.1.0", (2026, 1), (13, 2))["warning"] is None  # newer than the table: not known to be old


def test_where_reports_the_comparison(nsys):
    r = run_cli("-m", "nsys_transfer.profiling", "where", env={**os.environ, "NSYS": nsys.path})
    assert r.returncode == 0, r.stderr
    line = r.stdout.strip()
    assert "\t" not in line and line.startswith(f"Nsight Systems {nsys.version} at {nsys.path} (")
    assert "it traces programs up to CUDA" in line
    from nsys_transfer.nsys_core.driver import driver_cuda
    if driver_cuda() is None:
        assert line.endswith("; this machine has no NVIDIA driver") and "warning" not in r.stderr
    r = run_cli("-m", "nsys_transfer.nsys_core.driver", env={**os.environ, "NSYS": nsys.path})
    assert r.returncode == 0 and f"nsys {nsys.version}" in r.stderr


def test_install_script_takes_a_suite_and_refuses_odd_ones(tmp_path):
    r = __import__("subprocess").run(["bash", str(ROOT / "profiling" / "install_nsys.sh"), str(tmp_path / "n"),
                                      "trixie;rm"], capture_output=True, text=True)
    assert r.returncode == 2 and "bad suite" in r.stderr


# --- nsys's console output from real GPU captures (tests/data/programs/*.nsys.log, H200, CUDA 13.0 driver) --------

def test_importer_errors_in_real_console_logs():
    from nsys_transfer.nsys_core.nsys_messages import parse
    logs = ROOT / "tests" / "data" / "programs"
    hf = parse((logs / "hf_generate_nsys2023.nsys.log").read_text(errors="replace"))
    texts = [m["text"] for m in hf]
    assert "Importer error status: Importation succeeded with non-fatal errors." in texts
    assert "importer: TraceProcessEvent.cpp(45): Unknown runtime API function index: 468" in texts
    assert "importer: StringStorage.cpp(113): Cannot find string for an exterior index" in texts
    assert {m["stage"] for m in hf} == {"import"} and {m["kind"] for m in hf} == {"error"}
    assert len(texts) == len(set(texts)), "repeated blocks are kept once"
    # the same programs under nsys 2024.2: their own output (lightning's tips, a deprecation warning) is not nsys's
    for name in ("hf_generate", "lightning_predict", "torchvision_loader"):
        assert parse((logs / f"{name}_nsys2024.nsys.log").read_text(errors="replace")) == [], name
