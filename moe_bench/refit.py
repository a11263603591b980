"""The summary's refit block: per shape of the rank-load headline, one layer's first load against
a refit of it in each way, and whether the strategy survives vLLM's reload and reverses in place.

Read from the results alone, as the headline (``moe_bench.rankload``): the first load is
``bench_convert``'s (``PeakMemory``, ``Traffic``), the refit ``bench_refit.Refit``'s (per way of
``moe_suite.metrics.REFIT_WAYS``: peak transient bytes, traffic, launches, exact on meta; the two
classes as 0/1), all of a machine's latest commit, the one the headline shows. The strategies are
the headline's (``legacy``, ``preallocated``, the shape's best strategy) with vLLM's ``inplace``
and our ``streaming``; a strategy the refit grid does not run reads n/a. Then every quantized
format's refit cells the run recorded (``bench_<format>.Refit``, beside the format's own first
load), so the block shows every format. Results from before the refit was recorded have no
table, and the block says so in one line.

Below each run's table, the whole rank's refits in a row (``bench_refit.RefitReplay``, BF16's
headline shapes: the rank load in vLLM's sleep-mode pool at ``max_split_size_mb`` 20 on
``RankLoadReplay``'s device, then its recorded number of refits): per way, the refit that runs
out of memory with what each refit adds and its driver calls, or none and the margin left. Then
the whole rank's refit by EP (``bench_refit.RefitByEP``: a rank's share of E/EP experts of the
recorded models): per way one layer's peak transient bytes and the rank's traffic.
"""

from __future__ import annotations

import math

import pandas as pd

from moe_suite.metrics import (
    PEAK_BYTES,
    REFIT,
    REFIT_EP,
    REFIT_REPLAY,
    REFIT_REPLAY_FIGURES,
    REFIT_WAYS,
    format_figure,
    quant_sibling,
)

from .document import NA, Block, Cell, without_empty_columns
from .rankload import BEST, FIRST, best_strategies
from .units import human

__all__ = ["NO_REFIT", "NO_REPLAY", "SHOWN", "refit_blocks"]

#: The strategies of each shape's rows, after ``FIRST`` and the shape's best: vLLM's in-place
#: form and ours that streams.
SHOWN = ("inplace", "streaming")
#: The block's line where no run of the headline has a refit figure.
NO_REFIT = (
    "No refit figures in these results: `bench_refit.Refit` records them (since issue 38); "
    "`scripts/bench` runs it."
)
_TRAFFIC = "bench_convert.Traffic.track_traffic_bytes"
_SAFE = f"{REFIT}.track_reload_safe"
_REVERSIBLE = f"{REFIT}.track_reversible_in_place"
#: The table's figures: header -> (BF16's benchmark, unit), a way's after the first load's; a
#: quantized format's row reads the same figure of its module (``quant_sibling``).
_FIGURES = {
    "peak, first load": (PEAK_BYTES, "bytes"),
    **{f"peak, {w}": (f"{REFIT}.track_{w}_peak_transient_bytes", "bytes") for w in REFIT_WAYS},
    "traffic, first load": (_TRAFFIC, "bytes"),
    **{f"traffic, {w}": (f"{REFIT}.track_{w}_traffic_bytes", "bytes") for w in REFIT_WAYS},
    "reload-safe": (_SAFE, "class"),
    "reversible in place": (_REVERSIBLE, "class"),
}
#: The refits in a row: per way its figures' benchmarks (``REFIT_REPLAY_FIGURES``' names), and
#: the refits replayed.
_REPLAYED = {
    way: {figure: f"{REFIT_REPLAY}.track_{way}_{figure}" for figure, _, _ in REFIT_REPLAY_FIGURES}
    for way in REFIT_WAYS
}
_REFITS = f"{REFIT_REPLAY}.track_refits"
#: The line where a run has no refits in a row.
NO_REPLAY = (
    "Refits in a row: not in this run (`bench_refit.RefitReplay` records them since issue 38)."
)
_REFIT_NAMES = frozenset(name for name, _ in _FIGURES.values() if name.startswith(REFIT))


def _format_refit(benchmark: str) -> str | None:
    """The quantized format whose refit figure ``benchmark`` is (``bench_nvfp4.Refit.*`` ->
    ``nvfp4``), else ``None``."""
    module, _, figure = benchmark.partition(".")
    bf16 = f"{REFIT.partition('.')[0]}.{figure}"
    if format_figure(benchmark) is None or bf16 not in _REFIT_NAMES:
        return None
    return module.removeprefix("bench_")


