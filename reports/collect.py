"""Find the trace of each stage, and the bench results, in run folders, files, or the bundled H200 data."""
from __future__ import annotations

import json
import re
from pathlib import Path

from ..nsys_core.contracts import STAGES

BUNDLED = Path(__file__).resolve().parent / "data" / "h200"
ORDER = list(STAGES)
# torch.profiler's traces: the names tensorboard_trace_handler gives them are found in folders; a .json given by
# name is read too (a folder's other .json files are records: bench.json, x.run.json)
KINETO_SUFFIXES = (".pt.trace.json", ".pt.trace.json.gz")
TRACE_SUFFIXES = (".sqlite", ".sqlite.xz", ".nsys-rep", *KINETO_SUFFIXES)
GIVEN_SUFFIXES = (*TRACE_SUFFIXES, ".json", ".json.gz")
BUNDLED_GPUS = Path(__file__).resolve().parent / "data" / "h200x2"
MULTI_GPU = re.compile(r"-x(\d+)(?:gpu)?$")      # one torchrun trace: `make profile GPUS=N` names it <stage>-x<N>gpu
RANK_FILE = re.compile(r"^(.*)\.rank(\d+)$")     # per-rank traces: <name>.rank0, .rank1, ...


class ReportInputError(ValueError):
    """An input the report cannot use (missing or malformed file), said in one line."""


def _stage_of(path: Path) -> tuple[str, int]:
    """'streams-2.sqlite' -> ('streams', 2); 'pinned-long.sqlite.xz' -> ('pinned-long', 1)."""
    name = _bare(path)
    m = re.match(r"^(.*?)-(\d+)$", name)
    return (m.group(1), int(m.group(2))) if m else (name, 1)


def _bare(path: Path) -> str:
    name = path.name
    for suf in (*KINETO_SUFFIXES, *GIVEN_SUFFIXES):  # the longest first: x.pt.trace.json -> x
        if name.endswith(suf):
            return name[: -len(suf)]
    return name


def find_runs(paths: list[Path]) -> tuple[dict[str, Path], dict[str, list[Path]]]:
    """(stage -> trace, multi-GPU run -> its traces). Per stage the newest numbered run wins and a .sqlite beats the
    .nsys-rep beside it. A multi-GPU run is one torchrun trace (<stage>-x<N>gpu) or the per-rank traces of one run
    (<name>.rank0, .rank1, ...: `make profile GPUS=N PER_RANK=1`)."""
    files = _trace_files(paths)
    groups: dict[str, dict[int, Path]] = {}
    for f in files:
        m = RANK_FILE.match(_bare(f))
        if m and not (f.name.endswith(".nsys-rep") and f.with_name(_bare(f) + ".sqlite").exists()):
            groups.setdefault(m.group(1), {})[int(m.group(2))] = f
    stages = _best_per_stage([f for f in files if not RANK_FILE.match(_bare(f))])
    if not stages and not groups:
        raise ReportInputError(f"no traces found in {', '.join(map(str, paths))}: `make trace PROG=my.py NAME=before` "
                               "traces your program there (`make profile-all` the toolkit's stages)")
    single, multi = split_multi_gpu(stages)
    runs = {s: [p] for s, p in multi.items()}
    runs.update({name: [g[r] for r in sorted(g)] for name, g in sorted(groups.items())})
    return single, runs


def _trace_files(paths: list[Path]) -> list[Path]:
    files: list[Path] = []
    for p in paths or [BUNDLED]:
        if not p.exists():
            raise ReportInputError(f"{p}: no such file or folder")
        if p.is_dir():
            # a hidden file is a run still being written, or what a killed one left (profiling/staging.py): no trace
            files += [f for f in sorted(p.rglob("*")) if f.is_file() and f.name.endswith(TRACE_SUFFIXES)
                      and not f.name.startswith(".")]
        elif p.name.endswith(GIVEN_SUFFIXES):
            files.append(p)
        else:
            raise ReportInputError(f"{p}: not a trace (.sqlite, .sqlite.xz, .nsys-rep, or a torch.profiler "
                                   ".json[.gz]) or a folder of them")
    return files


