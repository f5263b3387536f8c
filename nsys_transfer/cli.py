"""`nsys-transfer ...` (also `python -m nsys_transfer.profiling ...`): profile the workloads or any command with Nsight
Systems, or measure them unprofiled. The command lines: parse the options, check what a run needs before it starts (a
GPU, nsys, a free output name, a program that can start), call the profiling and analysis layers, print (a line on
stderr after the name of the command that says it: say, fail); the capture itself is profiling/runner.py's, the
trace's reading the analysis's (through its facade)."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import click

from .analysis.facade import TraceError, capture_verdict, gpu_names, scaling_row
from .analysis.cli.options import OneLineGroup, refuse_unknown_option
from .analysis.cli.verify import main as verify_command
from .nsys_core.contracts import BENCH_ORDER, STAGES
from .nsys_core.driver import check
from .nsys_core.nsys import NsysNotFound, find_nsys
from .nsys_core.nsys_messages import summary_line
from .profiling import bench as bench_mod
from .profiling import staging
from .profiling.python_stacks import DEFAULT_INTERVAL_MS as DEFAULT_STACKS_MS
from .profiling.checks import (check_trace, has_gpu, nvtx_package_version, nvtx_unrecorded_warning,
                               traced_python)
from .profiling.startable import cannot_start
from .profiling.runner import (ProfileError, ProfileRequest, environment_for_profile, next_command,
                               next_free_base, profile, profile_per_rank, quote, shown, workload_command,
                               write_record)


STRICT_HELP = ("exit 1 when nsys reported warnings or errors (dropped events, importer errors, ...) or the trace "
               "lost CUDA events; the run record keeps them either way")


def command_name() -> str:
    """The name the running subcommand was called by (profile, run, scaling, ...: its lines on stderr say it); the
    tool's own name outside a command."""
    ctx = click.get_current_context(silent=True)
    return ctx.info_name if ctx is not None and ctx.info_name else "nsys-transfer"


def say(msg: str) -> None:
    """One line on stderr, after the running command's name."""
    click.echo(f"{command_name()}: {msg}", err=True)


def fail(msg: str, code: int = 2):
    """One line on stderr (say) and exit with code (2: bad input)."""
    say(msg)
    sys.exit(code)


def _free_base(directory: Path, name: str, force: bool, number: bool = True) -> Path:
    """next_free_base, or one line and exit 2 when nothing can be written there (before the program runs)."""
    try:
        return next_free_base(directory, name, force, number)
    except ProfileError as e:
        fail(str(e))


FOUND_VIA = {"$NSYS": "set by $NSYS", "PATH": "found on PATH", "/opt/nvidia": "NVIDIA's install folder",
             "/usr/local/cuda": "the CUDA toolkit's", "make nsys": "installed by make nsys"}


def _nsys(tell: bool = True):
    """The nsys to use, said on stderr unless not `tell` (`where` says it itself); one line and exit 2 when there is
    none."""
    try:
        n = find_nsys()
    except NsysNotFound as e:
        fail(str(e))
    if tell:
        say(f"using {_nsys_words(n)}")
    return n


def _nsys_words(n) -> str:
    """The nsys in use, in words: "Nsight Systems 2024.2.3.38 at PATH (installed by make nsys)"."""
    return f"Nsight Systems {n.version} at {n.path} ({FOUND_VIA.get(n.source, n.source)})"


def _driver_check(n) -> dict:
    """nsys against this machine's CUDA driver (nsys_core/driver.py): a warning when nsys is older."""
    c = check(n)
    if c["warning"]:
        say(f"warning: {c['warning']}")
    return c


@click.group(cls=OneLineGroup, name="nsys-transfer", context_settings={"help_option_names": ["-h", "--help"]})
def main():
    """Trace your program with Nsight Systems and read the trace (`run -o runs/x/x --analyze -- python my.py`: what
    `make trace` does), compare two traces of it before and after a fix (`verify BEFORE AFTER`), or profile and
    measure the toolkit's own stages (`profile`, `bench`, `scaling`)."""