def _is_refit(benchmark: str) -> bool:
    return benchmark in _REFIT_NAMES or _format_refit(benchmark) is not None


def refit_blocks(df: pd.DataFrame, loads: pd.DataFrame) -> list[Block]:
    """The refit block (``moe_bench.document`` blocks) of each run the headline shows (``loads``:
    ``rankload.rank_load_table``; none where it is empty): per shape, a row per strategy of
    ``FIRST``, its best (``rankload.best_strategies``) and ``SHOWN``, its first load's and each
    way's refit figures from ``df`` (``load_results``' frame) at that machine and commit. One
    line (``NO_REFIT``) where none of those runs has a refit figure."""
    if loads.empty:
        return []
    heading = "Refit: new weights into a converted layer (vLLM 0.34's reload, and ours)"
    runs = loads.sort_values("date", ascending=False, kind="stable")[["machine", "commit"]]
    runs = runs.drop_duplicates()
    refits = df[df["benchmark"].map(_is_refit)].merge(runs)
    if refits["value"].notna().sum() == 0:
        return [Block(heading, text=(NO_REFIT,))]
    blocks = [
        Block(
            heading,
            text=(
                "One layer per shape of the headline: its first load's peak transient bytes and "
                "traffic (`bench_convert`; a quantized format's `bench_<format>`) against a "
                "refit's in each way (`bench_refit.Refit`, `bench_<format>.Refit`, exact on "
                "meta): `direct` is vLLM 0.34's `VLLM_RELOAD_MODE=direct` (the new "
                "weights written into checkpoint views of the converted storage, the conversion "
                "run again), `layerwise` fresh tensors converted then copied in, `streamed` ours "
                "(each expert placed into the held layer, no conversion). Reload-safe: in vLLM's "
                "two ways every output keeps the first load's storage (captured CUDA graphs "
                "need it) and holds a cold conversion's bytes. Reversible in place: the "
                "checkpoint's bytes restored in the same storage. Launches per way are in the "
                "explorer.",
            ),
        )
    ]
    best = best_strategies(loads)
    for machine, commit in runs.itertuples(index=False):
        run = df[(df["machine"] == machine) & (df["commit"] == commit)]
        shapes = loads[(loads["machine"] == machine) & (loads["commit"] == commit)]["shape"]
        rows = [
            ("bf16", shape, strategy, best.get((machine, shape)) == strategy)
            for shape in shapes.unique()
            for strategy in dict.fromkeys((*FIRST, best.get((machine, shape)), *SHOWN))
            if strategy is not None
        ]
        rows += _format_rows(refits[(refits["machine"] == machine) & (refits["commit"] == commit)])
        cells, empty = without_empty_columns(_cells(run, machine, rows), {})
        blocks.append(Block(f"`{machine}` at `{commit[:8]}`", level=3, text=empty, table=cells))
        blocks.append(_replay_block(run, machine, [r for r in rows if r[0] == "bf16"]))
        blocks += _ep_blocks(run, machine)
    return blocks


def _ep_blocks(run: pd.DataFrame, machine: str) -> list[Block]:
    """The whole rank's refit by EP in ``run`` (one machine's commit): a row per EP shape and
    strategy recorded, per way one layer's peak and the rank's traffic, each linked to the
    peak's graph; none where the run has no such figure."""
    figures = run[run["benchmark"].str.startswith(f"{REFIT_EP}.")].dropna(subset=["value"])
    if figures.empty:
        return []
    values = figures.groupby(["benchmark", "shape", "strategy"])["value"].first()
    cells = figures[["shape", "strategy"]].drop_duplicates()
    table = cells.reset_index(drop=True)
    for way in REFIT_WAYS:
        peak, traffic = (
            f"{REFIT_EP}.track_{way}_{f}" for f in ("peak_transient_bytes", "rank_traffic_bytes")
        )
        table[way] = [
            Cell(
                _ep_text(
                    values.get((peak, shape, s), math.nan),
                    values.get((traffic, shape, s), math.nan),
                ),
                benchmark=peak,
                machine=machine,
            )
            for shape, s in cells.itertuples(index=False)
        ]
    return [
        Block(
            text=(
                "A whole rank's refit by EP (`bench_refit.RefitByEP`, exact on meta): a rank "
                "holds E/EP experts, each whole; per way one layer's peak transient bytes (the "
                "layers refit one after another) and the rank's traffic, every MoE layer's. EP 1 "
                "is a model's TP 1 (`qwen3-30b-a3b/tp1` above); `python -m moe_convert refit "
                "--model M --ep all` "
                "prints every EP with launches.",
            ),
            table=table,
        )
    ]


