"""The summary's headline: how long a rank's load spends converting, and whether it fits.

From each machine's latest results, per model shape x strategy, the whole rank's load as vLLM
makes it (``bench_allocator``: the default pool at ``max_split_size_mb`` 20): its seconds,
**measured** on CUDA (``RankLoadTime``) or, elsewhere, **predicted** for the device whose costs
were recorded last (``moe_suite.loadtime``: that device's per-layer seconds and event costs
times the replayed driver calls, over the layers converted: ``RankLoadReplay``'s recorded MoE
layers less those lost), or n/a where neither exists; then the replayed driver calls,
the peak reserved bytes and the layers an OOM left unconverted; one layer's peak transient
bytes (``PeakMemory``); and whether the same load under
vLLM's sleep mode fits that device (``SleepModeReplay``'s peak: the sleep-mode pool never gives a
segment back, so its reserved bytes climb the same way on any device until the first refusal,
which is the OOM: it fits exactly when that peak does; the device's bytes are the ones
``RankLoadReplay`` records). Everything the tables show is read from the results, so they are
made where torch is not installed; a figure results from before it was recorded lack is n/a.
The headline (``rank_load_blocks``)
shows ``legacy`` and ``preallocated`` and each shape's best strategy (``BEST_RULE``), with
legacy / preallocated beside vLLM #45589's 4.5x; ``every_strategy_blocks`` every strategy.
Both are ``moe_bench.document`` blocks: summary.md and the front page print the same tables.
``layer_curves`` replays that PR's own load for the per-layer plot
(``moe_bench.plots.write_rank_load_plot``), beside the runs of the latest committed
``scripts/gpu-check`` that loaded it (``recorded_runs``): the one part that needs the library
(``moe_convert``, imported there), as results hold no per-layer curve; where it is not
installed there is no plot, and ``NO_CURVES`` says why.
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from moe_suite.loadtime import COSTS_FILE, DeviceCosts, predict_load_seconds
from moe_suite.metrics import (
    PEAK_BYTES,
    RANK_LOAD_FACTS,
    RANK_LOAD_FIGURES,
    RANK_LOAD_REPLAY,
    RANK_LOAD_TIME,
    TIME,
)

from .document import NA, Block, Cell, without_empty_columns
from .gpucheck.plan import LOAD_STRATEGIES
from .units import human

if TYPE_CHECKING:  # the library's result type, for annotations only: no torch at import
    from moe_convert.load.wholemodel import RankLoad

__all__ = [
    "BEST",
    "CURVE_STRATEGIES",
    "FIRST",
    "NO_CURVES",
    "best_strategies",
    "every_strategy_blocks",
    "layer_curves",
    "rank_load_blocks",
    "rank_load_table",
    "recorded_runs",
]

#: The strategies shown first, in this order: vLLM's conversion before and after #45589.
FIRST = ("legacy", "preallocated")
#: The per-layer plot's strategies, where registered: those gpu-check's step 4 loads.
CURVE_STRATEGIES = LOAD_STRATEGIES
#: The replayed driver calls: the rank load's figures counted in calls or retries.
_EVENTS = tuple(name for name, unit in RANK_LOAD_FIGURES if unit in ("calls", "retries"))
#: The replayed figures by column name, as ``bench_allocator.RankLoadReplay`` names them.
_REPLAYED = {
    f"{RANK_LOAD_REPLAY}.track_{name}": name for name, _ in (*RANK_LOAD_FIGURES, *RANK_LOAD_FACTS)
}
_LOST = f"{RANK_LOAD_REPLAY}.track_layers_lost_to_oom"
_SLEEP_PEAK = "bench_allocator.SleepModeReplay.track_peak_reserved_bytes"
_REPLAYED[_LOST] = "layers_lost"
_REPLAYED[_SLEEP_PEAK] = "sleep_peak_bytes"
_REPLAYED[PEAK_BYTES] = "layer_peak_bytes"  # one layer's peak transient (exact, on meta)
_REPLAYED[TIME] = "layer_seconds"  # one layer's time: the best strategy where no load is timed


def rank_load_table(df: pd.DataFrame, costs: DeviceCosts | None) -> pd.DataFrame:
    """One row per machine, shape and strategy of each machine's latest commit.

    Columns: ``machine, commit, date, shape, strategy``, the replayed figures (``_REPLAYED``'s
    names), ``seconds`` and ``source``: ``measured`` (``RankLoadTime``), ``predicted`` (from
    ``costs``, where it has the shape's and strategy's layer seconds) or ``n/a``. Empty when
    ``df`` has no ``RankLoadReplay`` figure.
    """
    data = df[df["benchmark"].isin([*_REPLAYED, RANK_LOAD_TIME])]
    if data.empty:
        return pd.DataFrame()
    data = data[data["date"] == data.groupby("machine")["date"].transform("max")]
    names = {**_REPLAYED, RANK_LOAD_TIME: "measured"}
    wide = (
        data.assign(figure=data["benchmark"].map(names))
        .pivot_table(
            index=["machine", "commit", "date", "shape", "strategy"],
            columns="figure",
            values="value",
            aggfunc="first",
            dropna=False,
        )
        .reset_index()
    )
    for column in names.values():
        if column not in wide:
            wide[column] = math.nan
    wide = wide.dropna(subset=["num_device_alloc"])  # a commit the rank load was not run for
    if wide.empty:
        return pd.DataFrame()
    wide["seconds"], wide["source"] = zip(
        *(_seconds(row, costs) for _, row in wide.iterrows()), strict=True
    )
    order = {name: i for i, name in enumerate(FIRST)}
    wide["rank"] = wide["strategy"].map(lambda s: order.get(s, len(order)))
    return wide.sort_values(["machine", "shape", "rank"], kind="stable").drop(columns="rank")


def _seconds(row: pd.Series, costs: DeviceCosts | None) -> tuple[float, str]:
    if not math.isnan(row["measured"]):
        return row["measured"], "measured"
    layer = (costs.layer_seconds.get(row["shape"], {}) if costs else {}).get(row["strategy"])
    if layer is None or any(math.isnan(row[name]) for name in (*_EVENTS, "moe_layers")):
        return math.nan, "n/a"
    predicted = predict_load_seconds(
        layers=int(row["moe_layers"]) - int(row["layers_lost"]),
        layer_seconds=layer,
        events=costs.events,
        **{name: int(row[name]) for name in _EVENTS if name != "num_alloc_retries"},
    )
    return predicted, "predicted"


def rank_load_blocks(table: pd.DataFrame, costs: DeviceCosts | None) -> list[Block]:
    """The headline (``moe_bench.document`` blocks; none for an empty ``table``): per machine,
    newest first, and model shape the load of ``FIRST`` and of the shape's best strategy
    (``best_strategies``), with legacy / preallocated beside vLLM #45589's 4.5x."""
    if table.empty:
        return []
    where = (
        f"predicted for {costs.device} from the costs recorded at commit {costs.commit} "
        f"({costs.date}, docs/gpu-results/device-costs.json)"
        if costs
        else "no device's costs recorded yet (`scripts/gpu-check`'s step `load` records them)"
    )
    blocks = [
        Block(
            "Whole-rank load (vLLM's load: default pool, max_split_size_mb:20)",
            text=(
                "Seconds spent converting a rank's MoE layers: measured on CUDA; elsewhere "
                f"{where}. Driver calls and peak replayed for a device with vLLM #45589's "
                "headroom (29.89 GiB once loaded), exact on every machine; sleep mode: the same "
                "load in vLLM's sleep-mode pool on that device. `legacy` and `preallocated` are "
                "vLLM's conversion before and after #45589; the third row of a shape is its "
                f"{BEST}: {BEST_RULE}.",
            ),
        )
    ]
    best = best_strategies(table)
    for (machine, commit), rows in _by_run(table):
        is_best = [
            best.get((machine, shape)) == name
            for shape, name in zip(rows["shape"], rows["strategy"], strict=True)
        ]
        shown = rows[rows["strategy"].isin(FIRST) | pd.Series(is_best, index=rows.index)]
        cells, empty = without_empty_columns(_cells(shown, best), _FILLS)
        blocks.append(
            Block(
                f"`{machine}` at `{commit[:8]}`",
                level=3,
                text=empty,
                table=cells,
                items=tuple(_ratios(rows)),
            )
        )
    return blocks


