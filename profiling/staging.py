"""A run's files written whole or not at all: nsys, the export, the stack sampler and the run record write under a
hidden name beside the final one (`runs/before/.before-1a2b3c4d.part.nsys-rep`, ...), and only a run that got that far
is renamed into place (`runs/before/before.nsys-rep`, ...). A stop (Ctrl-C, SIGTERM), a failed capture or export
deletes them instead, so an interrupted run leaves nothing under its name: the next run of that name is not refused,
a report never lists half a run, and an earlier run of that name (replaced with --force) stays until the new one is
whole. A SIGKILL leaves only the hidden files, which block no name and no report reads."""
from __future__ import annotations

import os
import secrets
import shutil
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..nsys_core.signals import sigterm_raising, stops_blocked

from . import python_stacks

PART = ".part"
# what a run of this toolkit writes beside its base: an earlier run's, under --force, goes when the new one is whole
RUN_SUFFIXES = (".nsys-rep", ".sqlite", ".qdstrm", ".run.json", ".workload.json", python_stacks.SUFFIX)


def hidden(name: str) -> bool:
    """Whether a file name is a run's staged file (or any hidden one): never a trace to read or list."""
    return name.startswith(".")


@dataclass(frozen=True)
class Staged:
    """The final base of a run (`runs/before/before`) and the hidden one its files are written under meanwhile."""
    final: Path
    base: Path

    @classmethod
    def beside(cls, final: Path) -> "Staged":
        """A fresh hidden base in the final base's folder (the rename into place then never crosses file systems)."""
        return cls(final, final.with_name(f".{final.name}-{secrets.token_hex(4)}{PART}"))

    def files(self) -> list[Path]:
        """Every file and folder written under the hidden base so far."""
        folder = self.base.parent
        return sorted(p for p in folder.iterdir() if p.name.startswith(self.base.name)) if folder.is_dir() else []

    def final_of(self, path: str | os.PathLike) -> str:
        """A staged path's final name (any other path unchanged)."""
        text = str(path)
        return str(self.final) + text[len(str(self.base)):] if text.startswith(str(self.base)) else text

    def record(self, value):
        """A run record (or any of its values) with every staged path said by its final name."""
        if isinstance(value, dict):
            return {k: self.record(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.record(v) for v in value]
        return self.final_of(value) if isinstance(value, str) else value

    def publish(self) -> None:
        """Every staged file renamed to its final name, the trace itself (.sqlite) last, with the stops held back
        meanwhile; an earlier run's files under the final name that this run did not write are removed first (a
        stacks file of an older run beside this run's trace would be read as this one's)."""
        staged = self.files()
        finals = {Path(self.final_of(p)) for p in staged}
        with stops_blocked():
            shutil.rmtree(python_stacks.folder_of(self.final), ignore_errors=True)  # a killed run's samples
            for suffix in RUN_SUFFIXES:
                old = self.final.with_name(self.final.name + suffix)
                if old not in finals:
                    old.unlink(missing_ok=True)
            for p in sorted(staged, key=lambda p: p.name.endswith(".sqlite")):
                os.replace(p, self.final_of(p))

    def echo(self) -> Callable[[bytes], None]:
        """nsys's and the program's output on stderr, the run's hidden name said as the name it will have ("Generated:
        runs/x/x.nsys-rep", not the staged file that is renamed once the run is whole)."""
        hidden, final = self.base.name.encode(), self.final.name.encode()

        def echo(chunk: bytes) -> None:
            sys.stderr.buffer.write(chunk.replace(hidden, final))
            sys.stderr.flush()
        return echo

    def discard(self) -> None:
        """Every staged file and folder deleted (a stop, a failed capture): nothing of this run is left."""
        for p in self.files():
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)


@contextmanager
def staged(final: Path, created: Path | None = None) -> Iterator[Staged]:
    """A hidden base beside `final` for the block to write the run under and publish() once whole; however the block
    ends before that (a stop, an error, sys.exit), what it wrote is deleted, and the folders the run made (created: the
    outermost of them) where they are left empty."""
    stage = Staged.beside(final)
    try:
        with sigterm_raising():  # SIGTERM (`timeout`, a scheduler) unwinds through here as Ctrl-C does
            yield stage
    except BaseException:
        stage.discard()
        _remove_empty(final.parent, created)
        raise


@contextmanager
def whole_or_nothing(base: Path, created: Path | None, say: Callable[[str], None], shown: str) -> Iterator[Staged]:
    """staged() for a command: a stop (Ctrl-C, SIGTERM) or a failure leaves nothing under `base` (shown: as the user
    named it), and an earlier trace there (--force) as it was; a stop is said in one line (say) before it ends the
    command with its status (130, 143)."""
    earlier = base.with_name(base.name + ".sqlite").exists()
    try:
        with staged(base, created) as stage:
            yield stage
    except (KeyboardInterrupt, SystemExit) as e:
        code = e.code if isinstance(e, SystemExit) else None
        if isinstance(e, KeyboardInterrupt) or (isinstance(code, int) and code >= 128):
            say(f"{'interrupted' if isinstance(e, KeyboardInterrupt) else 'stopped by SIGTERM'}: nothing written "
                f"under {shown}" + (" (the earlier trace of that name is kept)" if earlier else " (the name stays free)"))
            sys.exit(130 if isinstance(e, KeyboardInterrupt) else code)  # said: not again as click's "interrupted"
        raise


def first_missing(folder: Path) -> Path | None:
    """The outermost folder of `folder` that does not exist yet (what making it makes), or None."""
    folder, missing = Path(os.path.abspath(folder)), None
    while not folder.exists() and folder != folder.parent:
        missing, folder = folder, folder.parent
    return missing


def _remove_empty(folder: Path, created: Path | None) -> None:
    """folder and its parents up to `created`, each removed where empty (never one that holds anything)."""
    if created is None:
        return
    folder, created = Path(os.path.abspath(folder)), Path(os.path.abspath(created))
    while folder == created or created in folder.parents:
        try:
            folder.rmdir()
        except OSError:
            return
        folder = folder.parent
