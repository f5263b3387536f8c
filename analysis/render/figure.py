"""A chart's figure, apart from pyplot: drawn by Agg whatever matplotlib backend the caller uses (a notebook's inline
backend, a desktop's Tk, none at all), and shown once where a notebook displays it. save() lays one out and writes it,
so the file analyze-trace --plots writes and the picture a notebook shows are the same drawing."""
from __future__ import annotations

import io
import sys
import warnings

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

DPI = 110  # the charts' resolution, in their files and in a notebook


class Chart(Figure):
    """A matplotlib Figure on its own Agg canvas. pyplot never holds it, so a chart returned to a notebook is shown
    once (by _repr_png_, not again by pyplot at the cell's end), no backend is switched under the user, and it is
    freed with its last reference."""

    def __init__(self, **kw):
        super().__init__(**kw)
        FigureCanvasAgg(self)
        self._fits: bool | None = None  # lay_out's answer, once laid out (None: not yet)

    def laid_out(self) -> bool:
        """Lay the chart out, once (lay_out: a second tight_layout moves it by a pixel), and say whether
        tight_layout could: the file, the notebook's picture and a user's savefig then draw the same layout."""
        if self._fits is None:
            self._fits = lay_out(self)
        return self._fits

    def _repr_png_(self) -> bytes:
        """The PNG a notebook shows: the chart as save() writes it."""
        out = io.BytesIO()
        save(self, out)
        return out.getvalue()


def new(figsize: tuple[float, float], nrows: int = 1, ncols: int = 1, **kw):
    """A Chart and its axes, as pyplot.subplots returns them (kw: subplots' own, e.g. sharex, gridspec_kw)."""
    fig = Chart(figsize=figsize)
    return fig, fig.subplots(nrows, ncols, **kw)


def lay_out(fig: Figure) -> bool:
    """tight_layout, where it can lay the figure out; False where it cannot (matplotlib's "Tight layout not
    applied": a legend wider than the figure), which save() then crops to what it draws. Other warnings pass on."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fig.tight_layout()
    tight = True
    for w in caught:
        if "layout not applied" in str(w.message):
            tight = False
        else:  # not ours to hide
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return tight


def save(fig: Figure, path, dpi: int = DPI):
    """Lay out and write a figure as PNG to path (a file name or a binary file); returns path. A figure pyplot made
    (reports/charts.py draws with pyplot) is closed, so pyplot stops holding it."""
    tight = fig.laid_out() if isinstance(fig, Chart) else lay_out(fig)
    fig.savefig(path, dpi=dpi, bbox_inches=None if tight else "tight", format="png")
    pyplot = sys.modules.get("matplotlib.pyplot")  # loaded wherever pyplot made a figure; never loaded here for it
    if pyplot is not None:
        pyplot.close(fig)
    return path
