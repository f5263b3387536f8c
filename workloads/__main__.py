"""python -m nsys_transfer.workloads --stage NAME ...: run one stage, print steps/s, write a JSON record."""
from __future__ import annotations

import json
import re
import sys

import click

from ..fixes.errors import PipelineError
from .config import MODELS, STAGES, ConfigError, RunConfig
from .distributed import current, worker_totals
from .lifetime import Terminated, sigterm_as_interrupt

D = RunConfig()


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--stage", type=click.Choice(STAGES), default=D.stage, show_default=True)
@click.option("--model", type=click.Choice(MODELS), default=D.model, show_default=True)
@click.option("--batch", type=int, default=D.batch, show_default=True)
@click.option("--img", type=int, default=D.img, show_default=True, help="deeplabv3 input size")
@click.option("--classes", type=int, default=D.classes, show_default=True)
@click.option("--tokens", type=int, default=D.tokens, show_default=True, help="encoder sequence length")
@click.option("--dim", type=int, default=D.dim, show_default=True, help="encoder width")
@click.option("--layers", type=int, default=D.layers, show_default=True, help="encoder layers")
@click.option("--steps", type=int, default=D.steps, show_default=True, help="measured steps")
@click.option("--warmup", type=int, default=D.warmup, show_default=True)
@click.option("--loader-workers", type=int, default=None,
              help=f"DataLoader workers in total; default {D.loader_workers} per GPU (rank)")
@click.option("--output-workers", type=int, default=None,
              help=f"output workers in total, shared out among ranks; default {D.output_workers} per GPU (rank)")
@click.option("--buffers", type=int, default=D.buffers, show_default=True, help="output buffer pool; 0 = workers + 2")
@click.option("--postprocess", default=D.postprocess, show_default=True, help="devnull or npy:DIR")
@click.option("--chunk-mb", type=int, default=D.chunk_mb, show_default=True,
              help="serialise outputs in slices of this size; -1 = the stage's default, 0 = whole batch")
@click.option("--split", type=int, default=D.split, show_default=True,
              help="output workers sharing one batch, each serialising a slice; 0 = the stage's default")
@click.option("--device", type=click.Choice(["cuda", "cpu"]), default=D.device, show_default=True)
@click.option("--profile", is_flag=True, help="bracket the measured steps with cudaProfilerStart/Stop")
@click.option("--unsafe", is_flag=True, help="hand buffers over before their copy finished (checker demo)")
@click.option("--fault", default="", help="test hook: corrupt:N or die:N")
@click.option("--seed", type=int, default=0)
@click.option("--dtype", type=click.Choice(["fp32", "bf16"]), default="fp32", show_default=True,
              help="the model's precision (bf16: stages pinned and ceiling)")
@click.option("--channels-last", is_flag=True, help="deeplabv3 in NHWC memory format (fast with bf16)")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="write the run record here")
def main(json_path, **kw):
    """Run one pipeline stage of the article (or beyond it) and report throughput and integrity."""
    rank = current()
    kw.update(worker_totals(kw["loader_workers"], kw["output_workers"], rank.world))
    try:
        cfg = RunConfig(**kw).validate()
    except ConfigError as e:
        raise SystemExit(f"workloads: {e}")
    from .runtime import ResourceError, run  # noqa: PLC0415 - torch: only to run, not for --help

    if rank.is_main:
        click.echo(f"stage {cfg.stage}: {cfg.model}, batch {cfg.batch}, output {cfg.output_bytes() / 1e9:.2f} GB/batch, "
                   f"{cfg.warmup} warm-up + {cfg.steps} measured steps on {cfg.device}"
                   + (f", {rank.world} ranks" if rank.distributed else ""), err=True)
    sigterm_as_interrupt()
    try:
        record = run(cfg, log=click.echo)
    except ResourceError as e:
        raise SystemExit(f"workloads: {e}")
    except PipelineError as e:  # a worker died or failed: the pool's message names it
        raise SystemExit(f"workloads: {e}; stopping the run")
    except Terminated:
        raise SystemExit("workloads: terminated (SIGTERM); workers stopped")
    except KeyboardInterrupt:
        raise SystemExit("workloads: interrupted; workers stopped")
    except Exception as e:  # torch's OOM and friends: one line, not a traceback
        said = _out_of_memory(e, cfg)
        if said:
            raise SystemExit(f"workloads: {said}")
        raise
    if not rank.is_main:
        return  # under torchrun rank 0 reports for every rank
    if json_path:
        with open(json_path, "w") as f:
            json.dump(record, f, indent=2)
    t, integ = record["throughput"], record["integrity"]
    status = "skipped (no output copy)" if not integ["checked"] else (
        "ok" if integ["ok"] else f"FAILED: {integ['n_missing']} missing, {integ['n_duplicated']} duplicated, "
                                 f"{integ['n_mismatched']} mismatched")
    if "ranks" in record:
        click.echo(f"{len(record['ranks'])} ranks: " + ", ".join(f"rank {r['rank']} {r['throughput']['steps_per_s']:.3f} "
                                                                 f"steps/s" for r in record["ranks"]))
    cpu = record.get("host_cpu")
    click.echo(f"{cfg.stage}: {t['steps_per_s']:.3f} steps/s ({t['samples_per_s']:.1f} samples/s, "
               f"{t['output_gb_per_s']:.2f} GB/s of output); integrity {status}"
               + (f"; host CPUs {cpu['busy']:.0%} busy ({cpu['busy_cores']:.1f} of {cpu['cpus']})" if cpu else ""))
    if integ["checked"] and not integ["ok"]:
        sys.exit(1)


def _out_of_memory(e: Exception, cfg) -> str | None:
    """One line for an allocation that failed after the up-front size check passed (other processes took the
    memory, a ulimit or cgroup limit, a full /dev/shm); None for any other error."""
    if type(e).__name__ == "OutOfMemoryError":
        return f"GPU out of memory at batch {cfg.batch}; lower --batch or --img"
    text = " ".join(str(e).split())
    if isinstance(e, MemoryError) or "can't allocate memory" in text or "Cannot allocate memory" in text:
        size = re.search(r"allocate (\d+) bytes", text)
        what = f"an allocation of {int(size.group(1)) / 1e9:.2f} GB" if size else "an allocation"
        return (f"out of host memory: {what} failed after the up-front check passed (another process, ulimit -v or "
                "a cgroup limit holds the room); lower --batch, --buffers or --output-workers")
    if "No space left on device" in text:
        return ("/dev/shm filled up during the run; free it or enlarge it (docker: --shm-size), or lower --buffers "
                "or --batch")
    return None


if __name__ == "__main__":
    main()
