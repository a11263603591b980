"""The summary's headline: the whole rank's load per strategy, measured, predicted or n/a."""

from __future__ import annotations

import dataclasses
import json
import math

import pandas as pd
import pytest

from moe_bench import rankload
from moe_bench.document import to_markdown
from moe_bench.plots import write_rank_load_plot
from moe_bench.refit import NO_REFIT, NO_REPLAY, refit_blocks
from moe_bench.results import COLUMNS
from moe_convert import layer_shape
from moe_convert.load.replay import pr45589_replay
from moe_convert.load.wholemodel import PR45589_HEADROOM_BYTES
from moe_suite.loadtime import DeviceCosts, EventCosts, predict_load_seconds
from moe_suite.metrics import RANK_LOAD_REPLAY, RANK_LOAD_TIME, TIME

SHAPE = "qwen3-235b-a22b/tp4"
DATE = pd.Timestamp("2026-12-01 12:00")
EVENTS = EventCosts(1e-4, 1e-3, 1e-5, 3)  # round numbers: the arithmetic is under test
COSTS = DeviceCosts(
    "NVIDIA H200", "2.11", "abcdef01", "2026-12-01", EVENTS, {SHAPE: {"legacy": 0.01}}
)


def _rows(strategy: str, figures: dict, *, commit: str = "c0ffee11", date=DATE) -> list[dict]:
    return [
        dict.fromkeys(COLUMNS)
        | {
            "machine": "box",
            "commit": commit,
            "date": date,
            "benchmark": benchmark,
            "shape": SHAPE,
            "strategy": strategy,
            "value": float(value),
        }
        for benchmark, value in figures.items()
    ]


#: The rank's MoE layers, and its 105.75 GiB + vLLM #45589's 29.89 GiB of headroom: the device.
LAYERS = 94
DEVICE_BYTES = layer_shape("qwen3-235b-a22b", 4).model_bytes + PR45589_HEADROOM_BYTES


def _replayed(allocs: int, frees: int = 0, lost: int = 0) -> dict:
    return {
        f"{RANK_LOAD_REPLAY}.track_moe_layers": LAYERS,
        f"{RANK_LOAD_REPLAY}.track_device_bytes": DEVICE_BYTES,
        f"{RANK_LOAD_REPLAY}.track_num_device_alloc": allocs,
        f"{RANK_LOAD_REPLAY}.track_num_device_free": frees,
        f"{RANK_LOAD_REPLAY}.track_num_device_alloc_failed": frees,
        f"{RANK_LOAD_REPLAY}.track_num_alloc_retries": 0,
        f"{RANK_LOAD_REPLAY}.track_peak_reserved_bytes": 2**30,
        f"{RANK_LOAD_REPLAY}.track_layers_lost_to_oom": lost,
    }


SLEEP_PEAK = "bench_allocator.SleepModeReplay.track_peak_reserved_bytes"
GiB = 2**30


def frame() -> pd.DataFrame:
    rows = _rows("preallocated", _replayed(3) | {RANK_LOAD_TIME: 2.5, SLEEP_PEAK: 107 * GiB})
    rows += _rows("inplace", _replayed(94))
    rows += _rows("legacy", _replayed(6113, 4676) | {SLEEP_PEAK: 225 * GiB})
    rows += _rows("legacy", _replayed(1), commit="01d01d01", date=DATE - pd.Timedelta("1D"))
    return pd.DataFrame(rows)


def test_measured_then_predicted_then_n_a_legacy_first():
    table = rankload.rank_load_table(frame(), COSTS)
    assert list(table["strategy"]) == ["legacy", "preallocated", "inplace"]  # the latest commit
    legacy, preallocated, inplace = (row for _, row in table.iterrows())
    assert legacy["source"] == "predicted"
    assert legacy["seconds"] == pytest.approx(
        predict_load_seconds(
            layers=94,
            layer_seconds=0.01,
            num_device_alloc=6113,
            num_device_free=4676,
            num_device_alloc_failed=4676,
            events=EVENTS,
        )
    )
    assert (preallocated["source"], preallocated["seconds"]) == ("measured", 2.5)
    assert inplace["source"] == "n/a" and math.isnan(inplace["seconds"])  # no layer time recorded


