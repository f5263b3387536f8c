"""One import namespace for the toolkit: nsys_transfer.nsys_core, .fixes, .workloads, .profiling, .analysis, .reports, and on
top the `nsys-transfer` command line (nsys_transfer.cli). Nothing else lives here: importing any layer imports this.

The layers keep the design card's top-level folders (analysis/, profiling/, ...); nsys_transfer/analysis etc. are
symbolic links to them, so the checkout is an ordinary package tree: Python, pip (editable or not), pyright and mypy
all resolve `nsys_transfer.analysis` to analysis/ with no import hook, and a new module needs no re-install. The
Makefile installs it path-based (editable_mode=compat: a .pth naming the checkout), and py.typed marks it typed, so a
type checker run from any folder reads it too."""
