"""The article's inference pipelines as runnable stages (see `python -m workloads --help`)."""
