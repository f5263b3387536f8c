"""Every top-level package is a layer of the one import namespace nsys_transfer, a link nsys_transfer/<name> to its
folder, so that `make lint` sees it: the import-linter contracts in pyproject.toml (exhaustive over nsys_transfer's
children) give it its place in the import graph. The layers' rules themselves are those contracts and ruff's.

The links give each file two paths; the tools see one (docs/layout.md): ruff and pyright the folder's, mypy and the
import drawing (tools/import_drawing.py, by module name) the package's."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ["nsys_core", "fixes", "workloads", "profiling", "analysis", "reports"]


# files the traced program's own Python loads by path (PYTHONPATH), never imported as modules of the package
NOT_MODULES = ROOT / "profiling" / "stack-sampler"


def _layer_files() -> set[Path]:
    """Every module of the layers, by its path in the top-level folder, and the command line's own."""
    return {p.relative_to(ROOT) for layer in LAYERS for p in (ROOT / layer).rglob("*.py")
            if NOT_MODULES not in p.parents} | {p.relative_to(ROOT) for p in (ROOT / "nsys_transfer").glob("*.py")}


def test_every_package_is_layered():
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")} - {"nsys_transfer", "tests"}
    linked = {p.name for p in (ROOT / "nsys_transfer").iterdir() if p.is_symlink() and p.resolve() == ROOT / p.name}
    missing = sorted(packages - linked)
    assert not missing, f"link {missing} as nsys_transfer/<name>, each with its layer in pyproject.toml's contracts"


def test_ruff_reads_each_file_once_by_its_folder():
    """ruff never walks into a link to a folder: pyproject.toml needs no exclude for nsys_transfer/<layer>."""
    ruff = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    if not Path(ruff).exists():
        pytest.skip("ruff is not installed (pip install -e '.[dev]')")
    listed = subprocess.run([ruff, "check", "--show-files"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    files = [Path(line).relative_to(ROOT) for line in listed.stdout.splitlines() if line.strip()]
    assert len(files) == len(set(files))
    through_links = [f for f in files if f.parts[0] == "nsys_transfer" and len(f.parts) > 2]
    assert not through_links, through_links[:5]
    assert _layer_files() <= set(files), sorted(_layer_files() - set(files))[:5]


def test_the_import_drawing_sees_each_module_once():
    """tools/import_drawing.py draws by module name: one module per file, each in its top-level folder."""
    grimp = pytest.importorskip("grimp")
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import import_drawing
    finally:
        sys.path.remove(str(ROOT / "tools"))
    modules = grimp.build_graph("nsys_transfer", cache_dir=None).modules
    assert len(modules) == len(_layer_files())
    arrows = import_drawing.arrows(layers_only=True)
    for pair in [("analysis", "nsys_core"), ("reports", "analysis"), ("workloads", "fixes"),
                 ("nsys_transfer", "profiling")]:
        assert pair in arrows, (pair, sorted(arrows))
    reading, capture = {"analysis", "reports"}, {"fixes", "workloads", "profiling"}
    assert not [p for p in arrows if {p[0], p[1]} & reading and {p[0], p[1]} & capture], sorted(arrows)
