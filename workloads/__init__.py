"""The article's inference pipelines as runnable stages (see `python -m workloads --help`)."""
if __name__ == "workloads":  # `python -m workloads` in a checkout: one package object, nsys_transfer.workloads
    import importlib, sys
    sys.modules[__name__] = importlib.import_module("nsys_transfer.workloads")