def test_without_costs_only_measured_seconds_remain():
    table = rankload.rank_load_table(frame(), None)
    assert dict(zip(table["strategy"], table["source"], strict=True)) == {
        "legacy": "n/a",
        "preallocated": "measured",
        "inplace": "n/a",
    }
    assert "no device's costs recorded yet" in to_markdown(rankload.rank_load_blocks(table, None))
    text = to_markdown(rankload.every_strategy_blocks(table))
    cells = {
        line.split("|")[2].strip(): line.split("|")[3].strip()
        for line in text.splitlines()
        if line.startswith(f"| {SHAPE}")
    }
    # the one load with a time is the best (its seconds, not a layer's, rank the loads)
    assert cells == {"legacy": "n/a", f"preallocated ({rankload.BEST})": "2.50 s (measured)",
                     "inplace": "n/a"}  # fmt: skip


def test_the_best_strategy_is_the_fastest_that_loses_no_layer():
    rows = _rows("preallocated", _replayed(3) | {TIME: 0.02})
    rows += _rows("inplace", _replayed(94) | {TIME: 0.01})
    rows += _rows("legacy", _replayed(6113, 4676, lost=2) | {TIME: 0.001})  # fastest, an OOM
    table = rankload.rank_load_table(pd.DataFrame(rows), None)
    # no load timed: one layer's time decides
    assert rankload.best_strategies(table) == {("box", SHAPE): "inplace"}
    text = to_markdown(rankload.rank_load_blocks(table, None))
    shown = [line.split("|")[2].strip() for line in text.splitlines() if f"| {SHAPE}" in line]
    assert shown == ["legacy", "preallocated", f"inplace ({rankload.BEST})"]
    # one load timed: its seconds decide over a faster layer without a load time (the best row
    # shows a load time beside the others' and must not show a longer one)
    rows += _rows("preallocated", {RANK_LOAD_TIME: 2.5})
    table = rankload.rank_load_table(pd.DataFrame(rows), None)
    assert rankload.best_strategies(table) == {("box", SHAPE): "preallocated"}
    # every load that fits timed: the shortest
    rows += _rows("inplace", {RANK_LOAD_TIME: 1.0})
    table = rankload.rank_load_table(pd.DataFrame(rows), None)
    assert rankload.best_strategies(table) == {("box", SHAPE): "inplace"}


def test_the_headline_names_the_device_and_the_ratio_against_vllm_45589():
    text = to_markdown(rankload.rank_load_blocks(rankload.rank_load_table(frame(), COSTS), COSTS))
    assert text.startswith("## Whole-rank load")
    assert "predicted for NVIDIA H200 from the costs recorded at commit abcdef01" in text
    legacy = 94 * 0.01 + 6113 * 1e-4 + 4676 * 1e-3 + 4676 * 1e-5
    assert f"legacy / preallocated {legacy / 2.5:.2f}x" in text
    assert "6,113" in text and "4,676" in text
    sleep = {
        line.split("|")[2].strip(): line.split("|")[-2].strip()
        for line in text.splitlines()
        if line.startswith(f"| {SHAPE}")
    }
    assert sleep == {
        "legacy": "OOM (peak 225 GiB)",
        f"preallocated ({rankload.BEST})": "fits (peak 107 GiB)",
    }


def test_results_from_before_the_loads_facts_were_recorded_predict_nothing():
    """Results without ``RankLoadReplay``'s MoE layers and device bytes (recorded since issue
    36): no predicted seconds, no sleep-mode verdict; n/a, the rest as before."""
    facts = ("track_moe_layers", "track_device_bytes")
    older = frame()[~frame()["benchmark"].str.endswith(facts)]
    table = rankload.rank_load_table(older, COSTS)
    assert dict(zip(table["strategy"], table["source"], strict=True)) == {
        "legacy": "n/a",
        "preallocated": "measured",
        "inplace": "n/a",
    }
    text = to_markdown(rankload.rank_load_blocks(table, COSTS))
    # No sleep-mode verdict in any row: the column gives way to a line saying what fills it.
    header = next(line for line in text.splitlines() if line.startswith("| shape"))
    assert "sleep mode" not in header and "load time" in header
    assert "sleep mode: n/a in every row; results that hold the device's bytes" in text
    assert "6,113" in text  # the driver calls as before


def test_no_rank_load_results_no_headline():
    other = frame().assign(benchmark="bench_convert.LayerTime.track_layer_seconds")
    table = rankload.rank_load_table(other, COSTS)
    assert table.empty and rankload.rank_load_blocks(table, COSTS) == []
    assert rankload.every_strategy_blocks(table) == []


