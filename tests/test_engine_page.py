"""The engine dashboard's steps (``moe_bench.engine_page``): which commits of an engine's own cell
the front page lists, by the metrics table's rules. Fast: frames built here; the page itself is
checked in the browser (tests/test_dashboard_browser.py, on fixtures/engine_results.py)."""

from __future__ import annotations

import math

import pandas as pd

from moe_bench.engine_page import EngineCommit, figure_steps, history_table

PEAK = "bench_fp8.PeakMemory.track_peak_transient_bytes"
SECONDS = "bench_fp8.LayerTime.track_layer_seconds"
RATIO = "bench_fp8.LayerTime.track_copy_ratio"


def _cell(values: dict[str, list[float | None]]) -> pd.DataFrame:
    """One cell's figures over commits 0..N-1: benchmark -> values (None: failed, NaN: n/a)."""
    rows = [
        {
            "machine": "box",
            "benchmark": name,
            "figure": name.partition(".")[2],
            "order": i,
            "value": math.nan if v is None else v,
            "failed": v is None,
        }
        for name, series in values.items()
        for i, v in enumerate(series)
    ]
    return pd.DataFrame(rows)


def test_a_step_is_any_exact_change_a_ratio_beyond_the_factor_never_seconds():
    steps = figure_steps(
        _cell(
            {
                PEAK: [100.0, 100.0, 101.0, 101.0, 100.0],
                SECONDS: [1.0, 9.0, 9.0, 1.0, 1.0],  # 9x: a host's, never judged
                RATIO: [1.0, 2.0, 2.0, 5.1, 5.1],  # 2x within NOISE_FACTOR, then 2.55x beyond
            }
        )
    )
    assert steps == {
        2: {"PeakMemory.track_peak_transient_bytes": ("regressed", 1.01)},
        3: {"LayerTime.track_copy_ratio": ("regressed", 5.1 / 2.0)},
        4: {"PeakMemory.track_peak_transient_bytes": ("improved", 100.0 / 101.0)},
    }


def test_a_failing_cell_is_a_step_and_so_is_its_return_n_a_is_none():
    steps = figure_steps(_cell({PEAK: [100.0, None, None, math.nan, 100.0]}))
    failed, again = steps[1]["PeakMemory.track_peak_transient_bytes"], steps[4]
    assert failed[0] == "failed" and math.isnan(failed[1])
    assert again["PeakMemory.track_peak_transient_bytes"][0] == "measured again"
    assert set(steps) == {1, 4}  # the second failure and the n/a commit are no step


def test_a_reload_class_steps_both_ways_without_a_ratio():
    """A class is 0 or 1 (``Refit.track_reload_safe``): its step from 0 has no ratio (it was a
    division by zero), and each way is judged by its direction, 1 -> 0 worse."""
    safe = "bench_fp8.Refit.track_reload_safe"
    steps = figure_steps(_cell({safe: [0.0, 1.0, 1.0, 0.0]}))
    (up,), (down,) = steps[1].values(), steps[3].values()
    assert up[0] == "improved" and math.isnan(up[1])
    assert down == ("regressed", 0.0)
    assert set(steps) == {1, 3}


def test_the_table_lists_the_first_the_steps_and_the_newest_commit():
    commits = [EngineCommit(str(i) * 40, f"v0.{i}.0", f"release {i}") for i in range(5)]
    rows = _cell({PEAK: [math.nan, 100.0, 100.0, 200.0, 200.0]})
    table, steps = history_table(rows, commits)
    assert steps == 1
    assert list(table["commit"]) == [f"v0.{i}.0 ({str(i) * 8})" for i in (1, 3, 4)]
    assert list(table["subject"]) == ["release 1", "release 3", "release 4"]
    peak = [cell.text + (f" {cell.mark}" if cell.mark else "") for cell in table["peak transient"]]
    assert peak == ["100 B", "200 B ⚠ +100%", "200 B"]
    assert history_table(_cell({PEAK: [math.nan] * 5}), commits) == (None, 0)
