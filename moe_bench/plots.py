"""PNG plots of asv results (matplotlib, Agg canvas; no pyplot state, no display needed).

Per machine, from ``moe_bench.results.load_results``'s frame:

- ``<machine>-<model>-tpN.png``: one model shape at the machine's latest commit, the time of
  one layer and the peak transient memory, a bar per strategy;
- ``<machine>-time-vs-memory.png``: every strategy as a point (peak memory, time; a colour and
  marker per strategy, one legend), a panel per shape: the lower left corner is best;
- ``<machine>-history.png``: the time of each strategy over the machine's commits (oldest
  left), a panel per shape.

And once, from loads rather than results (``write_rank_load_plot``): ``rank-load-per-layer.png``,
vLLM #45589's whole-rank load layer by layer, a column per ``max_split_size_mb`` setting: the
reserved GiB after each layer (replayed, the same on every machine) and the seconds of each
layer (run on CUDA; the panel says so where no run is recorded).

Axes are in human units (ms, GiB, ...); skipped or failed points are left out (a bar is
labelled n/a).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd
from matplotlib.figure import Figure

from moe_suite.metrics import METRICS, PEAK_BYTES, TIME

from .units import scale

if TYPE_CHECKING:  # the library's result type, for annotations only: no torch at import
    from moe_convert.load.wholemodel import RankLoad

__all__ = ["write_plots", "write_rank_load_plot"]

_PANEL = (4.8, 3.6)  # inches per panel
_COLUMNS = 3  # panels per row in the per-shape grids
_MARKERS = "osD^vPX*"  # a marker per strategy in the time-vs-memory view
_DPI = 110


def write_plots(df: pd.DataFrame, out_dir) -> list[Path]:
    """Write the PNGs described in the module docstring into ``out_dir``; return their paths.

    Machines without any ``TIME`` or ``PEAK_BYTES`` result get no plots.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for machine, rows in df[df["benchmark"].isin([TIME, PEAK_BYTES])].groupby("machine", sort=True):
        latest = rows[rows["date"] == rows["date"].max()]
        colours = _strategy_colours(rows)
        for shape, points in latest.groupby("shape", sort=False):
            written.append(
                _save(
                    _shape_bars(machine, shape, points, colours),
                    out_dir / f"{machine}-{shape.replace('/', '-')}.png",
                )
            )
        written.append(
            _save(
                _time_vs_memory(machine, latest, colours), out_dir / f"{machine}-time-vs-memory.png"
            )
        )
        history = rows[rows["benchmark"] == TIME]
        if history["value"].notna().any():
            written.append(
                _save(_history(machine, history, colours), out_dir / f"{machine}-history.png")
            )
    return written


def _strategy_colours(rows: pd.DataFrame) -> dict[str, str]:
    """A fixed colour per strategy (order of the asv parameter axis), the same in every plot."""
    return {s: f"C{i % 10}" for i, s in enumerate(rows["strategy"].dropna().unique())}


def _values(points: pd.DataFrame, benchmark: str) -> pd.Series:
    """``value`` by strategy for ``benchmark`` (NaN where skipped or failed)."""
    return points[points["benchmark"] == benchmark].set_index("strategy")["value"]


def _shape_bars(machine: str, shape: str, points: pd.DataFrame, colours: dict) -> Figure:
    commit = points["commit"].iloc[0][:8]
    figure = Figure(figsize=(2 * _PANEL[0], _PANEL[1]), layout="constrained")
    figure.suptitle(f"{shape} on {machine} at {commit}")
    for axes, benchmark, what in zip(
        figure.subplots(1, 2),
        (TIME, PEAK_BYTES),
        ("time of one layer", "peak transient memory"),
        strict=True,
    ):
        unit = METRICS[benchmark].display
        values = _values(points, benchmark).reindex(list(colours))
        divisor, label = scale(values.max(), unit)
        heights = (values / divisor).fillna(0.0)
        bars = axes.bar(values.index, heights, color=[colours[s] for s in values.index])
        axes.bar_label(
            bars, labels=["n/a" if math.isnan(v) else f"{v / divisor:.3g}" for v in values]
        )
        axes.set_ylabel(f"{what} ({label})")
        axes.tick_params(axis="x", labelrotation=30)
        axes.margins(y=0.15)
    return figure


