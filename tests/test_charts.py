"""Every chart, read back: analyze-trace's per-trace PNGs for the bundled H200 traces, a program of
tests/data/programs and two public exports, and compare-traces' report (a user's two traces with the bundled H200
report beside them). Each chart's artists are read as it is saved (legend colours, bars, titles) and every PNG's
pixels after: one colour per cause in every chart, the palette's; gap bars as wide as the gaps are long; no chart
that is empty, blank or left over from an earlier run; the HTML's every image there and drawn."""
from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
import subprocess
import warnings
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from conftest import H200, ROOT, SHARED_TRACES

PROGRAMS = ROOT / "tests" / "data" / "programs"
PUBLIC = ["pipit_cloverleaf_cuda_v2024.5.1.sqlite", "nsightful_power_iteration_v2025.3.1.sqlite"]
PAIR = [PROGRAMS / "seg_logits_nsys2024.sqlite.xz", PROGRAMS / "seg_logits_fixed_nsys2024.sqlite.xz"]


def _rgb(c) -> tuple[int, int, int]:
    from matplotlib.colors import to_rgb
    return tuple(round(255 * x) for x in to_rgb(c))


def _axes_record(ax) -> dict:
    """What one axes draws: its legend (label, RGB), the RGB of every filled patch and collection, its bars
    (x, width, height, RGB), its broken bars (x0, x1, y0, RGB), its title and its place on the canvas (pixels)."""
    from matplotlib.collections import PolyCollection
    from matplotlib.patches import Rectangle
    legend = ax.get_legend()
    entries = [(t.get_text(), _rgb(h.get_facecolor())) for h, t in zip(legend.legend_handles, legend.get_texts())] \
        if legend else []
    drawn, bars = set(), []
    for p in ax.patches:
        if isinstance(p, Rectangle) and p.get_facecolor()[3] > 0.5:
            drawn.add(_rgb(p.get_facecolor()))
            bars.append((p.get_x(), p.get_width(), p.get_height(), _rgb(p.get_facecolor())))
    spans = []  # broken_barh's bars: (x0, x1, y0, RGB) each, in data units
    for c in ax.collections:
        if isinstance(c, PolyCollection):
            drawn |= {_rgb(f) for f in c.get_facecolors() if f[3] > 0.5}
            faces = c.get_facecolors()
            for i, path in enumerate(c.get_paths()):
                v = path.vertices
                spans.append((v[:, 0].min(), v[:, 0].max(), v[:, 1].min(), _rgb(faces[i % len(faces)])))
    return {"legend": entries, "drawn": drawn, "bars": bars, "spans": spans, "xlim": ax.get_xlim(),
            "title": " ".join(t for t in (ax.get_title("left"), ax.get_title()) if t),
            "extent": ax.get_window_extent().bounds}


@pytest.fixture(scope="session")
def rendered(tmp_path_factory):
    """Every chart drawn once: per trace (analyze-trace's --plots, in this process) and the report (compare-traces
    with two traces of a user's program and --bundled, into a folder an earlier report left files in)."""
    from nsys_transfer.analysis.cli.analyze import analyze_file
    from nsys_transfer.analysis.facade import options_for
    from nsys_transfer.analysis.render import plots
    from nsys_transfer.reports import charts
    from nsys_transfer.reports.compare_command import main as compare
    traces = sorted(H200.glob("*.sqlite.xz")) + [PAIR[1]]
    public = [SHARED_TRACES / n for n in PUBLIC if (SHARED_TRACES / n).exists()]
    base = tmp_path_factory.mktemp("charts")
    out = {"plots": base / "plots", "whole": base / "whole", "report": base / "report", "charts": {},
           "analyses": {}, "public": [p.name.split(".")[0] for p in public]}
    out["plots"].mkdir()
    for stale in ("pinned_gaps.png", "ceiling_dtoh.png", "pinned_gpus.png"):  # an earlier run's, to be removed
        (out["plots"] / stale).write_bytes(b"an earlier run's")
    (out["report"] / "bundled").mkdir(parents=True)
    for stale in ("gpus_old-run.png", "before_after.png", "timelines.png", "bundled/dtoh.png"):
        (out["report"] / stale).write_bytes(b"an earlier report's")
    (out["report"] / "notes.txt").write_text("the user's own file")
    real_save = plots.save

    def save(fig, path, dpi=110):
        saved = real_save(fig, path, dpi)  # laid out and drawn as saved; the figure is still there to read
        scale = dpi / fig.dpi  # extents at the saved resolution, in the PNG's pixels
        out["charts"][str(Path(path).resolve())] = [
            {**r, "extent": tuple(v * scale for v in r["extent"])} for r in map(_axes_record, fig.axes)]
        return saved

    err = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, warnings.catch_warnings(record=True) as caught, \
            contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("always")
        mp.setattr(plots, "save", save)
        mp.setattr(charts, "save", save)
        for t in traces + public:
            out["analyses"][t.name.split(".")[0]] = analyze_file(t, options_for(t, None, None), plot_dir=out["plots"])
        # the whole capture: seg_logits_fixed's set-up maps memory while the GPU waits
        out["analyses"]["whole"] = analyze_file(PAIR[1], options_for(PAIR[1], None, None, whole=True),
                                                plot_dir=out["whole"])
        try:
            compare.main([*map(str, PAIR), "--bundled", "--out", str(out["report"])], standalone_mode=False)
        except SystemExit as e:
            pytest.fail(f"compare-traces exited {e.code}: {err.getvalue()[-2000:]}")
    out["warnings"] = [str(w.message) for w in caught]
    out["stderr"] = err.getvalue()
    return out


