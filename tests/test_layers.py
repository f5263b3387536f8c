"""The import graph runs downwards only: nsys_core (Nsight Systems itself, the contracts) at the bottom, then workloads
and profiling, then analysis, then reports, then the nsys_transfer command line on top. Every import counts, those
inside functions too. Every package is a layer of the one import namespace nsys_transfer (nsys_transfer.analysis is
the folder analysis/), and the toolkit imports itself only under that name."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# what each package may import of the toolkit's own packages (besides itself)
ALLOWED = {
    "nsys_core": set(),
    "fixes": {"nsys_core"},
    "workloads": {"nsys_core", "fixes"},
    "profiling": {"nsys_core", "fixes", "workloads"},
    "analysis": {"nsys_core"},
    "reports": {"nsys_core", "analysis"},
    "nsys_transfer": {"nsys_core", "fixes", "workloads", "profiling", "analysis", "reports"},
}
# `python -m PACKAGE` scripts: entry points nothing imports, so they may start the command line on top
ENTRY_POINT_MAY_IMPORT = {"nsys_transfer"}
# reports read the analysis's results and public API, never the trace's own tables
REPORTS_NEVER = {"nsys_transfer.analysis.load.sql", "nsys_transfer.analysis.load.trace", "sqlite3"}
NAMESPACE = "nsys_transfer"


def module_name(path: Path) -> tuple[str, ...]:
    """The installed name of a file: analysis/load/trace.py is nsys_transfer.analysis.load.trace, nsys_transfer/cli.py itself."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    return parts if parts[0] == NAMESPACE else (NAMESPACE, *parts)


def layer(name: str) -> str | None:
    """The layer a module name belongs to (nsys_transfer.cli: the command line on top); None outside the toolkit."""
    parts = name.split(".")
    if parts[0] != NAMESPACE:
        return None
    return parts[1] if len(parts) > 1 and parts[1] in ALLOWED else NAMESPACE


def module_path(name: str) -> Path:
    parts = name.split(".")
    if parts[0] == NAMESPACE and len(parts) > 1 and parts[1] in ALLOWED and parts[1] != NAMESPACE:
        parts = parts[1:]
    return ROOT.joinpath(*parts).with_suffix(".py")


def toolkit_imports(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in the file, relative ones resolved."""
    module_parts = module_name(path)
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the module's package, one level up per extra dot
                package_parts = module_parts[:-1]  # a/b/c.py and a/b/__init__.py both live in package a.b
                base = list(package_parts[:len(package_parts) - node.level + 1])
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module
            out.append((node.lineno, name))
            out += [(node.lineno, f"{name}.{a.name}") for a in node.names]
    return out


def modules():
    for package in ALLOWED:
        for path in sorted((ROOT / package).rglob("*.py")):
            yield package, path


@pytest.mark.parametrize("package,path", list(modules()), ids=lambda x: str(x.relative_to(ROOT)) if isinstance(x, Path) else x)
def test_imports_point_downwards(package, path):
    allowed = ALLOWED[package] | {package}
    if path.name == "__main__.py":
        allowed |= ENTRY_POINT_MAY_IMPORT
    upward = []
    for line, name in toolkit_imports(path):
        top = layer(name)
        if name.split(".")[0] in ALLOWED and name.split(".")[0] != NAMESPACE:
            upward.append(f"{path.relative_to(ROOT)}:{line} imports {name}: a second module object; import "
                          f"{NAMESPACE}.{name}")
        elif top is not None and top not in allowed:
            upward.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
        if package == "reports" and any(name == n or name.startswith(n + ".") for n in REPORTS_NEVER):
            upward.append(f"{path.relative_to(ROOT)}:{line} reads the trace itself ({name})")
    assert not upward, "\n".join(upward)


def test_every_package_is_layered():
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")}
    assert packages <= set(ALLOWED) | {"tests"}, f"put {packages - set(ALLOWED)} in a layer (ALLOWED)"


HEAVY = {"torch", "torchvision", "matplotlib", "distributed", "dask"}  # optional or slow to import (matplotlib: 0.3 s
# of every analyze-trace run, needed for charts only; dask: the optional extra of --dask): may stay inside functions


def _imports_torch_at_top(module: str) -> bool:
    path = module_path(module)
    if not path.is_file():
        return False
    tree = ast.parse(path.read_text())
    names = [a.name for n in tree.body if isinstance(n, ast.Import) for a in n.names]
    names += [n.module or "" for n in tree.body if isinstance(n, ast.ImportFrom) and not n.level]
    return any(n.split(".")[0] in HEAVY for n in names)


@pytest.mark.parametrize("package,path", list(modules()), ids=lambda x: str(x.relative_to(ROOT)) if isinstance(x, Path) else x)
def test_imports_at_module_top(package, path):
    """Imports inside functions hide the graph; only HEAVY packages (or a module that imports one) may wait until they
    are needed."""
    module_parts = module_name(path)
    inner = []
    for func in ast.walk(ast.parse(path.read_text())):
        if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(func):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = ".".join(module_parts[:len(module_parts) - node.level]) if node.level else ""
                names = [".".join(x for x in (base, node.module) if x)]
                if not node.module:
                    names = [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            lazy_ok = all(n.split(".")[0] in HEAVY or _imports_torch_at_top(n) for n in names)
            if not lazy_ok:
                inner.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {', '.join(names)} inside {func.name}()")
    assert not inner, "\n".join(inner)