@main.command()
def where():
    """Show which nsys would be used."""
    n = _nsys(tell=False)
    c = _driver_check(n)
    driver = (f"this machine's driver runs CUDA {c['driver_cuda']}" if c["driver_cuda"] else
              "this machine has no NVIDIA driver")
    newest = (f"it traces programs up to CUDA {c['nsys_newest_cuda']}" if c["nsys_newest_cuda"] else
              "the newest CUDA it traces is not known")
    click.echo(f"{_nsys_words(n)}: {newest}; {driver}")


@main.command("profile", context_settings={"ignore_unknown_options": True})
@click.argument("stage")
@click.option("--steps", default=3, show_default=True, help="captured steps")
@click.option("--warmup", default=3, show_default=True)
@click.option("--out-dir", default="runs", show_default=True, type=click.Path(file_okay=False))
@click.option("--force", is_flag=True, help="overwrite runs/<stage>/<stage>.* instead of numbering a new run")
@click.option("--trace", default="cuda,nvtx,osrt", show_default=True)
@click.option("--sample", is_flag=True, help="CPU sampling (off by default: keeps traces small)")
@click.option("--ctxsw", is_flag=True, help="trace context switches")
@click.option("--gpus", default=1, show_default=True, help="ranks under torchrun, one per GPU, in one trace")
@click.option("--per-rank", is_flag=True, help="with --gpus N: one nsys session and trace per rank (.rank0, .rank1, ...)")
@click.option("--strict", is_flag=True, help=STRICT_HELP)
@click.argument("workload_args", nargs=-1, type=click.UNPROCESSED)
def profile_command(stage, steps, warmup, out_dir, force, trace, sample, ctxsw, gpus, per_rank, strict, workload_args):
    """Trace one workload STAGE under nsys; extra args go to `python -m nsys_transfer.workloads`. Writes <base>.run.json (the
    profiling run record: nsys, files, checks, integrity) beside <base>.workload.json (the workload's own record)."""
    if stage not in STAGES:
        fail(f"unknown stage {stage!r}; choose one of {', '.join(STAGES)}")
    n = _nsys()
    driver_check = _driver_check(n)
    warn = nvtx_unrecorded_warning(n.year_release, nvtx_package_version())
    if warn:
        fail(warn)
    if "--device" not in workload_args and not has_gpu():
        fail("no NVIDIA GPU on this machine (no nvidia-smi, no /dev/nvidiactl); stage traces need one. "
             "For CPU-only programs use `python -m nsys_transfer.profiling run --no-capture-range -- CMD`")
    if gpus < 1:
        fail("--gpus must be at least 1")
    if per_rank and gpus < 2:
        fail("--per-rank needs --gpus 2 or more")
    name = stage if gpus == 1 else f"{stage}-x{gpus}{'rank' if per_rank else 'gpu'}"
    created = staging.first_missing(Path(out_dir) / name)
    base = _free_base(Path(out_dir) / name, name, force)
    with staging.whole_or_nothing(base, created, say, shown(base)) as staged:
        workload_json = staged.base.with_name(staged.base.name + ".workload.json")  # throughput, integrity, host CPU
        args = ["--steps", str(steps), "--warmup", str(warmup), *workload_args, "--json", str(workload_json)]
        cmd = workload_command(stage, args, gpus=1 if per_rank else gpus)
        req = ProfileRequest(cmd, staged.base, trace=trace, sample=sample, ctxsw=ctxsw, env=environment_for_profile())
        click.echo(f"profiling: {quote(cmd)} -> {base}{'.rank<N>' if per_rank else ''}.nsys-rep", err=True)
        try:
            rec = profile_per_rank(n, req, gpus, staged.echo()) if per_rank else profile(n, req, staged.echo())
        except ProfileError as e:
            fail(str(e), 1)
        if workload_json.exists():
            rec["files"]["workload"] = str(workload_json)
        rec["nsys"]["driver_check"] = driver_check
        rec.update({"stage": stage, "steps": steps, "warmup": warmup, "gpus": gpus,
                    "config": {"stage": stage, "steps": steps, "warmup": warmup, "args": list(workload_args)},
                    "gpu": _gpu_names(Path(rec["files"]["sqlite"]))})
        sqlites = [r["sqlite"] for r in rec["files"].get("ranks", [rec["files"]])]
        rec["checks"] = [w for q in sqlites for w in check_trace(Path(q), expect_nvtx=True, nsys=n)]
        rec["integrity"] = [_integrity(Path(q)) for q in sqlites]
        rec = staged.record(rec)
        write_record(staged.base, rec)
        staged.publish()
    path = base.with_name(base.name + ".run.json")
    sqlites = [staged.final_of(q) for q in sqlites]
    for w in rec["checks"]:
        say(f"warning: {w}")
    click.echo("\n".join(sqlites))
    _finish(rec, path, strict)



