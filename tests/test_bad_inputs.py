"""Bad input, one row per case: damaged or odd exports, a trace left mid-write, bad option values, outputs that cannot
be written. Each fixture is the smallest real H200 export (naive-input: 867 kernels, 6 copies, 3 steps) altered with
sqlite3 at test time, and every case is run as the user runs it, then checked for: its exit code, exactly one line on
stderr saying what is wrong (or what was dropped), no traceback, every input byte-identical, and, where the trace is
analysed, the figures (and no negative or NaN number anywhere in the summary JSON).
"""
from __future__ import annotations

import ctypes
import json
import math
import os
import random
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from conftest import ROOT, sha256

K, M, S, R = (f"CUPTI_ACTIVITY_KIND_{t}" for t in ("KERNEL", "MEMCPY", "MEMSET", "RUNTIME"))
N, O = "NVTX_EVENTS", "OSRT_API"  # noqa: E741
ACTIVITY = (K, M, S, R, N, O)
PROGRESS = re.compile(r"^compare-traces: (\[\d+/\d+\] analysing |drawing charts|reporting \d+ traces? )")  # its normal progress, not errors


@dataclass
class Case:
    id: str
    make: Callable  # (work folder, pristine export) -> (argv after `python`, the inputs that must stay identical)
    code: int
    says: str  # in the one stderr line
    figures: Callable | None = None  # (summary JSON, reference summary) -> asserts, for cases whose trace is analysed
    read_only: bool = False  # run without the power to write into read-only folders (root has it)
    needs_nsys: bool = False
    result: str = "summary.json"  # the JSON the run writes into its folder, read for the figures
    shows: Callable | None = None  # (stdout) -> asserts on the text the user reads


# --- fixtures: the pristine export, altered copies, a trace left mid-write -----------------------------------------

@pytest.fixture(scope="session")
def pristine(h200, tmp_path_factory) -> Path:
    from nsys_transfer.analysis.load.inputs import resolve_input
    path, _ = resolve_input(h200["naive-input"])
    dst = tmp_path_factory.mktemp("pristine") / "naive-input.sqlite"
    shutil.copyfile(path, dst)
    return dst


def analyse(trace, work, *extra: str) -> list[str]:
    """analyze-trace as a user runs it, its summary JSON into the case's folder (and its text on stdout: the text
    report must render whatever the JSON holds, n/a for a figure nothing gives)."""
    return ["-m", "nsys_transfer.analysis", str(trace), "--json", f"{work}/summary.json", *extra]


def altered(*statements: str, extra: tuple[str, ...] = ()):
    """A copy of the export with these statements applied (NOT NULL constraints lifted first, as a tool would)."""
    def make(work: Path, pristine: Path):
        trace = work / "trace.sqlite"
        shutil.copyfile(pristine, trace)
        con = sqlite3.connect(trace)
        for table in (*ACTIVITY, "StringIds"):
            con.execute(f"CREATE TABLE loose AS SELECT * FROM {table}")
            con.execute(f"DROP TABLE {table}")
            con.execute(f"ALTER TABLE loose RENAME TO {table}")
        for s in statements:
            con.execute(s)
        con.commit()
        con.close()
        return analyse(trace, work, *[x.format(work=work) for x in extra]), [trace]
    return make


def kernel_less(*args: str):
    """The export with its kernel table dropped ({kl}: under runs/kl/, as a run folder holds it) beside the untouched
    one ({trace}), with these arguments ({work} is the case's folder)."""
    def make(work: Path, pristine: Path):
        trace = _copy(pristine, work)
        kl = work / "runs" / "kl" / "kl.sqlite"
        kl.parent.mkdir(parents=True)
        shutil.copyfile(pristine, kl)
        con = sqlite3.connect(kl)
        con.execute(f"DROP TABLE {K}")
        con.commit()
        con.close()
        return [a.format(trace=trace, work=work, kl=kl) for a in args], [trace, kl]
    return make


def verify_against_altered(*statements: str, extra: tuple[str, ...] = ()):
    """verify of the untouched export (before) against a copy altered with these statements (after)."""
    alter = altered(*statements)

    def make(work: Path, pristine: Path):
        _, (trace,) = alter(work, pristine)
        before = _copy(pristine, work, "before.sqlite")
        return ["-m", "nsys_transfer", "verify", str(before), str(trace), *extra], [before, trace]
    return make


