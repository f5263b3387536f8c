"""The compiled parts: analysis/load/_btree.c, the fast reader of an export's big tables (analysis/load/btree.py), and
analysis/replay/_engine.c, the replay's loop (analysis/replay/engine.py).

optional=True: where no C compiler is found the install still succeeds, and the analysis reads through SQLite alone
and replays in Python (same answers, slower)."""
from setuptools import Extension, setup

setup(ext_modules=[Extension("nsys_transfer.analysis.load._btree", ["analysis/load/_btree.c"], optional=True,
                             extra_compile_args=["-O2"]),
                   Extension("nsys_transfer.analysis.replay._engine", ["analysis/replay/_engine.c"], optional=True,
                             extra_compile_args=["-O2"])])