def every_strategy_blocks(table: pd.DataFrame) -> list[Block]:
    """The whole rank's load of every strategy, per machine (newest first); none if empty."""
    if table.empty:
        return []
    blocks = [Block("Whole-rank load of every strategy")]
    best = best_strategies(table)
    for (machine, commit), rows in _by_run(table):
        cells, empty = without_empty_columns(_cells(rows, best), _FILLS)
        blocks.append(Block(f"`{machine}` at `{commit[:8]}`", level=3, text=empty, table=cells))
    return blocks


def best_strategies(table: pd.DataFrame) -> dict[tuple[str, str], str]:
    """``(machine, shape) -> strategy`` by ``BEST_RULE``; a shape none qualifies for is absent."""
    best = {}
    for (machine, shape), rows in table.groupby(["machine", "shape"], sort=False):
        fits = rows[rows["layers_lost"] == 0]
        # A load time shown beside the others: the best row must not show a longer one.
        by = "seconds" if fits["seconds"].notna().any() else "layer_seconds"
        ranked = fits.dropna(subset=[by])
        if not ranked.empty:
            best[(machine, shape)] = ranked.loc[ranked[by].idxmin(), "strategy"]
    return best


def _by_run(table: pd.DataFrame):
    """``((machine, commit), rows)`` per machine's latest commit, the newest run first."""
    runs = table.sort_values("date", ascending=False, kind="stable")
    return runs.groupby(["machine", "commit"], sort=False)


