"""The bottom layer every other package may import: Nsight Systems itself (find it, its version, its CUDA limits,
export, its console messages) and the contracts between workloads, analysis and reports (stage names, NVTX range
names, defaults). Standard library only: `make nsys` runs `python -m nsys_core.driver` before any venv exists."""
if __name__ == "nsys_core":  # `python -m nsys_core` in a checkout: one package object, nsys_transfer.nsys_core
    import importlib, sys
    sys.modules[__name__] = importlib.import_module("nsys_transfer.nsys_core")
