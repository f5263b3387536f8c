"""Rows of a damaged or odd export that no figure can use: dropped before any analysis, and said so.

nsys writes every time, id and size as an integer and every event once. A copied, edited or half-written export can
hold NULL or text where a number belongs, an end before its start, or the same row twice; taken as they are these
give negative busy times, doubled counts or a `device -1` nobody has. `clean()` drops such rows from a frame the
Trace loads and returns one line per reason ("5 kernel rows with no start or end time, dropped"), which the CLI
prints on stderr and the summary JSON lists under `warnings`. Zero-length events are real (nsys records them) and
stay.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ..common.errors import TraceError

MISSING = -1  # what ColumnReader.int_columns() reads for NULL or a value that is not an integer (sql.int_or_missing)
TIMES = ("start_ns", "end_ns")


def clean(df: pd.DataFrame, what: str, required: tuple[str, ...] = (), times: tuple[str, str] = TIMES
          ) -> tuple[pd.DataFrame, list[str]]:
    """df without the rows whose times or `required` columns are missing, negative or not numbers, whose end comes
    before their start, or that repeat an earlier row exactly; and a warning per reason that dropped any.

    Numeric columns come back as int64 (a frame read with query() may hold None, text or floats there)."""
    if df.empty:
        return df, []
    numeric = [c for c in (*times, *required) if c in df]
    df = _as_integers(df, numeric)
    said: list[str] = []
    keep = np.ones(len(df), dtype=bool)

    def drop(mask: np.ndarray, reason: str):
        new = mask & keep
        if new.any():
            said.append(f"{int(new.sum())} {what} rows {reason}, dropped")
            keep[new] = False

    start, end = df[times[0]].to_numpy(), df[times[1]].to_numpy()
    drop((start < 0) | (end < 0), "with a start or end time that is NULL, not an integer or negative")
    drop(end < start, "that end before they start")
    for col in required:
        if col in df:
            drop(df[col].to_numpy() < 0, f"with a {col.replace('_', ' ')} that is NULL, not an integer or negative")
    drop(repeated_rows(df, times[0]), "that repeat another row exactly")
    if keep.sum() > 1 and (end[keep] == start[keep]).all():  # a capture never has only instants: a damaged export
        said.append(f"all {int(keep.sum())} {what} rows are zero-length (start = end), so their time figures are 0")
    return (df if keep.all() else df[keep].reset_index(drop=True)), said


def _as_integers(df: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """The columns as int64 with MISSING where a value is NULL, text or fractional; untouched when already int64."""
    loose = [c for c in columns if df[c].dtype != np.int64]
    if not loose:
        return df
    df = df.copy()
    for c in loose:
        values = pd.to_numeric(df[c], errors="coerce")
        whole = values.notna() & (values == np.floor(values)) & (values.abs() < 2 ** 62)
        df[c] = np.where(whole, values.fillna(MISSING), MISSING).astype(np.int64)
    return df


def repeated_rows(df: pd.DataFrame, start_col: str = "start_ns") -> np.ndarray:
    """True for every row equal, in all columns, to an earlier one.

    A repeat must share its start with another row, so only rows whose start is not unique are compared in full:
    pandas' duplicated() over every column of millions of rows would cost seconds, this a sort of one column."""
    start = df[start_col].to_numpy()
    in_order = bool((start[1:] >= start[:-1]).all())  # nsys writes rows in time order: then no sort at all
    order = None if in_order else np.argsort(start, kind="stable")
    ordered = start if in_order else start[order]
    same = ordered[1:] == ordered[:-1]
    out = np.zeros(len(df), dtype=bool)
    if not same.any():
        return out
    candidates = np.zeros(len(df), dtype=bool)  # both rows of every pair sharing a start
    candidates[1:] |= same
    candidates[:-1] |= same
    if order is not None:  # the flags above are by sorted position: back to rows
        candidates[order] = candidates.copy()
    rows = np.flatnonzero(candidates)
    out[rows] = df.iloc[rows].duplicated().to_numpy()
    return out


