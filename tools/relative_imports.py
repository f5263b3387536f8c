"""Rewrite the product's first-party imports as relative ones, which resolve both by module name and by file path
(issue 59 item 7). Re-runnable and idempotent: `python tools/relative_imports.py` rewrites what a merge brought in and
prints, per file, how many imports it rewrote (a second run rewrites none); `--check` rewrites nothing and exits 1
when some import would be rewritten. tools/check_path_imports.py (`make lint`) holds the result.

Why relative: code imported `nsys_transfer.analysis.load`, which a tool reading files by their paths resolves to
nsys_transfer/analysis/load, a path through a link, never to analysis/load.py, so it drew no arrow between the layers.
A relative import names the same module both ways, at every depth. A file <layer>/a/b/f.py is the module
nsys_transfer.<layer>.a.b.f: its package is nsys_transfer.<layer>.a.b (an __init__.py's package is its own folder, the
same one), and k dots are that package less its last k-1 names. By path, k dots are the file's folder <layer>/a/b less
its last k-1 folders. The two differ by the leading `nsys_transfer` alone, the checkout's root standing for it: one dot
is <layer>/a/b, two <layer>/a, three <layer>, four the root, where nsys_transfer.<other layer> is the real folder
<other layer>/. So `..load` in analysis/sections/loop.py is nsys_transfer.analysis.load and analysis/load/, and
`...nsys_core.nsys` in analysis/load/trace.py is nsys_transfer.nsys_core.nsys and nsys_core/nsys.py. The rewrite
takes the fewest dots: up to the longest package the two share.

What is rewritten: `from nsys_transfer.x.y import a` anywhere in a file (module top, functions: the lazy imports,
`if TYPE_CHECKING:` blocks, try/except), and `import nsys_transfer.x.y as z` as `from <dots>x import y as z`.
What is not (the EXCEPTIONS, which check_path_imports.py allows, and no others):
- the top package's own modules (nsys_transfer.cli, nsys_transfer itself) imported from a layer: their file lies in
  nsys_transfer/, which is not the folder above the layer (the root is), so no relative import reaches it by path:
  profiling/__main__.py's `from nsys_transfer.cli import main` (`python -m nsys_transfer.profiling`).
- `import nsys_transfer.x` without `as`: it binds the name nsys_transfer, which the code then spells out.
- Module names in strings (importlib.import_module(f"{__package__}.{name}"), `-m nsys_transfer.workloads` command
  lines, docstrings) are not imports and stay as they are; the product's own use __name__/__package__.
- profiling/stack-sampler/: not modules of the package (the traced program loads them by path from PYTHONPATH; the
  folder's name has a dash), and they import nothing of the toolkit.
No product file runs by its path: the `if __name__ == "__main__":` modules (nsys_core/driver.py,
workloads/linkprobe.py, workloads/__main__.py) and every __main__.py run as `python -m nsys_transfer...` (the
Makefile, the command lines' subprocesses, benchmarks/*.sh, the docs), which sets their package, and multiprocessing
workers import modules by their names (spawn re-runs a `-m` main by its module name); analysis/executors/
dask_worker.py, which Dask loads by path, imports nothing of the toolkit. A file run by path would need its imports
absolute: RUN_BY_PATH lists such files (none today), whose imports the rewrite leaves alone.

The files directly in nsys_transfer/ (__init__.py, __main__.py, cli.py) are nsys_transfer's own modules: one dot is
nsys_transfer/, so their imports of a layer (`.analysis.facade`) reach it by path through the link
nsys_transfer/analysis, the one way there is (`..` would leave the package at run time)."""
from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "nsys_transfer"
LAYERS = ("nsys_core", "fixes", "workloads", "profiling", "analysis", "reports")
NOT_MODULES = (Path("profiling") / "stack-sampler",)  # loaded by path by the traced program, never as the package's
RUN_BY_PATH: dict[str, str] = {}  # file -> why it runs by path (its imports stay absolute); none today


def product_files(root: Path = ROOT) -> list[Path]:
    """Every module of the package, by its path in the checkout (the folders', never through the links)."""
    files = [p for layer in LAYERS for p in sorted((root / layer).rglob("*.py"))
             if not any(root / n in p.parents for n in NOT_MODULES) and "__pycache__" not in p.parts]
    return files + sorted((root / PACKAGE).glob("*.py"))


def package_of(path: Path, root: Path = ROOT) -> list[str]:
    """The package a file's relative imports start from, by module name: analysis/load/trace.py ->
    [nsys_transfer, analysis, load]; nsys_transfer/cli.py -> [nsys_transfer]."""
    folders = list(path.relative_to(root).parent.parts)
    return folders if folders[:1] == [PACKAGE] else [PACKAGE, *folders]


def relative_name(package: list[str], target: list[str]) -> str:
    """The relative module name (dots, then names) of the absolute `target`, from `package`: the fewest dots."""
    common = 0
    while common < min(len(package), len(target)) and package[common] == target[common]:
        common += 1
    return "." * (len(package) - common + 1) + ".".join(target[common:])