#: The name and rule of the third strategy of each shape in the headline.
BEST = "best strategy"
BEST_RULE = (
    "of the strategies whose load loses no layer to an OOM, the one with the shortest load time "
    "(measured or predicted) of those that have one, else the fastest one layer "
    "(`LayerTime`) on this machine"
)

#: The headline's columns: header -> (the rank-load table's column, its benchmark, its unit).
_COLUMNS = {
    "cudaMalloc": ("num_device_alloc", f"{RANK_LOAD_REPLAY}.track_num_device_alloc", "calls"),
    "cudaFree": ("num_device_free", f"{RANK_LOAD_REPLAY}.track_num_device_free", "calls"),
    "refused": (
        "num_device_alloc_failed",
        f"{RANK_LOAD_REPLAY}.track_num_device_alloc_failed",
        "calls",
    ),
    "retries": ("num_alloc_retries", f"{RANK_LOAD_REPLAY}.track_num_alloc_retries", "calls"),
    "peak transient (1 layer)": ("layer_peak_bytes", PEAK_BYTES, "bytes"),
    "peak reserved (rank)": (
        "peak_reserved_bytes",
        f"{RANK_LOAD_REPLAY}.track_peak_reserved_bytes",
        "bytes",
    ),
}


#: What would fill a headline column that is n/a in every row (``without_empty_columns``).
_FILLS = {
    "load time": (
        "a run on CUDA measures it (`RankLoadTime`), or a device's costs recorded by "
        "`scripts/gpu-check`'s step `load` (docs/gpu-results/device-costs.json) predict it"
    ),
    "sleep mode": (
        "results that hold the device's bytes (`RankLoadReplay.track_device_bytes`, recorded "
        "by `scripts/bench` since issue 36) place the sleep-mode peak against that device"
    ),
}


def _cells(rows: pd.DataFrame, best: dict) -> pd.DataFrame:
    """One row of ``Cell``s per strategy: the headline's columns, each linked to its graph."""
    machine = rows["machine"]
    shown = pd.DataFrame(
        {
            "shape": rows["shape"],
            "strategy": [
                f"{s} ({BEST})" if best.get((m, shape)) == s else s
                for m, shape, s in zip(machine, rows["shape"], rows["strategy"], strict=True)
            ],
            "load time": [
                Cell(
                    NA if source == "n/a" else f"{human(value, 'seconds')} ({source})",
                    benchmark=RANK_LOAD_TIME if source == "measured" else None,
                    machine=m,
                )
                for value, source, m in zip(rows["seconds"], rows["source"], machine, strict=True)
            ],
        }
    )
    for header, (column, benchmark, unit) in _COLUMNS.items():
        shown[header] = [
            Cell(_count(v) if unit == "calls" else human(v, unit), benchmark=benchmark, machine=m)
            for v, m in zip(rows[column], machine, strict=True)
        ]
    shown["OOM"] = [
        Cell(f"{_count(n)} layers lost" if n else "-", benchmark=_LOST, machine=m)
        for n, m in zip(rows["layers_lost"], machine, strict=True)
    ]
    shown["sleep mode"] = [
        Cell(_sleep_mode(peak, device), benchmark=_SLEEP_PEAK, machine=m)
        for peak, device, m in zip(
            rows["sleep_peak_bytes"], rows["device_bytes"], machine, strict=True
        )
    ]
    return shown.reset_index(drop=True)