# `stage`: the command's first name (Make targets and scripts use it), kept working, not listed
main.add_command(click.Command("stage", callback=profile_command.callback, params=profile_command.params,
                               help=profile_command.help, hidden=True,
                               context_settings={"ignore_unknown_options": True}))


def _gpu_names(sqlite: Path) -> list[str]:
    """The GPUs the trace recorded, by name, for the run record."""
    try:
        return gpu_names(sqlite)
    except TraceError:
        return []


@main.command(context_settings={"ignore_unknown_options": True})
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="output base path")
@click.option("--trace", default="cuda,nvtx,osrt", show_default=True)
@click.option("--capture-range/--no-capture-range", default=False, show_default=True,
              help="capture only from cudaProfilerStart to cudaProfilerStop (default: the whole program)")
@click.option("--cuda-graph-trace", type=click.Choice(["graph", "node"]), default=None,
              help="CUDA graphs as one row a launch (nsys's default) or as the kernels inside them")
@click.option("--um-page-faults", is_flag=True, help="record the page faults behind managed-memory migrations")
@click.option("--sample", default="process-tree", show_default=True,
              type=click.Choice(["process-tree", "cpu", "system-wide", "none"]),
              help="CPU samples with backtraces (nsys --sample; cpu: nsys's older word for process-tree): what the "
                   "host did while the GPU waited; none: no samples and, unless --cpuctxsw says otherwise, no "
                   "context switches")
@click.option("--cpuctxsw", default=None, type=click.Choice(["none", "process-tree", "system-wide"]),
              help="context-switch trace (nsys --cpuctxsw)  [default: process-tree, none with --sample none]")
@click.option("--python-backtrace", default="cuda", show_default=True, type=click.Choice(["cuda", "none"]),
              help="the Python stack of each CUDA API call (nsys --python-backtrace), where this nsys has the "
                   "option and --trace has cuda")
@click.option("--python-sampling", is_flag=True,
              help="sample the Python stacks too (nsys --python-sampling=true, where this nsys has it; nsys 2024.2's "
                   "SQLite export keeps no frames of it)")
@click.option("--python-stacks-ms", type=click.FloatRange(min=0), default=DEFAULT_STACKS_MS, show_default=True,
              help="sample every Python thread's stack this often, in each Python process of the command, into "
                   "BASE.pystacks.gz: the line of the program behind each finding; 0: off")
@click.option("--force", is_flag=True, help="overwrite the trace of that name instead of numbering a new one (-2)")
@click.option("--keep-name", is_flag=True,
              help="write exactly the name given, or refuse before the program runs when a trace of that name is "
                   "there (no numbered -2: a command written with the name never reads an older trace)")