def verify_with(*args: str):
    """verify of the untouched export against itself, with these options."""
    return pristine_with("-m", "nsys_transfer", "verify", "{trace}", "{trace}", *args)


def pristine_with(*args: str):
    """The untouched export, with these arguments ({work} is the case's folder, {ro} a read-only folder in it)."""
    def make(work: Path, pristine: Path):
        trace = work / "trace.sqlite"
        shutil.copyfile(pristine, trace)
        ro = read_only_dir(work) if any("{ro}" in a for a in args) else None
        return [a.format(trace=trace, work=work, ro=ro) for a in args], [trace]
    return make


def option(*args: str):
    """analyze-trace on the untouched export with these option values."""
    return pristine_with(*analyse("{trace}", "{work}", *args))


def read_only_dir(work: Path) -> Path:
    ro = work / "ro"
    if not ro.exists():
        ro.mkdir()
        ro.chmod(0o555)
    return ro


def a_file(work: Path) -> Path:
    f = work / "a-file"
    f.write_text("not a folder\n")
    return f


WRITER = r"""
import sqlite3, sys
con = sqlite3.connect(sys.argv[1], isolation_level=None)
con.execute("PRAGMA cache_size=1")  # dirty pages spill into the database file before any commit
if sys.argv[2] == "wal":
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA wal_autocheckpoint=0")
    con.execute("DELETE FROM NVTX_EVENTS WHERE textId = (SELECT id FROM StringIds WHERE value = 'Batch 5')")  # committed
con.execute("BEGIN")
con.execute("UPDATE StringIds SET value = value || '1' WHERE value = 'process output'")
con.execute("DELETE FROM NVTX_EVENTS WHERE textId = (SELECT id FROM StringIds WHERE value = 'Batch 4')")
con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET gridX = gridX + 1")
print("written", flush=True)
sys.stdin.read()  # killed here, before any COMMIT
"""