def _best_per_stage(files: list[Path]) -> dict[str, Path]:
    best: dict[str, tuple[int, int, Path]] = {}
    given: dict[str, int] = {}  # a user's own traces keep the order they were given in
    for f in files:
        stage, n = _stage_of(f)
        given.setdefault(stage, len(given))
        rank = (n, 0 if f.name.endswith(".nsys-rep") else 1)
        if stage not in best or rank > best[stage][:2]:
            best[stage] = (*rank, f)
    return {s: best[s][2] for s in sorted(best, key=lambda s: stage_sort_key(s, given.get(s, 0)))}


def stage_sort_key(stage: str, given: int = 0):
    """Sort key: the stages in the article's order, '-long' runs after their stage, other traces after them in the
    order they were given."""
    base = stage.split("-long")[0]
    return (ORDER.index(base), 0, stage) if base in ORDER else (len(ORDER), given, stage)


def find_bench(paths: list[Path], explicit: Path | None) -> dict[str, dict]:
    """stage (or label) -> bench record, from an explicit file, bench.json in the given folders, or the bundle."""
    candidates = [explicit] if explicit else [p / "bench.json" for p in (paths or [BUNDLED]) if p.is_dir()]
    for c in candidates:
        if c and c.exists():
            data = _read_json(c)
            records = data if isinstance(data, list) else data.get("records", [])
            return {(r.get("label") or r["stage"]): r for r in records if "throughput" in r}
    if explicit:
        raise ReportInputError(f"{explicit}: no such bench file; run `make bench` to make one")
    return {}


def split_multi_gpu(traces: dict[str, Path]) -> tuple[dict[str, Path], dict[str, Path]]:
    """(single-GPU stages, multi-GPU runs): `make profile GPUS=N` names its run <stage>-x<N>gpu."""
    single = {s: p for s, p in traces.items() if not MULTI_GPU.search(s)}
    return single, {s: p for s, p in traces.items() if MULTI_GPU.search(s)}


def bundled_multi_gpu() -> dict[str, list[Path]]:
    """The bundled 2 x H200 runs (reports/data/h200x2): run name -> its trace files."""
    return find_runs([BUNDLED_GPUS])[1]


def _read_json(path: Path) -> dict | list:
    try:
        return json.loads(path.read_text())
    except OSError as e:
        raise ReportInputError(f"{path}: cannot read it ({e.strerror or e})") from None
    except ValueError as e:  # JSONDecodeError, and UnicodeDecodeError for a file that is not text at all
        raise ReportInputError(f"{path}: not valid JSON ({e}); give the JSON file the tool wrote") from None


def _json_in(paths: list[Path], name: str) -> tuple[dict | None, Path | None]:
    """The first file called `name` in the given folders (or the bundled 2-GPU data when none is given)."""
    for folder in [p for p in paths if p.is_dir()] if paths else [BUNDLED_GPUS]:
        for c in sorted(folder.rglob(name)):
            return _read_json(c), c
    return None, None


def find_probe(paths: list[Path], explicit: Path | None) -> tuple[dict | None, Path | None]:
    """The link-probe record (python -m nsys_transfer.workloads.linkprobe --json): --probe, probe.json in the folders, or bundled."""
    if explicit:
        if not explicit.exists():
            raise ReportInputError(f"{explicit}: no such probe file; make one with `python -m nsys_transfer.workloads.linkprobe --json`")
        return _probe_record(_read_json(explicit), explicit), explicit
    probe, path = _json_in(paths, "probe.json")
    return (_probe_record(probe, path) if probe is not None else None), path


def _probe_record(data, path: Path) -> dict:
    """A link-probe record is an object with a `verdict` object; anything else is refused in one line."""
    if not isinstance(data, dict) or not isinstance(data.get("verdict"), dict):
        raise ReportInputError(f"{path}: not a link-probe record (no 'verdict'); make one with "
                               "`python -m nsys_transfer.workloads.linkprobe --json FILE` on the GPU machine")
    return data


def find_scaling(paths: list[Path]) -> tuple[dict | None, Path | None]:
    """Unprofiled single-GPU vs N-GPU runs (`make scaling`: scaling.json), when there are some."""
    return _json_in(paths, "scaling.json")