def _replay_block(run: pd.DataFrame, machine: str, rows: list[tuple[str, str, str, bool]]) -> Block:
    """The refits in a row of ``rows`` (BF16's) in ``run``: a ``Cell`` per way, linked to the
    graph of the refit that runs out; ``NO_REPLAY`` where the run has none."""
    values = run.groupby(["benchmark", "shape", "strategy"])["value"].first()
    recorded = values[values.index.get_level_values("benchmark") == _REFITS].dropna()
    if recorded.empty:
        return Block(text=(NO_REPLAY,))
    refits = int(recorded.iloc[0])
    table = pd.DataFrame(
        {
            "shape": [shape for _, shape, _, _ in rows],
            "strategy": [f"{s} ({BEST})" if is_best else s for _, _, s, is_best in rows],
        }
    )
    for way, names in _REPLAYED.items():
        table[way] = [
            Cell(
                _refits_text(
                    *(values.get((names[f], shape, strategy), math.nan) for f in names), refits
                ),
                benchmark=names["oom_refit"],
                machine=machine,
            )
            for _, shape, strategy, _ in rows
        ]
    return Block(
        text=(
            f"Refits in a row, per way: the rank load in vLLM's sleep-mode pool at "
            f"max_split_size_mb:20 on the headline's device (the rank's MoE weights and 29.89 "
            f"GiB to spare), then {refits} refits of every layer, exact on meta "
            "(`bench_refit.RefitReplay`): the refit that runs out of memory, with the reserved "
            "bytes and driver calls each refit adds before it; or none, and the margin left. "
            'vLLM 0.34 reloads outside that pool (docs/allocator.md, "Refits, replayed").',
        ),
        table=table,
    )


def _ep_text(peak: float, traffic: float) -> str:
    """A way's refit by EP: one layer's ``peak`` and the rank's ``traffic``; n/a without it."""
    if math.isnan(peak):
        return NA
    return f"{human(peak, 'bytes')} peak, {human(traffic, 'bytes')}"


def _refits_text(oom: float, growth: float, calls: float, margin: float, refits: int) -> str:
    """A way's refits in a row: ``oom`` the refit that runs out (0 the load, above ``refits``
    none), then the steady state's ``growth`` and driver ``calls`` per refit and the
    ``margin``."""
    if math.isnan(oom):
        return NA
    if oom == 0:
        return "OOM at the load"
    cost = f"+{human(growth, 'bytes')}, {calls:,.0f} calls a refit"
    if oom > refits:
        return f"none in {refits}; margin {human(margin, 'bytes')}" + (
            f"; {cost}" if growth or calls else ""
        )
    return f"OOM at refit {oom:,.0f}; {cost}"


def _format_rows(refits: pd.DataFrame) -> list[tuple[str, str, str, bool]]:
    """``(format, shape, strategy, False)`` of every quantized format's refit cell with a figure
    in ``refits`` (one run's), in the order recorded."""
    measured = refits.dropna(subset=["value"])
    formats = measured["benchmark"].map(_format_refit)
    cells = measured.assign(format=formats).dropna(subset=["format"])
    return [
        (fmt, shape, strategy, False)
        for fmt, shape, strategy in cells[["format", "shape", "strategy"]].drop_duplicates()
        .itertuples(index=False)
    ]  # fmt: skip


def _cells(run: pd.DataFrame, machine: str, rows: list[tuple[str, str, str, bool]]) -> pd.DataFrame:
    """A row of ``Cell``s per ``(format, shape, strategy, is_best)``: ``_FIGURES`` of ``run``
    (one machine's commit; a quantized format's from its module), each linked to its graph."""
    values = run.groupby(["benchmark", "shape", "strategy"])["value"].first()
    table = pd.DataFrame(
        {
            "shape": [shape for _, shape, _, _ in rows],
            "strategy": [f"{s} ({BEST})" if is_best else s for _, _, s, is_best in rows],
        }
    )
    for header, (bf16, unit) in _FIGURES.items():
        names = [bf16 if fmt == "bf16" else quant_sibling(bf16, fmt) for fmt, _, _, _ in rows]
        table[header] = [
            Cell(
                _text(values.get((benchmark, shape, strategy), math.nan), unit),
                benchmark=benchmark,
                machine=machine,
            )
            for benchmark, (_, shape, strategy, _) in zip(names, rows, strict=True)
        ]
    return table


def _text(value: float, unit: str) -> str:
    """``value`` in human units; a class (0/1) as no/yes; NaN as n/a."""
    if math.isnan(value):
        return NA
    if unit == "class":
        return "yes" if value else "no"
    return human(value, unit)