def _palette_labels() -> dict[str, str]:
    from nsys_transfer.analysis.render import palette
    labels = {palette.key_label(k): k for k in palette.keys()}
    assert len(labels) == len(palette.keys())  # one name per key
    return labels


def _entries(rendered):
    """(chart file, axes, label, RGB) of every legend entry that names a palette key (', % of steps' dropped)."""
    labels = _palette_labels()
    for path, axes in rendered["charts"].items():
        for i, ax in enumerate(axes):
            for label, rgb in ax["legend"]:
                name = label.split(", % of")[0]
                if name in labels:
                    yield Path(path).name, i, labels[name], rgb


def test_each_cause_has_the_palettes_colour_in_every_chart(rendered):
    from nsys_transfer.analysis.render import palette
    seen: dict[str, set] = {}
    where: dict[str, set] = {}
    for chart, _, key, rgb in _entries(rendered):
        assert rgb == palette.rgb(key), (chart, key, rgb)
        seen.setdefault(key, set()).add(rgb)
        where.setdefault(key, set()).add(re.sub(r"^.*_", "", chart))  # the chart kind: timeline, gaps, ...
    assert all(len(v) == 1 for v in seen.values())
    # the causes these traces have, each in several kinds of chart (not a check of one chart with itself)
    for key in ("input", "cpu-range", "launch", "host-sync", "mapping", "compute", "DtoH", "DtoH/Pageable"):
        assert key in where, key
    assert {"timeline.png", "breakdown.png", "gaps.png"} <= where["input"]
    assert {"timeline.png", "breakdown.png", "gaps.png", "timelines.png"} <= where["cpu-range"]
    assert {"timeline.png", "breakdown.png", "gaps.png"} <= where["mapping"]
    assert {"timeline.png", "breakdown.png", "dtoh.png", "overlap.png"} <= where["DtoH/Pageable"]
    # the palette itself: one colour per key, no two keys alike
    colours = [palette.rgb(k) for k in _palette_labels().values()]
    assert len(set(colours)) == len(colours)


def test_a_chart_draws_only_the_colours_its_legend_names(rendered):
    """Every filled bar of an axes with a palette legend is a colour that legend names (or the neutral grey of the
    NVTX rows): no unnamed colour, and no legend with two entries of one colour or more than 10 entries."""
    from nsys_transfer.analysis.render import palette
    labels = _palette_labels()
    neutral = {palette.rgb_of(palette.NVTX_COLOR), palette.rgb_of(palette.NVTX_OUTER)}
    checked = 0
    for path, axes in rendered["charts"].items():
        for ax in axes:
            assert len(ax["legend"]) <= palette.MAX_LEGEND, (path, ax["legend"])
            names = [label.split(", % of")[0] for label, _ in ax["legend"]]
            if not names or not all(n in labels or n == "NVTX range (CPU)" for n in names):
                continue  # the GPUs' bands of the several-GPU chart: GPU 0, GPU 1 ...
            rgbs = [rgb for label, rgb in ax["legend"] if label != "NVTX range (CPU)"]
            assert len(set(rgbs)) == len(rgbs), (path, ax["legend"])
            assert ax["drawn"] <= set(rgbs) | neutral, (path, ax["drawn"] - set(rgbs) - neutral, ax["legend"])
            checked += 1
    assert checked > 40


