"""The article's inference pipelines as runnable stages (see `python -m nsys_transfer.workloads --help`)."""
