"""The one compiled part: analysis/load/_btree.c, the fast reader of an export's big tables (analysis/load/btree.py).

optional=True: where no C compiler is found the install still succeeds, and the analysis reads through SQLite alone
(same answers, slower on long captures)."""
from setuptools import Extension, setup

setup(ext_modules=[Extension("nsys_transfer.analysis.load._btree", ["analysis/load/_btree.c"], optional=True,
                             extra_compile_args=["-O2"])])
