"""One module per stage; diff stage N against N+1 to see the article's change."""
import importlib

MODULES = {"naive-input": "naive_input", "baseline": "baseline", "multiproc": "multiproc",
           "bufpool": "bufpool", "async": "async_copy", "streams": "streams", "pinned": "pinned",
           "ceiling": "ceiling"}


def stage_class(name: str):
    """The Stage class of the named stage."""
    return importlib.import_module(f"{__name__}.{MODULES[name]}").Stage
