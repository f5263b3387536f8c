"""Every first-party import of the product resolves by the importing file's path alone (issue 59 item 7): what a tool
that reads files by their paths sees. For each module of the layers and of nsys_transfer/*.py, each relative import
is resolved from the file's own folder, one folder up per dot past the first, then down its names, to a .py file or a
folder; no sys.path, no links followed (a link on the way fails, but for nsys_transfer/'s own files, whose imports reach
the layers by the links nsys_transfer/<layer>, the one way there is). A name imported `from <folder> import name` is a
module of that folder or a name its __init__.py binds. An import from one layer to another climbs to the
checkout's root, which has no __init__.py: a tool that holds a relative import inside the top folder with one (as
Python does for a file run by path, and ruff does) follows the imports within a layer, not those between layers. And no absolute `nsys_transfer` import is left but the
exceptions tools/relative_imports.py documents (keeps_absolute); `python tools/relative_imports.py` rewrites the rest.
Nor an absolute import of a layer by its folder's name (`from analysis.load import x`: a second copy of each module),
which ruff's TID251 forbids everywhere else (pyproject.toml says why not in the product).

Usage: python tools/check_path_imports.py (`make lint`). Exit 1 listing each import that fails."""
from __future__ import annotations

import ast
import sys
from pathlib import Path

from relative_imports import LAYERS, PACKAGE, ROOT, first_party_imports, keeps_absolute, product_files


def bound_names(path: Path) -> set[str] | None:
    """The names a module binds at its top (blocks under if/try too); None where a module __getattr__ makes any name."""
    names: set[str] = set()
    body = list(ast.parse(path.read_text()).body)
    while body:
        node = body.pop()
        if isinstance(node, (ast.If, ast.Try)):
            body += node.body + node.orelse + getattr(node, "finalbody", [])
            body += [s for h in getattr(node, "handlers", []) for s in h.body]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if node.name == "__getattr__":
                return None
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {a.asname or a.name.split(".")[0] for a in node.names}
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
    return names


def module_at(folder: Path, name: str) -> Path | None:
    """The module `name` in `folder` by path: name.py, a folder name/, or a compiled one (its C source, name.c, which
    setup.py builds beside it)."""
    for candidate in (folder / f"{name}.py", folder / name, folder / f"{name}.c"):
        if candidate.exists() or candidate.is_symlink():
            return candidate
    return None


def resolve(path: Path, node: ast.ImportFrom, root: Path = ROOT) -> list[str]:
    """What fails of a relative import, resolved by the file's path (nothing: it resolves)."""
    where = f"{path.relative_to(root)}:{node.lineno}: from {'.' * node.level}{node.module or ''}"
    own = path.parent == root / PACKAGE  # nsys_transfer/*.py: the layers are links beside them
    folder = path.parent
    for _ in range(node.level - 1):
        if folder == root:
            return [f"{where}: above the checkout"]
        folder = folder.parent
    for part in (node.module or "").split(".") if node.module else []:
        found = module_at(folder, part)
        if found is None:
            return [f"{where}: no {(folder / part).relative_to(root)}[.py]"]
        if found.is_symlink() and not (own and found.parent == root / PACKAGE):
            return [f"{where}: {found.relative_to(root)} is a link (no path tool should need it)"]
        folder = found
    if folder.suffix == ".py":
        bound = bound_names(folder)
        return [f"{where} import {a.name}: {folder.relative_to(root)} binds no {a.name}"
                for a in node.names if bound is not None and a.name not in bound and a.name != "*"]
    init = folder / "__init__.py"
    bound = bound_names(init) if init.exists() else set()
    return [f"{where} import {a.name}: no module {a.name} in {folder.relative_to(root)}/"
            + (", nor a name its __init__.py binds" if init.exists() else "")
            for a in node.names if a.name != "*" and module_at(folder, a.name) is None
            and bound is not None and a.name not in bound]


def top_level_layers(tree: ast.AST) -> list[tuple[ast.AST, str]]:
    """Absolute imports of a layer by its folder's name (`import analysis`, `from analysis.load import x`)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node, a.name) for a in node.names if a.name.split(".")[0] in LAYERS]
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] in LAYERS:
            found.append((node, node.module or ""))
    return found


def main() -> int:
    """Check every product file; print what fails, or a one-line count."""
    failures, relative, kept, across = [], 0, 0, 0
    for path in product_files():
        tree = ast.parse(path.read_text(), str(path))
        depth = len(path.relative_to(ROOT).parts) - 1  # the file's folders: its layer's is the first
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level:
                relative += 1
                across += node.level > depth and path.parent != ROOT / PACKAGE
                failures += resolve(path, node)
        failures += [f"{path.relative_to(ROOT)}:{node.lineno}: absolute import of the top-level {name}: a second copy of "
                     "each module (ruff's TID251 outside the product); import it relatively"
                     for node, name in top_level_layers(tree)]
        for node in first_party_imports(tree):
            why = keeps_absolute(path, node)
            kept += bool(why)
            if not why:
                failures.append(f"{path.relative_to(ROOT)}:{node.lineno}: absolute import of {PACKAGE}: "
                                "python tools/relative_imports.py makes it relative")
    for line in failures:
        print(line)
    print(f"{relative} relative imports resolve by path ({across} of them from one layer to another, through the "
          f"checkout's root); {kept} absolute, as tools/relative_imports.py documents"
          + (f"; {len(failures)} failures" if failures else ""), file=sys.stderr if failures else sys.stdout)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
