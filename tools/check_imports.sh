#!/bin/sh
# Every first-party import resolves (a module or name of nsys_transfer that is not there): mypy reads the package,
# and only those of its errors fail the check; its type errors are not house rules. It skips the third-party packages
# (torch, pandas: four fifths of its time), whose imports it still resolves, as every first-party one (-p lists them
# all). Usage: check_imports.sh [PYTHON]
PY=${1:-.venv/bin/python}
"$PY" -m mypy --version >/dev/null || exit 2
out=$("$PY" -m mypy -p nsys_transfer --python-executable "$PY" --no-error-summary --follow-imports=skip 2>&1)
[ $? -le 1 ] || { printf '%s\n' "$out"; exit 2; }  # 2: mypy itself failed
! printf '%s\n' "$out" | grep -E '(module named|Module) "nsys_transfer[."]'
