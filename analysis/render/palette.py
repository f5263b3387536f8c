"""The one palette of every chart (render/plots.py, reports/charts.py) and of the HTML report: a fixed colour per idle
cause (sections/idle.py), per GPU activity (compute, busy, memset), per copy direction and host memory kind, so a
cause or a copy reads the same in the breakdown, the timeline, the gaps and the report. Plain data, no matplotlib.

A copy's colour is its direction's hue in its memory kind's shade: pinned (or device) memory full, pageable light,
managed dark. An idle gap inside a user NVTX range is the cpu-range cause whatever the range: the range's name is
written on the bar, never told by a colour of its own.
"""
from __future__ import annotations

from ..common import idle_causes


def causes() -> tuple[str, ...]:
    """The idle causes' keys, in sections/idle.py's order of precedence (each one's colour and legend name are
    declared with it, common/idle_causes.py: the legend names the rule the text names for it, so a colour in a chart
    and a finding in the text say one name; cpu-range's bars name their range)."""
    return idle_causes.names()


# the GPU's own activity; 'other' is the rest: idle time no cause holds, and what a legend groups beyond its room
KIND_COLORS = {"compute": "#4C72B0", "busy": "#A0BCE0", "memset": "#CCB974", "copy": "#8C8C8C", "other": "#D9D9D9"}
DIRECTIONS = ("DtoH", "HtoD", "DtoD", "unified")
DIRECTION_COLORS = {"DtoH": "#C44E52", "HtoD": "#55A868", "DtoD": "#8172B2", "unified": "#E377C2"}
MEMORY_KINDS = ("Pinned", "Pageable", "Device", "Managed")
MEMORY_SHADE = {"Pinned": 0.0, "Device": 0.0, "Pageable": 0.5, "Managed": -0.35}  # > 0 toward white, < 0 toward black
SHADED = ("DtoH", "HtoD", "DtoD")  # the directions whose host memory kind shades them (a migration is managed memory)
NVTX_COLOR, NVTX_OUTER = "#D5D5D5", "#ECECEC"  # the CPU's ranges: neutral, hatched, named by their text
MAX_LEGEND = 10  # entries; the parts beyond it are drawn and named as 'other'


def shade(hex_color: str, amount: float) -> str:
    """A colour moved toward white (amount > 0) or black (< 0) by that share."""
    rgb = [int(hex_color[i:i + 2], 16) for i in (1, 3, 5)]
    rgb = [round(c + (255 - c) * amount) if amount > 0 else round(c * (1 + amount)) for c in rgb]
    return "#" + "".join(f"{c:02X}" for c in rgb)


def direction_of(copy_kind: str) -> str:
    """The palette's direction of a copy kind (HtoD, DtoH, DtoD; 'Unified HtoD' etc.: unified); 'copy' for the rest
    (HtoH, PtoP, unknown)."""
    if copy_kind.startswith("Unified"):
        return "unified"
    return copy_kind if copy_kind in DIRECTION_COLORS else "copy"


def copy_key(copy_kind: str, memory: str | None = None) -> str:
    """The palette key of a copy: 'DtoH/Pinned', 'HtoD/Pageable', 'unified', 'copy' ...; a memory kind the palette
    has no shade for (Unknown, Array) takes the direction's full colour."""
    d = direction_of(copy_kind)
    return f"{d}/{memory}" if d in SHADED and MEMORY_SHADE.get(memory or "") else d


def host_memory(copy_kind: str, src_kind: str, dst_kind: str) -> str:
    """The host side's memory kind of a copy (the destination of a DtoH, the source of an HtoD), else the source's."""
    return dst_kind if copy_kind.endswith("DtoH") else src_kind


def color(key: str) -> str:
    """The colour (#RRGGBB) of a palette key: a cause, a kind, a direction, or 'direction/memory kind'."""
    cause = idle_causes.by_name(key)
    if cause is not None:
        return cause.color
    if key in KIND_COLORS:
        return KIND_COLORS[key]
    direction, _, memory = key.partition("/")
    if direction in DIRECTION_COLORS:
        return shade(DIRECTION_COLORS[direction], MEMORY_SHADE.get(memory, 0.0))
    raise KeyError(f"no colour for {key!r}")


def rgb_of(hex_color: str) -> tuple[int, int, int]:
    """#RRGGBB as 8-bit (red, green, blue)."""
    return int(hex_color[1:3], 16), int(hex_color[3:5], 16), int(hex_color[5:7], 16)


def rgb(key: str) -> tuple[int, int, int]:
    """The colour of a key as 8-bit (red, green, blue)."""
    return rgb_of(color(key))


def part_key(label: str) -> str:
    """The palette key of a part of sections/breakdown.time_breakdown (and of an idle gap's label in the timeline):
    'kernels' compute, 'DtoH (Pinned)' a copy, 'idle: input-bound' its cause, "idle: in 'get batch'" cpu-range."""
    if label == "kernels":
        return "compute"
    cause = next((c.name for c in idle_causes.CAUSES if c.label == label), None)
    if cause is not None:
        return cause
    if label.startswith("idle: in ") or label == "idle: CPU work":
        return "cpu-range"
    if label.startswith("idle"):
        return "other"
    kind, _, memory = label.partition(" (")
    return copy_key(kind, memory.rstrip(")") or None)


def key_label(key: str) -> str:
    """What a legend calls a key."""
    cause = idle_causes.by_name(key)
    if cause is not None:
        return f"idle: {cause.legend_name}"
    direction, _, memory = key.partition("/")
    if direction in DIRECTION_COLORS:
        if direction == "unified":
            return "unified-memory migration"
        memory = memory or ("pinned" if direction in ("DtoH", "HtoD") else "")  # the full colour's host memory
        return f"{direction} copy, {memory.lower()} memory" if memory else f"{direction} copy"
    return {"compute": "kernels", "busy": "GPU busy (kernels + copies)", "memset": "memset", "copy": "other copy",
            "other": "other"}[key]


def keys() -> list[str]:
    """Every key the palette gives a colour of its own, each once."""
    return [*causes(), *KIND_COLORS, *DIRECTIONS,
            *(f"{d}/{m}" for d in SHADED for m in MEMORY_KINDS if MEMORY_SHADE[m])]


def legend_keys(weights: dict[str, float], max_entries: int = MAX_LEGEND) -> tuple[list[str], set[str]]:
    """(the keys a legend names, in the given order, and the keys it folds into 'other'): at most max_entries, the
    smallest by weight folded first (with 'other' itself taking one of the entries)."""
    keys = list(dict.fromkeys(weights))
    if len(keys) <= max_entries:
        return keys, set()
    kept = sorted((k for k in keys if k != "other"), key=lambda k: -weights[k])[:max_entries - 1]
    folded = {k for k in keys if k not in kept and k != "other"}
    return [k for k in keys if k in kept] + ["other"], folded


def html_key(keys: list[str]) -> str:
    """A row of colour swatches with their names, for the HTML report (what the charts' colours mean)."""
    return "".join(f"<span style='white-space:nowrap;margin-right:12px'><span style='display:inline-block;width:12px;"
                   f"height:12px;background:{color(k)};border:1px solid #777;vertical-align:middle'></span> "
                   f"{key_label(k)}</span>" for k in keys)
