"""The summary's headline: how long a rank's load spends converting, and whether it fits.

From each machine's latest results, per model shape x strategy, the whole rank's load as vLLM
makes it (``bench_allocator``: the default pool at ``max_split_size_mb`` 20): its seconds,
**measured** on CUDA (``RankLoadTime``) or, elsewhere, **predicted** for the device whose costs
were recorded last (``moe_convert.load.loadtime``: that device's per-layer seconds and event costs
times the replayed driver calls), or n/a where neither exists; then the replayed driver calls,
the peak reserved bytes and the layers an OOM left unconverted; one layer's peak transient
bytes (``PeakMemory``); and whether the same load under
vLLM's sleep mode fits that device (``SleepModeReplay``'s peak: the sleep-mode pool never gives a
segment back, so its reserved bytes climb the same way on any device until the first refusal,
which is the OOM: it fits exactly when that peak does). ``legacy`` and ``preallocated``
come first, with their ratio beside vLLM #45589's 4.5x. ``layer_curves`` replays that PR's own
load for the per-layer plot (``moe_bench.plots.write_rank_load_plot``), beside the runs of the
latest committed ``scripts/gpu-check`` that loaded it (``recorded_runs``).
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path

import pandas as pd

from moe_convert import STRATEGIES
from moe_convert.formats.bf16.shapes import shape_from_label
from moe_convert.load.loadtime import COSTS_FILE, DeviceCosts, predict_load_seconds
from moe_convert.load.replay import pr45589_replay
from moe_convert.load.wholemodel import PR45589_HEADROOM_BYTES, VLLM_LOAD_MAX_SPLIT_MB, RankLoad

from .gpucheck.plan import LOAD_STRATEGIES
from .metrics import PEAK_BYTES, RANK_LOAD_FIGURES, RANK_LOAD_REPLAY, RANK_LOAD_TIME
from .units import human

__all__ = [
    "CURVE_STRATEGIES",
    "FIRST",
    "layer_curves",
    "rank_load_table",
    "recorded_runs",
    "render_rank_load",
]

#: The strategies shown first, in this order: vLLM's conversion before and after #45589.
FIRST = ("legacy", "preallocated")
#: The per-layer plot's strategies, where registered: those gpu-check's step 4 loads.
CURVE_STRATEGIES = LOAD_STRATEGIES
#: The replayed driver calls: the rank load's figures counted in calls or retries.
_EVENTS = tuple(name for name, unit in RANK_LOAD_FIGURES if unit in ("calls", "retries"))
#: The replayed figures by column name, as ``bench_allocator.RankLoadReplay`` names them.
_REPLAYED = {f"{RANK_LOAD_REPLAY}.track_{name}": name for name, _ in RANK_LOAD_FIGURES}
_REPLAYED[f"{RANK_LOAD_REPLAY}.track_layers_lost_to_oom"] = "layers_lost"
_REPLAYED["bench_allocator.SleepModeReplay.track_peak_reserved_bytes"] = "sleep_peak_bytes"
_REPLAYED[PEAK_BYTES] = "layer_peak_bytes"  # one layer's peak transient (exact, on meta)


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
    if layer is None or any(math.isnan(row[name]) for name in _EVENTS):
        return math.nan, "n/a"
    layers = shape_from_label(row["shape"]).moe_layers - int(row["layers_lost"])
    predicted = predict_load_seconds(
        layers=layers,
        layer_seconds=layer,
        events=costs.events,
        **{name: int(row[name]) for name in _EVENTS if name != "num_alloc_retries"},
    )
    return predicted, "predicted"


def render_rank_load(table: pd.DataFrame, costs: DeviceCosts | None) -> str:
    """The headline section in markdown (empty for an empty ``table``)."""
    if table.empty:
        return ""
    where = (
        f"predicted for {costs.device} from the costs recorded at commit {costs.commit} "
        f"({costs.date}, docs/gpu-results/device-costs.json)"
        if costs
        else "no device's costs recorded yet (`scripts/gpu-check`'s step `load` records them)"
    )
    lines = [
        "## Whole-rank load (vLLM's load: default pool, max_split_size_mb:20)",
        "",
        "Seconds spent converting a rank's MoE layers: measured on CUDA; elsewhere "
        f"{where}. Driver calls and peak replayed for a device with vLLM #45589's headroom "
        "(29.89 GiB once loaded), exact on every machine; sleep mode: the same load in vLLM's "
        "sleep-mode pool on that device.",
    ]
    for (machine, commit), rows in table.groupby(["machine", "commit"], sort=False):
        lines += ["", f"### `{machine}` at `{commit[:8]}`", ""]
        shown = pd.DataFrame(
            {
                "shape": rows["shape"],
                "strategy": rows["strategy"],
                "load time": [
                    "n/a" if s == "n/a" else f"{human(v, 'seconds')} ({s})"
                    for v, s in zip(rows["seconds"], rows["source"], strict=True)
                ],
                "cudaMalloc": rows["num_device_alloc"].map(_count),
                "cudaFree": rows["num_device_free"].map(_count),
                "refused": rows["num_device_alloc_failed"].map(_count),
                "retries": rows["num_alloc_retries"].map(_count),
                "peak transient (1 layer)": rows["layer_peak_bytes"].map(
                    lambda b: human(b, "bytes")
                ),
                "peak reserved (rank)": rows["peak_reserved_bytes"].map(
                    lambda b: human(b, "bytes")
                ),
                "OOM": rows["layers_lost"].map(lambda n: f"{_count(n)} layers lost" if n else "-"),
                "sleep mode": [
                    _sleep_mode(shape, peak)
                    for shape, peak in zip(rows["shape"], rows["sleep_peak_bytes"], strict=True)
                ],
            }
        )
        lines.append(shown.to_markdown(index=False, disable_numparse=True))
        lines += _ratios(rows)
    return "\n".join(lines) + "\n"


def _sleep_mode(shape: str, peak: float) -> str:
    """Whether the sleep-mode load fits the device of the table (the rank + the headroom)."""
    if math.isnan(peak):
        return "n/a"
    device = shape_from_label(shape).model_bytes + PR45589_HEADROOM_BYTES
    return f"{'fits' if peak <= device else 'OOM'} (peak {human(peak, 'bytes')})"


def _count(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:,.0f}"


def _ratios(rows: pd.DataFrame) -> list[str]:
    """``legacy / preallocated`` per shape where both have seconds, beside vLLM #45589's."""
    seconds = rows.set_index(["shape", "strategy"])["seconds"]
    lines = []
    for shape in rows["shape"].unique():
        pair = [seconds.get((shape, name), math.nan) for name in FIRST]
        if not any(math.isnan(v) for v in pair):
            lines.append(
                f"- {shape}: legacy / preallocated {pair[0] / pair[1]:.2f}x "
                "(vLLM #45589, Qwen3-235B TP4 on an H20-141GB: 10.72 s / 2.39 s = 4.5x)"
            )
    return [""] + lines if lines else []


@functools.cache
def layer_curves() -> tuple[RankLoad, ...]:
    """vLLM #45589's load replayed (``replay.pr45589_replay``: the default pool, a 141 GB
    device) for each registered ``CURVE_STRATEGIES`` at 20 MiB and unlimited: reserved bytes
    per layer, the same on every machine (so computed once per process)."""
    return tuple(
        pr45589_replay(name, max_split_size_mb=max_split)
        for max_split in (VLLM_LOAD_MAX_SPLIT_MB, None)
        for name in CURVE_STRATEGIES
        if name in STRATEGIES
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
    return RankLoad(
        **{key: tuple(value) if isinstance(value, list) else value for key, value in fields.items()}
    )
