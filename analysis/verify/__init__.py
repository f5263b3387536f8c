"""Before and after a fix, for the same program (`nsys-transfer verify`): two analysis summaries in, one comparison
document out (docs/json-schema.md, "verify"). A module per job, each importing only those below it (pyproject.toml's
contract holds the order): side (what is compared) < throughput < comparability, matching < verdict < profiler_cost
< loop < metrics, backlog, gates, predictions, noise (one run a side against the machine's noise) < comparison (the
document typed, and its last steps) < cpu (two captures without GPU work: their loops) < compare (verify(): the whole
comparison).

The facade and the result types take what they need from here."""
from .comparability import NotComparable, check_same_profiler
from .compare import verify
from .comparison import Comparison, VerifyDocument
from .matching import finding_name
from .side import Side

__all__ = ["verify", "Side", "Comparison", "VerifyDocument", "NotComparable", "check_same_profiler", "finding_name"]
