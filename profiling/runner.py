"""Profile a command or a workload stage with nsys, export SQLite, and write a run record."""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ..nsys_core import nsys as nsys_tool
from ..nsys_core.contracts import name_says
from ..nsys_core.nsys import Nsys
from ..nsys_core.nsys_messages import MessageSink
from ..nsys_core.signals import sigterm_raising

from . import python_stacks, staging
from .checks import diagnose_profile_failure, has_gpu

DEFAULT_TRACE = "cuda,nvtx,osrt"
CUDA_BACKTRACE = "all"  # nsys --cudabacktrace with Python backtraces: every CUDA API kind, at nsys's 80 us threshold


class ProfileError(RuntimeError):
    """A profiling run that produced no usable trace; the message says why and what to do."""


@dataclass
class ProfileRequest:
    """One nsys capture: the command to trace, where the files go and what nsys records."""
    command: list[str]
    out_base: Path                      # without extension
    trace: str = DEFAULT_TRACE
    capture_range: bool = True          # --capture-range=cudaProfilerApi
    sample: bool | str = False          # CPU sampling (off keeps traces small); or nsys's word: process-tree (cpu),
    #                                     system-wide, none
    ctxsw: bool | str = False           # context switches; or nsys's word: process-tree, system-wide
    python_backtrace: str | None = None  # nsys --python-backtrace (e.g. cuda: the Python stack of each CUDA call),
    #                                     passed only where this nsys knows the option and the trace has that API
    python_sampling: bool = False       # nsys --python-sampling=true, where this nsys knows it
    python_stacks_ms: float | None = None  # our own Python stack sampler's period (python_stacks.py); None: off
    env: dict | None = None
    cuda_graph_trace: str | None = None  # nsys --cuda-graph-trace: graph (nsys's default: one row a launch) or node
    um_page_faults: bool = False        # nsys --cuda-um-{cpu,gpu}-page-faults: the faults behind managed-memory moves


RUN_FILES = staging.RUN_SUFFIXES  # what a run writes beside its base


