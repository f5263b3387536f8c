"""The one compiled part: analysis/_btree.c, the fast reader of an export's big tables (analysis/btree.py).

optional=True: where no C compiler is found the install still succeeds, and the analysis reads through SQLite alone
(same answers, slower on long captures)."""
from setuptools import Extension, setup

setup(ext_modules=[Extension("nsys_transfer.analysis._btree", ["analysis/_btree.c"], optional=True,
                             extra_compile_args=["-O2"])])
