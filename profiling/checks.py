"""What a profiling run checks and explains: the Python and nvtx package the traced program runs with, and why a run
failed, from what nsys printed and what it left behind."""
from __future__ import annotations

import re
import shutil
import sqlite3
import subprocess
from importlib import metadata
from pathlib import Path


def nvtx_package_version() -> str | None:
    """The installed nvtx package's version; None when it is not installed."""
    try:
        return metadata.version("nvtx")
    except metadata.PackageNotFoundError:
        return None


def nvtx_unrecorded_warning(nsys_version: tuple[int, int], nvtx_version: str | None) -> str | None:
    """nvtx >= 0.2.12 emits ranges that nsys 2023.4 and older do not record (seen on our machines)."""
    if not nvtx_version:
        return None
    parts = tuple(int(p) for p in nvtx_version.split(".")[:3] if p.isdigit())
    if parts >= (0, 2, 12) and nsys_version <= (2023, 4):
        return (f"the nvtx package {nvtx_version} is not recorded by nsys {nsys_version[0]}.{nsys_version[1]} "
                "(no NVTX ranges in the trace); pip install 'nvtx<0.2.12' or use a newer nsys")
    return None


def traced_python(command) -> str | None:
    """Where the command is a Python, which one runs and whether it has the nvtx package (its ranges name the program's
    phases) and torch, in one sentence; None for another command or a Python that cannot say."""
    exe = shutil.which(command[0]) if command else None
    if not exe or not re.match(r"^python(\d(\.\d+)?)?$", Path(command[0]).name):
        return None
    probe = subprocess.run([exe, "-c", "import importlib.util, sys; print(sys.version.split()[0], "
                            "bool(importlib.util.find_spec('nvtx')), bool(importlib.util.find_spec('torch')))"],
                           capture_output=True, text=True, timeout=60)
    if probe.returncode != 0:
        return None
    version, nvtx, torch = probe.stdout.split()
    return (f"tracing {command[0]} = {exe} (Python {version}; nvtx "
            f"{'installed' if nvtx == 'True' else 'missing: its NVTX ranges will not be recorded'}"
            f"{'' if torch == 'True' else '; no torch'})")


def diagnose_profile_failure(lines: list[str], rc: int, qdstrm: Path, nsys, req) -> str:
    """Why a profiling run produced no trace, from nsys's output lines, its exit code and leftovers."""
    text = "\n".join(lines)
    tail = " | ".join(lines[-5:]) if lines else "(no output)"
    if qdstrm.exists():
        importer = Path(nsys.path).resolve().parent.parent / "host-linux-x64" / "QdstrmImporter"
        if importer.exists():
            return (f"nsys left {qdstrm} without importing it; import it with: {importer} -i {qdstrm} "
                    f"(then `nsys export --type=sqlite`). nsys said: {tail}")
        return (f"nsys left {qdstrm} but this install has no QdstrmImporter (host-linux-x64 is missing); "
                "install the full Nsight Systems (`make nsys` installs both halves) and import it there")
    if req.capture_range and ("No reports were generated" in text or "capture range" in text.lower()
                              or "cudaProfilerStart" in text or rc == 0):
        return ("the capture range never started: the program did not call cudaProfilerStart "
                "(torch.cuda.profiler.start()); call it where the capture should begin, or trace the whole program "
                f"(leave out --capture-range). nsys said: {tail}")
    if rc != 0:
        return f"the program failed under nsys (exit {rc}); its last lines: {tail}"
    return f"nsys produced no report; its last lines: {tail}"


def has_gpu() -> bool:
    """Whether this machine has an NVIDIA GPU driver (nvidia-smi or /dev/nvidiactl)."""
    return shutil.which("nvidia-smi") is not None or Path("/dev/nvidiactl").exists()


def check_trace(sqlite: Path, expect_nvtx: bool, nsys=None) -> list[str]:
    """Post-capture sanity: warnings for a trace that will not show what the user wants."""
    warnings = []
    con = sqlite3.connect(f"file:{sqlite}?mode=ro", uri=True)
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if expect_nvtx and ("NVTX_EVENTS" not in tables
                            or con.execute("SELECT COUNT(*) FROM NVTX_EVENTS WHERE eventType IN (59, 60)").fetchone()[0] == 0):
            msg = "the trace has no NVTX ranges although the workload emits them"
            w = nvtx_unrecorded_warning(nsys.year_release, nvtx_package_version()) if nsys else None
            warnings.append(msg + (f": {w}" if w else "; check that the nvtx package is installed"))
        if "CUPTI_ACTIVITY_KIND_KERNEL" not in tables:
            warnings.append("the trace has no CUDA kernels (no GPU, or --trace without cuda)")
    finally:
        con.close()
    return warnings
