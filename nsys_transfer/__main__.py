"""`python -m nsys_transfer ...`: the `nsys-transfer` command line."""
from .cli import main

main()
