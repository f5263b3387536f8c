# Set-up is part of every target: a fresh clone needs only `make report` or `make test`.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAGE   ?= baseline
STEPS   ?= 3
WARMUP  ?= 3
MODEL   ?=
OUT     ?= runs
FORCE   ?=
GPUS    ?= 1
PER_RANK ?=
CPUS    ?=
REPORT  ?= out/report
GPU_OUT ?= out/gpu
WHAT    ?=
PROG    ?=
NAME    ?= $(basename $(notdir $(firstword $(PROG))))
OPTS    ?=
# the folder make was called from: `make -C CHECKOUT trace PROG=my.py` finds my.py, and runs it, there. After -C
# make's $(CURDIR) and a recipe's shell ($$PWD, $(shell pwd)) are the checkout; the PWD make read from the caller's
# environment is not (measured with GNU make 4.3; a caller without PWD gets the checkout)
CALLER  := $(or $(wildcard $(PWD)),$(CURDIR))
STAGES  := naive-input baseline multiproc bufpool async streams pinned ceiling
MODEL_ARG := $(if $(MODEL),--model $(MODEL),)

.PHONY: install install-workloads nsys test lint report profile profile-all trace scaling bench benchmark-analysis benchmark-gpu clean help

help:
	@echo "make report [BUNDLED=0]     comparison report (PNGs, Markdown, HTML) of runs/ in out/report, the bundled H200 traces in out/report/bundled (BUNDLED=0: runs/ alone)"
	@echo "make test                   install everything (venv, torch, Nsight Systems) and run the tests"
	@echo "make lint                   the house rules: ruff, import-linter (the layers), every first-party import resolves, by name and by path"
	@echo "make profile STAGE=baseline [MODEL=encoder STEPS=3 OUT=runs FORCE=1 GPUS=1 PER_RANK=1]   trace one stage (GPU + nsys)"
	@echo "make profile-all            trace every stage;  make bench: unprofiled throughput of every stage"
	@echo "make trace PROG='my.py ARGS' [NAME=my FORCE=1 OPTS='--sample none ...']   your own program: traced whole with the venv's Python, then analysed (OPTS: nsys-transfer run's options)"
	@echo "make scaling STAGE=pinned GPUS=2 [CPUS=0-7]   1 GPU against N GPUs unprofiled -> runs/scaling.json (the report reads it)"
	@echo "make benchmark-gpu [WHAT='bench profile']   the GPU benchmark: benchmarks/gpu.sh (tests, bench, scaling, captures) -> out/gpu"
	@echo "make nsys [NSYS_SUITE=experimental]   install Nsight Systems into .nsys/ (no system change); checks it against the driver"
	@echo "analyze-trace TRACE         (in $(BIN)) summary, --json, --csv, --plots"

$(BIN)/python:
	@echo "setting up $(VENV) (a Python venv in this checkout)"
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# the development install is path-based (a .pth naming the checkout), not setuptools' import hook: mypy, pyright and
# editors then resolve nsys_transfer from any folder (a user's own project too), and a new module needs no reinstall.
# setuptools warns, in a box pip 24+ shows on every install, that its 'compat' mode will go one day: that one warning
# is filtered (by its first words), nothing else; should the mode go, a .pth of our own written here replaces it
EDITABLE := --config-settings editable_mode=compat
PIP      := PYTHONWARNINGS="$${PYTHONWARNINGS:+$$PYTHONWARNINGS,}ignore:Compat editable installs" $(BIN)/python -m pip

$(VENV)/.base: pyproject.toml setup.py analysis/load/_btree.c analysis/replay/_engine.c | $(BIN)/python
	@echo "installing nsys-transfer and pandas, numpy, matplotlib, click, ijson into $(VENV) (a minute or so the first time)"
	$(PIP) install -q -e . $(EDITABLE)
	@touch $@

$(VENV)/.dev: pyproject.toml setup.py analysis/load/_btree.c analysis/replay/_engine.c | $(BIN)/python
	@echo "installing nsys-transfer and its dev tools (pytest, ruff, import-linter, mypy, dask) into $(VENV) (a minute or two the first time)"
	$(PIP) install -q -e '.[dev]' $(EDITABLE)
	@touch $@ $(VENV)/.base

