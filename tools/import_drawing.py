"""The import drawing by module name: grimp (import-linter's graph) reads nsys_transfer's modules once each, by their
names, so the links nsys_transfer/<layer> -> <layer>/ make no second copy; each module is drawn in its design-card
folder (nsys_transfer.analysis.load.trace in analysis/load). Prints the arrows between folders, or --dot a Graphviz
drawing of them (`python tools/import_drawing.py --layers --dot | dot -Tsvg > imports.svg`).

--by-path: what a tool that follows imports by file path sees instead (docs/layout.md): each import resolved to a file
under the checkout by its path, the links left as they are, so nearly every arrow lands on nsys_transfer/<layer>/...,
a folder that is only a link. Usage: python tools/import_drawing.py [--layers] [--dot] [--by-path]"""
from __future__ import annotations

import ast
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "nsys_transfer"


def folder_of(module: str, layers_only: bool = False) -> str:
    """The folder a module's file lies in, as the design card names it (nsys_transfer.cli: nsys_transfer)."""
    parts = module.split(".")[1:]  # past nsys_transfer: the layer is the top-level folder
    if not (ROOT.joinpath(*parts) / "__init__.py").exists():
        parts = parts[:-1]  # a module, not a package: its folder
    if layers_only:
        parts = parts[:1]
    return "/".join(parts) or PACKAGE


def arrows(layers_only: bool = False) -> dict[tuple[str, str], int]:
    """(importing folder, imported folder) -> how many module imports run between them (within a folder: none)."""
    import grimp  # noqa: PLC0415  (import-linter's; --by-path needs none)

    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))  # this checkout's package, whatever an editable install names
    graph = grimp.build_graph(PACKAGE, cache_dir=None)
    counts: dict[tuple[str, str], int] = {}
    for module in graph.modules:
        src = folder_of(module, layers_only)
        for imported in graph.find_modules_directly_imported_by(module):
            dst = folder_of(imported, layers_only)
            if dst != src:
                counts[src, dst] = counts.get((src, dst), 0) + 1
    return counts


def _imported_names(tree: ast.AST, package: tuple[str, ...]) -> list[str]:
    """The module names an import statement may name (from a import b: a and a.b), relative ones made absolute."""
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = ".".join([*package[:len(package) - node.level + 1], node.module or ""] if node.level else
                            [node.module or ""]).strip(".")
            names += [base] + [f"{base}.{a.name}" for a in node.names]
    return names


def arrows_by_path() -> tuple[dict[tuple[str, str], int], set[str]]:
    """Arrows between the folders that hold .py files (os.walk: links to folders not followed, each file once), an
    import resolved to <root>/a/b.py or a/b/__init__.py by its name; and the folders it lands in that hold none."""
    folders, counts = set(), {}
    for where, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in ("__pycache__", "build", "out", "runs")]
        src = Path(where).relative_to(ROOT)
        for name in (f for f in files if f.endswith(".py")):
            folders.add(src.as_posix())
            tree = ast.parse((Path(where) / name).read_text())
            for module in _imported_names(tree, src.parts):
                path = ROOT.joinpath(*module.split("."))
                found = next((p for p in (path.with_suffix(".py"), path / "__init__.py") if p.exists()), None)
                dst = found and found.parent.relative_to(ROOT).as_posix()
                if dst and dst != src.as_posix():
                    counts[src.as_posix(), dst] = counts.get((src.as_posix(), dst), 0) + 1
    return counts, {dst for _, dst in counts} - folders


def main(argv: list[str]) -> None:
    """Print the arrows (or --dot: a Graphviz digraph of them)."""
    if "--by-path" in argv:
        counts, nowhere = arrows_by_path()
        counts = {pair: n for pair, n in counts.items() if pair[1] not in nowhere}
    else:
        counts, nowhere = arrows("--layers" in argv), set()
    if "--dot" in argv:
        print("digraph imports {\n  rankdir=BT;")
        for (src, dst), n in sorted(counts.items()):
            print(f'  "{src}" -> "{dst}" [label={n}];')
        print("}")
        return
    folders = {f for pair in counts for f in pair}
    for (src, dst), n in sorted(counts.items()):
        print(f"{src} -> {dst}  {n}")
    print(f"{len(counts)} arrows between {len(folders)} folders" +
          (f"; the imports of the others land on {len(nowhere)} link paths" if nowhere else ""))


if __name__ == "__main__":
    main(sys.argv[1:])
