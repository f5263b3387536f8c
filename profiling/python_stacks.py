"""The program's Python stacks beside the trace: the sampler (stack-sampler/) started in every Python process of the
traced command, its files packed into one BASE.pystacks.gz once the program has ended."""
from __future__ import annotations

import gzip
import os
import shutil
from pathlib import Path

from ..nsys_core.contracts import PYSTACKS_SUFFIX

SAMPLER_DIR = Path(__file__).resolve().parent / "stack-sampler"
SUFFIX = PYSTACKS_SUFFIX
DEFAULT_INTERVAL_MS = 10.0


def stacks_path(base: Path) -> Path:
    """Where the packed stacks of the capture at base (without extension) go."""
    return base.with_name(base.name + SUFFIX)


def folder_of(base: Path) -> Path:
    """BASE.pystacks.d: where the samplers of one run write, one file a process, until pack()."""
    return base.with_name(base.name + ".pystacks.d")


def forget(base: Path) -> None:
    """An older run's stacks at base removed (a kill left its folder, or this run replaces it), so the stacks beside
    the trace are this run's or none."""
    shutil.rmtree(folder_of(base), ignore_errors=True)
    stacks_path(base).unlink(missing_ok=True)


def fresh_folder(base: Path) -> Path:
    """BASE.pystacks.d, made empty for this run's samplers (after forget())."""
    folder = folder_of(base)
    folder.mkdir()
    return folder


def sampling_environment(env: dict, folder: Path, interval_ms: float) -> dict:
    """env with the sampler started by Python itself in every process (sitecustomize first on PYTHONPATH)."""
    out = dict(env)
    out["PYTHONPATH"] = os.pathsep.join(p for p in (str(SAMPLER_DIR), env.get("PYTHONPATH", "")) if p)
    out["NSYS_TRANSFER_PYSTACKS"] = str(folder)
    out["NSYS_TRANSFER_PYSTACKS_MS"] = f"{interval_ms:g}"
    return out


def pack(folder: Path, out: Path) -> Path | None:
    """Each process's file in folder, one after another (each starts with its H line), gzipped into out, whole or
    not at all; the folder is removed. None when no Python process sampled anything."""
    files = sorted(folder.glob("*.stacks"), key=lambda p: p.stat().st_mtime) if folder.is_dir() else []
    files = [f for f in files if f.stat().st_size > 0]
    try:
        if not files:
            return None
        part = out.with_name(out.name + ".part")
        try:
            with gzip.open(part, "wb", compresslevel=6) as gz:
                for f in files:
                    with open(f, "rb") as src:
                        shutil.copyfileobj(src, gz)
                    gz.write(b"\n")
            os.replace(part, out)
        except BaseException:
            part.unlink(missing_ok=True)
            raise
        return out
    finally:
        shutil.rmtree(folder, ignore_errors=True)
