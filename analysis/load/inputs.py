"""Turn what the user gave (.sqlite, .sqlite.xz, .nsys-rep, or a torch.profiler trace .json[.gz]) into a local SQLite
path, never touching theirs.

Compressed traces are decompressed, reports exported, and torch.profiler traces converted (load/kineto.py) into the
cache (analysis/load/cache.py), so a second run of the same trace is instant.
"""
from __future__ import annotations

import json
import lzma
import shutil
import tempfile
from pathlib import Path

from ...nsys_core.nsys import NsysNotFound, export_sqlite, find_nsys

from . import kineto, kineto_json, validate
from .cache import cached
from ..common.errors import TraceError

XZ_MAGIC = b"\xfd7zXZ\x00"
REPORT_MAGIC = b"NVIDIA Tegra Profiler Report"  # how a .nsys-rep begins (seen from 2023 to 2026 builds); wording only


def resolve_input(path: Path, nsys=None) -> tuple[Path, str]:
    """(a local SQLite path to open, the path to show the user) for a .sqlite, .sqlite.xz, .nsys-rep or a
    torch.profiler trace (JSON, gzip-compressed or not: told by its content)."""
    if not path.exists() or path.is_dir():
        return path, str(path)  # Trace's checks word these cases
    if not path.is_file():
        raise TraceError(f"{path}: not a regular file (a pipe, socket or device); give the path of "
                         f"{validate.TRACE_KINDS} on disk")
    if path.stat().st_size == 0:
        if path.name.endswith(kineto_json.NAMES):
            raise TraceError(f"{path}: the file is empty; record the torch.profiler trace again (its "
                             "on_trace_ready writes it when the profiler's schedule ends)")
        return path, str(path)
    with open(path, "rb") as f:
        head = f.read(16)
    if head.startswith(XZ_MAGIC):
        return cached(path, lambda tmp: _decompress_xz(path, tmp)), str(path)
    if path.suffix == ".nsys-rep" or path.suffix == ".qdrep":
        return cached(path, lambda tmp: _export_report(path, tmp, nsys)), str(path)
    if kineto_json.looks_like_json(path):
        return cached(path, lambda tmp: kineto.convert(path, tmp), salt=kineto.VERSION), str(path)
    return path, str(path)


def _decompress_xz(path: Path, out: Path) -> None:
    try:
        with lzma.open(path) as src, open(out, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    except (lzma.LZMAError, EOFError) as e:
        raise TraceError(f"{path}: damaged .xz file ({e}: cut short or corrupted); copy it again") from None


def _export_report(path: Path, out: Path, nsys=None) -> None:
    if nsys is None:
        try:
            nsys = find_nsys()
        except NsysNotFound as e:
            raise TraceError(f"{path}: a .nsys-rep needs nsys to export it to SQLite, and {e}") from None
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=".export-") as d:
        made = Path(d) / "export.sqlite"  # nsys names its output by the extension it is given
        proc = export_sqlite(nsys, path, made)
        if proc.returncode != 0 or not made.exists():
            said = " ".join((proc.stderr or proc.stdout).split())[-300:]
            raise TraceError(f"{path}: nsys {nsys.version} could not export it ({said or 'no output'}); "
                             f"{_export_hint(path, said, nsys.version)}")
        made.replace(out)


def _export_hint(path: Path, said: str, version: str) -> str:
    """What to do when nsys cannot export a report: a file that is no report is not blamed on nsys' age."""
    with open(path, "rb") as f:
        head = f.read(len(REPORT_MAGIC))
    if head != REPORT_MAGIC:
        return ("the file does not start like an Nsight Systems report; give the .nsys-rep that `nsys profile` wrote "
                "(copied in binary mode) or its SQLite export")
    if "newer" in said.lower():
        return (f"the report was made by a newer Nsight Systems than {version}; export it there "
                "(`nsys export --type=sqlite`) or install a newer nsys")
    return "the report may be damaged or cut short: copy it again, or export it where it was recorded"


def read_record(path: Path, key: str, what: str, how: str) -> dict:
    """A JSON record that must be an object whose `key` holds an object; TraceError saying what is wrong and `how`
    to make one."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise TraceError(f"{path}: cannot read it ({e})") from None
    if not isinstance(data, dict) or not isinstance(data.get(key), dict):
        raise TraceError(f"{path}: not {what} (no '{key}'); {how}")
    return data


def run_record_beside(trace: Path) -> Path | None:
    """The workload's own record that `profile stage` writes beside its trace: runs/x/x.sqlite ->
    runs/x/x.workload.json; per-rank traces x.rank0.sqlite share x.workload.json."""
    stem = trace.name.split(".")[0]
    candidate = trace.with_name(f"{stem}.workload.json")
    return candidate if candidate.is_file() else None


def capture_record_beside(trace_path) -> Path | None:
    """The run record `python -m nsys_transfer.profiling` writes beside its trace: runs/x/x.sqlite -> runs/x/x.run.json (per-rank
    traces x.rank0.sqlite share x.run.json)."""
    p = Path(trace_path)
    candidate = p.with_name(f"{p.name.split('.')[0]}.run.json")
    return candidate if candidate.is_file() else None


NSYS_ENDINGS = (".sqlite", ".sqlite.xz", ".nsys-rep", ".qdrep")
KINETO_ENDINGS = (".json", ".json.gz", ".json.gzip")


def traces_in(folder: Path) -> list[Path]:
    """The traces a folder holds, by name: nsys exports (a report's .sqlite beside it stands for it) and torch.profiler
    traces (tensorboard_trace_handler's <host>_<pid>.<ns>.pt.trace.json[.gz], export_chrome_trace's .json: a JSON
    file counts where it holds trace events, so a run record beside a trace is not taken for one), hidden files aside;
    TraceError where there is none."""
    # a hidden file is a run still being written, or what a killed one left (profiling/staging.py): never a trace
    files = sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith("."))
    exports = {p.name[: -len(e)] for p in files for e in (".sqlite", ".sqlite.xz") if p.name.endswith(e)}
    found = [p for p in files if p.name.endswith(NSYS_ENDINGS) and not
             (p.name.endswith((".nsys-rep", ".qdrep")) and p.name.rsplit(".", 1)[0] in exports)]
    found += [p for p in files if p.name.endswith(KINETO_ENDINGS) and kineto_json.has_trace_events(p)]
    if not found and not kineto_json.STREAMS and any(p.name.endswith(KINETO_ENDINGS) for p in files):
        raise TraceError(f"{folder}: its JSON files may be torch.profiler traces, and {kineto_json.NO_IJSON}")
    if not found:
        raise TraceError(f"{folder}: is a directory with no trace in it; give the path of {validate.TRACE_KINDS}, or "
                         "the folder tensorboard_trace_handler wrote them into")
    return sorted(found)

