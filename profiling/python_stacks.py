"""The program's Python stacks beside the trace: the sampler (stack-sampler/) started in every Python process of the
traced command, its files packed into one BASE.pystacks.gz once the program has ended."""
from __future__ import annotations

import gzip
import os
import shutil
from pathlib import Path

SAMPLER_DIR = Path(__file__).resolve().parent / "stack-sampler"
SUFFIX = ".pystacks.gz"  # the reader's too (analysis/load/python_stacks.py imports nothing of this side: same text)
DEFAULT_INTERVAL_MS = 10.0


def stacks_path(base: Path) -> Path:
    """Where the packed stacks of the capture at base (without extension) go."""
    return base.with_name(base.name + SUFFIX)


def fresh_folder(base: Path) -> Path:
    """BASE.pystacks.d, empty, for this run's samplers; an older run's BASE.pystacks.gz or folder there is removed
    first (a kill left it, or this run replaces that one), so the stacks beside the trace are this run's or none."""
    folder = base.with_name(base.name + ".pystacks.d")
    shutil.rmtree(folder, ignore_errors=True)
    stacks_path(base).unlink(missing_ok=True)
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