def test_gap_bars_are_as_wide_as_the_gaps_are_long(rendered):
    """Each bar of a gaps chart spans its gap: x at the gap's start, width and height its duration (ms); and in the
    PNG, the one long gap of seg_logits_fixed covers its share of the axis, in pixels."""
    for stem in ["seg_logits_fixed_nsys2024", "baseline", "multiproc", *rendered["public"]]:
        a = rendered["analyses"][stem]
        g = a.tables["gaps"]
        path = rendered["plots"] / f"{stem}_gaps.png"
        assert len(g) and path.exists(), stem
        bars = rendered["charts"][str(path.resolve())][0]["bars"]
        t0 = a.summary["window"]["start_ns"]
        want = sorted(zip((g["start_ns"] - t0) / 1e6, g["duration_ns"] / 1e6))
        got = sorted((x, w) for x, w, _, _ in bars)
        assert len(got) == len(want), stem
        assert np.allclose(got, want, rtol=1e-9, atol=1e-6), stem
        assert all(abs(w - h) < 1e-9 for _, w, h, _ in bars), stem
    ax = rendered["charts"][str((rendered["plots"] / "seg_logits_fixed_nsys2024_gaps.png").resolve())][0]
    (x, w, _, rgb), = ax["bars"]
    img = _pixels(rendered["plots"] / "seg_logits_fixed_nsys2024_gaps.png")
    columns = np.flatnonzero((img == np.array(rgb, dtype=np.uint8)).all(axis=2).any(axis=0))
    left, _, width, _ = ax["extent"]
    columns = columns[columns >= left + 1]  # the legend's swatch lies right of the axes
    columns = columns[columns <= left + width]
    span = ax["xlim"][1] - ax["xlim"][0]
    assert abs(len(columns) / width - w / span) < 0.01, (len(columns), width, w, span)
    assert w > 500 and abs(columns[0] - (left + width * x / span)) <= 2


def test_titles_say_what_the_timeline_draws(rendered):
    titles = {Path(p).name: axes[0]["title"] for p, axes in rendered["charts"].items() if p.endswith("_timeline.png")}
    assert "no steps found" in titles["seg_logits_fixed_nsys2024_timeline.png"]
    assert "the last 3 of 12 steps ('Batch 12' ... 'Batch 14')" in titles["pinned-long_timeline.png"]
    assert "all 3 steps" in titles["pinned_timeline.png"]
    for stem in rendered["public"]:
        assert "last steps" not in titles[f"{stem}_timeline.png"]
    if "pipit_cloverleaf_cuda_v2024" in rendered["public"]:
        assert "no steps found" in titles["pipit_cloverleaf_cuda_v2024_timeline.png"]
    if "nsightful_power_iteration_v2025" in rendered["public"]:
        assert "the last 3 of 44 steps" in titles["nsightful_power_iteration_v2025_timeline.png"]
    assert all("last steps" not in t for t in titles.values())


def _pixels(path: Path) -> np.ndarray:
    from matplotlib.image import imread
    return (imread(path)[..., :3] * 255).round().astype(np.uint8)


def _not_blank(path: Path) -> bool:
    img = _pixels(path)
    inked = (img < 245).any(axis=2).mean()
    packed = (img[..., 0].astype(np.uint32) << 16) | (img[..., 1].astype(np.uint32) << 8) | img[..., 2]
    return inked > 0.01 and len(np.unique(packed)) >= 8


def test_no_empty_blank_or_stale_chart(rendered):
    """No chart that would say only 'nothing here': pinned has no idle gap of 1 ms and ceiling no DtoH copy, so
    neither chart is written, the earlier run's files of those names are gone, and stderr says so once each. Every
    PNG left is one this run drew, and not blank."""
    plots = rendered["plots"]
    assert not (plots / "pinned_gaps.png").exists() and not (plots / "ceiling_dtoh.png").exists()
    assert not (plots / "pinned_gpus.png").exists()
    assert rendered["stderr"].count("pinned_gaps.png (no GPU idle gap >= 1 ms)") == 1
    assert rendered["stderr"].count("ceiling_dtoh.png (no DtoH copies)") == 1
    written = {Path(p) for p in rendered["charts"]}
    for folder in (plots, rendered["whole"], rendered["report"], rendered["report"] / "bundled"):
        for png in folder.glob("*.png"):
            assert png.resolve() in written, png
            assert _not_blank(png), png
    assert not any("layout not applied" in w for w in rendered["warnings"]), rendered["warnings"]
    assert "Warning" not in rendered["stderr"]


