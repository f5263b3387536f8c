"""One import namespace: `pip install .` puts nsys_transfer (and only it) into site-packages, and every layer is a
module of it, once. Console scripts and `python -m nsys_transfer...` work from a fresh venv outside the checkout;
`python -m nsys_transfer.analysis` (and the other layers) keep working from the checkout without making second copies of modules."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from conftest import ROOT

LAYERS = ["nsys_core", "fixes", "workloads", "profiling", "analysis", "reports"]
def _dependencies_of_this_environment(into: Path) -> Path:
    """This environment's installed packages (pandas, click, setuptools...) without the toolkit itself, so the fresh
    venv needs no download and cannot see the checkout."""
    here = Path(sysconfig.get_paths()["purelib"])
    into.mkdir()
    for entry in here.iterdir():
        if entry.suffix == ".pth" or entry.name.lower().startswith(("nsys_transfer", "__editable__", "nsys-transfer")):
            continue
        (into / entry.name).symlink_to(entry)
    return into


@pytest.mark.parametrize("compiler", ["found", "missing"])
def test_pip_install_into_a_fresh_venv(tmp_path, h200, compiler):
    """Where no C compiler works, the install still succeeds without the fast reader (SQLite reads everything)."""
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        ".git", ".venv", ".nsys", ".carry", "out", "runs", "build", "*.egg-info", "__pycache__", "tests", "docs",
        "*.so"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    python, bin_ = venv / "bin" / "python", venv / "bin"
    site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "dependencies.pth").write_text(f"{_dependencies_of_this_environment(tmp_path / 'deps')}\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update({"CC": "/bin/false"} if compiler == "missing" else {})
    r = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                        "--no-build-isolation", "--no-index", str(src)],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    def run(*cmd):
        r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env, cwd=elsewhere, timeout=120)
        assert r.returncode == 0, f"{cmd}: {r.stdout[-2000:]}{r.stderr[-3000:]}"
        return r.stdout

    # site-packages holds nsys_transfer and its layers, no top-level analysis, profiling, reports, workloads
    installed = sorted(p.name for p in site.iterdir() if not p.name.endswith((".dist-info", ".pth", "__pycache__")))
    assert installed == ["nsys_transfer"], installed
    assert sorted(p.name for p in (site / "nsys_transfer").iterdir() if p.is_dir() and p.name != "__pycache__") \
        == sorted(LAYERS)
    where = run(python, "-c", "import nsys_transfer, nsys_transfer.analysis as a, importlib.util as u; "
                              "print(nsys_transfer.__path__, a.__file__, [n for n in %r if u.find_spec(n)])" % LAYERS)
    assert str(site) in where and str(src) not in where and str(ROOT) not in where and where.endswith("[]\n"), where
    built = run(python, "-c", "from nsys_transfer.analysis.load import btree; print(btree._btree is not None)")
    assert built.strip() == str(compiler == "found"), built
    out = elsewhere / "baseline.json"
    run(bin_ / "analyze-trace", h200["baseline"], "--json", out, "-q")
    assert out.stat().st_size > 1000
    if compiler == "missing":
        return  # the console scripts and modules below are the same files whichever reader was built
    for script in ("compare-traces", "scrub-trace", "nsys-transfer"):
        assert "Usage" in run(bin_ / script, "--help")
    for module in ("nsys_transfer", "nsys_transfer.analysis", "nsys_transfer.reports", "nsys_transfer.profiling",
                   "nsys_transfer.workloads", "nsys_transfer.analysis.cli.scrub"):
        assert "Usage" in run(python, "-m", module, "--help")


def _makefile_editable_mode() -> list[str]:
    """The options the Makefile's install rules give `pip install -e` (EDITABLE)."""
    for line in (ROOT / "Makefile").read_text().splitlines():
        if line.startswith("EDITABLE :="):
            return line.split(":=", 1)[1].split()
    raise AssertionError("the Makefile names no EDITABLE mode for its install rules")


def test_development_install_is_seen_from_any_folder(tmp_path):
    """`pip install -e` as the Makefile runs it, into a fresh venv: from a folder outside the checkout, mypy resolves
    every first-party import of nsys_transfer (setuptools' default editable install is an import hook, which mypy
    cannot follow: "Can't find package 'nsys_transfer'"), `python -m nsys_transfer.analysis` runs, and a module added
    to a layer's folder after the install is importable at once; the layers stay links to the top-level folders."""
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, symlinks=True, ignore=shutil.ignore_patterns(
        ".git", ".venv", ".nsys", ".carry", "out", "runs", "build", "*.egg-info", "__pycache__", "tests", "docs",
        "*.so", ".mypy_cache", ".pytest_cache", ".ruff_cache"))
    assert all((src / "nsys_transfer" / layer).is_symlink() for layer in LAYERS)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "dependencies.pth").write_text(f"{_dependencies_of_this_environment(tmp_path / 'deps')}\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "MYPYPATH")}
    r = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                        "--no-build-isolation", "--no-index", "-e", str(src), *_makefile_editable_mode()],
                       capture_output=True, text=True, env={**env, "CC": "/bin/false"}, cwd=tmp_path, timeout=180)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    def run(*cmd, ok=(0,)):
        r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env, cwd=elsewhere, timeout=600)
        assert r.returncode in ok, f"{cmd}: {r.stdout[-3000:]}{r.stderr[-3000:]}"
        return r.stdout + r.stderr

    # mypy exits 1 on the type errors it finds (third-party stubs, not house rules), 2 when it cannot run at all; it
    # skips the third-party packages (torch, pandas: four fifths of its time), whose imports it still resolves and
    # reports when missing, as it does every first-party one (-p lists them all)
    said = run(python, "-m", "mypy", "--python-executable", python, "-p", "nsys_transfer", "--no-error-summary",
               "--follow-imports=skip", "--cache-dir", tmp_path / "mypy-cache", ok=(0, 1))
    assert "Can't find package" not in said and "'nsys_transfer' cannot be type checked" not in said, said[-2000:]
    unresolved = [x for x in said.splitlines() if re.search(r'(module named|Module) "nsys_transfer[."]', x)]
    assert not unresolved, unresolved[:5]
    assert str(src / "nsys_transfer") in said or not said.strip()  # it read the checkout's files
    assert "Usage" in run(python, "-m", "nsys_transfer.analysis", "--help")
    (src / "analysis" / "added_later.py").write_text("WHERE = __file__\n")
    where = run(python, "-c", "import nsys_transfer.analysis.added_later as m; print(m.WHERE)")
    assert where.strip() == str(src / "nsys_transfer" / "analysis" / "added_later.py"), where
