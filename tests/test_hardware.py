"""One machine name, two hosts: the summary's marks on results of the committed history's shape.

The first run is ``results/cpu-2core-epyc``'s real asv result of d65cf1b. The second is either
the real one of 2fe0e2a, measured on another host behind the same name (its same-size copies
3.39x slower, copy ratios 0.79-1.30x per strategy: issue 22), or the first written again as the
next commit, on a host ``HOST`` times slower: every absolute second (layer, whole model) x
``HOST``, copy ratios equal. A strategy slowed by the code slows its copy ratio by the same
factor on any host.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from moe_bench import hardware
from moe_bench.compare import compare_commits
from moe_bench.document import to_markdown
from moe_bench.report import format_blocks, summary_table
from moe_bench.results import load_results
from moe_suite.metrics import (
    COPY_RATIO,
    HARDWARE_BAND,
    NOISE_FACTOR,
    STEADY_SPREAD,
    STRATEGY_FACTOR,
    TIME,
    WHOLE_MODEL,
    steady,
)

RESULTS = Path(__file__).resolve().parents[1] / "results"
MACHINE = "cpu-2core-epyc"
ENV = "virtualenv-py3.11-flashinfer-python-torch2.13.0"
FIRST = RESULTS / MACHINE / f"d65cf1b4-{ENV}.json"
REAL_SECOND = RESULTS / MACHINE / f"2fe0e2a2-{ENV}.json"  # the other host, unchanged code
LOADED = Path(__file__).resolve().parent / "fixtures" / "loaded_runs"
SECOND = "5ec0bd00" * 5  # the next commit, a day later
HOST = 3.0  # the second host's same-size copies (and all else) take 3x as long
SLOWED = "preallocated"
TIMED = (TIME, COPY_RATIO, WHOLE_MODEL)


def scaled(data: dict, scale) -> dict:
    """``data`` (an asv result file's JSON) with each timed figure times ``scale(name,
    shape, strategy)``."""
    columns = data["result_columns"]
    for name, row in data["results"].items():
        if name not in TIMED:
            continue
        shapes, strategies = (
            [json.loads(v.replace("'", '"')) for v in axis] for axis in row[columns.index("params")]
        )
        values = row[columns.index("result")]
        for i, value in enumerate(values):
            shape, strategy = shapes[i // len(strategies)], strategies[i % len(strategies)]
            values[i] = value * scale(name, shape, strategy)
    return data


def write_runs(root: Path, second: dict) -> None:
    """``root``: a results dir with the first run and ``second`` as asv wrote them."""
    shutil.copy(RESULTS / "benchmarks.json", root / "benchmarks.json")
    (root / MACHINE).mkdir()  # the named runs alone: the committed history grows after them
    for path in (RESULTS / MACHINE / "machine.json", FIRST):
        shutil.copy(path, root / MACHINE / path.name)
    (root / MACHINE / f"{second['commit_hash'][:8]}-{ENV}.json").write_text(json.dumps(second))


def first_as_next_commit() -> dict:
    """The first run's asv result file, written as the next commit a day later."""
    data = json.loads(FIRST.read_text())
    data["commit_hash"] = SECOND
    data["date"] += 86_400_000
    return data


def write_second_run(
    root: Path, host: float, slowdown: float = 1.0, shapes: tuple[str, ...] | None = None
) -> None:
    """The first run and the synthetic second (``host``; ``SLOWED`` x ``slowdown`` at
    ``shapes``, every shape where None)."""
    data = first_as_next_commit()

    def scale(name, shape, strategy):
        code = slowdown if strategy == SLOWED and (shapes is None or shape in shapes) else 1.0
        return code * (1.0 if name == COPY_RATIO else host)

    write_runs(root, scaled(data, scale))


def write_real_second_run(root: Path, slowdown: float = 1.0) -> None:
    """The first run and the real one of the other host, ``SLOWED`` x ``slowdown``."""
    data = json.loads(REAL_SECOND.read_text())
    write_runs(
        root, scaled(data, lambda name, shape, strategy: slowdown if strategy == SLOWED else 1.0)
    )


def marks(root: Path) -> dict[tuple[str, str], tuple[str, ...]]:
    table = summary_table(load_results(root))
    return {(r.shape, r.strategy): r.regressions for r in table.itertuples() if r.regressions}