def left_mid_write(mode: str, read_only: bool = False):
    """A copy a writer was killed (SIGKILL) in the middle of: `journal` leaves a hot rollback journal and uncommitted
    pages in the file; `wal` leaves a WAL with one committed transaction not yet in the file, and uncommitted frames."""
    def make(work: Path, pristine: Path):
        folder = work / "traces"
        folder.mkdir()
        trace = folder / "trace.sqlite"
        shutil.copyfile(pristine, trace)
        writer = subprocess.Popen([sys.executable, "-c", WRITER, str(trace), mode], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        assert writer.stdout.readline().strip() == "written"
        writer.send_signal(signal.SIGKILL)
        writer.wait()
        side = trace.with_name(trace.name + ("-journal" if mode == "journal" else "-wal"))
        assert side.stat().st_size > 0
        if mode == "journal":  # the premise: reading the file as it lies gives the uncommitted state
            assert _steps_as_the_file_lies(trace) == 2 and "process output1" in _names_as_the_file_lies(trace)
        else:  # the premise: the committed delete is only in the WAL
            assert _steps_as_the_file_lies(trace) == 3
        if read_only:
            folder.chmod(0o555)
        return analyse(trace, work), sorted(folder.iterdir())
    return make


def _raw(trace: Path, sql: str):
    con = sqlite3.connect(f"file:{trace}?mode=ro&immutable=1", uri=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def _steps_as_the_file_lies(trace: Path) -> int:
    return _raw(trace, "SELECT count(*) FROM NVTX_EVENTS n JOIN StringIds s ON s.id = n.textId "
                       "WHERE s.value LIKE 'Batch %'")[0][0]


def _names_as_the_file_lies(trace: Path) -> set[str]:
    return {v for (v,) in _raw(trace, "SELECT value FROM StringIds")}


def random_file(name: str, *args: str, seed: int | None = None):
    """A file of 4096 random bytes (os.urandom, or a fixed seed's bytes to repeat a case that once failed)."""
    def make(work: Path, pristine: Path):
        f = work / name
        f.write_bytes(os.urandom(4096) if seed is None else random.Random(seed).randbytes(4096))
        trace = work / "trace.sqlite"
        shutil.copyfile(pristine, trace)
        return [a.format(file=f, trace=trace, work=work) for a in args], [f, trace]
    return make


# --- the figures each analysed case must show -----------------------------------------------------------------------

def counts(s: dict) -> tuple:
    return (s["kernels"]["count"], s["memcpy"]["dtoh"]["count"], s["memcpy"]["htod"]["count"], s["steps"]["count"],
            s["nvtx"]["count"], s["trace"]["counts"]["osrt_calls"])


def expect(kernels=867, dtoh=3, htod=3, steps=3, nvtx=15, osrt=3076, more: Callable | None = None):
    def check(s: dict, ref: dict):
        assert counts(ref) == (867, 3, 3, 3, 15, 3076)  # the pristine export, as the H200 captured it
        assert counts(s) == (kernels, dtoh, htod, steps, nvtx, osrt)
        assert s["warnings"], "what was dropped is listed in the JSON too"
        if more:
            more(s, ref)
    return check


def same_as_pristine(s: dict, ref: dict):
    """Every figure and finding equals the pristine export's: the duplicates were dropped, nothing else."""
    def bare(x):
        x = json.loads(json.dumps(x))
        x.pop("warnings", None)
        x["trace"].pop("path")
        # the integrity figures describe the export as it lies (its repeated rows share correlation ids): same verdict
        x["trace"]["integrity"].pop("figures")
        x["trace"].pop("program_end")  # read from the run record beside the bundled trace; the altered copy has none
        return x
    assert bare(s) == bare(ref)
    assert s["trace"]["integrity"]["figures"]["shared_correlation_ids"]["count"] > 0


def fewer_kernels_less_compute(s, ref):
    assert 0 < s["gpu"]["compute_utilization"] < ref["gpu"]["compute_utilization"]


def no_device_minus_one(s, ref):
    assert [d["device"] for d in s["gpu"]["devices"]] == [0]
    assert all(d["device"] == 0 for d in s["gaps"]["top"])


def zero_time(s, ref):
    assert s["gpu"]["utilization"] == 0 and s["memcpy"]["dtoh"]["gbps"] is None
    assert all("inf" not in f["evidence"] for f in s["diagnosis"])


def no_compute_stream_none(s, ref):
    # no kernels recorded: compute and overlap are unknown (null), not 0% computed from nothing
    assert s["memcpy"]["compute_stream"] is None and s["gpu"]["compute_utilization"] is None
    assert s["memcpy"]["overlap_fraction"] is None and s["memcpy"]["dtoh"]["overlap_fraction"] is None
    assert all("None" not in f["evidence"] for f in s["diagnosis"])


def kernel_less_row(rows, ref):
    """compare-traces' row of the kernel-less trace: compute unknown and said so, its busy time still measured."""
    (row,) = rows
    assert row["compute_utilization"] is None and row["gpu_utilization"] > 0
    assert any("no kernel table" in c for c in row["cannot_give"])


def kernel_less_gpu(s, ref):
    """Two traces, one kernel-less: each GPU named with the process that drove it (the copies' where no kernels
    say), the kernel-less one's compute unknown (null), not 0."""
    kl, full = sorted(s["ranks"]["gpus"], key=lambda g: g["trace"])
    assert kl["compute_utilization"] is None and full["compute_utilization"] > 0
    assert isinstance(kl["pid"], int) and kl["pid"] == full["pid"]  # the same capture twice: the same process
    assert kl["steps"] == full["steps"] == 3
    assert not any("nan" in f for f in s["ranks"]["figures"])


def every_pid_a_number(text):
    """Each GPU's line names its process by number (not `pid None`, nor `pid 2233.0`), and no share is `nan%`."""
    pids = re.findall(r"\(pid ([^,)]*)[,)]", text)
    assert len(pids) == 2 and all(p.isdigit() for p in pids), pids
    assert "nan" not in text


def committed_names(s, ref):
    names = {r["name"] for r in s["nvtx"]["ranges"]}
    assert "process output" in names and "process output1" not in names


def names_unknown(s, ref):
    assert {r["name"] for r in s["kernels"]["top"]} == {"?"}


def copies_sync_unknown(s, ref):
    """Without CUDA API rows no copy is called sync or async: each is unknown, not 0 of 3 split into nothing."""
    for d in ("dtoh", "htod"):
        assert (s["memcpy"][d]["sync"], s["memcpy"][d]["async"]) == (0, 0)
        assert ref["memcpy"][d]["sync"] + ref["memcpy"][d]["async"] == 3


def says_sync_unknown(text):
    assert text.count("0 sync / 0 async / 3 unknown (no CUDA API row)") == 2, text


# --- the table --------------------------------------------------------------------------------------------------

CASES = [
    # damaged or odd exports: analysed, with one warning line saying what was dropped
    Case("null-kernel-times", altered(f"UPDATE {K} SET start = NULL WHERE rowid % 100 = 0",
                                      f'UPDATE {K} SET "end" = NULL WHERE rowid % 100 = 50'),
         0, "17 kernel rows with a start or end time that is NULL", expect(kernels=850, more=fewer_kernels_less_compute)),
    Case("text-in-numeric-columns", altered(f"UPDATE {K} SET start = 'abc' WHERE rowid % 100 = 0",
                                            f"UPDATE {K} SET deviceId = 'gpu0' WHERE rowid = 5",
                                            f'UPDATE {K} SET "end" = "end" + 0.5 WHERE rowid = 7',
                                            f"UPDATE {M} SET bytes = 'lots' WHERE rowid = 2",
                                            f"UPDATE {N} SET start = 'x' WHERE rowid = 2"),
         0, "1 kernel rows with a device that is NULL, not an integer", expect(kernels=857, dtoh=2, nvtx=14)),
    Case("null-copy-bytes-and-kinds", altered(f"UPDATE {M} SET bytes = NULL WHERE rowid = 2",
                                              f"UPDATE {M} SET copyKind = NULL, dstKind = NULL WHERE rowid = 4"),
         0, "memcpy rows with no copy or memory kind", expect(dtoh=1)),
    Case("null-names", altered("UPDATE StringIds SET value = NULL"),
         0, "rows whose name is not in the string table", expect(steps=0, more=names_unknown)),
    Case("zero-length-events", altered(*(f'UPDATE {t} SET "end" = start' for t in ACTIVITY),
                                       extra=("--csv", "{work}/csv", "--plots", "{work}/png")),
         0, "all 867 kernel rows are zero-length", expect(more=zero_time)),
    Case("negative-durations", altered(f'UPDATE {K} SET "end" = start - 1000 WHERE rowid % 2 = 0',
                                       f'UPDATE {M} SET start = "end", "end" = start WHERE copyKind = 2',
                                       f'UPDATE {N} SET start = "end", "end" = start WHERE textId = '
                                       "(SELECT id FROM StringIds WHERE value = 'Batch 4')"),
         0, "433 kernel rows that end before they start", expect(kernels=434, dtoh=0, steps=2, nvtx=14)),
    Case("duplicated-rows", altered(*(f"INSERT INTO {t} SELECT * FROM {t}" for t in ACTIVITY)),
         0, "867 kernel rows that repeat another row exactly", same_as_pristine),
    Case("null-device-and-stream", altered(f"UPDATE {K} SET deviceId = NULL WHERE rowid % 10 = 0",
                                           f"UPDATE {M} SET streamId = NULL WHERE rowid = 2"),
         0, "86 kernel rows with a device that is NULL", expect(kernels=781, dtoh=2, more=no_device_minus_one)),
    Case("no-kernel-table", altered(f"DROP TABLE {K}"),
         0, "no kernel table", expect(kernels=0, more=no_compute_stream_none)),
    # a trace left mid-write: never its uncommitted pages; the user's files untouched
    Case("empty-runtime-table", altered(f"DELETE FROM {R}"), 0, "no CUDA API rows", expect(more=copies_sync_unknown),
         shows=says_sync_unknown),
    Case("no-runtime-table", altered(f"DROP TABLE {R}"), 0, "no CUDA API rows", expect(more=copies_sync_unknown),
         shows=says_sync_unknown),
    Case("verify-one-side-without-api-rows", verify_against_altered(f"DELETE FROM {R}"), 2,
         "no CUDA API rows (CUPTI_ACTIVITY_KIND_RUNTIME absent or empty), so its launching thread"),
    Case("hot-journal", left_mid_write("journal"), 0, "rolled back",
         expect(more=committed_names)),
    Case("hot-journal-read-only-folder", left_mid_write("journal", read_only=True), 0, "rolled back",
         expect(more=committed_names), read_only=True),
    Case("wal", left_mid_write("wal"), 0, "WAL", expect(steps=2, nvtx=14, more=committed_names)),
    # option values: refused in one line, in the tool's words
    Case("window-to-infinity", option("--window", "0:inf"), 2, "finite"),
    Case("window-past-int64", option("--window", "0:1e30"), 2, "at most"),
    Case("window-empty", option("--window", "1:2"), 2, "no GPU activity inside it"),
    Case("window-not-numbers", option("--window", "a:b"), 2, "use START:END"),
    Case("window-fraction-of-ns", option("--window", "0.1:0.5"), 2, "must be whole"),
    Case("window-one-unit", option("--window", "100ms:5"), 2, "both ends a unit"),
    Case("steps-backwards", option("--steps", "5:3"), 2, "END must be after FIRST"),
    Case("steps-past-the-end", option("--steps", "40:"), 2, "the trace has 3 steps"),
    Case("min-gap-nan", option("--min-gap-ms", "nan"), 2, "finite"),
    Case("min-gap-inf", option("--min-gap-ms", "inf"), 2, "finite"),
    Case("min-gap-negative", option("--min-gap-ms", "-1"), 2, "at least 0"),
    Case("link-gbps-zero", option("--link-gbps", "0"), 2, "more than 0"),
    Case("link-gbps-negative", option("--link-gbps", "-5"), 2, "more than 0"),
    Case("top-negative", option("--top", "-1"), 2, "at least 1"),
    Case("top-not-a-number", option("--top", "x"), 2, "not a valid integer"),
    Case("pipeline-depth-negative", option("--pipeline-depth", "-1"), 2, "at least 1"),
    # a trace without a kernel table among others, and in a run folder
    Case("jobs-zero", option("--jobs", "0"), 2, "--jobs 0: give at least 1"),
    Case("dask-not-an-address", option("--dask", "bogus"), 2, "--dask bogus: not a scheduler address"),
    Case("dask-not-an-address-two-traces", option("{trace}", "--dask", "bogus"), 2,
         "--dask bogus: not a scheduler address"),
    # one trace's options with several traces: said, not dropped
    Case("whole-two-traces", option("{trace}", "--whole"), 2, "--whole applies to one trace"),
    Case("top-two-traces", option("{trace}", "--top", "3"), 2, "--top applies to one trace's findings"),
    Case("all-two-traces", option("{trace}", "--all"), 2, "--all applies to one trace's findings"),
    Case("verify-step-regex-invalid", verify_with("--step-regex", "("), 2, "is not a valid regular expression"),
    Case("verify-fail-if-slower-nan", verify_with("--fail-if-slower", "nan"), 2, "must be a finite number"),
    Case("verify-fail-if-slower-negative", verify_with("--fail-if-slower", "-3"), 2,
         "--fail-if-slower -3: must be at least 0"),
    Case("verify-fail-on-new-typo", verify_with("--fail-on-new", "host-sinc"), 2, "no rule 'host-sinc'; give 'any'"),
    Case("verify-fail-on-new-nothing", verify_with("--fail-on-new", ","), 2, "no rule; give 'any'"),
    Case("verify-whole-and-window", verify_with("--whole", "--window", "1s:"), 2,
         "--whole and --window both name the span"),
    Case("verify-unknown-option", verify_with("--bogus"), 2, "nsys-transfer verify: No such option"),
    Case("compare-kernel-less-folder", kernel_less("-m", "nsys_transfer.reports", "{work}/runs", "--out", "{work}/rep"),
         0, "no kernel table", kernel_less_row, result="rep/results.json"),
    Case("two-traces-one-kernel-less", kernel_less(*analyse("{kl}", "{work}", "{trace}")), 0, "no kernel table",
         kernel_less_gpu, shows=every_pid_a_number),
    Case("compare-link-gbps-zero", pristine_with("-m", "nsys_transfer.reports", "{trace}", "--out", "{work}/rep", "--link-gbps", "0"),
         2, "more than 0"),
    # outputs that cannot be written: one line before any work, nothing left behind
    Case("json-read-only", pristine_with("-m", "nsys_transfer.analysis", "{trace}", "--json", "{ro}/s.json"), 2, "cannot write into",
         read_only=True),
    Case("json-under-a-file", lambda w, p: (["-m", "nsys_transfer.analysis", str(_copy(p, w)), "--json", f"{a_file(w)}/s.json"],
                                            [w / "trace.sqlite", w / "a-file"]), 2, "is a file"),
    Case("csv-read-only", pristine_with("-m", "nsys_transfer.analysis", "{trace}", "--csv", "{ro}/csv"), 2, "cannot write into",
         read_only=True),
    Case("csv-under-a-file", lambda w, p: (["-m", "nsys_transfer.analysis", str(_copy(p, w)), "--csv", f"{a_file(w)}/csv"],
                                           [w / "trace.sqlite", w / "a-file"]), 2, "is a file"),
    Case("json-over-the-trace", pristine_with("-m", "nsys_transfer.analysis", "{trace}", "--json", "{trace}"), 2, "is an input"),
    Case("plots-read-only", pristine_with("-m", "nsys_transfer.analysis", "{trace}", "--plots", "{ro}/png"), 2, "cannot write into",
         read_only=True),
    Case("plots-under-a-file", lambda w, p: (["-m", "nsys_transfer.analysis", str(_copy(p, w)), "--plots", f"{a_file(w)}/png"],
                                             [w / "trace.sqlite", w / "a-file"]), 2, "is a file"),
    Case("compare-out-read-only", pristine_with("-m", "nsys_transfer.reports", "{trace}", "--out", "{ro}/rep"), 2,
         "cannot write into", read_only=True),
    Case("compare-out-under-a-file", lambda w, p: (["-m", "nsys_transfer.reports", str(_copy(p, w)), "--out", f"{a_file(w)}/rep"],
                                                   [w / "trace.sqlite", w / "a-file"]), 2, "is a file"),
    # places the OS refuses whatever the permission bits say (root may "access" /proc): refused before the analysis,
    # naming the output, not the trace
    Case("json-into-proc", option("--json", "/proc/nsys-transfer.json"), 2, "--json /proc/nsys-transfer.json: cannot write into /proc"),
    Case("plots-into-proc", option("--plots", "/proc/nsys-transfer"), 2, "--plots /proc/nsys-transfer: cannot write into /proc"),
    Case("verify-json-into-proc", pristine_with("-m", "nsys_transfer", "verify", "{trace}", "{trace}", "--json", "/proc/v.json"), 2,
         "--json /proc/v.json: cannot write into /proc"),
    Case("verify-plots-into-proc", pristine_with("-m", "nsys_transfer", "verify", "{trace}", "{trace}", "--plots", "/proc/v"), 2,
         "--plots /proc/v: cannot write into /proc"),
    Case("compare-out-into-proc", pristine_with("-m", "nsys_transfer.reports", "{trace}", "--out", "/proc/rep"), 2,
         "--out /proc/rep: cannot write into /proc"),
    Case("compare-probe-random-bytes", random_file("probe.json", "-m", "nsys_transfer.reports", "{trace}", "--probe", "{file}",
                                                   "--out", "{work}/rep"), 2, "not valid JSON"),
    Case("compare-failing-trace", random_file("bad.sqlite", "-m", "nsys_transfer.reports", "{file}", "--out", "{work}/rep/deep"), 2,
         "not an SQLite file"),
    Case("scrub-read-only", pristine_with("-m", "nsys_transfer.analysis.cli.scrub", "{trace}", "{ro}/clean.sqlite"), 2,
         "cannot write into", read_only=True),
    Case("scrub-under-a-file", lambda w, p: (["-m", "nsys_transfer.analysis.cli.scrub", str(_copy(p, w)), f"{a_file(w)}/c.sqlite.xz"],
                                             [w / "trace.sqlite", w / "a-file"]), 2, "is a file"),
    # a random file named like a report is not blamed on nsys' age
    Case("random-nsys-rep", random_file("capture.nsys-rep", "-m", "nsys_transfer.analysis", "{file}"), 2,
         "does not start like an Nsight Systems report", needs_nsys=True),
    # these bytes make nsys 2024.2 echo invalid UTF-8 (an internal error until its output was decoded leniently)
    Case("random-nsys-rep-echoed", random_file("capture.nsys-rep", "-m", "nsys_transfer.analysis", "{file}", seed=27), 2,
         "does not start like an Nsight Systems report", needs_nsys=True),
]


def _copy(pristine: Path, work: Path, name: str = "trace.sqlite") -> Path:
    trace = work / name
    shutil.copyfile(pristine, trace)
    return trace


# --- running a case ---------------------------------------------------------------------------------------------

def _without_dac_override():
    """In the child: lose root's power to write into folders whose mode forbids it (a read-only place for root)."""
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH: dropped from the bounding set, gone after exec
        if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def _read_only_runner(work: Path):
    """preexec_fn for a run that must find read-only folders read-only, after checking that it really does."""
    preexec = _without_dac_override if os.geteuid() == 0 else None
    probe = read_only_dir(work) / "probe"
    try:
        r = subprocess.run([sys.executable, "-c", f"open({str(probe)!r}, 'w')"], preexec_fn=preexec,
                           capture_output=True, text=True)
    except subprocess.SubprocessError as e:
        pytest.skip(f"cannot make a folder read-only for this user here ({e})")
    if r.returncode == 0:
        probe.unlink()
        pytest.skip("this user can write into a mode-555 folder even without CAP_DAC_OVERRIDE")
    return preexec


def bad_numbers(obj, where="$") -> list[tuple[str, float]]:
    """Every negative, NaN or infinite number in a JSON document, with its path."""
    if isinstance(obj, dict):
        return [b for k, v in obj.items() for b in bad_numbers(v, f"{where}.{k}")]
    if isinstance(obj, list):
        return [b for i, v in enumerate(obj) for b in bad_numbers(v, f"{where}[{i}]")]
    if isinstance(obj, (int, float)) and not isinstance(obj, bool) and (not math.isfinite(obj) or obj < 0):
        return [(where, obj)]
    return []


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case: Case, pristine, analyzed, tmp_path, request):
    if case.needs_nsys:
        request.getfixturevalue("nsys")
    work = tmp_path / "case"
    work.mkdir()
    argv, inputs = case.make(work, pristine)
    preexec = _read_only_runner(work) if case.read_only else None
    before = {p: sha256(p) for p in inputs}
    listing = sorted(work.rglob("*"))
    env = {**os.environ, "NSYS_TRANSFER_CACHE": str(tmp_path / "cache")}
    r = subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=120, cwd=ROOT, env=env,
                       preexec_fn=preexec)

    lines = [x for x in r.stderr.splitlines() if x.strip() and not PROGRESS.match(x)]
    assert r.returncode == case.code, r.stderr[-2000:]
    assert "Traceback" not in r.stderr and len(lines) == 1, r.stderr[-2000:]
    assert case.says in lines[0], lines[0]
    assert "internal error" not in lines[0]
    assert {p: sha256(p) for p in inputs} == before, "an input was modified"
    if case.code:
        created = sorted(set(work.rglob("*")) - set(listing))
        assert not created, f"a failed run left {created} behind"
        return
    s = json.loads((work / case.result).read_text())
    assert not bad_numbers(s), bad_numbers(s)[:5]
    if case.result == "summary.json":
        assert s["warnings"] and all(w in lines[0] for w in s["warnings"])
    case.figures(s, analyzed["naive-input"])
    if case.shows:
        case.shows(r.stdout)


def test_real_exports_have_nothing_to_drop(analyzed, public_traces):
    """The warnings are not noise: no real export, bundled or public, has a row that validation drops."""
    from nsys_transfer.analysis import Trace
    for name, s in analyzed.items():
        assert s["warnings"] == [], name
    for path in public_traces:
        with Trace.open(path) as t:
            t.device.kernels, t.device.memcpys, t.device.memsets, t.host.nvtx, t.osrt.frame, t.calls.api_rows  # noqa: B018 (loading is the test)
            assert t.warnings == [], (path.name, t.warnings)