class _Refs(HTMLParser):
    def __init__(self):
        super().__init__()
        self.refs, self.text = [], []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "img":
            self.refs.append(a["src"])
        if tag == "a" and not a.get("href", "").startswith(("http", "#")):
            self.refs.append(a["href"])

    def handle_data(self, data):
        self.text.append(data)


def test_the_report_holds_this_runs_files_and_its_html_every_image(rendered):
    rep = rendered["report"]
    assert not (rep / "gpus_old-run.png").exists() and not (rep / "timelines.png").exists()
    assert (rep / "notes.txt").read_text() == "the user's own file"  # not the report's: left alone
    assert "reporting 2 traces from" in rendered["stderr"] and "the bundled H200 traces into" in rendered["stderr"]
    for page in (rep / "report.html", rep / "bundled" / "report.html"):
        p = _Refs()
        p.feed(page.read_text())
        pngs = [r for r in p.refs if r.endswith(".png")]
        assert pngs, page
        for ref in p.refs:
            target = page.parent / ref
            assert target.is_file(), (page, ref)
            if ref.endswith(".png"):
                assert _not_blank(target), target
        # every PNG of the folder is one the page shows
        assert {f.name for f in page.parent.glob("*.png")} == set(pngs), page
    md = (rep / "report.md").read_text()
    assert "## Before and after" in md and "![where the GPU's time went](before_after.png)" in md
    assert "## The bundled H200 stages" in md and "| pinned | 6.63 |" in md and "bundled/report.html" in md
    bundled = (rep / "bundled" / "report.html").read_text()
    assert bundled.count("steps captured") == 1  # said once for the seven stages with 3 steps, not under each
    assert "7 of 9: naive-input, baseline, multiproc, bufpool, async, streams, pinned" in bundled
    assert "PCIe gen5 x16 nominal" in bundled and "pinned (55.1 GB/s), pinned-long (55.1 GB/s) run above it" in bundled


def _browser() -> str | None:
    return next((b for b in ("chromium-headless-shell", "chromium", "google-chrome") if shutil.which(b)), None)


PROBE = ("<script>const seen={errors:[]};window.addEventListener('error',e=>seen.errors.push("
         "(e.target&&e.target.src)||e.message),true);window.addEventListener('load',()=>{const im=[...document.images];"
         "seen.images=im.length;seen.drawn=im.filter(i=>i.complete&&i.naturalWidth>0).length;const p="
         "document.createElement('pre');p.id='probe';p.textContent=JSON.stringify(seen);document.body.appendChild(p)})"
         "</script>")


@pytest.mark.skipif(_browser() is None, reason="no headless browser (apt-get install chromium-headless-shell)")
def test_the_html_report_renders_in_a_browser(rendered, tmp_path):
    """Chromium loads each report page (a copy beside it with a probe script): every image decodes, no error and
    no console message."""
    for page in (rendered["report"] / "report.html", rendered["report"] / "bundled" / "report.html"):
        probe = page.with_name("_probe.html")
        probe.write_text(page.read_text().replace("<head>", "<head>" + PROBE, 1))
        try:
            r = subprocess.run([_browser(), "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0",
                                "--virtual-time-budget=10000", f"--user-data-dir={tmp_path / 'profile'}",
                                "--dump-dom", probe.as_uri()], capture_output=True, text=True, timeout=120)
        finally:
            probe.unlink()
        m = re.search(r'<pre id="probe">(.*?)</pre>', r.stdout)
        assert m, (page, r.stderr[-2000:])
        seen = json.loads(m.group(1).replace("&quot;", '"'))
        assert seen["images"] >= 4 and seen["drawn"] == seen["images"] and not seen["errors"], (page, seen)
        assert ":CONSOLE" not in r.stderr, r.stderr