@pytest.mark.parametrize("host", [HOST, 1 / HOST])
def test_unchanged_code_on_another_host_is_not_marked(tmp_path, host):
    write_second_run(tmp_path, host)
    table = summary_table(load_results(tmp_path))
    timed = table.dropna(subset=["time"])
    assert len(timed) == 54  # 6 shapes x 9 strategies timed in the committed run
    # Without the hardware rule every slower figure would be marked: 3x > NOISE_FACTOR.
    assert host < 1 or (timed["time_change"] > NOISE_FACTOR).all()
    assert timed["copy_scale"].to_numpy() == pytest.approx(host)
    assert marks(tmp_path) == {}
    text = to_markdown(format_blocks(table))
    assert "⚠" not in text.split("\n", 3)[3]  # the legend aside
    assert "**Other hardware:** compared with `d65cf1b4`" in text
    assert f"copies took {host:.2f}x as long as its (beyond {HARDWARE_BAND:g}x)" in text


@pytest.mark.parametrize("host", [HOST, 1.0])
def test_a_slowed_strategy_is_marked_on_either_host(tmp_path, host):
    # Beyond NOISE_FACTOR (a revert to vLLM's legacy conversion was 4.5x): its copy ratio
    # marks every shape, on the slower host as on the same one; absolute seconds only there.
    write_second_run(tmp_path, host, slowdown=NOISE_FACTOR * 1.2)
    found = marks(tmp_path)
    assert set(found) == {(shape, SLOWED) for shape, _ in found} and len(found) == 6
    expected = ("copy_ratio",) if host == HOST else ("time", "copy_ratio", "whole_model")
    assert set(found.values()) == {expected}


@pytest.mark.parametrize("host", [HOST, 1.0])
def test_a_slowdown_of_one_strategy_within_the_noise_is_marked_on_either_host(tmp_path, host):
    # 1.5x: within NOISE_FACTOR at each cell, but at every shape: the strategy moved as a whole.
    write_second_run(tmp_path, host, slowdown=1.5)
    found = marks(tmp_path)
    assert set(found) == {(shape, SLOWED) for shape, _ in found} and len(found) == 6
    assert set(found.values()) == {("copy_ratio",)}  # absolute seconds: within 2.5x, or info


def test_one_odd_shape_is_not_a_strategy_slowdown(tmp_path):
    # 2x at one shape of six: the median over shapes is 1.0, within STRATEGY_FACTOR.
    write_second_run(tmp_path, HOST, slowdown=2.0, shapes=("qwen3-235b-a22b/tp4",))
    assert marks(tmp_path) == {}


def test_an_unsteady_run_leaves_small_steps_to_the_paired_run(tmp_path):
    # Every other strategy and its copy 2x slower (a loaded host), SLOWED not among them: each
    # shape's same-size copies spread 2x, so whole strategies are not judged and 1.5x is unmarked.
    data = first_as_next_commit()
    row = data["results"][TIME]
    strategies = sorted(row[data["result_columns"].index("params")][1])
    loaded = {json.loads(s.replace("'", '"')) for s in strategies[::2]} - {SLOWED}

    def scale(name, shape, strategy):
        code = 1.5 if strategy == SLOWED else 1.0
        return code if name == COPY_RATIO else code * (2.0 if strategy in loaded else 1.0)

    write_runs(tmp_path, scaled(data, scale))
    table = summary_table(load_results(tmp_path))
    assert (table.dropna(subset=["time"])["copy_spread"] > STEADY_SPREAD).all()
    assert marks(tmp_path) == {}
    assert "**Not both steady**" in to_markdown(format_blocks(table))


@pytest.mark.parametrize("run", ["1", "2", "3"])
def test_runs_under_load_are_not_steady(tmp_path, run):
    # Three real runs of unchanged code under a load of 3-4 (fixtures/loaded_runs/README.md):
    # whole strategies moved by up to 1.49x there, so none may count as steady.
    shutil.copy(RESULTS / "benchmarks.json", tmp_path / "benchmarks.json")
    shutil.copytree(LOADED / run, tmp_path / "noise-probe")
    shutil.copy(LOADED / "machine.json", tmp_path / "noise-probe" / "machine.json")
    copies = hardware.copy_seconds(load_results(tmp_path))
    (only,) = copies.columns
    assert not steady(hardware.copy_spread(copies, only))


def test_the_two_real_hosts_of_the_committed_history_mark_nothing(tmp_path):
    write_real_second_run(tmp_path)
    df = load_results(tmp_path)
    table = summary_table(df)
    timed = table.dropna(subset=["time"])
    assert len(timed) == 54
    assert (timed["copy_scale"] > HARDWARE_BAND).all()  # another host: 3-4x slower copies
    assert (timed["copy_spread"] <= STEADY_SPREAD).all()  # both steady
    assert (timed["previous_copy_spread"] <= STEADY_SPREAD).all()
    copies = hardware.copy_seconds(df)
    first, second = sorted(copies.columns, key=lambda run: not run[2].startswith("d65cf1b4"))
    moved = hardware.strategy_changes(df, COPY_RATIO, second, first, copies)
    assert len(moved) == 9 and moved.between(1 / STRATEGY_FACTOR, STRATEGY_FACTOR).all()
    assert marks(tmp_path) == {}
    text = to_markdown(format_blocks(table))
    assert "⚠" not in text.split("\n", 3)[3] and "Both runs steady" in text


