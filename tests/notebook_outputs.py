"""docs/notebook.ipynb as a Jupyter kernel runs it today: execute() runs it (nbclient, in a real kernel of this
Python), shown() is what a run shows that tests/test_api.py holds to what the notebook stores.

    python tests/notebook_outputs.py --update     # after a change meant to move what it shows: runs it, stores it

What is held: each code cell's printed text, whole (the API's own words and figures: the verdict, the findings, what
their fixes buy), and the kinds of what it displays (a table, a chart). Not the tables' and charts' bytes: pandas and
matplotlib draw those a little differently from release to release; test_api.py holds the values behind them."""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "docs" / "notebook.ipynb"
KERNEL = "nsys-transfer-this-python"  # a name no user's kernel has: the kernel is this Python, whatever is installed


def execute(path: Path = NOTEBOOK, timeout: int = 900):
    """The notebook run from its own folder (as Jupyter runs it) in a kernel of this Python (sys.executable), with
    its outputs; nbclient's CellExecutionError where a cell fails."""
    import nbformat
    from nbclient import NotebookClient
    nb = nbformat.read(path, as_version=4)
    kernelspec = nb.metadata.get("kernelspec")
    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "kernels" / KERNEL
        spec.mkdir(parents=True)
        (spec / "kernel.json").write_text(json.dumps({
            "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "Python 3 (ipykernel)", "language": "python"}))
        was = os.environ.get("JUPYTER_PATH")
        os.environ["JUPYTER_PATH"] = tmp + (os.pathsep + was if was else "")  # read when the kernel is looked up
        try:
            NotebookClient(nb, kernel_name=KERNEL, timeout=timeout, record_timing=False,
                           resources={"metadata": {"path": str(path.parent)}}).execute()
        finally:
            if was is None:
                os.environ.pop("JUPYTER_PATH")
            else:
                os.environ["JUPYTER_PATH"] = was
    if kernelspec is not None:  # the notebook names the reader's usual kernel, not this run's
        nb.metadata["kernelspec"] = kernelspec
    return nb


def shown(nb) -> list[dict]:
    """What each code cell shows: its printed text (stdout, however the kernel split it into outputs) and the kinds
    of what it displays, in order (['text/html', 'text/plain'] for a table, ['image/png', 'text/plain'] for a
    chart); an error's name and message."""
    out = []
    for cell in (c for c in nb.cells if c.cell_type == "code"):
        printed, displayed = "", []
        for o in cell.outputs:
            if o.output_type == "stream" and o.name == "stdout":
                printed += o.text
            elif o.output_type in ("execute_result", "display_data"):
                displayed.append(sorted(o.data))
            elif o.output_type == "error":
                displayed.append(["error", o.ename, o.evalue])
        out.append({"source": cell.source, "printed": printed, "displayed": displayed})
    return out


def main() -> None:
    """--update: run the notebook and store what it shows in it."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--update", action="store_true", help="run docs/notebook.ipynb and store its outputs in it")
    if not parser.parse_args().update:
        parser.error("say --update to run the notebook and store its outputs")
    import nbformat
    nbformat.write(execute(), NOTEBOOK)
    print(f"stored the outputs of {NOTEBOOK.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
