"""Where several traces' work runs: worker processes (--jobs) or a Dask cluster (--dask), and its workers' preload."""
