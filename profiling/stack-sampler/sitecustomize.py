"""Started by Python itself when `nsys-transfer run` puts this folder first on PYTHONPATH: starts the stack sampler
(nsys_transfer_pystacks.py), then hands over to the sitecustomize the program would have had without it."""
import importlib
import sys

try:
    import nsys_transfer_pystacks
    nsys_transfer_pystacks.start_from_environment()
except Exception as e:  # never stop the user's program
    print(f"nsys-transfer: Python stack sampling not started: {e}", file=sys.stderr)


def _chain() -> None:
    """Import the next sitecustomize on the path, if any, as if this one were not there."""
    here = __file__.rsplit("/", 1)[0]
    saved = list(sys.path)
    me = sys.modules.pop("sitecustomize", None)
    try:
        sys.path[:] = [p for p in sys.path if p.rstrip("/") != here.rstrip("/")]
        importlib.import_module("sitecustomize")
    except ImportError as e:
        sys.modules["sitecustomize"] = me
        if e.name != "sitecustomize":  # the program's own sitecustomize failed: its error, not ours to hide
            raise
    finally:
        sys.path[:] = saved


_chain()
