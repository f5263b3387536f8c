"""`python -m nsys_transfer ...`: the `nsys-transfer` command line."""
from nsys_transfer.cli import main

main()
