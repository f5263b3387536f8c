"""The bottom layer every other package may import: Nsight Systems itself (find it, its version, its CUDA limits,
export, its console messages) and the contracts between workloads, analysis and reports (stage names, NVTX range
names, defaults). Standard library only: `make nsys` runs `python -m nsys_transfer.nsys_core.driver` before any venv exists."""
