"""Every line of the program a CPU-only capture's main thread was sampled at in its loop, however little its time:
what verify reads to tell a line the change introduced from one that was there before under the finding threshold
(the cpu-hotspot findings name only the costliest few), and to tell two programs from one and its fix."""
from __future__ import annotations

import numpy as np
import pandas as pd

from . import loop


def loop_lines(trace, start_ns: int, end_ns: int) -> dict | None:
    """{"period_ns": the sampling period, "lines": [{file, line, function, code, ns, on_stack_ns, path}, costliest
    first]}: every line of the program on the main thread's stacks sampled in [start_ns, end_ns] (the loop's own line
    `for x in loader` too, whose time is its callees'): ns, the time it was the innermost line of the program's own
    code (its own time, as the findings count it); on_stack_ns, the time it was on the stack at all; path, the
    library functions below it where its own time went most, innermost last. None without Python stacks."""
    stacks = loop.stacks_of(trace)
    pid = loop.first_pid(stacks)
    if stacks is None or pid is None:
        return None
    s = stacks.samples
    main = s[(s["pid"] == pid) & (s["tid"] == pid)]
    ns = (np.minimum(main["end_ns"].to_numpy(), end_ns) - np.maximum(main["start_ns"].to_numpy(), start_ns)).clip(0)
    frames, leaf, below, on = stacks.frames, {}, {}, {}
    for k in set(main["stack"].tolist()):
        stack = stacks.stacks[k]
        own = [i for i, f in enumerate(stack) if frames[f].in_program]
        leaf[k] = stack[own[-1]] if own else -1
        below[k] = tuple(frames[f].function for f in stack[own[-1] + 1:]) if own else ()
        on[k] = {(frames[stack[i]].file, frames[stack[i]].line): stack[i] for i in own}
    inclusive: dict[tuple, list] = {}  # every line of the program on a stack: [frame, ns with it on the stack]
    for k, t in zip(main["stack"].to_numpy(), ns):
        for place, f in on[k].items():
            inclusive.setdefault(place, [f, 0])[1] += int(t)
    df = pd.DataFrame({"leaf": [leaf[k] for k in main["stack"]], "ns": ns,
                       "below": [below[k] for k in main["stack"]]})
    df = df[(df["leaf"] >= 0) & (df["ns"] > 0)]
    df["place"] = [(frames[f].file, frames[f].line) for f in df["leaf"]]
    own_ns = df.groupby("place", sort=False)["ns"].sum().to_dict() if len(df) else {}
    paths = df.groupby(["place", "below"], sort=False)["ns"].sum() if len(df) else pd.Series(dtype="int64")
    out = []
    for place, (fid, on_stack) in inclusive.items():
        if not on_stack:
            continue
        f = frames[fid]
        path = paths[place].idxmax() if place in own_ns else ()
        out.append({"file": f.file, "line": int(f.line), "function": f.function, "code": f.code,
                    "ns": int(own_ns.get(place, 0)), "on_stack_ns": on_stack, "path": list(path)})
    return {"period_ns": int(stacks.period_ns), "lines": sorted(out, key=lambda x: (-x["ns"], -x["on_stack_ns"]))}
