"""`scrub-trace SRC DST`: a copy of an nsys export without the profiled program's environment.

An export carries the whole environment (tokens, private paths) in TARGET_INFO_SYSTEM_ENV
(DeviceEnvironment), META_DATA_CAPTURE (PROCESS_n:ENVIRONMENT_VARIABLE, PROCESS_n:WORKING_DIR) and
NUL-separated blocks in StringIds. SRC is never modified; DST may be .sqlite or .sqlite.xz.
"""
from __future__ import annotations

import lzma
import re
import shutil
import sqlite3
import sys
import tempfile
from pathlib import Path

import click

from nsys_transfer.analysis.render import outputs
from nsys_transfer.analysis.common.errors import TraceError
from nsys_transfer.analysis.cli.options import OneLineCommand
from nsys_transfer.analysis.load.trace import Trace

SCRUBBED = "(scrubbed)"
ENV_ASSIGN = re.compile(r"(?:^|[\x00;\n])[A-Za-z_][A-Za-z0-9_]*=")


def _looks_like_environment(value: str) -> bool:
    return "\x00" in value or len(ENV_ASSIGN.findall(value)) >= 3


def scrub(src: Path, dst: Path) -> dict:
    """Write a scrubbed copy of src to dst; return counts of what was removed."""
    if dst.resolve() == Path(src).resolve():
        raise TraceError(f"{dst}: refusing to overwrite the input; give another output path")
    outputs.check_destination(dst, "DST", folder=False, inputs=[src])
    with Trace.open(src) as t:  # validates, decompresses, and applies a journal beside it on a private copy
        local = t.path
    counts = {"system_env": 0, "capture_meta": 0, "strings": 0}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "scrubbed.sqlite"
        shutil.copyfile(local, work)
        con = sqlite3.connect(work)
        con.text_factory = lambda b: b.decode("utf-8", "replace")
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if "TARGET_INFO_SYSTEM_ENV" in tables:
            counts["system_env"] = con.execute("UPDATE TARGET_INFO_SYSTEM_ENV SET value=? WHERE name LIKE '%Environment%'",
                                               (SCRUBBED,)).rowcount
        if "META_DATA_CAPTURE" in tables:
            counts["capture_meta"] = con.execute("DELETE FROM META_DATA_CAPTURE WHERE name LIKE '%ENVIRONMENT_VARIABLE%'").rowcount
            counts["capture_meta"] += con.execute("UPDATE META_DATA_CAPTURE SET value=? WHERE name LIKE '%WORKING_DIR%'",
                                                  (SCRUBBED,)).rowcount
        ids = [i for i, v in con.execute("SELECT id, value FROM StringIds") if _looks_like_environment(str(v or ""))]
        con.executemany("UPDATE StringIds SET value=? WHERE id=?", [(SCRUBBED, i) for i in ids])
        counts["strings"] = len(ids)
        con.commit()
        con.execute("VACUUM")
        con.close()
        _write(work, dst)
    return counts


def _write(work: Path, dst: Path) -> None:
    """The scrubbed file to dst (xz-compressed for .xz); one line, and no partial dst left, when that fails."""
    created = outputs.first_missing(dst.parent)
    try:
        dst.parent.mkdir(parents=True, exist_ok=True)
        if dst.name.endswith(".xz"):
            with open(work, "rb") as f, lzma.open(dst, "wb", preset=9) as out:
                shutil.copyfileobj(f, out, 1 << 20)
        else:
            shutil.copyfile(work, dst)
    except OSError as e:
        dst.unlink(missing_ok=True)
        outputs.remove_created(created)
        raise TraceError(f"{dst}: cannot write it ({e.strerror or e}); choose a place you can write") from None


@click.command(cls=OneLineCommand, name="scrub-trace", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("src", type=click.Path(path_type=Path))
@click.argument("dst", type=click.Path(dir_okay=False, path_type=Path))
def main(src, dst):
    """Copy SRC to DST without the environment and working directory the export recorded."""
    try:
        counts = scrub(src, dst)
    except TraceError as e:
        click.echo(f"scrub-trace: {e}", err=True)
        sys.exit(2)
    except sqlite3.DatabaseError as e:
        click.echo(f"scrub-trace: {src}: the export is damaged ({e}); re-export it", err=True)
        sys.exit(2)
    click.echo(f"{dst}: removed {counts['system_env']} system environment, {counts['capture_meta']} capture "
               f"metadata and {counts['strings']} string-table entries")


if __name__ == "__main__":
    main()
