"""The top layer: the `nsys-transfer` command line, which profiles (profiling, workloads) and checks what it
recorded (analysis). Nothing imports it but `python -m` entry points."""
