"""Is this nsys new enough for the CUDA driver? The newest CUDA an nsys can trace, against the driver's CUDA version.

Measured on an H200 with a CUDA 13.0 driver: nsys 2023.4 (newest CUDA 12.4) recorded 35 of ~9,300 GPU operations
of a transformers `generate()` call, said "Importation succeeded with non-fatal errors" and exported anyway; the
toolkit's own stages were recorded completely on the same machine. An nsys older than the driver is a risk, not
a certainty: warn, say how to use a newer one, and let the trace's own figures (analyze-trace --check) decide.

`python -m nsys_transfer.nsys_core.driver` prints the comparison (plain Python: `make nsys` runs it before any venv exists).
"""
from __future__ import annotations

import ctypes
import glob
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from .nsys import NsysNotFound, find_nsys

# The newest CUDA each Nsight Systems release traces, where a source says so (see docs/nsys-versions.md):
#   2023.4 -> 12.4  the 2023.4.4 CLI bundles libcupti.so.12.4 as its newest CUPTI (target-linux-x64/); Debian and
#                   Ubuntu ship it from CUDA Toolkit 12.4.1 (nvidia-cuda-toolkit 12.4.1)
#   2024.2 -> 12.5  Debian's nsight-systems 2024.2.3.38~12.5.0 comes from CUDA Toolkit 12.5.0:
#                   https://packages.debian.org/experimental/nsight-systems-target ; and 2024.2.3 itself, on the H200's
#                   CUDA 13.0 driver, logs "CUDA trace will be collected using libraries for driver version 12.5"
#                   (tests/data/programs/hf_generate_nsys2024.sqlite.xz, DIAGNOSTIC_EVENT)
#   2024.6 -> 12.8  nsys 2024.6.2 on CUDA 13.x drivers says "Installed CUDA driver version (13.x) is not supported
#                   by this build of Nsight Systems. CUDA trace will be collected using libraries for driver version
#                   12.8" (its DIAGNOSTIC_EVENT table)
#   2025.6 -> 13.1  Nsight Systems 2025.6 release notes, "CUDA 13.1 support":
#                   https://docs.nvidia.com/nsight-systems/2025.6/ReleaseNotes/index.html
# A release between two rows supports at least the older row's CUDA (releases only add support); one older than
# the first row at most 12.4. The libcupti.so.X.Y files beside the nsys binary, when present, say it exactly and
# are used first.
NSYS_NEWEST_CUDA: dict[tuple[int, int], tuple[int, int]] = {
    (2023, 4): (12, 4),
    (2024, 2): (12, 5),
    (2024, 6): (12, 8),
    (2025, 6): (13, 1),
}
GET_NSYS = "https://developer.nvidia.com/nsight-systems/get-started"
CUPTI = re.compile(r"libcupti\.so\.(\d+)\.(\d+)$")


def parse_cuda(text: str | int | None) -> tuple[int, int] | None:
    """'13.0', '13000' (cuDriverGetVersion, TARGET_INFO_SYSTEM_ENV.CudaDriverVersion) or 13000 -> (13, 0)."""
    if text is None:
        return None
    s = str(text).strip()
    m = re.fullmatch(r"(\d+)\.(\d+)", s)
    if m:
        return int(m.group(1)), int(m.group(2))
    if s.isdigit() and int(s) >= 1000:
        v = int(s)
        return v // 1000, (v % 1000) // 10
    return None