@click.option("--analyze", is_flag=True, help="analyse the trace when the run ends (analyze-trace's summary)")
@click.option("--strict", is_flag=True, help=STRICT_HELP)
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def run(output, trace, capture_range, cuda_graph_trace, um_page_faults, sample, cpuctxsw, python_backtrace,
        python_sampling, python_stacks_ms, force, keep_name, analyze, strict, command):
    """Trace any COMMAND, the whole program (CPU-only programs too, with --trace=nvtx,osrt). By default with CPU
    samples and context switches of the process tree and the Python stack of each CUDA call (`--sample none
    --python-backtrace none` for neither); the run record's "recorded" says what was asked of nsys."""
    refuse_unknown_option(command)
    why = cannot_start(list(command))
    if why:  # refused before nsys runs: a program that never started leaves no trace to read as a run
        fail(f"cannot start the program: {why}")
    out = Path(output)
    for ext in (".nsys-rep", ".sqlite"):
        if out.name.endswith(ext):
            out = out.with_name(out.name[: -len(ext)])
    folder = out.parent if str(out.parent) else Path(".")
    created = staging.first_missing(folder)
    base = _free_base(folder, out.name, force, number=not keep_name)
    n = _nsys()
    driver_check = _driver_check(n)
    if (python := traced_python(command)) is not None:  # a bare `python` is often the system's, not the venv's
        say(python)
    if cpuctxsw is None:
        cpuctxsw = "none" if sample == "none" else "process-tree"
    with staging.whole_or_nothing(base, created, say, shown(base)) as staged:
        req = ProfileRequest(list(command), staged.base, trace=trace, capture_range=capture_range, sample=sample,
                             ctxsw=cpuctxsw, env=environment_for_profile(), cuda_graph_trace=cuda_graph_trace,
                             um_page_faults=um_page_faults,
                             python_backtrace=None if python_backtrace == "none" else python_backtrace,
                             python_sampling=python_sampling, python_stacks_ms=python_stacks_ms or None)
        try:
            rec = profile(n, req, staged.echo())
        except ProfileError as e:
            fail(str(e), 1)
        rec["nsys"]["driver_check"] = driver_check
        rec["integrity"] = [_integrity(Path(rec["files"]["sqlite"]))]
        rec = staged.record(rec)
        write_record(staged.base, rec)
        staged.publish()
    path = base.with_name(base.name + ".run.json")
    for why in rec["recorded"]["left_out"]:
        if "no such option" in why:  # the nsys in use is older than the option; a trace without cuda is no news
            say(f"left out {why}")
    click.echo(rec["files"]["sqlite"])
    _finish(rec, path, strict)
    _program_status(rec)
    sqlite = Path(rec["files"]["sqlite"])
    say(f"wrote {shown(sqlite)} (beside it {base.name}.nsys-rep and the run record {path.name})")
    if analyze:
        _analyze(sqlite)
    click.echo(f"next: {next_command(sqlite, analyzed=analyze)}", err=True)


def _analyze(sqlite: Path) -> None:
    """analyze-trace's summary of the new trace, on stdout; its failure (one line, its status) is the run's."""
    sys.stdout.flush()
    done = subprocess.run([sys.executable, "-m", "nsys_transfer.analysis", str(sqlite)])
    if done.returncode:
        sys.exit(done.returncode)


def _program_status(rec: dict) -> None:
    """A program that failed fails the run too, with its own status, after one line that says so; the capture is
    kept (its trace shows what ran before the failure)."""
    rc = rec.get("program_exit_code")
    if not rc:
        return
    status = rc if 0 < rc < 256 else 1
    say(f"the program exited with status {rc} (its error is in the output above); the capture of what it did is kept "
        f"in {rec['files']['sqlite']}, but it shows a failed run: fix the program, then trace it again")
    sys.exit(status)


def _integrity(sqlite: Path) -> dict:
    """The trace's own consistency verdict (analysis/sections/capture_figures.py), without the figures, for the run record."""
    try:
        a = capture_verdict(sqlite)
    except TraceError as e:
        return {"sqlite": str(sqlite), "verdict": None, "lost_fraction": None, "evidence": str(e)}
    return {"sqlite": str(sqlite), "verdict": a["verdict"], "lost_fraction": a["lost_fraction"],
            "evidence": a["evidence"]}


def _finish(rec: dict, record_path: Path, strict: bool) -> None:
    """Print nsys's own messages and a lossy verdict last, where they are seen; with --strict, exit 1 on any."""
    messages = rec.get("nsys_messages", [])
    for m in messages:
        say(f"nsys {m['kind']} ({m['stage']}): {m['text']}")
    problems = [f"nsys reported {summary_line(messages)}"] if messages else []
    if rec.get("nsys", {}).get("driver_check", {}).get("warning"):
        say(f"warning: {rec['nsys']['driver_check']['warning']}")
    for i in rec.get("integrity", []):
        if i["verdict"] == "lossy":
            say(f"warning: {i['sqlite']}: {i['evidence']}")
            problems.append(f"{Path(i['sqlite']).name} lost CUDA events")
    if problems:
        msg = f"{'; '.join(problems)}; kept in {record_path}"
        if strict:
            fail(f"--strict: {msg}", 1)
        say(f"{msg} (--strict makes this an error)")