def test_recorded_runs_come_from_the_latest_gpu_check_that_ran_the_load(tmp_path):
    run = dataclasses.replace(
        pr45589_replay("preallocated"),
        num_device_alloc_failed=None,
        stranded_segments=None,
        seconds=0.8,
        layer_seconds=(0.008,) * 94,
    )
    newer = tmp_path / "2026-12-02-h200"
    older = tmp_path / "2026-12-01-h200"
    for folder, steps in (
        (older, [{"step": "load", "rows": [{"run": dataclasses.asdict(run)}]}]),
        (newer, [{"step": "load", "rows": [{"error": "boom"}]}]),  # a run that ran no load
    ):
        folder.mkdir()
        (folder / "gpu-check.json").write_text(json.dumps({"steps": steps}))
    assert rankload.recorded_runs(tmp_path) == [run]
    assert rankload.recorded_runs(tmp_path / "none") == []


def test_per_layer_plot(tmp_path):
    replayed = [pr45589_replay("preallocated", max_split_size_mb=m) for m in (20, None)]
    run = dataclasses.replace(replayed[0], seconds=0.8, layer_seconds=(0.008,) * 94)
    path = write_rank_load_plot(replayed, [run], tmp_path)
    assert path.name == "rank-load-per-layer.png" and path.stat().st_size > 10_000


# The refit block: the same runs and shapes, first load against each way's refit.

REFIT = "bench_refit.Refit"
#: qwen3-235b-a22b/tp4's refits of one layer, exact on meta (benchmarks/bench_refit.py's _refit).
LEGACY_REFIT = {
    f"{REFIT}.track_direct_peak_transient_bytes": 3221225472,
    f"{REFIT}.track_layerwise_peak_transient_bytes": 4429185024,
    f"{REFIT}.track_streamed_peak_transient_bytes": 0,
    f"{REFIT}.track_direct_traffic_bytes": 13695188992,
    f"{REFIT}.track_reload_safe": 0,
    f"{REFIT}.track_reversible_in_place": 1,
}


def test_refit_block_per_shape_first_load_against_each_way():
    first_load = {"bench_convert.PeakMemory.track_peak_transient_bytes": 3 * GiB}
    rows = _rows("legacy", LEGACY_REFIT | first_load)
    rows += _rows("inplace", {f"{REFIT}.track_reload_safe": 1})
    df = pd.concat([frame(), pd.DataFrame(rows)], ignore_index=True)
    text = to_markdown(refit_blocks(df, rankload.rank_load_table(df, COSTS)))
    assert text.startswith("## Refit: new weights into a converted layer")
    lines = text.splitlines()
    header = [c.strip() for c in next(x for x in lines if x.startswith("| shape")).split("|")]
    table = {
        row[2].strip(): dict(zip(header, (c.strip() for c in row), strict=True))
        for row in (line.split("|") for line in lines if line.startswith(f"| {SHAPE}"))
    }
    # legacy and preallocated (the best: the shortest load time), then vLLM's inplace and our
    # streaming
    assert list(table) == ["legacy", f"preallocated ({rankload.BEST})", "inplace", "streaming"]
    legacy = table["legacy"]
    assert (legacy["peak, first load"], legacy["peak, direct"]) == ("3.00 GiB", "3.00 GiB")
    assert (legacy["peak, layerwise"], legacy["peak, streamed"]) == ("4.12 GiB", "0 B")
    assert (legacy["reload-safe"], legacy["reversible in place"]) == ("no", "yes")
    assert table["inplace"]["reload-safe"] == "yes" and table["streaming"]["reload-safe"] == "n/a"
    # A column n/a in every row gives way to a line.
    assert "traffic, first load: n/a in every row." in text
    assert "traffic, first load" not in header


def test_results_without_refit_figures_say_so_in_one_line():
    blocks = refit_blocks(frame(), rankload.rank_load_table(frame(), COSTS))
    assert [block.text for block in blocks] == [(NO_REFIT,)]
    empty = rankload.rank_load_table(frame().iloc[:0], COSTS)
    assert refit_blocks(frame(), empty) == []


def test_refit_block_shows_every_formats_refit_cells_beside_its_first_load():
    # a quantized format's refit (bench_nvfp4.Refit) after BF16's rows, its first load its own
    nvfp4 = "qwen3-235b-a22b-nvfp4/tp4"
    quant = [
        row | {"shape": nvfp4}
        for row in _rows(
            "inplace",
            {
                "bench_nvfp4.PeakMemory.track_peak_transient_bytes": 2 * 2**20,
                "bench_nvfp4.Refit.track_direct_peak_transient_bytes": 2**20,
                "bench_nvfp4.Refit.track_reload_safe": 1,
                "bench_nvfp4.Refit.track_reversible_in_place": 0,
            },
        )
    ]
    bf16 = _rows("legacy", {f"{REFIT}.track_reload_safe": 0})
    df = pd.concat([frame(), pd.DataFrame(bf16 + quant)], ignore_index=True)
    text = to_markdown(refit_blocks(df, rankload.rank_load_table(df, COSTS)))
    lines = text.splitlines()
    header = [c.strip() for c in next(x for x in lines if x.startswith("| shape")).split("|")]
    shapes = [
        line.split("|")[1].strip() for line in lines if line.startswith("| ") and "|--" not in line
    ]
    assert shapes[-1] == nvfp4 and shapes.count(nvfp4) == 1 and shapes.count(SHAPE) == 4
    cells = next(x for x in lines if nvfp4 in x).split("|")
    row = dict(zip(header, (c.strip() for c in cells), strict=True))
    assert (row["strategy"], row["peak, first load"], row["peak, direct"]) == (
        "inplace",
        "2.00 MiB",
        "1.00 MiB",
    )
    assert (row["reload-safe"], row["reversible in place"]) == ("yes", "no")


