"""What a line's work is for, from its Python stack and its source text: the role that picks the advice
(rules/code_advice.py). The first role whose test matches wins, in ROLES' order: the line's own text first (it says
what the user wrote), then the library frames it runs through."""
from __future__ import annotations

import re

from nsys_transfer.analysis.load.python_stacks import Frame

INPUT, OUTPUT, WEIGHTS, PER_ELEMENT, ACCUMULATION = "input", "output", "weights", "per-element read", "accumulation"
TIMING_SYNC, CACHE_CHURN, DISK, COMPUTE, MODEL = "timing sync", "allocation churn", "disk output", "host compute", "model"
PROFILER = "the profiler"  # prof.step(), the profiler's start and stop: the capture's cost, never the program's work

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
    (PER_ELEMENT, re.compile(r"\.item\s*\(\s*\)|\.tolist\s*\(\s*\)|"
                             r"\b(int|float|bool)\s*\([^)]*\.(sum|any|all|max|min|argmax|argmin|numel)\s*\(|"
                             r"^\s*(if|elif|while)\b.*(\.(sum|any|all|item)\s*\(|\bin\s+\w+\[)")),
    (DISK, re.compile(r"\.save\s*\(|\.to_(csv|parquet|json)\s*\(|\bnp\.save|\btorch\.save\s*\(|imwrite")),
    (OUTPUT, re.compile(r"\.cpu\s*\(\s*\)|\.numpy\s*\(\s*\)|\.to\s*\(\s*['\"]cpu['\"]|device\s*=\s*['\"]cpu['\"]")),
)
IN_MODULE = re.compile(r"torch/nn/modules/module\.py$")
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
    in_model = any(IN_MODULE.search(f.file) for f in stack)
    if leaf is not None:
        for role, code in BY_CODE:
            # inside a module's forward a concatenation makes this step's activations, not an array that outlives it
            if code.search(leaf.code) and not (role == ACCUMULATION and in_model):
                return role
    for frame in reversed([f for f in stack if not f.in_program]):  # a library's frames, the innermost that says it
        for role, file, function in BY_FRAME:
            if file.search(frame.file) and (function is None or function.search(frame.function)):
                return role
    return COMPUTE