$(VENV)/.full: pyproject.toml setup.py analysis/load/_btree.c analysis/replay/_engine.c | $(BIN)/python
	@echo "installing nsys-transfer, torch, torchvision, nvtx and the dev tools into $(VENV): the first time downloads about 2-3 GB (torch with its CUDA libraries) and takes a few minutes, quietly"
	$(PIP) install -q -e '.[workloads,dev]' $(EDITABLE)
	@echo "installed into $(VENV)"
	@touch $@ $(VENV)/.base $(VENV)/.dev

install: $(VENV)/.base
install-workloads: $(VENV)/.full

nsys:
	@if $(BIN)/python -c "from nsys_transfer.nsys_core.nsys import find_nsys; find_nsys()" >/dev/null 2>&1; then \
	  $(BIN)/python -m nsys_transfer.profiling where; else bash profiling/install_nsys.sh .nsys $(NSYS_SUITE) && $(PY) -m nsys_transfer.nsys_core.driver; fi

# two processes (pytest-xdist; tests/conftest.py): about half the time of one on CI's 2 cores
test: $(VENV)/.full nsys
	$(BIN)/python -m pytest -q -n 2 --dist loadgroup

# the rules are in pyproject.toml ([tool.ruff], [tool.importlinter]); no torch or Nsight Systems needed
lint: $(VENV)/.dev
	$(BIN)/ruff check
	$(BIN)/lint-imports
	sh tools/check_imports.sh $(BIN)/python
	$(BIN)/python tools/check_path_imports.py

# your runs (OUT) in REPORT, the bundled H200 report always in REPORT/bundled (BUNDLED=0: without it); with no run
# of yours yet, REPORT/report.md says how to make one (BUNDLED=0 then: one line, the same)
report: $(VENV)/.base
	$(BIN)/compare-traces --out $(REPORT) $(if $(or $(wildcard $(OUT)/*/*.sqlite),$(filter 0 no,$(BUNDLED))),$(OUT),) $(if $(filter 0 no,$(BUNDLED)),,--bundled)

profile: $(VENV)/.full nsys
	$(BIN)/python -m nsys_transfer.profiling profile $(STAGE) --steps $(STEPS) --warmup $(WARMUP) --out-dir $(OUT) --gpus $(GPUS) $(if $(PER_RANK),--per-rank,) $(if $(FORCE),--force,) $(MODEL_ARG)

# your own program, traced whole (nsys-transfer run) with the venv's Python (torch, nvtx) from the caller's folder,
# then analysed; exactly OUT/NAME/NAME.sqlite (a trace there already: refused, FORCE=1 replaces it), so the verify
# command the run ends with, and the README's, never read an older trace
trace: $(VENV)/.full nsys
	@test -n "$(PROG)" || { echo 'make trace PROG="my.py ARGS": the Python program to trace, run with $(BIN)/python' >&2; exit 2; }
	@cd "$(CALLER)" && "$(CURDIR)/$(BIN)/nsys-transfer" run -o "$(abspath $(OUT))/$(NAME)/$(NAME)" \
	  $(if $(FORCE),--force,--keep-name) --analyze $(OPTS) -- "$(CURDIR)/$(BIN)/python" $(PROG)

profile-all: $(VENV)/.full nsys
	@for s in $(STAGES); do $(BIN)/python -m nsys_transfer.profiling profile $$s --steps $(STEPS) --warmup $(WARMUP) --out-dir $(OUT) $(if $(FORCE),--force,) $(MODEL_ARG) || exit 1; done

scaling: $(VENV)/.full
	$(BIN)/python -m nsys_transfer.profiling scaling --stage $(STAGE) --gpus $(GPUS) $(if $(CPUS),--cpus $(CPUS),) --out $(OUT)/scaling.json $(MODEL_ARG)

bench: $(VENV)/.full
	$(BIN)/python -m nsys_transfer.profiling bench --out $(OUT)/bench.json $(MODEL_ARG)

benchmark-analysis: $(VENV)/.base nsys
	$(BIN)/python benchmarks/analysis_speed.py --size 0.5 2 $(SIZE)

# on a GPU machine: where, tests, bench, scaling (2+ GPUs), captures; WHAT picks steps (benchmarks/gpu.sh --help)
benchmark-gpu: $(VENV)/.full
	PYTHON=$(BIN)/python OUT=$(GPU_OUT) bash benchmarks/gpu.sh $(WHAT)

clean:
	rm -rf out .pytest_cache