def _time_vs_memory(machine: str, latest: pd.DataFrame, colours: dict) -> Figure:
    shapes = list(latest["shape"].dropna().unique())
    figure, panels = _grid(len(shapes))
    figure.suptitle(f"time vs peak transient memory on {machine} (lower left is better)")
    for axes, shape in zip(panels, shapes, strict=False):
        points = latest[latest["shape"] == shape]
        both = pd.DataFrame(
            {"time": _values(points, TIME), "peak": _values(points, PEAK_BYTES)}
        ).dropna()
        if both.empty:
            axes.set_title(f"{shape}: no result")
            continue
        t_div, t_label = scale(both["time"].max(), METRICS[TIME].display)
        m_div, m_label = scale(both["peak"].max(), METRICS[PEAK_BYTES].display)
        for strategy, (time, peak) in both.iterrows():
            marker = _MARKERS[list(colours).index(strategy) % len(_MARKERS)]
            axes.scatter(
                peak / m_div,
                time / t_div,
                label=strategy,
                s=60,
                alpha=0.8,
                color=colours[strategy],
                marker=marker,
            )
        axes.set_title(shape)
        axes.set_xlabel(f"peak transient memory ({m_label})")
        axes.set_ylabel(f"time of one layer ({t_label})")
        axes.set_xlim(left=0)
        axes.set_ylim(bottom=0)
        axes.margins(0.2)
    # One legend for all panels, a marker per strategy: equal points (e.g. two strategies with
    # the same peak) stay told apart, where text labels would print over each other.
    handles = {h.get_label(): h for a in panels for h in a.get_legend_handles_labels()[0]}
    figure.legend(handles.values(), handles.keys(), loc="outside right upper")
    return figure


def _history(machine: str, history: pd.DataFrame, colours: dict) -> Figure:
    commits = history.drop_duplicates("commit").sort_values("date")["commit"].tolist()
    position = {c: i for i, c in enumerate(commits)}
    shapes = list(history["shape"].dropna().unique())
    figure, panels = _grid(len(shapes))
    figure.suptitle(f"time of one layer over commits on {machine}")
    divisor, label = scale(history["value"].max(), METRICS[TIME].display)
    for axes, shape in zip(panels, shapes, strict=False):
        for strategy, series in history[history["shape"] == shape].groupby("strategy", sort=False):
            series = series.dropna(subset=["value"]).sort_values("date")
            if not series.empty:
                axes.plot(
                    series["commit"].map(position),
                    series["value"] / divisor,
                    marker="o",
                    color=colours[strategy],
                    label=strategy,
                )
        axes.set_title(shape)
        axes.set_ylabel(f"time ({label})")
        axes.set_xticks(range(len(commits)), [c[:8] for c in commits], rotation=45, fontsize=7)
        axes.set_ylim(bottom=0)
    panels[0].legend(fontsize=8)
    return figure


def write_rank_load_plot(replayed: Sequence[RankLoad], runs: Sequence[RankLoad], out_dir) -> Path:
    """``rank-load-per-layer.png`` in ``out_dir``: reserved GiB per layer from ``replayed``,
    seconds per layer from ``runs`` (CUDA ``RankLoad``s of the default pool; may be empty), a
    column per ``max_split_size_mb``, a colour per strategy."""
    settings = list(dict.fromkeys(load.max_split_size_mb for load in replayed))
    colours = {
        name: f"C{i % 10}" for i, name in enumerate(dict.fromkeys(r.strategy for r in replayed))
    }
    figure = Figure(figsize=(len(settings) * _PANEL[0], 2 * _PANEL[1]), layout="constrained")
    panels = figure.subplots(2, len(settings), squeeze=False)
    figure.suptitle(f"{replayed[0].shape}: the whole rank's load, layer by layer (default pool)")
    for column, setting in enumerate(settings):
        reserved, seconds = panels[0][column], panels[1][column]
        for load in (r for r in replayed if r.max_split_size_mb == setting):
            reserved.plot(
                [b / 2**30 for b in load.reserved_after_layer],
                color=colours[load.strategy],
                label=load.strategy,
            )
        timed = [r for r in runs if r.max_split_size_mb == setting and r.pool == "default"]
        for load in timed:
            seconds.plot(
                [s * 1e3 for s in load.layer_seconds],
                color=colours.get(load.strategy, "k"),
                label=load.strategy,
            )
        if not timed:
            seconds.text(0.5, 0.5, "no CUDA run recorded", ha="center", transform=seconds.transAxes)
        name = "unlimited" if setting is None else f"{setting} MiB"
        reserved.set_title(f"max_split_size_mb {name}: reserved (replayed)")
        reserved.set_ylabel("reserved after the layer (GiB)")
        seconds.set_title(f"max_split_size_mb {name}: time (run on CUDA)")
        seconds.set_ylabel("seconds of the layer (ms)")
        seconds.set_xlabel("layer")
    panels[0][0].legend(fontsize=8)
    return _save(figure, Path(out_dir) / "rank-load-per-layer.png")


def _grid(panels: int) -> tuple[Figure, list]:
    rows = max(1, math.ceil(panels / _COLUMNS))
    columns = min(panels, _COLUMNS) or 1
    figure = Figure(figsize=(columns * _PANEL[0], rows * _PANEL[1]), layout="constrained")
    axes = list(figure.subplots(rows, columns, squeeze=False).flat)
    for unused in axes[panels:]:
        unused.set_visible(False)
    return figure, axes


def _save(figure: Figure, path: Path) -> Path:
    figure.savefig(path, dpi=_DPI)
    return path
