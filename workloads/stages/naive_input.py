"""Part 1's "before": the baseline loop with a single-process loader, pageable input and a blocking HtoD copy."""
from nsys_transfer.workloads.stages.baseline import Stage as Baseline


class Stage(Baseline):
    naive_input = True
