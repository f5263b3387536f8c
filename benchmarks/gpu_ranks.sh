#!/bin/bash
# On the GPU machine (no network): analyze-trace (--jobs, --dask local) against nsys recipe on 32 derived rank
# traces, with 8 and 16 workers. Needs, carried along in .carry/ (ignored by git): nsys2024.tar.xz (a bundle packed by
# ../shared/tools/nsys-portable.sh) and wheels312/ (pip download "dask[distributed]" --python-version 3.12
# --only-binary=:all: --platform manylinux2014_x86_64 -d .carry/wheels312).
#   bash benchmarks/gpu_ranks.sh [COPIES]
set -e
tar xJf .carry/nsys2024.tar.xz -C /tmp
N=$(dirname "$(find /tmp/nsys -name nsys -type f -path '*target-linux-x64*' | head -1)")
mkdir -p "$N/python/packages/nsys_recipe/third_party"
q=$(ldconfig -p | awk '$1=="libsqlite3.so.0" {print $NF; exit}'); [ -n "$q" ] && ln -sf "$q" "$N/libsqlite3.so.0"
python3 -m pip install --no-index --find-links .carry/wheels312 --target /tmp/site "dask[distributed]" -q 2>&1 | tail -2
export PYTHONPATH=$PWD:/tmp/site NSYS=$N/nsys
EXT=$(python3 -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
INC=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['include'])")
cc -O2 -shared -fPIC -I"$INC" analysis/load/_btree.c -o "analysis/load/_btree$EXT"
python3 -c "import distributed, pyarrow, psutil; print('dask', distributed.__version__)"
nproc; $NSYS --version
for w in 8 16; do
  echo "== workers $w"; timeout 250 python3 benchmarks/ranks_vs_recipe.py --ranks 32 --copies "${1:-1}" --workers $w --out /tmp/r32 2>&1 | tail -14
done