def _sleep_mode(peak: float, device: float) -> str:
    """Whether the sleep-mode load (its peak) fits the device of the table (its bytes, the
    rank + the headroom); n/a where either figure is missing."""
    if math.isnan(peak) or math.isnan(device):
        return NA
    return f"{'fits' if peak <= device else 'OOM'} (peak {human(peak, 'bytes')})"


def _count(value: float) -> str:
    return NA if math.isnan(value) else f"{value:,.0f}"


def _ratios(rows: pd.DataFrame) -> list[str]:
    """``legacy / preallocated`` per shape where both have seconds, beside vLLM #45589's."""
    seconds = rows.set_index(["shape", "strategy"])["seconds"]
    lines = []
    for shape in rows["shape"].unique():
        pair = [seconds.get((shape, name), math.nan) for name in FIRST]
        if not any(math.isnan(v) for v in pair):
            lines.append(
                f"{shape}: legacy / preallocated {pair[0] / pair[1]:.2f}x "
                "(vLLM #45589, Qwen3-235B TP4 on an H20-141GB: 10.72 s / 2.39 s = 4.5x)"
            )
    return lines


#: The summary's line where ``layer_curves`` has none.
NO_CURVES = (
    "rank-load-per-layer.png is not drawn here: its curves are vLLM #45589's load replayed by "
    "the library (moe_convert), which cannot be imported without torch; the results hold no "
    "per-layer curve."
)


@functools.cache
def layer_curves() -> tuple[RankLoad, ...] | None:
    """vLLM #45589's load replayed (``replay.pr45589_replay``: the default pool, a 141 GB
    device) for each registered ``CURVE_STRATEGIES`` at 20 MiB and unlimited: reserved bytes
    per layer, the same on every machine (so computed once per process). None where the
    library or torch is not installed (``NO_CURVES``); any other failed import raises."""
    try:
        from moe_convert import REGISTRY
        from moe_convert.load.replay import pr45589_replay
        from moe_convert.load.wholemodel import VLLM_LOAD_MAX_SPLIT_MB
    except ModuleNotFoundError as error:
        if error.name not in ("torch", "moe_convert"):
            raise
        return None
    return tuple(
        pr45589_replay(name, max_split_size_mb=max_split)
        for max_split in (VLLM_LOAD_MAX_SPLIT_MB, None)
        for name in CURVE_STRATEGIES
        if name in REGISTRY
    )


def recorded_runs(gpu_results: Path = COSTS_FILE.parent) -> list[RankLoad]:
    """The loads run on CUDA by the latest ``gpu-check.json`` under ``gpu_results`` (folders
    named by date, ``docs/gpu-results/``) whose step ``load`` ran them; empty if none did."""
    for path in sorted(gpu_results.glob("*/gpu-check.json"), reverse=True):
        steps = {step["step"]: step for step in json.loads(path.read_text())["steps"]}
        rows = (steps.get("load") or {}).get("rows") or []
        runs = [_rank_load(row["run"]) for row in rows if "run" in row]
        if runs:
            return runs
    return []


def _rank_load(fields: dict) -> RankLoad:
    """A ``RankLoad`` from its JSON form (``dataclasses.asdict``; tuples came back as lists)."""
    from moe_convert.load.wholemodel import RankLoad  # the plot's, drawn where the library is

    return RankLoad(
        **{key: tuple(value) if isinstance(value, list) else value for key, value in fields.items()}
    )
