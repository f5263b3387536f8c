"""`python -m nsys_transfer.workloads.linkprobe`: how fast can outputs leave the GPUs, one GPU alone and all of them at once?

Each GPU copies an output-sized buffer to host memory `--repeat` times, into pinned and into pageable memory,
first one GPU at a time, then every GPU at once (one thread per GPU). The ratio of the concurrent aggregate to
the sum of the solo figures says whether the GPUs share a host-side limit (root complex, memory bandwidth, the
CPU that stages pageable copies). The multi-GPU analysis compares traced copy rates with these figures.
"""
from __future__ import annotations

import json
import threading
import time

import click

from ..fixes.ranges import nvtx_range


def _copy_loop(src, dst, repeat: int) -> float:
    import torch  # noqa: PLC0415
    with torch.cuda.device(src.device):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(repeat):
            dst.copy_(src, non_blocking=True)  # pageable destinations make this synchronous anyway
        torch.cuda.synchronize()
        return time.perf_counter() - t0


def probe(nbytes: int, repeat: int, devices: list[int], memories=("pinned", "pageable")) -> list[dict]:
    """Rows: memory, mode (alone/together), device (-1 = all), bytes, seconds, gbps."""
    import torch  # noqa: PLC0415

    srcs = {d: torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{d}").fill_(7) for d in devices}
    rows = []
    for memory in memories:
        dsts = {d: torch.empty(nbytes, dtype=torch.uint8, pin_memory=memory == "pinned") for d in devices}
        for d in devices:  # touch every page first: first-touch faults are not link time
            dsts[d].fill_(0)
            _copy_loop(srcs[d], dsts[d], 1)
        for d in devices:
            with nvtx_range(f"{memory} DtoH gpu{d} alone"):
                s = _copy_loop(srcs[d], dsts[d], repeat)
            rows.append({"memory": memory, "mode": "alone", "device": d, "bytes": nbytes * repeat, "seconds": s})
        if len(devices) > 1:
            times: dict[int, float] = {}
            go = threading.Barrier(len(devices))

            def one(d, src, dst):
                go.wait()  # noqa: B023 - the threads end within this iteration
                times[d] = _copy_loop(src, dst, repeat)  # noqa: B023

            with nvtx_range(f"{memory} DtoH all GPUs together"):
                t0 = time.perf_counter()
                threads = [threading.Thread(target=one, args=(d, srcs[d], dsts[d])) for d in devices]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                wall = time.perf_counter() - t0
            rows += [{"memory": memory, "mode": "together", "device": d, "bytes": nbytes * repeat, "seconds": times[d]}
                     for d in devices]
            rows.append({"memory": memory, "mode": "together", "device": -1, "bytes": nbytes * repeat * len(devices),
                         "seconds": wall})
        del dsts
    for r in rows:
        r["gbps"] = r["bytes"] / r["seconds"] / 1e9
    return rows


def verdict(rows: list[dict]) -> dict:
    """Per memory kind: the solo rates, the all-GPU aggregate and their ratio (1.0 = no shared host-side limit).

    The aggregate sums each GPU's own rate while all copy (the threads start a little apart, so the wall-clock
    figure, kept as together_wall_gbps, understates what the host sustained)."""
    out = {}
    for memory in sorted({r["memory"] for r in rows}):
        solo = [r["gbps"] for r in rows if r["memory"] == memory and r["mode"] == "alone"]
        each = [r["gbps"] for r in rows if r["memory"] == memory and r["mode"] == "together" and r["device"] >= 0]
        wall = [r["gbps"] for r in rows if r["memory"] == memory and r["mode"] == "together" and r["device"] == -1]
        out[memory] = {"solo_gbps": solo, "solo_sum_gbps": sum(solo),
                       "together_gbps": sum(each) if each else None,
                       "together_wall_gbps": wall[0] if wall else None,
                       "scaling": sum(each) / sum(solo) if each and solo else None}
    return out


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--mb", default=1344, show_default=True, help="bytes per copy in MiB (1344 = the article's 1.41 GB output)")
@click.option("--repeat", default=8, show_default=True)
@click.option("--memory", "memories", multiple=True, type=click.Choice(["pinned", "pageable"]),
              default=("pinned", "pageable"), show_default=True)
@click.option("--profile", is_flag=True, help="bracket the copies with cudaProfilerStart/Stop")
@click.option("--json", "json_path", type=click.Path(dir_okay=False))
def main(mb, repeat, memories, profile, json_path):
    """Measure DtoH bandwidth of every visible GPU, alone and all at once."""
    import torch  # noqa: PLC0415
    if not torch.cuda.is_available():
        raise SystemExit("linkprobe: no CUDA GPU is visible; run it on the GPU machine")
    if mb < 1 or repeat < 1:
        raise SystemExit("linkprobe: --mb and --repeat must be at least 1")
    devices = list(range(torch.cuda.device_count()))
    if profile:
        torch.cuda.profiler.start()
    rows = probe(mb << 20, repeat, devices, memories)
    if profile:
        torch.cuda.profiler.stop()
    names = [torch.cuda.get_device_name(d) for d in devices]
    rec = {"devices": names, "bytes_per_copy": mb << 20, "repeat": repeat, "rows": rows, "verdict": verdict(rows)}
    for r in rows:
        who = "all" if r["device"] < 0 else f"gpu{r['device']}"
        click.echo(f"{r['memory']:8s} {r['mode']:8s} {who:4s} {r['gbps']:7.2f} GB/s")
    for memory, v in rec["verdict"].items():
        if v["scaling"] is not None:
            click.echo(f"{memory}: {len(devices)} GPUs together {v['together_gbps']:.1f} GB/s = "
                       f"{v['scaling']:.2f} x the sum of solo runs ({v['solo_sum_gbps']:.1f} GB/s)")
    if json_path:
        with open(json_path, "w") as f:
            json.dump(rec, f, indent=2)


if __name__ == "__main__":
    main()