def nameless(codes: np.ndarray, uniques, names: dict[int, str], what: str) -> list[str]:
    """A warning when string ids of `what` rows (factorized: codes into uniques) point at no text (a NULL or missing
    StringIds value). Counted per distinct id: no lookup per row."""
    unknown = [k for k, u in enumerate(uniques) if int(u) not in names]
    return nameless_rows(int(np.bincount(codes[codes >= 0], minlength=len(uniques))[unknown].sum()) if unknown else 0,
                         what)


def nameless_rows(missing: int, what: str) -> list[str]:
    """nameless()'s warning for `missing` rows counted already."""
    return [f"{missing} {what} rows whose name is not in the string table, shown as '?'"] if missing else []


def unnamed(names: pd.Series, what: str, shown_as: str) -> list[str]:
    """A warning when `what` rows have no name at all (NULL text, or a string id pointing at none)."""
    missing = int(names.isna().sum())
    return [f"{missing} {what} rows with no name, shown as '{shown_as}'"] if missing else []


def uncoded(df: pd.DataFrame, columns: tuple[str, ...], what: str) -> list[str]:
    """A warning when enum code columns (copy kind, memory kind) hold NULL or text: those rows count as 'Unknown',
    so they are in no DtoH or HtoD figure."""
    bad = np.zeros(len(df), dtype=bool)
    for c in columns:
        bad |= pd.to_numeric(df[c], errors="coerce").isna().to_numpy()
    n = int(bad.sum())
    return [f"{n} {what} rows with no copy or memory kind (NULL or text), counted as 'Unknown'"] if n else []


def no_kernel_table(tables: set[str]) -> list[str]:
    """A warning when an export has CUDA activity but no kernel table: no compute figure can be made."""
    cuda = {"CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_RUNTIME"} & tables
    return ["no kernel table (CUPTI_ACTIVITY_KIND_KERNEL) although the export has CUDA activity: no kernel, compute or "
            "copy-compute overlap figures"] if cuda else []


NO_API_ROWS = "no CUDA API rows (CUPTI_ACTIVITY_KIND_RUNTIME absent or empty)"


def no_runtime_table(tables: set[str]) -> list[str]:
    """A warning when an export has GPU activity but no CUDA API rows: what the program asked for is unknown."""
    gpu = {"CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY"} & tables
    if not gpu or "CUPTI_ACTIVITY_KIND_RUNTIME" in tables:
        return []
    return [f"{NO_API_ROWS} although the export has GPU activity: no launch, synchronisation or sync/async copy "
            "figures"]


SQLITE_MAGIC = b"SQLite format 3\x00"
# what analyze-trace reads, as its messages name it
TRACE_KINDS = ("an nsys export (.sqlite, .sqlite.xz) or report (.nsys-rep), or a torch.profiler trace (the .json "
               "export_chrome_trace writes, or tensorboard_trace_handler's .pt.trace.json[.gz])")


def check_sqlite_file(file: Path, path: str) -> None:
    """Cheap checks before SQLite sees the file: exists, not empty, SQLite, not truncated. path: what the user gave
    (the messages name it, not a cache entry made from it)."""
    if not file.exists():
        raise TraceError(f"{path}: no such file; give the path of {TRACE_KINDS}")
    if file.is_dir():
        raise TraceError(f"{path}: is a directory; give the path of a trace inside it ({TRACE_KINDS})")
    size = file.stat().st_size
    if size == 0:
        raise TraceError(f"{path}: the file is empty; re-export it with `nsys export --type=sqlite REPORT.nsys-rep`")
    with open(file, "rb") as f:
        header = f.read(100)
    if not header.startswith(SQLITE_MAGIC):
        raise TraceError(f"{path}: not an SQLite file; give an nsys SQLite export "
                         "(`nsys export --type=sqlite REPORT.nsys-rep`) or the .nsys-rep itself")
    if len(header) < 100:
        raise TraceError(f"{path}: truncated SQLite file ({size} bytes); copy or re-export it again")
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big")
    change_counter, valid_for = header[24:28], header[92:96]
    if pages and change_counter == valid_for and size < pages * page_size:
        raise TraceError(f"{path}: truncated SQLite file ({size} of {pages * page_size} bytes); "
                         "copy it again or re-export it with `nsys export --type=sqlite`")
