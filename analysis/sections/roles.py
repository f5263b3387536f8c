"""What a line's work is for, from its Python stack and its source text: the role that picks the advice
(rules/code_advice.py). The first role whose test matches wins, in ROLES' order: the line's own text first (it says
what the user wrote), then the library frames it runs through."""
from __future__ import annotations

import re

from ..load.python_stacks import Frame

INPUT, OUTPUT, WEIGHTS, PER_ELEMENT, ACCUMULATION = "input", "output", "weights", "per-element read", "accumulation"
TIMING_SYNC, CACHE_CHURN, DISK, COMPUTE, MODEL = "timing sync", "allocation churn", "disk output", "host compute", "model"
PROFILER = "the profiler"  # prof.step(), the profiler's start and stop: the capture's cost, never the program's work
# the loop blocked inside this toolkit's own OutputPipeline (nsys_transfer.fixes: the loop's back-pressure, the drain
# at its end): the output workers' pace, not the line's own work
OUTPUT_WAIT = "waiting for the output workers"

# (role, test of the innermost user line's text)
BY_CODE = (
    (CACHE_CHURN, re.compile(r"\bempty_cache\s*\(")),
    (TIMING_SYNC, re.compile(r"\bsynchronize\s*\(")),
    # an array that grows by copying itself: the name assigned is the first thing concatenated, or a table enlarged
    # by one row; before the scalar reads, which such a line may also hold (`df.loc[len(df)] = [int(x.argmax())]`) on
    # host arrays: the copy of the whole table grows with the run, the reads do not
    (ACCUMULATION, re.compile(r"^\s*([\w.]+)\s*=\s*(np|numpy|torch|pd)\.(concatenate|append|vstack|hstack|cat|concat)"
                              r"\s*\(\s*[\[(]?\s*\1\b|\.loc\[\s*len\(")),
    # a scalar read of a tensor, or a Python branch on one (`if mask.sum() == 0:`, `if y in top5[i]:`): a copy and a
    # sync each; a branch on a dict or a number (`if cfg["debug"]:`, `int(args.n)`) is none
    # (`.tolist()` converts a whole tensor in one call: per-element only in a Python loop, ONE_AT_A_TIME)
    (PER_ELEMENT, re.compile(r"\.item\s*\(\s*\)|"
                             r"\b(int|float|bool)\s*\([^)]*\.(sum|any|all|max|min|argmax|argmin|numel)\s*\(|"
                             r"^\s*(if|elif|while)\b.*(\.(sum|any|all|item)\s*\(|\bin\s+\w+\[)")),
    (DISK, re.compile(r"\.save\s*\(|\.to_(csv|parquet|json)\s*\(|\bnp\.save|\btorch\.save\s*\(|imwrite")),
    (OUTPUT, re.compile(r"\.cpu\s*\(\s*\)|\.tolist\s*\(\s*\)|"
                        r"\.numpy\s*\(\s*\)|\.to\s*\(\s*['\"]cpu['\"]|device\s*=\s*['\"]cpu['\"]")),
)
# a batched conversion (`.tolist()`) read one element or row at a time: the line is a comprehension's (its own frame,
# `<listcomp>`), holds one (`for` in its text), or indexes by a loop's counter (`dets[i].tolist()`, `x[i, :]`); once a
# step over a whole batch (`dets[dets[:, 4] > 0].tolist()`) it is the output's one conversion
TOLIST = re.compile(r"\.tolist\s*\(\s*\)")
ONE_AT_A_TIME = re.compile(r"\bfor\b.+\bin\b|\[\s*[A-Za-z_]\w{0,2}\s*[,\]]")
COMPREHENSIONS = ("<listcomp>", "<genexpr>", "<dictcomp>", "<setcomp>")
IN_MODULE = re.compile(r"torch/nn/modules/module\.py$")
OUTPUT_PIPELINE = re.compile(r"/fixes/(pipeline|workers|slots)\.py$")
# a blocking wait, as Python's own frames name it: selectors' select, a Condition's or an Event's wait, a queue's get
WAITS = re.compile(r"(^|\.)(_?select|_?poll|_?wait\w*|get|join|acquire|_?recv\w*|sleep)$")
# (role, test of a frame's file, test of its function): any frame of the stack
BY_FRAME = (
    (PROFILER, re.compile(r"torch/profiler/|torch/autograd/profiler(_util)?\.py$"), None),
    (WEIGHTS, re.compile(r"torch/nn/modules/module\.py$"), re.compile(r"^Module\.(to|cuda|cpu|_apply|half|float)\b")),
    (INPUT, re.compile(r"torch/utils/data/|torchvision/(transforms|datasets|io)/|/datasets/"), None),
    (DISK, re.compile(r"/PIL/(Image|PngImagePlugin|JpegImagePlugin)\.py$"), re.compile(r"save|_save|encode")),
    (DISK, re.compile(r"/pandas/io/|/numpy/lib/_?npyio"), None),
    (INPUT, re.compile(r"/PIL/|/tokenizers/|/transformers/tokenization"), None),
    (MODEL, re.compile(r"torch/nn/modules/|/transformers/models/|/timm/models/|torchvision/models/"), None),
)


def role_of(stack: list[Frame], leaf: Frame | None) -> str:
    """The role of a stack's work (outermost frame first; leaf: its innermost frame of the program's own code). A
    module's own move (`Module.to`) anywhere in the stack is its weights', whatever the line says (`blk.to("cpu")`)."""
    if any(BY_FRAME[0][1].search(f.file) for f in stack):
        return PROFILER  # the profiler's own work (prof.step()), wherever the program called it from
    role, file, function = BY_FRAME[1]
    if any(file.search(f.file) and function.search(f.function) for f in stack):
        return role
    if stack and WAITS.search(stack[-1].function) and any(OUTPUT_PIPELINE.search(f.file) for f in stack):
        return OUTPUT_WAIT  # blocked inside the toolkit's OutputPipeline: the loop waits for its output workers
    in_model = any(IN_MODULE.search(f.file) for f in stack)
    if leaf is not None and _library_role(_callees(stack, leaf)) == MODEL:
        return MODEL  # the time went into the model's forward, whatever else the line does (`model(x).numpy()`)
    if leaf is not None:
        if TOLIST.search(leaf.code) and (leaf.function in COMPREHENSIONS or ONE_AT_A_TIME.search(leaf.code)):
            return PER_ELEMENT
        for role, code in BY_CODE:
            # inside a module's forward a concatenation makes this step's activations, not an array that outlives it
            if code.search(leaf.code) and not (role == ACCUMULATION and in_model):
                return role
    return _library_role(stack) or COMPUTE


def _callees(stack: list[Frame], leaf: Frame) -> list[Frame]:
    """The frames the innermost line of the program called into (where the sample's time went)."""
    at = max((i for i, f in enumerate(stack) if f is leaf or f == leaf), default=len(stack) - 1)
    return stack[at + 1:]


def _library_role(stack: list[Frame]) -> str | None:
    """The role the innermost of a stack's library frames that says one says; None where none does."""
    for frame in reversed([f for f in stack if not f.in_program]):
        for role, file, function in BY_FRAME:
            if file.search(frame.file) and (function is None or function.search(frame.function)):
                return role
    return None
