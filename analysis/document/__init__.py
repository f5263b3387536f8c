"""The analysis document's types, one door: Document (the whole JSON typed) and the types of the parts made above
the sections (several GPUs side by side, a torch.profiler run's cycles). The sections' own types are defined beside
them (sections/*.py) and reached through Document's fields."""
from .cycles import Cycle, CycleRun, CycleVerdict
from .document import Document, ExtraPart
from .ranks import CommonWindow, HostCpuLoad, RanksPart, RankTrace, WorkloadRun

__all__ = ["Document", "ExtraPart", "Cycle", "CycleRun", "CycleVerdict", "RanksPart", "RankTrace", "CommonWindow", "WorkloadRun",
           "HostCpuLoad"]
