"""A torch.profiler trace made fit to commit as test data: the header's record of where and on what it was recorded
dropped (traceName's folder, host_name, trace_id, distributedInfo's addresses), every event kept as recorded, written
gzip-compressed (the form tensorboard_trace_handler(use_gzip=True) writes, which analyze-trace reads).

    python tools/scrub_kineto.py IN.json[.gz] OUT.pt.trace.json.gz
"""
from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

KEPT_DISTRIBUTED = ("backend", "rank", "world_size")  # what tells ranks apart; addresses and ports go


def scrub(doc: dict | list) -> dict | list:
    """The trace without its recorded place: the events untouched (a bare array of events has no header)."""
    if isinstance(doc, list):
        return doc
    out = dict(doc)
    if "traceName" in out:
        out["traceName"] = Path(str(out["traceName"])).name
    if "host_name" in out:
        out["host_name"] = "host"
    out.pop("trace_id", None)
    if isinstance(out.get("distributedInfo"), dict):
        out["distributedInfo"] = {k: v for k, v in out["distributedInfo"].items() if k in KEPT_DISTRIBUTED}
    return out


def main() -> None:
    """The command line: one trace in, its scrubbed gzip out."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("src", type=Path)
    p.add_argument("dst", type=Path)
    a = p.parse_args()
    raw = a.src.read_bytes()
    doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    a.dst.write_bytes(gzip.compress(json.dumps(scrub(doc), separators=(",", ":")).encode(), 9, mtime=0))


if __name__ == "__main__":
    main()