@main.command(context_settings={"ignore_unknown_options": True})
@click.option("--stages", default=",".join(BENCH_ORDER), show_default=True)
@click.option("--out", default="runs/bench.json", show_default=True, type=click.Path(dir_okay=False))
@click.option("--timeout", "timeout_s", default=600.0, show_default=True, help="seconds per stage")
@click.option("--label", default="", help="name the rows (e.g. pinned-12w) instead of by stage")
@click.argument("workload_args", nargs=-1, type=click.UNPROCESSED)
def bench(stages, out, timeout_s, label, workload_args):
    """Run every stage unprofiled and write one JSON plus a Markdown table."""
    records = [bench_mod.run_stage(s, list(workload_args), log=click.echo, timeout_s=timeout_s, label=label)
               for s in stages.split(",") if s]
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w") as f:
        json.dump({"records": records}, f, indent=2)
    md = bench_mod.table(records)
    Path(out).with_suffix(".md").write_text(md + "\n")
    click.echo(md)


@main.command(context_settings={"ignore_unknown_options": True})
@click.option("--stage", "stage_name", default="pinned", show_default=True)
@click.option("--gpus", default=2, show_default=True, help="ranks for the N-GPU run (torchrun)")
@click.option("--cpus", default=None, help="confine both runs to these CPUs (taskset list, e.g. 0-7)")
@click.option("--label", default=None, help="scenario name in the file (default: the CPU list)")
@click.option("--out", default="runs/scaling.json", show_default=True, type=click.Path(dir_okay=False))
@click.option("--timeout", "timeout_s", default=900.0, show_default=True, help="seconds per run")
@click.argument("workload_args", nargs=-1, type=click.UNPROCESSED)
def scaling(stage_name, gpus, cpus, label, out, timeout_s, workload_args):
    """One GPU against N GPUs (torchrun), unprofiled: appends a scenario to OUT (the report reads it)."""
    if stage_name not in STAGES:
        fail(f"unknown stage {stage_name!r}; choose one of {', '.join(STAGES)}")
    if gpus < 2:
        fail("--gpus must be at least 2 (the single-GPU run is always made)")
    if cpus and not shutil.which("taskset"):
        fail("--cpus needs `taskset` (util-linux) on PATH")
    one_cmd, all_cmd = bench_mod.scaling_launchers(gpus, cpus)
    label = label or (f"CPUs {cpus}" if cpus else "all CPUs")
    one = bench_mod.run_stage(stage_name, list(workload_args), log=click.echo, timeout_s=timeout_s,
                              label=f"{label}, 1 GPU", launcher=one_cmd)
    every = bench_mod.run_stage(stage_name, list(workload_args), log=click.echo, timeout_s=timeout_s,
                                label=f"{label}, {gpus} GPUs", launcher=all_cmd)
    path = Path(out)
    try:
        data = json.loads(path.read_text()) if path.exists() else {"scenarios": []}
    except ValueError:
        fail(f"{path}: exists but is not JSON; give another --out")
    data.setdefault("scenarios", []).append({"label": label, "one": one, "all": every})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")
    row = scaling_row({"label": label, "one": one, "all": every})
    if row is None:
        fail(f"a run failed ({(one.get('error') or every.get('error') or ['?'])[0]}); recorded in {path}", 1)
    click.echo(f"{label}: 1 GPU {row['single_steps_per_s']:.3f}, {gpus} GPUs {row['total_steps_per_s']:.3f} steps/s = "
               f"{row['efficiency']:.2f} x N x single; {row['limit']['evidence']}; written to {path}")


if __name__ == "__main__":
    main()


main.add_command(verify_command, "verify")
