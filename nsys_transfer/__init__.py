"""One import namespace for the toolkit: nsys_transfer.nsys_core, .fixes, .workloads, .profiling, .analysis, .reports, and on
top the `nsys-transfer` command line (nsys_transfer.cli). Importing any layer imports this, so it stays a docstring and
one lazy name: `from nsys_transfer import analyze` (the Python API, analysis/api.py) loads the analysis, and pandas with
it, only when that name is asked for; `import nsys_transfer` or a layer (a DataLoader worker importing
nsys_transfer.fixes) loads neither.

    from nsys_transfer import analyze
    r = analyze("runs/before/before.sqlite")     # or a torch.profiler trace, .pt.trace.json.gz
    r.verdict, r.idle_by_cause, r.plot.timeline()

The layers keep the design card's top-level folders (analysis/, profiling/, ...); nsys_transfer/analysis etc. are
symbolic links to them, so the checkout is an ordinary package tree: Python, pip (editable or not), pyright and mypy
all resolve `nsys_transfer.analysis` to analysis/ with no import hook, and a new module needs no re-install. The
Makefile installs it path-based (editable_mode=compat: a .pth naming the checkout), and py.typed marks it typed, so a
type checker run from any folder reads it too."""
# not typing's: importing typing (and __future__) would be most of this module's cost; mypy and pyright read a
# module-level TYPE_CHECKING = False as typing's
TYPE_CHECKING = False
if TYPE_CHECKING:  # what a type checker and an editor see; at run time __getattr__ imports it when first asked for
    from .analysis.api import analyze

__all__ = ["analyze"]


def __getattr__(name: str):
    """The lazy names (PEP 562): `analyze` imports analysis/api.py on first use."""
    if name == "analyze":
        from .analysis.api import analyze  # noqa: PLC0415 - lazy: pandas only for who asks
        return analyze
    raise AttributeError(f"module 'nsys_transfer' has no attribute {name!r}")
