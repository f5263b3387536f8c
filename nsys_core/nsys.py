"""Nsight Systems itself: find an nsys executable in the order a user expects, its version, and `nsys export`."""
from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
PROJECT_NSYS = PROJECT_ROOT / ".nsys" / "target-linux-x64" / "nsys"


class NsysNotFound(RuntimeError):
    """No working nsys anywhere the toolkit looks; the message says where it looked and how to get one."""


@dataclass(frozen=True)
class Nsys:
    """A working nsys: its path, its version and the rule (find_nsys) that found it."""
    path: str
    version: str          # e.g. "2023.4.4.54"
    source: str           # which rule found it

    @property
    def year_release(self) -> tuple[int, int]:
        """(year, release) of the version, e.g. (2023, 4); (0, 0) when it does not parse."""
        m = re.match(r"(\d{4})\.(\d+)", self.version)
        return (int(m.group(1)), int(m.group(2))) if m else (0, 0)

    def env(self) -> dict:
        """Environment for `nsys stats`, which needs the host-side python helpers."""
        env = dict(os.environ)
        host = Path(self.path).resolve().parent.parent / "host-linux-x64" / "python" / "lib"
        if host.is_dir():
            env["PYTHONPATH"] = f"{host}{os.pathsep}{env.get('PYTHONPATH', '')}"
        return env


def candidates() -> list[tuple[str, str]]:
    """(path, why) of every nsys to try, in order: $NSYS, PATH, NVIDIA's install folders, `make nsys`."""
    out = []
    if os.environ.get("NSYS"):
        out.append((os.environ["NSYS"], "$NSYS"))
    if shutil.which("nsys"):
        out.append((shutil.which("nsys"), "PATH"))
    for pattern, why in (("/opt/nvidia/nsight-systems/*/bin/nsys", "/opt/nvidia"),
                         ("/usr/local/cuda*/bin/nsys", "/usr/local/cuda")):
        for p in sorted(glob.glob(pattern), reverse=True):
            out.append((p, why))
    out.append((str(PROJECT_NSYS), "make nsys"))
    return out


def version_of(path: str) -> str:
    """`nsys --version` as "2023.4.4.54"; "" when it does not run."""
    try:
        text = subprocess.run([path, "--version"], capture_output=True, text=True, errors="replace", timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""
    m = re.search(r"(\d{4}\.\d+\.\d+(?:\.\d+)?)", text)
    return m.group(1) if m else ""


def find_nsys() -> Nsys:
    """The first working nsys of candidates(); NsysNotFound saying what was tried."""
    tried = []
    for path, why in candidates():
        if os.path.isfile(path) and os.access(path, os.X_OK):
            v = version_of(path)
            if v:
                return Nsys(path, v, why)
            tried.append(f"{path} (does not run)")
        elif why == "$NSYS":
            tried.append(f"{path} ($NSYS, not an executable)")
    hint = "run `make nsys` (installs Nsight Systems into .nsys/ without root changes) or set NSYS=/path/to/nsys"
    raise NsysNotFound("no working nsys found" + (f" (tried {', '.join(tried)})" if tried else "") + f"; {hint}")


def export_sqlite(nsys: Nsys, report: Path, out: Path) -> subprocess.CompletedProcess:
    """`nsys export --type=sqlite` of a .nsys-rep into `out`; the caller judges the result in its own words. nsys may
    echo bytes of a file that is no report: its output is decoded with replacement characters, never an error."""
    return subprocess.run([nsys.path, "export", "--type=sqlite", "--force-overwrite=true", f"--output={out}",
                           str(report)], capture_output=True, text=True, errors="replace")
