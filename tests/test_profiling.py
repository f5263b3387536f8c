"""profiling/: finding nsys, the checks that explain failures, and refusing what cannot work here."""
import json
import os
import stat

from conftest import run_cli
from nsys_transfer.nsys_core import nsys as locate
from nsys_transfer.profiling.checks import nvtx_unrecorded_warning


def test_find_nsys_order_and_report(nsys, monkeypatch, tmp_path):
    fake = tmp_path / "nsys"
    fake.write_text(f"#!/bin/sh\nexec {nsys.path} \"$@\"\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("NSYS", str(fake))
    n = locate.find_nsys()
    assert n.path == str(fake) and n.source == "$NSYS" and n.version == nsys.version


def test_no_nsys_says_how_to_get_it(monkeypatch, tmp_path):
    monkeypatch.setenv("NSYS", str(tmp_path / "missing"))
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(locate, "PROJECT_NSYS", tmp_path / "none" / "nsys")
    monkeypatch.setattr(locate.glob, "glob", lambda pattern: [])
    try:
        locate.find_nsys()
    except locate.NsysNotFound as e:
        assert "make nsys" in str(e) and "NSYS=" in str(e)
    else:
        raise AssertionError("expected NsysNotFound")


def test_cli_without_nsys_is_one_line(tmp_path):
    env = {**os.environ, "NSYS": str(tmp_path / "missing"), "PATH": "/usr/bin:/bin"}
    # hide the project's own install by pointing the module at an empty folder via a wrapper
    code = ("import nsys_transfer.nsys_core.nsys as l, pathlib, sys; l.PROJECT_NSYS = pathlib.Path('/nonexistent/nsys'); "
            "l.glob.glob = lambda p: []; from nsys_transfer.cli import main; sys.argv = ['profile', 'where']; main()")
    r = run_cli("-c", code, env=env)
    assert r.returncode == 2 and "no working nsys" in r.stderr and "Traceback" not in r.stderr


def test_nvtx_version_rule():
    assert "not recorded" in nvtx_unrecorded_warning((2023, 4), "0.2.12")
    assert nvtx_unrecorded_warning((2023, 4), "0.2.11") is None
    assert nvtx_unrecorded_warning((2024, 2), "0.2.14") is None


def test_stage_without_gpu_is_refused_clearly(nsys):
    from nsys_transfer.profiling.checks import has_gpu
    if has_gpu():
        return  # on a GPU machine this path is the real profile, covered by docs/benchmarks.md
    r = run_cli("-m", "nsys_transfer.profiling", "stage", "baseline")
    assert r.returncode == 2 and "no NVIDIA GPU" in r.stderr and "Traceback" not in r.stderr


def test_unknown_stage_is_refused(nsys):
    r = run_cli("-m", "nsys_transfer.profiling", "stage", "warp-speed")
    assert r.returncode == 2 and "unknown stage" in r.stderr


def test_multi_gpu_command_uses_torchrun():
    from nsys_transfer.profiling.runner import workload_command
    one = workload_command("pinned", ["--steps", "3"], python="py")
    two = workload_command("pinned", ["--steps", "3"], python="py", gpus=2)
    assert one == ["py", "-m", "nsys_transfer.workloads", "--stage", "pinned", "--profile", "--steps", "3"]
    assert two[:5] == ["py", "-m", "torch.distributed.run", "--nproc-per-node", "2"] and two[5:] == one[1:]


def test_scaling_on_one_cpu_names_the_saturated_cores(tmp_path, h200):
    """`profile scaling` for real on CPU (gloo ranks): confined to one core, two ranks cannot double the throughput,
    and both the command and the report say the host's cores are the limit."""
    runs = tmp_path / "runs"
    cpu = str(min(os.sched_getaffinity(0)))
    r = run_cli("-m", "nsys_transfer.profiling", "scaling", "--stage", "bufpool", "--gpus", "2", "--cpus", cpu, "--out",
                str(runs / "scaling.json"), "--device", "cpu", "--batch", "2", "--img", "64", "--classes", "3",
                "--steps", "3", "--warmup", "1", "--loader-workers", "1", "--output-workers", "2", timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "host CPU cores" in r.stdout
    sc = json.loads((runs / "scaling.json").read_text())["scenarios"][0]
    assert sc["one"]["host_cpu"]["cpus"] == 1 and sc["all"]["throughput"]["world_size"] == 2
    assert sc["all"]["integrity"]["ok"]
    (runs / "pinned").mkdir()
    (runs / "pinned" / "pinned.sqlite.xz").write_bytes(h200["pinned"].read_bytes())
    r = run_cli("-m", "nsys_transfer.reports", str(runs), "--out", str(tmp_path / "rep"))
    assert r.returncode == 0, r.stderr[-2000:]
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "## Several GPUs" in md and f"| bufpool | CPUs {cpu} |" in md and "host CPU cores: " in md
    r = run_cli("-m", "nsys_transfer.profiling", "scaling", "--stage", "nope")
    assert r.returncode == 2 and "unknown stage" in r.stderr and "Traceback" not in r.stderr
