"""`python -m nsys_transfer.profiling ...`: the same command line as `nsys-transfer` (nsys_transfer/cli.py)."""
from nsys_transfer.cli import main

main()