def driver_cuda() -> tuple[tuple[int, int], str] | None:
    """The CUDA version the installed driver supports and where it came from; None without a driver."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
        v = ctypes.c_int(0)
        if lib.cuDriverGetVersion(ctypes.byref(v)) == 0 and v.value:
            return parse_cuda(v.value), "cuDriverGetVersion"
    except (OSError, AttributeError):
        pass
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run([smi], capture_output=True, text=True, timeout=20).stdout
        except (OSError, subprocess.TimeoutExpired):
            return None
        found = parse_nvidia_smi(out)
        if found:
            return found, "nvidia-smi"
    return None


def parse_nvidia_smi(text: str) -> tuple[int, int] | None:
    """nvidia-smi's header: '... Driver Version: 580.95.05      CUDA Version: 13.0     |'."""
    m = re.search(r"CUDA Version:\s*(\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else None


def bundled_cupti(nsys_path: str) -> tuple[int, int] | None:
    """The newest libcupti.so.X.Y an nsys install carries (beside the binary, or in its target-linux-x64)."""
    real = Path(os.path.realpath(nsys_path)).parent
    versions = []
    for folder in {real, real.parent / "target-linux-x64"}:
        for p in glob.glob(str(folder / "libcupti.so.*")):
            m = CUPTI.search(p)
            if m:
                versions.append((int(m.group(1)), int(m.group(2))))
    return max(versions) if versions else None


def newest_cuda(year_release: tuple[int, int], nsys_path: str | None = None):
    """(newest CUDA this nsys is known to trace, how that is known, bound) or None: bound is "exact" (its bundled
    CUPTI, or a release in the table), "at least" (a release between two rows) or "at most" (older than every row)."""
    if nsys_path:
        cupti = bundled_cupti(nsys_path)
        if cupti:
            return cupti, f"its newest bundled CUPTI is libcupti.so.{cupti[0]}.{cupti[1]}", "exact"
    known = sorted(NSYS_NEWEST_CUDA)
    first = known[0]
    if year_release < first:
        return NSYS_NEWEST_CUDA[first], f"it is older than {first[0]}.{first[1]}, which traces up to CUDA " \
                                        f"{_fmt(NSYS_NEWEST_CUDA[first])}", "at most"
    k = [r for r in known if r <= year_release][-1]
    if k == year_release:
        return NSYS_NEWEST_CUDA[k], f"NVIDIA's notes for {k[0]}.{k[1]}, docs/nsys-versions.md", "exact"
    if k == known[-1]:
        return None  # newer than every row: not known to be too old
    return NSYS_NEWEST_CUDA[k], f"{k[0]}.{k[1]} traces up to CUDA {_fmt(NSYS_NEWEST_CUDA[k])}; later releases may " \
                                "trace newer ones", "at least"


def compare(nsys_version: str, year_release: tuple[int, int], driver: tuple[int, int] | None,
            nsys_path: str | None = None, driver_source: str = "") -> dict:
    """The record's `driver_check`: driver and nsys CUDA versions, and a warning when nsys is older than the driver."""
    out = {"driver_cuda": _fmt(driver), "driver_source": driver_source or None, "nsys_version": nsys_version,
           "nsys_newest_cuda": None, "nsys_source": None, "older_than_driver": False, "warning": None}
    newest = newest_cuda(year_release, nsys_path)
    if newest:
        out["nsys_newest_cuda"] = ("<=" if newest[2] == "at most" else ">=" if newest[2] == "at least" else "") \
            + _fmt(newest[0])
        out["nsys_source"] = newest[1]
    if driver is None or newest is None or newest[0] >= driver:
        return out
    out["older_than_driver"] = True
    known = "is not known to trace" if newest[2] == "at least" else "does not trace"
    out["warning"] = (f"nsys {nsys_version} {known} CUDA {_fmt(driver)} ({newest[1]}), the driver's CUDA version "
                      f"here: the capture may lose most CUDA events without failing (seen on an H200: 35 of ~9,300 "
                      f"GPU operations recorded). Use an Nsight Systems made for CUDA {_fmt(driver)}: install it from "
                      f"NVIDIA ({GET_NSYS}; the .run/.deb puts it in /opt/nvidia/nsight-systems/<version>, found "
                      f"automatically) or point the toolkit at one with NSYS=/path/to/nsys; check a trace with "
                      f"`analyze-trace --check TRACE`.")
    return out


def check(nsys) -> dict:
    """compare() for a found Nsys (nsys_core.nsys) and this machine's driver."""
    found = driver_cuda()
    driver, source = found if found else (None, "")
    return compare(nsys.version, nsys.year_release, driver, nsys.path, source)


def _fmt(v: tuple[int, int] | None) -> str | None:
    return f"{v[0]}.{v[1]}" if v else None


def main(argv: list[str]) -> int:
    """Print this machine's nsys against its driver; 2 without an nsys."""
    try:
        n = find_nsys()
    except NsysNotFound as e:
        print(f"nsys-driver: {e}", file=sys.stderr)
        return 2
    c = check(n)
    driver = f"CUDA {c['driver_cuda']} ({c['driver_source']})" if c["driver_cuda"] else "no NVIDIA driver here"
    newest = f"CUDA {c['nsys_newest_cuda']} ({c['nsys_source']})" if c["nsys_newest_cuda"] else "not known"
    print(f"nsys {n.version} at {n.path}: newest {newest}; driver: {driver}", file=sys.stderr)
    if c["warning"]:
        print(f"nsys-driver: warning: {c['warning']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
