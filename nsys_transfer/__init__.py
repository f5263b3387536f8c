"""One import namespace for the toolkit: nsys_transfer.nsys_core, .fixes, .workloads, .profiling, .analysis, .reports, and on
top the `nsys-transfer` command line (nsys_transfer.cli). Nothing else lives here: importing any layer imports this.

Installed (`pip install .`), pyproject's package-dir puts the top-level folders analysis/, profiling/, ... inside
nsys_transfer/. In a checkout (PYTHONPATH=$PWD) they stay siblings of this folder, so the package's search path also
holds the checkout root: nsys_transfer.analysis is analysis/ either way, and `python -m analysis` aliases to it."""
import os as _os

_here = _os.path.dirname(_os.path.abspath(__file__))
_root = _os.path.dirname(_here)
if not _os.path.isdir(_os.path.join(_here, "analysis")) and _os.path.isfile(_os.path.join(_root, "pyproject.toml")) \
        and _os.path.isfile(_os.path.join(_root, "analysis", "__init__.py")):
    __path__.append(_root)  # a checkout: the layers are the root's analysis/, profiling/, ...
