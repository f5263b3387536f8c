"""Every top-level package is a layer of the one import namespace nsys_transfer, a link nsys_transfer/<name> to its
folder, so that `make lint` sees it: the import-linter contracts in pyproject.toml (exhaustive over nsys_transfer's
children) give it its place in the import graph. The layers' rules themselves are those contracts and ruff's."""
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_package_is_layered():
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")} - {"nsys_transfer", "tests"}
    linked = {p.name for p in (ROOT / "nsys_transfer").iterdir() if p.is_symlink() and p.resolve() == ROOT / p.name}
    missing = sorted(packages - linked)
    assert not missing, f"link {missing} as nsys_transfer/<name>, each with its layer in pyproject.toml's contracts"
