# Sourced by the GPU-machine scripts: the carried nvtx wheel and Nsight Systems bundle (.carry/), unbuffered Python.
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
python3 -m pip install -q --no-index --no-deps --target /tmp/site .carry/nvtx-*.whl >/dev/null 2>&1
tar xJf .carry/nsys.tar.xz -C /tmp && export NSYS=/tmp/nsys/target-linux-x64/nsys
OUT=${OUT:-out}
