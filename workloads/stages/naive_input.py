"""Part 1's "before": the baseline loop with a single-process loader, pageable input and a blocking HtoD copy."""
from .baseline import Stage as Baseline


class Stage(Baseline):
    """Part 1's before: the baseline with a single-process loader and pageable input."""
    naive_input = True