def test_a_real_slowdown_of_one_strategy_on_the_slower_host_is_marked(tmp_path):
    write_real_second_run(tmp_path)
    unchanged = summary_table(load_results(tmp_path)).set_index(["shape", "strategy"])
    change = unchanged.xs(SLOWED, level="strategy")["copy_ratio_change"] * 1.5
    shutil.rmtree(tmp_path / MACHINE)
    write_real_second_run(tmp_path, slowdown=1.5)
    found = marks(tmp_path)
    # marked where the cell rose beyond STRATEGY_FACTOR: the median over shapes did
    assert change.median() > STRATEGY_FACTOR
    assert found == {
        (shape, SLOWED): ("copy_ratio",) for shape in change[change > STRATEGY_FACTOR].index
    }
    assert len(found) >= hardware.MIN_SHAPES


def test_copy_seconds_and_scale_from_the_committed_run(tmp_path):
    write_second_run(tmp_path, HOST)
    df = load_results(tmp_path)
    copies = hardware.copy_seconds(df)
    env, commit = df.loc[df["commit"] != SECOND, ["env", "commit"]].iloc[0]
    first, second = (MACHINE, env, commit), (MACHINE, env, SECOND)
    assert set(copies.columns) == {first, second}
    # the cells of one shape copy the same bytes: within 1.25x of each other in the real run,
    # far inside the 3x between hosts; the median over all cells decides
    by_shape = copies[first].dropna().groupby(level="shape")
    assert (by_shape.max() / by_shape.min()).max() < 1.3
    assert hardware.copy_scale(copies, second, first) == pytest.approx(HOST)
    assert hardware.copy_scale(copies, first, second) == pytest.approx(1 / HOST)
    assert math.isnan(hardware.copy_scale(copies, second, (MACHINE, "other-env", SECOND)))
    # two shared cells: too few for a median to outvote an odd one
    few = copies.iloc[:3].copy()
    few.iloc[0, few.columns.get_loc(second)] = math.nan
    assert math.isnan(hardware.copy_scale(few, second, first))
    assert hardware.copy_scale(copies.iloc[:3], second, first) == pytest.approx(HOST)
    # how steady: one shape's cells copy the same bytes; a run not timed says nothing
    assert hardware.copy_spread(copies, first) == pytest.approx(
        hardware.copy_spread(copies, second)
    )
    assert 1 < hardware.copy_spread(copies, first) <= STEADY_SPREAD
    assert math.isnan(hardware.copy_spread(copies, (MACHINE, "other-env", SECOND)))
    # a run without LayerTime (the memory benchmarks only) has no copy time
    assert hardware.copy_seconds(df[df["benchmark"].str.contains("PeakMemory")]).empty


def test_compare_of_the_two_runs_judges_alike(tmp_path):
    # moe-bench compare without a paired run (two nightly commits): the same rule.
    write_second_run(tmp_path, HOST, slowdown=NOISE_FACTOR * 1.2)
    df = load_results(tmp_path)
    table = compare_commits(df, "d65cf1b4", SECOND[:8])
    failing = table[table["failing"]]
    assert set(failing["benchmark"]) == {COPY_RATIO} and set(failing["strategy"]) == {SLOWED}
    assert len(failing) == 6 and set(failing["status"]) == {"regressed"}
    seconds = table[table["benchmark"].isin([TIME, WHOLE_MODEL]) & table["value_base"].notna()]
    assert len(seconds) == 2 * 54 and set(seconds["status"]) == {"info (other hardware)"}
    assert seconds["note"].str.startswith("head's same-size copies took 3.00x base's").all()


def test_compare_marks_a_strategy_that_moved_as_a_whole(tmp_path):
    write_second_run(tmp_path, HOST, slowdown=1.5)
    table = compare_commits(load_results(tmp_path), "d65cf1b4", SECOND[:8])
    failing = table[table["failing"]]
    assert set(failing["benchmark"]) == {COPY_RATIO} and set(failing["strategy"]) == {SLOWED}
    assert len(failing) == 6 and set(failing["status"]) == {"regressed"}
    assert (failing["note"] == f"{SLOWED}: 1.50x in the median over its shapes").all()
