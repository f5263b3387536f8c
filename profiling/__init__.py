"""Run workloads under Nsight Systems and collect traces, run records and unprofiled throughput."""
if __name__ == "profiling":  # `python -m profiling` in a checkout: one package object, nsys_transfer.profiling
    import importlib, sys
    sys.modules[__name__] = importlib.import_module("nsys_transfer.profiling")