def test_the_readmes_charts_are_there_and_small():
    """The README shows a breakdown and a timeline next to the command that made them (docs/img, a few hundred KB)."""
    readme = (ROOT / "README.md").read_text()
    shown = re.findall(r"!\[[^\]]*\]\((docs/img/[^)]+\.png)\)", readme)
    assert {Path(s).name for s in shown} == {"baseline_breakdown.png", "baseline_timeline.png"}
    assert "analyze-trace reports/data/h200/baseline.sqlite.xz --plots" in readme
    for s in shown:
        assert (ROOT / s).stat().st_size < 300_000 and _not_blank(ROOT / s), s


def test_a_legend_beyond_ten_parts_names_the_largest_and_folds_the_rest_into_other(rendered, tmp_path, monkeypatch):
    """One breakdown of every trace rendered above (the H200 stages, seg_logits_fixed, the public exports): more
    than ten kinds of part, so the legend names the nine largest and 'other', and every bar is one of its colours."""
    from nsys_transfer.analysis.render import palette, plots
    from nsys_transfer.analysis.document.breakdown import time_breakdown
    summaries = {k: a.doc for k, a in rendered["analyses"].items()}
    keys = {palette.part_key(label) for s in summaries.values() for label, _ in time_breakdown(s)}
    assert len(keys) > palette.MAX_LEGEND  # the case at hand, from these traces
    kept = []
    real_save = plots.save
    monkeypatch.setattr(plots, "save", lambda fig, path, dpi=110: (real_save(fig, path, dpi), kept.append(fig))[0])
    path = plots.plot_breakdown(list(summaries.values()), list(summaries), tmp_path / "all.png")
    ax = _axes_record(kept[0].axes[0])
    names = [label for label, _ in ax["legend"]]
    assert len(names) == palette.MAX_LEGEND and names[-1] == "other" and len(set(names)) == len(names)
    assert ax["drawn"] == {rgb for _, rgb in ax["legend"]}
    assert "kernels" in names and _not_blank(path)


def test_the_gpus_chart_labels_each_bar_with_its_height_and_no_legend_covers_a_bar(monkeypatch, tmp_path):
    """gpus_*.png (issue 49): a DtoH bar's label is its height (% of the GPU's steps), its GB/s under the GPU's name,
    and the legend lies on no bar; read from the artists before the figure is saved."""
    from nsys_transfer.analysis import Trace
    from nsys_transfer.analysis.rank_summary import RankOptions, analyze_ranks
    from nsys_transfer.analysis.render import plots, rank_plots
    drawn = []
    monkeypatch.setattr(plots, "save", lambda fig, path: drawn.append(fig) or path)
    with Trace.open(ROOT / "reports/data/h200x2/streams-x2.sqlite.xz") as t:
        ranks = analyze_ranks([t], RankOptions())
    rank_plots.plot_ranks(ranks, tmp_path / "gpus.png")
    fig = drawn[0]
    ax = fig.axes[0]
    fig.canvas.draw()
    gpus = ranks.devices
    bars = [p for p in ax.patches if abs(p.get_width() - 0.4) < 1e-9]
    dtoh = sorted((p for p in bars if p.get_x() > round(p.get_x()) - 1e-9), key=lambda p: p.get_x())[-len(gpus):]
    labels = {round(t.get_position()[0], 3): t.get_text() for t in ax.texts}
    for p, share in zip(dtoh, gpus["dtoh_busy_share"]):
        assert p.get_height() == pytest.approx(100 * share)
        assert labels[round(p.get_x() + p.get_width() / 2, 3)] == f"{100 * share:.0f}"
    assert not any("GB/s" in t.get_text() for t in ax.texts)
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    assert all(f"DtoH {g:.0f} GB/s" in tick for g, tick in zip(gpus["dtoh_gbps"], ticks))
    legend = ax.get_legend().get_window_extent()
    assert not any(legend.overlaps(p.get_window_extent()) for p in bars)


def test_legends_name_each_cause_by_the_rule_the_text_names():
    """A cause's legend entry names the rule whose finding the text gives for it (issue 49)."""
    from nsys_transfer.analysis.render import palette
    from nsys_transfer.analysis.rules.diagnosis import RULES
    from nsys_transfer.analysis.rules.code_advice import sites_of
    rules = {r.id for r in RULES}
    for cause in palette.causes():
        label = palette.key_label(cause)
        rule = label.removeprefix("idle: ").split(" ")[0].rstrip(",")
        assert rule in rules and cause in sites_of(rule), (cause, label)