def next_free_base(directory: Path, name: str, force: bool, number: bool = True) -> Path:
    """runs/<stage>/<stage>, then <stage>-2, -3, ...: never silently overwrite an earlier run (number=False: that
    name or none, ProfileError when it is taken, so a command written with the name never reads an older trace).
    ProfileError when nothing can be written there. Both are said before the program runs, not after."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as e:
        raise ProfileError(f"{directory}: the trace cannot be written there ({e.strerror or e}); give another place")
    base = directory / name
    if force:
        return base
    taken = [base.with_name(base.name + ext) for ext in RUN_FILES if base.with_name(base.name + ext).exists()]
    if taken and not number:
        raise ProfileError(f"{taken[0]} is there from an earlier run; replace it with --force (make trace: FORCE=1), "
                           "or give another name (make trace: NAME=...)")
    n = 1
    while any(base.with_name(base.name + ext).exists() for ext in RUN_FILES):
        n += 1
        base = directory / f"{name}-{n}"
    return base


def previous_trace(sqlite: Path) -> Path | None:
    """The newest other trace beside this one, or in a sibling run folder (runs/before/before.sqlite for
    runs/after/after.sqlite): what a fix is verified against, never one whose name says it is an after (the last
    pair's `after` is no before of the next run); None when there is none, or when this trace's own name says it is a
    before (NAME=before2: a new pair starts)."""
    sqlite = Path(sqlite).resolve()
    if name_says(sqlite.stem) == "before":
        return None
    here = [*sqlite.parent.glob("*.sqlite"), *sqlite.parent.parent.glob("*/*.sqlite")]
    # a hidden one is a run still being written (profiling/staging.py), never an earlier trace
    others = {p.resolve() for p in here if p.is_file() and not p.name.startswith(".")} - {sqlite}
    others = {p for p in others if name_says(p.stem) != "after"}
    return max(others, key=lambda p: p.stat().st_mtime, default=None)


def next_command(sqlite: Path, analyzed: bool) -> str:
    """The one command to run next: the analysis, else the comparison with the trace made before this one (or,
    without one, what to do to make it)."""
    tool = Path(sys.executable).parent
    analyze_trace = shown(tool / "analyze-trace") if (tool / "analyze-trace").exists() else \
        f"{shown(Path(sys.executable))} -m nsys_transfer.analysis"
    if not analyzed:
        return f"{analyze_trace} {shown(sqlite)}"
    verify = shown(tool / "nsys-transfer") if (tool / "nsys-transfer").exists() else \
        f"{shown(Path(sys.executable))} -m nsys_transfer"
    # without a GPU, verify compares the two loops by their time (no transfer to measure): said once
    cpu = "" if has_gpu() else "; no GPU here, so verify compares the loops' time: the transfers are measured on a " \
        "machine with an NVIDIA GPU"
    before = previous_trace(sqlite)
    if before is None:
        return (f"apply the fix the top finding names, trace the fixed program under another name, then "
                f"`{verify} verify {shown(sqlite)} AFTER.sqlite`{cpu}")
    return f"{verify} verify {shown(before)} {shown(sqlite)}   (before: the newest other trace beside this one{cpu})"


def shown(path: Path) -> str:
    """A path as the user can type it from here: relative to the working folder when it lies inside it."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


# nsys's progress bar as it writes the report, one "[1/1] [===   40%   ] x.nsys-rep" a few times a second: repeated
# without a newline, it is neither echoed nor kept (its "Generated: x.nsys-rep" says the same once)
PROGRESS = re.compile(rb"^\[\d+/\d+\] \[[= ]*\d{1,3}%[= ]*\]( \S+)?$")
LINE_END = re.compile(rb"[\r\n]")


def without_progress(pending: bytes, final: bool = False) -> tuple[bytes, bytes]:
    """(what to pass on, what to hold back) of the output read so far: every line ending in \\r or \\n that is not
    nsys's progress bar; an unfinished line is held back only while it may still become one (it starts with "[")."""
    out = []
    start = 0
    for m in LINE_END.finditer(pending):
        line = pending[start:m.start()]
        if line and not PROGRESS.match(line) or not line and m.group() == b"\n":  # the \r before a bar: dropped
            out.append(pending[start:m.end()])
        start = m.end()
    rest = pending[start:]
    if final or not rest.startswith(b"["):
        if not PROGRESS.match(rest):
            out.append(rest)
        rest = b""
    return b"".join(out), rest


def _stream(proc, sink: list[str], echo, marks: dict | None = None, messages: MessageSink | None = None) -> None:
    """Echo the child's output (nsys's progress bar left out), keep the last lines for errors, note when the capture
    ended (nsys prints "Generating '...qdstrm'" as it starts importing), and pick out nsys's own messages."""
    buf = b""
    held = b""
    pending = ""
    marks = marks if marks is not None else {}
    while True:
        read = proc.stdout.read1(4096) if hasattr(proc.stdout, "read1") else proc.stdout.read(4096)
        chunk, held = without_progress(held + read, final=not read)
        if not read and not chunk:
            break
        if echo and chunk:
            echo(chunk)
        if "import_started" not in marks and b".qdstrm" in chunk:
            marks["import_started"] = time.time()
        if messages is not None:
            *lines, pending = re.split(r"[\r\n]", pending + chunk.decode("utf-8", "replace"))
            pending = pending[-65536:]
            for line in lines:
                messages.feed(line, "import" if "import_started" in marks else "capture")
        buf += chunk
        if len(buf) > 1 << 20:
            buf = buf[-(1 << 19):]
        if not read:
            break
    if messages is not None and pending:
        messages.feed(pending, "import" if "import_started" in marks else "capture")
    text = buf.decode("utf-8", "replace").replace("\r", "\n")
    sink.extend(line for line in text.splitlines() if line.strip())


@lru_cache(maxsize=8)
def _profile_help(path: str) -> str:
    try:
        proc = subprocess.run([path, "profile", "--help"], capture_output=True, text=True, errors="replace", timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return proc.stdout + proc.stderr


def profile_options(nsys: Nsys) -> frozenset[str]:
    """The long options `nsys profile --help` lists (e.g. "python-backtrace"), read once per nsys."""
    return frozenset(re.findall(r"^\s*(?:-\w, )?--([a-z][a-z0-9-]*)", _profile_help(nsys.path), re.M))


def recording(nsys: Nsys, req: ProfileRequest) -> dict:
    """What the capture records beyond --trace, as nsys will be asked for it: the words passed, and for each option
    asked for but left out, why (this nsys lacks it, or the trace lacks the API it hangs on)."""
    sample = req.sample if isinstance(req.sample, str) else ("cpu" if req.sample else "none")
    ctxsw = req.ctxsw if isinstance(req.ctxsw, str) else ("process-tree" if req.ctxsw else "none")
    rec = {"trace": req.trace, "sample": sample, "cpuctxsw": ctxsw, "python_backtrace": None, "cudabacktrace": None,
           "python_sampling": False, "python_stacks_ms": req.python_stacks_ms, "left_out": []}
    known = profile_options(nsys) if (req.python_backtrace or req.python_sampling) else frozenset()
    traced = set(req.trace.split(","))
    if req.python_backtrace and req.python_backtrace not in ("none", "false"):
        missing = [api for api in req.python_backtrace.split(",") if api not in traced]
        why = None
        if "python-backtrace" not in known or "cudabacktrace" not in known:
            why = f"nsys {nsys.version} has no such option"
        elif missing:
            why = f"--trace={req.trace} does not trace {','.join(missing)}"
        elif sample == "none":
            why = "needs CPU sampling (nsys takes the stack with the CUDA backtrace, and those only while sampling)"
        if why:
            rec["left_out"].append(f"--python-backtrace={req.python_backtrace}: {why}")
        else:
            # nsys 2024.2 takes a CUDA call's Python stack only with its native one (--cudabacktrace, calls of 80 us
            # and longer by default: the syncs and blocking copies), and that only while it samples the CPU
            rec["python_backtrace"] = req.python_backtrace
            rec["cudabacktrace"] = CUDA_BACKTRACE
    if req.python_sampling:
        if "python-sampling" in known:
            rec["python_sampling"] = True
        else:
            rec["left_out"].append(f"--python-sampling=true: nsys {nsys.version} has no such option")
    return rec


def nsys_profile_args(nsys: Nsys, req: ProfileRequest, output: str) -> list[str]:
    """`nsys profile ...` up to (not including) the profiled command."""
    rec = recording(nsys, req)
    args = [nsys.path, "profile", f"--trace={req.trace}", f"--output={output}", "--force-overwrite=true",
            f"--sample={rec['sample']}", f"--cpuctxsw={rec['cpuctxsw']}"]
    if rec["python_backtrace"]:
        args += [f"--cudabacktrace={rec['cudabacktrace']}", f"--python-backtrace={rec['python_backtrace']}"]
    if rec["python_sampling"]:
        args.append("--python-sampling=true")
    if req.capture_range:
        args += ["--capture-range=cudaProfilerApi", "--capture-range-end=stop"]
    if req.cuda_graph_trace:
        args.append(f"--cuda-graph-trace={req.cuda_graph_trace}")
    if req.um_page_faults:
        args += ["--cuda-um-cpu-page-faults=true", "--cuda-um-gpu-page-faults=true"]
    return args


def profile(nsys: Nsys, req: ProfileRequest, echo=None) -> dict:
    """One nsys session around req.command (a torchrun command too: nsys follows every rank into one trace)."""
    return _run_and_export(nsys, req, nsys_profile_args(nsys, req, str(req.out_base)) + list(req.command),
                           [req.out_base], echo)


def profile_per_rank(nsys: Nsys, req: ProfileRequest, gpus: int, echo=None) -> dict:
    """One nsys session per rank: torchrun starts `nsys profile ... <command>` once per GPU (`--no-python`), and
    each writes <out_base>.rank<RANK>; req.command is the per-rank program. analyze-trace puts the traces on one
    clock by their session starts."""
    output = f"{req.out_base}.rank%q{{RANK}}"  # nsys expands %q{VAR} from the rank's environment
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(gpus), "--no-python",
           *nsys_profile_args(nsys, req, output), *req.command]
    bases = [req.out_base.with_name(f"{req.out_base.name}.rank{r}") for r in range(gpus)]
    return _run_and_export(nsys, req, cmd, bases, echo)


def _run_and_export(nsys: Nsys, req: ProfileRequest, args: list[str], bases: list[Path], echo) -> dict:
    echo = echo if echo is not None else (lambda b: (sys.stderr.buffer.write(b), sys.stderr.flush()))
    t0 = time.time()
    python_stacks.forget(bases[0])  # an older run's stacks are never read as this one's
    stacks_dir = python_stacks.fresh_folder(bases[0]) if req.python_stacks_ms else None
    env = python_stacks.sampling_environment(req.env or dict(os.environ), stacks_dir, req.python_stacks_ms) \
        if stacks_dir else dict(req.env or os.environ)
    # nsys's temporary files (the capture's .qdstrm, under TMPDIR) in a folder of this run's, removed however the run
    # ends: a stop mid-capture had left /tmp/nsys-report-*.qdstrm behind
    env["TMPDIR"] = scratch = tempfile.mkdtemp(prefix="nsys-transfer-")
    os.chmod(scratch, 0o1777)  # as /tmp is: an NSYS that runs nsys as another user (setpriv, sudo -u) writes there too
    lines: list[str] = []
    marks: dict = {}
    messages = MessageSink()
    with sigterm_raising():  # a stop ends nsys and the program with us, and leaves no samples folder behind
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
        try:
            _stream(proc, lines, echo, marks, messages)
            rc = proc.wait()
        except BaseException:
            _stop_group(proc)
            if stacks_dir:
                shutil.rmtree(stacks_dir, ignore_errors=True)
            raise
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        stacks = python_stacks.pack(stacks_dir, python_stacks.stacks_path(bases[0])) if stacks_dir else None
    t_end = time.time()
    profile_s = t_end - t0
    record = {"command": req.command, "nsys_command": args, "nsys": {"path": nsys.path, "version": nsys.version},
              "recorded": recording(nsys, req), "exit_code": rc, "durations_s": {"profile": round(profile_s, 2)}}
    if "import_started" in marks:
        record["durations_s"]["capture"] = round(marks["import_started"] - t0, 2)
        record["durations_s"]["import"] = round(t_end - marks["import_started"], 2)
    reps = [b.with_name(b.name + ".nsys-rep") for b in bases]
    for b, rep in zip(bases, reps):
        if not rep.exists():
            raise ProfileError(diagnose_profile_failure(lines, rc, b.with_name(b.name + ".qdstrm"), nsys, req))
    t1 = time.time()
    sqlites = [export_sqlite(nsys, rep, messages=messages) for rep in reps]
    record["durations_s"]["export"] = round(time.time() - t1, 2)
    record["files"] = {"nsys_rep": str(reps[0]), "sqlite": str(sqlites[0])}
    if stacks:
        record["files"]["python_stacks"] = str(stacks)
    if len(bases) > 1:
        record["files"]["ranks"] = [{"nsys_rep": str(r), "sqlite": str(q)} for r, q in zip(reps, sqlites)]
    record["program_exit_code"] = rc  # nsys returns the profiled program's exit code
    record["last_lines"] = lines[-15:]
    # nsys's own warnings and errors from the capture, the import and the export (a lossy trace exports anyway)
    record["nsys_messages"] = messages.messages
    return record


def _stop_group(proc: subprocess.Popen) -> None:
    """nsys and the program it runs (its own process group), ended: SIGINT first, which nsys turns into a clean stop
    of the capture, then SIGKILL after 5 s."""
    for sig, wait_s in ((signal.SIGINT, 5), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
            proc.wait(timeout=wait_s)
            return
        except (ProcessLookupError, PermissionError):
            return
        except subprocess.TimeoutExpired:
            continue


def export_sqlite(nsys: Nsys, rep: Path, out: Path | None = None, messages: MessageSink | None = None) -> Path:
    """rep exported beside it (or to out), its messages fed to `messages`; ProfileError when the export fails."""
    out = out or rep.with_suffix(".sqlite")
    proc = nsys_tool.export_sqlite(nsys, rep, out)
    if messages is not None:
        messages.feed_text(f"{proc.stdout}\n{proc.stderr}", "export")
    if proc.returncode != 0 or not out.exists():
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise ProfileError(f"nsys export of {rep} failed: {tail[0]}")
    return out


def write_record(base: Path, record: dict) -> Path:
    """Write the run record next to the trace base as BASE.run.json; returns its path."""
    path = base.with_name(base.name + ".run.json")
    with open(path, "w") as f:
        json.dump(record, f, indent=2)
    return path


def workload_command(stage: str, args: list[str], python: str = sys.executable, gpus: int = 1) -> list[str]:
    """The stage's command; with gpus > 1, one process per GPU under torchrun (nsys follows the children,
    so one multi-process trace holds every rank, each on its own device). profile_per_rank takes the gpus=1
    command and starts it under torchrun, inside one nsys per rank."""
    launcher = [python, "-m", "torch.distributed.run", "--nproc-per-node", str(gpus)] if gpus > 1 else [python]
    return [*launcher, "-m", "nsys_transfer.workloads", "--stage", stage, "--profile", *args]


def quote(cmd: list[str]) -> str:
    """The command as one shell-quoted line."""
    return " ".join(shlex.quote(c) for c in cmd)


def environment_for_profile() -> dict:
    """This process's environment for the profiled program, with unbuffered Python output."""
    env = dict(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env