def keeps_absolute(path: Path, node: ast.Import | ast.ImportFrom, root: Path = ROOT) -> str | None:
    """Why this first-party import stays absolute (one of the EXCEPTIONS above), or None: it is rewritten."""
    rel = path.relative_to(root).as_posix()
    if rel in RUN_BY_PATH:
        return f"run by path: {RUN_BY_PATH[rel]}"
    in_layer = path.relative_to(root).parts[0] != PACKAGE
    if isinstance(node, ast.Import):
        if len(node.names) > 1:
            return "several modules in one import statement: split it, and run again"
        if node.names[0].asname is None:
            return "`import nsys_transfer.x` binds the name nsys_transfer, which the code spells out"
        if node.names[0].name == PACKAGE:
            return "`import nsys_transfer as z`: the top package itself"
        target = node.names[0].name.split(".")
        top_names = [target[1]]
    else:
        target = (node.module or "").split(".")
        top_names = [target[1]] if len(target) > 1 else [a.name for a in node.names]
    if in_layer and any(name not in LAYERS for name in top_names):
        return ("the top package's own module (nsys_transfer/, not the folder above the layer): "
                "no relative import reaches it by path")
    return None


def _is_first_party(node: ast.AST) -> bool:
    if isinstance(node, ast.ImportFrom):
        return node.level == 0 and (node.module == PACKAGE or (node.module or "").startswith(PACKAGE + "."))
    if isinstance(node, ast.Import):
        return any(a.name == PACKAGE or a.name.startswith(PACKAGE + ".") for a in node.names)
    return False


def first_party_imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every absolute import of nsys_transfer in a module, wherever it stands (functions, TYPE_CHECKING, try)."""
    return [n for n in ast.walk(tree) if _is_first_party(n)]  # type: ignore[misc]


def _offset(lines: list[str], lineno: int, col: int) -> int:
    """A (1-based line, UTF-8 byte column) position as an index into the text."""
    return sum(len(line) for line in lines[:lineno - 1]) + len(lines[lineno - 1].encode()[:col].decode())


FROM = re.compile(r"from(\s+)(" + PACKAGE + r"[\w.]*)(\s+)import\b")


def _realigned(text: str, lines: list[str], node: ast.ImportFrom, after: int, shift: int) -> list[tuple[int, int, str]]:
    """The continuation lines of a parenthesized import aligned under its first name, moved by the module name's
    change in length, so that they stay aligned."""
    if node.end_lineno == node.lineno:
        return []
    paren = text.find("(", after, _offset(lines, node.lineno + 1, 0))  # on the import's first line
    if paren < 0:
        return []
    column = paren - _offset(lines, node.lineno, 0) + 1  # where the first name starts
    edits = []
    for lineno in range(node.lineno + 1, (node.end_lineno or node.lineno) + 1):
        line = lines[lineno - 1]
        if len(line) - len(line.lstrip(" ")) == column and line.strip():
            start = _offset(lines, lineno, 0)
            edits.append((start, start + column, " " * (column + shift)))
    return edits


def rewrite(path: Path, root: Path = ROOT) -> tuple[str, int, list[tuple[int, str]]]:
    """The file's text with its first-party imports made relative, how many were rewritten, and those kept absolute
    (line, why)."""
    text = path.read_text()
    lines = text.splitlines(keepends=True)
    package = package_of(path, root)
    edits, kept, rewritten = [], [], 0
    for node in first_party_imports(ast.parse(text, str(path))):
        why = keeps_absolute(path, node, root)
        if why:
            kept.append((node.lineno, why))
            continue
        rewritten += 1
        start = _offset(lines, node.lineno, node.col_offset)
        end = _offset(lines, node.end_lineno or node.lineno, node.end_col_offset or 0)
        if isinstance(node, ast.ImportFrom):
            m = FROM.match(text, start, end)
            if not m:
                raise SystemExit(f"{path}:{node.lineno}: cannot read this import's module name; rewrite it by hand")
            new = relative_name(package, (node.module or "").split("."))
            edits.append((m.start(2), m.end(2), new))
            edits += _realigned(text, lines, node, m.end(2), len(new) - len(m.group(2)))
        else:
            alias = node.names[0]
            *parent, name = alias.name.split(".")
            edits.append((start, end, f"from {relative_name(package, parent)} import {name} as {alias.asname}"))
    for a, b, new in sorted(edits, reverse=True):
        text = text[:a] + new + text[b:]
    return text, rewritten, kept


def main(argv: list[str]) -> int:
    """Rewrite (or --check) every product file; print the count per file, the total and the imports kept absolute."""
    check = "--check" in argv
    total, kept_all = 0, []
    for path in product_files():
        new, n, kept = rewrite(path)
        rel = path.relative_to(ROOT).as_posix()
        kept_all += [f"{rel}:{line}: {why}" for line, why in kept]
        if n:
            total += n
            print(f"{rel}: {n} import{'s' if n > 1 else ''} {'to rewrite' if check else 'rewritten'}")
            if not check:
                path.write_text(new)
    print(f"{total} import{'' if total == 1 else 's'} {'to rewrite' if check else 'rewritten'}")
    for line in kept_all:
        print(f"kept absolute: {line}")
    return 1 if check and total else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