#: qwen3-235b-a22b/tp4's refits in a row, exact on meta (benchmarks/formats.py's _refit_replay):
#: inplace's direct refit runs out at refit 16, each refit 94 cudaMalloc and 1880 MiB before
#: it; streaming's none of 20; legacy's sleep-mode load itself runs out.
REPLAY = "bench_refit.RefitReplay"


def _replay(way: str, oom: int, growth: int, calls: int, margin: int) -> dict:
    figures = zip(
        ("oom_refit", "reserved_growth_per_refit_bytes", "driver_calls_per_refit", "margin_bytes"),
        (oom, growth, calls, margin),
        strict=True,
    )
    return {f"{REPLAY}.track_{way}_{name}": value for name, value in figures}


def test_refit_block_says_which_refit_runs_out_per_way():
    rows = _rows("legacy", {f"{REFIT}.track_reload_safe": 0, f"{REPLAY}.track_refits": 20})
    rows += _rows("legacy", _replay("direct", 0, 0, 0, 7717519))
    rows += _rows("inplace", _replay("direct", 16, 1971322880, 94, 7717519))
    rows += _rows("streaming", _replay("direct", 21, 0, 0, 30886183567))
    rows += _rows("streaming", _replay("streamed", 21, 0, 0, 30886183567))
    df = pd.concat([frame(), pd.DataFrame(rows)], ignore_index=True)
    text = to_markdown(refit_blocks(df, rankload.rank_load_table(df, COSTS)))
    assert "then 20 refits of every layer" in text
    lines = text.splitlines()
    cells = [[c.strip() for c in line.split("|")] for line in lines]
    start = next(i for i, c in enumerate(cells) if c[1:4] == ["shape", "strategy", "direct"])
    header = cells[start]
    rows = [line.split("|") for line in lines[start:] if line.startswith(f"| {SHAPE}")]
    table = {
        row[2].strip(): dict(zip(header, (c.strip() for c in row), strict=True)) for row in rows
    }
    assert table["legacy"]["direct"] == "OOM at the load"
    assert table["inplace"]["direct"] == "OOM at refit 16; +1.84 GiB, 94 calls a refit"
    assert table["streaming"]["direct"] == "none in 20; margin 28.8 GiB"
    assert table[f"preallocated ({rankload.BEST})"]["layerwise"] == "n/a"


def test_a_run_without_refits_in_a_row_says_so():
    rows = _rows("legacy", {f"{REFIT}.track_reload_safe": 0})
    df = pd.concat([frame(), pd.DataFrame(rows)], ignore_index=True)
    assert NO_REPLAY in to_markdown(refit_blocks(df, rankload.rank_load_table(df, COSTS)))


def test_refit_block_shows_the_whole_ranks_refit_by_ep():
    # qwen3-30b-a3b/ep8's figures, exact on meta (benchmarks/formats.py's _rank_refit)
    ep8 = "qwen3-30b-a3b/ep8"
    figures = {
        "bench_refit.RefitByEP.track_direct_peak_transient_bytes": 6 * 2**20,
        "bench_refit.RefitByEP.track_direct_rank_traffic_bytes": 43508563968,
        "bench_refit.RefitByEP.track_direct_rank_launches": 3168,
    }
    rows = _rows("legacy", {f"{REFIT}.track_reload_safe": 0})
    rows += [row | {"shape": ep8} for row in _rows("inplace", figures)]
    df = pd.concat([frame(), pd.DataFrame(rows)], ignore_index=True)
    text = to_markdown(refit_blocks(df, rankload.rank_load_table(df, COSTS)))
    assert "A whole rank's refit by EP" in text
    (line,) = [x for x in text.splitlines() if x.startswith(f"| {ep8}")]
    cells = [c.strip() for c in line.split("|")]
    assert cells[1:5] == [ep8, "inplace", "6.00 MiB peak, 40.5 GiB", "n/a"]
