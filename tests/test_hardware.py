"""One machine name, two hosts: the summary's marks on results of the committed history's shape.

The first run is ``results/cpu-2core-epyc``'s real asv result of d65cf1b. The second is the same
file written as the next commit, measured on another host behind the same name: every absolute
second (layer, whole model) ``HOST`` times the first's, copy ratios equal, as two hosts behind
``cpu-2core-epyc`` measured unchanged code (issue 22: 3-4x apart, legacy's copy ratio 12.3 vs
12.8). A strategy slowed by the code slows its copy ratio by the same factor on any host.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from moe_bench import hardware
from moe_bench.compare import compare_commits
from moe_bench.metrics import COPY_RATIO, HARDWARE_BAND, NOISE_FACTOR, TIME, WHOLE_MODEL
from moe_bench.report import render_markdown, summary_table
from moe_bench.results import load_results

RESULTS = Path(__file__).resolve().parents[1] / "results"
MACHINE = "cpu-2core-epyc"
FIRST = RESULTS / MACHINE / "d65cf1b4-virtualenv-py3.11-flashinfer-python-torch2.13.0.json"
SECOND = "5ec0bd00" * 5  # the next commit, a day later
HOST = 3.0  # the second host's same-size copies (and all else) take 3x as long
SLOWED = "preallocated"


def write_second_run(root: Path, host: float, slowdown: float = 1.0) -> None:
    """``root``: a results dir with the first run and the second (``host``, ``SLOWED`` x
    ``slowdown``) as asv wrote them."""
    shutil.copy(RESULTS / "benchmarks.json", root / "benchmarks.json")
    (root / MACHINE).mkdir()  # the first run alone: the committed history grows after it
    for path in (RESULTS / MACHINE / "machine.json", FIRST):
        shutil.copy(path, root / MACHINE / path.name)
    data = json.loads(FIRST.read_text())
    data["commit_hash"] = SECOND
    data["date"] += 86_400_000
    columns = data["result_columns"]
    for name, row in data["results"].items():
        axes = row[columns.index("params")]
        if name not in (TIME, COPY_RATIO, WHOLE_MODEL):
            continue
        strategies = [json.loads(v.replace("'", '"')) for v in axes[1]]
        values = row[columns.index("result")]
        for i, value in enumerate(values):
            code = slowdown if strategies[i % len(strategies)] == SLOWED else 1.0
            values[i] = value * code * (1.0 if name == COPY_RATIO else host)
    (root / MACHINE / f"{SECOND[:8]}-{data['env_name']}.json").write_text(json.dumps(data))


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
    text = render_markdown(table, title="t")
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
def test_a_slowdown_within_the_noise_is_left_to_the_paired_run_on_either_host(tmp_path, host):
    # 1.5x: within NOISE_FACTOR, unmarked on the same host and, alike, on the slower one.
    write_second_run(tmp_path, host, slowdown=1.5)
    assert marks(tmp_path) == {}


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
