"""No function or method in the project's packages is longer than 60 lines."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("analysis", "profiling", "reports", "workloads", "nsys_core", "nsys_transfer")
LIMIT = 60


def long_functions(limit=LIMIT):
    """Yield 'path:line name (N lines)' for every function longer than limit."""
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(), filename=str(path))
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    length = node.end_lineno - node.lineno + 1
                    if length > limit:
                        where = path.relative_to(ROOT)
                        yield f"{where}:{node.lineno} {node.name} ({length} lines)"


def test_no_function_over_60_lines():
    too_long = list(long_functions())
    assert not too_long, "functions over %d lines:\n%s" % (LIMIT, "\n".join(too_long))