def test_timelines_draw_the_idle_between_steps_by_its_cause(rendered):
    """timelines.png (issue 49): multiproc's row starts where its next-to-last step ends, so the GPU's idle between
    the two ranges is drawn: each gap of the row from its start to its end (clipped to the row), and the one between
    the steps in memory mapping's colour, its largest cause in gaps.png; in the PNG too, as wide as it is long."""
    from nsys_transfer.analysis.render import palette
    path = rendered["report"] / "bundled" / "timelines.png"
    ax = next(a for a in rendered["charts"][str(path.resolve())] if a["title"].startswith("multiproc:"))
    a = rendered["analyses"]["multiproc"]
    st = a.tables["steps"].sort_values("start_ns")
    t0, step = int(st["end_ns"].iloc[-2]), int(st["start_ns"].iloc[-1])  # the time between the last two steps
    assert f"{(step - t0) / 1e6:,.0f} ms between steps, then {st['name'].iloc[-1]}" in ax["title"]
    t1 = t0 + ax["xlim"][1] * 1e6
    g = a.tables["gaps"]
    g = g[(g["end_ns"] > t0) & (g["start_ns"] < t1)]
    want = sorted(((max(s, t0) - t0) / 1e6, (min(e, t1) - t0) / 1e6) for s, e in zip(g["start_ns"], g["end_ns"]))
    row = sorted((x0, x1, rgb) for x0, x1, y0, rgb in ax["spans"] if y0 == 0)  # the row "GPU idle: cause"
    assert np.allclose([(x0, x1) for x0, x1, _ in row], want, atol=1e-3), (row, want)
    x0, x1, rgb = max(row, key=lambda r: r[1] - r[0])
    assert rgb == palette.rgb("mapping") and x0 == 0 and x1 >= (step - t0) / 1e6, (x0, x1, rgb)
    img = _pixels(path)
    left, bottom, width, height = ax["extent"]
    top = img.shape[0] - (bottom + height)  # the PNG's rows run down, the canvas's up
    box = img[int(top) + 2:int(top + height) - 2, int(left) + 2:int(left + width) - 2]
    columns = np.flatnonzero((box == np.array(rgb, dtype=np.uint8)).all(axis=2).any(axis=0))
    assert abs(len(columns) / width - (x1 - x0) / ax["xlim"][1]) < 0.01, (len(columns), width)


def test_a_timeline_draws_every_copy_of_the_steps_its_title_names(rendered):
    """pinned_timeline.png (issue 49) says "all 3 steps": every copy those steps' CUDA calls made is drawn, from its
    start to its end in its direction's and memory's colour, though an asynchronous step's DtoH lands long after its
    range; and the title says how far past the ranges the chart runs."""
    from nsys_transfer.analysis.render import palette
    for stem in ("pinned", "pinned-long", "baseline", "multiproc"):
        a = rendered["analyses"][stem]
        ax = rendered["charts"][str((rendered["plots"] / f"{stem}_timeline.png").resolve())][0]
        st = a.tables["steps"].sort_values("start_ns").iloc[-3:]
        t0, end = int(st["start_ns"].iloc[0]), int(st["end_ns"].iloc[-1])
        c = a.tables["memcpy"]
        c = c[(c["api_start_ns"] >= t0) & (c["api_start_ns"] < end)]
        assert len(c), stem
        spans = {(round(x0, 3), round(x1, 3), rgb) for x0, x1, _, rgb in ax["spans"]}
        for r in c.itertuples():
            key = palette.copy_key(r.copy_kind, palette.host_memory(r.copy_kind, r.src_kind, r.dst_kind))
            bar = (round((r.start_ns - t0) / 1e6, 3), round((r.end_ns - t0) / 1e6, 3), palette.rgb(key))
            assert bar in spans, (stem, bar)
        after = (ax["xlim"][1] * 1e6 - (end - t0)) / 1e6
        assert after < 0.5 or f"and the {after:,.0f} ms after them" in ax["title"], (stem, ax["title"])
    assert "their last copy's end" in rendered["charts"][str((rendered["plots"] / "pinned_timeline.png").resolve())][0]["title"]
