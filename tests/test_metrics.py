"""The metrics table (moe_suite.metrics): it covers the whole asv suite, asv's dashboard
configuration agrees with it, its rule decides; and the nightly's choice of commits to measure."""

from __future__ import annotations

import importlib
import inspect
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from asv.config import Config
from asv.plugins.regressions import _GraphDataFilter
from fixtures.asv_fixture import OUT as FIXTURE_RESULTS
from fixtures.asv_fixture import git, make_repo

from moe_bench import cli
from moe_bench.results import new_commits, unmeasurable
from moe_convert import FORMATS
from moe_suite.formats import FORMAT_TITLES, titled
from moe_suite.metrics import (
    COPY_RATIO,
    EXACT,
    HARDWARE_BAND,
    INFO,
    METRICS,
    NOISE_FACTOR,
    PAIRED,
    PAIRED_TIME,
    PEAK_BYTES,
    STEADY_SPREAD,
    STRATEGY_FACTOR,
    TIME,
    figure_format,
    judge,
    steady,
)

ROOT = Path(__file__).resolve().parents[1]
KINDS = re.compile(r"^(time|timeraw|track|peakmem|mem)_")


def suite_benchmarks() -> dict[str, str]:
    """Every benchmark of ``benchmarks/`` as asv names it, with the unit it declares (a class's
    inherited methods included, as asv runs them)."""
    sys.path.insert(0, str(ROOT))  # the suite is a folder of asv, not an installed package
    found = {}
    for path in sorted((ROOT / "benchmarks").glob("bench_*.py")):
        module = importlib.import_module(f"benchmarks.{path.stem}")
        for cls_name, cls in inspect.getmembers(module, inspect.isclass):
            # asv's discovery skips private and abstract classes (bases of the grids)
            private = cls_name.startswith("_") or inspect.isabstract(cls)
            if cls.__module__ != module.__name__ or private:
                continue
            for name, method in inspect.getmembers(cls, callable):
                if KINDS.match(name):
                    default = (
                        "seconds"
                        if name.startswith("time")
                        else "bytes"
                        if "mem" in name
                        else "unit"
                    )
                    unit = getattr(method, "unit", getattr(cls, "unit", default))
                    found[f"{path.stem}.{cls_name}.{name}"] = unit
    return found


def test_every_suite_benchmark_is_in_the_table_with_its_unit():
    suite = suite_benchmarks()
    assert len(suite) >= 10
    assert {name: METRICS[name].unit if name in METRICS else None for name in suite} == suite


def test_the_table_is_consistent():
    for m in METRICS.values():
        assert m.rule in (EXACT, PAIRED, INFO), m
        assert (m.column is None) == (m.title is None), m
        assert m.factor == {EXACT: 1.0, PAIRED: NOISE_FACTOR, INFO: None}[m.rule]
    deterministic = [
        "bench_convert.Traffic.track_traffic_bytes",
        "bench_convert.Traffic.track_launches",
        "bench_convert.Traffic.track_traffic_ratio",
        "bench_convert.PeakMemory.track_peak_transient_bytes",
    ]
    assert all(METRICS[name].rule == EXACT for name in deterministic)
    assert METRICS["bench_noise.Noise.track_copy_spread"].rule == INFO
    assert NOISE_FACTOR > 2.11  # the worst unchanged-code rise in results/cpu-2core-xeon
    # Absolute seconds are host-bound; the paired A/B's ratio is taken on one box.
    for m in METRICS.values():
        seconds = m.unit == "seconds" and m.rule == PAIRED and m.benchmark != PAIRED_TIME
        assert m.host_bound == seconds, m
    # On same-looking hardware an unchanged layer time (1.43x at worst on one host) stays within.
    assert HARDWARE_BAND * 1.43 < NOISE_FACTOR
    # A whole strategy slowed 1.5x (issue 22) is marked; the cell's own factor is the wider.
    assert 1 < STRATEGY_FACTOR < 1.5 < NOISE_FACTOR


def test_the_format_titles_are_the_librarys_in_its_order():
    # Every title written here is the record's, in FORMATS' order; a new format may be missing.
    assert list(FORMAT_TITLES.items()) == [
        (name, f.title) for name, f in FORMATS.items() if name in FORMAT_TITLES
    ]
    assert set(FORMAT_TITLES) <= set(FORMATS)


def test_a_format_not_titled_yet_is_reported_after_the_titled_ones_under_its_name():
    # A new format's results reach the summary's and the engine page's tables before anyone
    # titles it in moe_suite (issue 36: a new format is its module, catalog entries, asv module).
    present = ["fakefp4", "mxfp4", "bf16", "fakefp4", "mxfp4"]
    assert titled(present) == [("bf16", "BF16"), ("mxfp4", "MXFP4"), ("fakefp4", "fakefp4")]


@pytest.mark.parametrize(
    ("benchmark", "shape", "fmt"),
    [
        (TIME, "qwen3-235b-a22b/tp4", "bf16"),
        ("bench_allocator.RankLoadH200.track_moe_layers", "deepseek-v3/tp8", "bf16"),
        ("bench_engine.LayerTime.track_layer_seconds", "deepseek-v3/tp8", "bf16"),
        ("bench_nvfp4.LayerTime.track_copy_ratio", "kimi-k2-nvfp4/tp8", "nvfp4"),
        ("bench_fakefp4.PeakMemory.track_peak_transient_bytes", "new-model/tp2", "fakefp4"),
        ("bench_quant.QuantLayerTime.track_layer_seconds", "gpt-oss-120b-mxfp4/tp2", "mxfp4"),
    ],
)
def test_a_figures_format_is_read_from_its_names(benchmark, shape, fmt):
    assert figure_format(benchmark, shape) == fmt


def test_the_committed_history_still_loads():
    """A renamed benchmark keeps its old name in the table (retired), or results/ stops loading."""
    from moe_bench.results import load_results

    assert not load_results(ROOT / "results").empty


@pytest.mark.parametrize("config", ["asv.conf.json", "asv.pr.conf.json"])
def test_dashboard_regression_thresholds_follow_the_table(config):
    """asv publish's regressions view, by asv's own resolution of the patterns, judges each
    benchmark as the table does: threshold = factor - 1; info figures and absolute seconds
    (host-bound: asv cannot tell one machine name's hosts apart) not at all."""
    conf = Config.load(str(ROOT / config))
    resolver = _GraphDataFilter(conf, repo=None, revisions={"commit": 0})
    graph = type("Graph", (), {"params": {}})()
    # The listed figures, the suite's (every format's module), and a format no config names.
    names = {
        *METRICS,
        *suite_benchmarks(),
        *(
            f"bench_fakefmt.{n.partition('.')[2]}"
            for n in METRICS
            if n.startswith("bench_convert.")
        ),
    }
    for name in sorted(names):
        m = METRICS.get(name)
        if name == PAIRED_TIME or m is None or name.startswith("bench_engine."):
            # not an asv benchmark; a retired BF16 one no format has; an engine config's
            # (tests/test_engine_asv.py)
            continue
        entry = f"{name}('qwen3-235b-a22b/tp4', 'strided_copy')"
        start = resolver._get_start_revision(graph, None, entry)
        if m.rule == INFO or m.host_bound:
            assert start is None, name  # regression detection off
            continue
        assert start is not None, name
        assert resolver._get_threshold(graph, None, entry) == pytest.approx(m.factor - 1), name


@pytest.mark.parametrize(
    ("rule", "base", "head", "paired", "status"),
    [
        (EXACT, 10, 10, False, "same"),
        (EXACT, 10, 11, False, "regressed"),
        (EXACT, 10, 9, False, "improved"),
        (PAIRED, 1.0, NOISE_FACTOR * 1.01, False, "regressed"),
        (PAIRED, 1.0, NOISE_FACTOR * 0.99, False, "same"),
        (PAIRED, 1.0, 10.0, True, "info (decided by paired)"),
        (INFO, 1.0, 10.0, False, "info"),
    ],
)
def test_judge(rule, base, head, paired, status):
    m = next(m for m in METRICS.values() if m.rule == rule and m.lower_is_better)
    assert judge(m, base, head, paired=paired) == status


def test_a_time_figure_no_paired_run_times_keeps_the_unpaired_rule_beside_one():
    """A refit's copy ratio is not timed by the paired runs (they time ``LayerTime``): in a PR
    with a paired file it is still judged, by ``NOISE_FACTOR``, never left as decided there."""
    refit = METRICS["bench_refit.RefitTime.track_streamed_copy_ratio"]
    layer = METRICS["bench_convert.LayerTime.track_copy_ratio"]
    assert layer.paired_run and not refit.paired_run
    assert judge(refit, 1.0, NOISE_FACTOR * 1.01, paired=True) == "regressed"
    assert judge(refit, 1.0, NOISE_FACTOR * 0.99, paired=True) == "same"
    assert judge(layer, 1.0, 10.0, paired=True) == "info (decided by paired)"


@pytest.mark.parametrize(
    ("benchmark", "copy_scale", "status"),
    [
        # absolute seconds 3x: a 3x slower host judges nothing, the same host a regression
        ("bench_convert.LayerTime.track_layer_seconds", 3.0, "info (other hardware)"),
        ("bench_convert.LayerTime.track_layer_seconds", 1 / 3, "info (other hardware)"),
        ("bench_convert.LayerTime.track_whole_model_seconds", 3.0, "info (other hardware)"),
        ("bench_convert.LayerTime.track_layer_seconds", HARDWARE_BAND, "regressed"),
        ("bench_convert.LayerTime.track_layer_seconds", 1.0, "regressed"),
        ("bench_convert.LayerTime.track_layer_seconds", math.nan, "regressed"),  # nothing to tell
        # a ratio within one run is judged on any host
        ("bench_convert.LayerTime.track_copy_ratio", 3.0, "regressed"),
        ("bench_convert.PeakMemory.track_peak_transient_bytes", 3.0, "regressed"),
    ],
)
def test_judge_compares_absolute_seconds_only_on_same_looking_hardware(
    benchmark, copy_scale, status
):
    assert judge(METRICS[benchmark], 1.0, 3.0, copy_scale=copy_scale) == status


@pytest.mark.parametrize(
    ("benchmark", "head", "strategy_change", "status"),
    [
        # a ratio within one run: its strategy moved as a whole beyond the factor, and so did it
        (COPY_RATIO, 1.5, 1.5, "regressed"),
        (COPY_RATIO, 1.5, STRATEGY_FACTOR, "same"),  # the median within: one cell's noise
        (COPY_RATIO, STRATEGY_FACTOR, 1.5, "same"),  # the strategy moved, this cell not so far
        (COPY_RATIO, 1.5, math.nan, "same"),  # not known (an unsteady run): NOISE_FACTOR alone
        (COPY_RATIO, 1 / 1.5, 1 / 1.5, "improved"),
        (COPY_RATIO, NOISE_FACTOR * 1.01, 1.0, "regressed"),  # beyond the cell's own factor
        # absolute seconds move with the host: never judged by strategy
        (TIME, 1.5, 1.5, "same"),
        # exact figures: any rise, as always
        (PEAK_BYTES, 1.5, 1.0, "regressed"),
    ],
)
def test_judge_marks_a_strategy_that_moved_as_a_whole(benchmark, head, strategy_change, status):
    m = METRICS[benchmark]
    assert m.by_strategy == (benchmark == COPY_RATIO)
    assert judge(m, 1.0, head, strategy_change=strategy_change) == status


def test_steady():
    assert steady(1.0) and steady(STEADY_SPREAD)
    assert not steady(STEADY_SPREAD * 1.01)
    assert not steady(math.nan)  # no copy timed: nothing says it was steady
    assert steady(1.0, STEADY_SPREAD) and not steady(1.0, STEADY_SPREAD * 1.01)  # both runs
    assert not steady(1.0, math.nan)


def test_judge_without_direction_fails_any_change():
    experts = METRICS["bench_convert.Profile.track_timed_experts"]
    assert judge(experts, 8, 16) == judge(experts, 8, 4) == "changed"
    assert judge(experts, 8, 8) == "same"


@pytest.fixture
def history(tmp_path):
    """The fixture's git history with its asv results (all 4 commits measured on fixture-box)."""
    repo = tmp_path / "repo"
    commits = make_repo(repo)
    conf = {
        "version": 1,
        "project": "fixture",
        "repo": str(repo),
        "branches": ["main"],
        "dvcs": "git",
        "results_dir": str(FIXTURE_RESULTS),
    }
    config = tmp_path / "asv.conf.json"
    config.write_text(json.dumps(conf))
    return repo, commits, config


def test_nightly_has_nothing_new_when_head_is_measured(history):
    repo, commits, config = history
    assert new_commits(config, "fixture-box") == []


def test_nightly_measures_the_commits_after_the_last_measured(history):
    repo, commits, config = history
    for i in range(2):
        (repo / "revision.txt").write_text(f"new {i}\n")
        git(repo, "commit", "-q", "-am", f"new commit {i}")
    new = git(repo, "rev-list", f"{commits[-1]}..main").split()
    assert len(new) == 2 and new_commits(config, "fixture-box") == new
    # A machine without history measures HEAD only, not the whole past.
    assert new_commits(config, "new-box") == [new[0]]


def test_commits_older_than_the_oldest_measurable_are_neither_measured_nor_compared(
    history, capsys
):
    repo, commits, config = history
    for i in range(2):
        (repo / "revision.txt").write_text(f"new {i}\n")
        git(repo, "commit", "-q", "-am", f"new commit {i}")
    new = git(repo, "rev-list", f"{commits[-1]}..main").split()  # newest first
    conf = json.loads(config.read_text())
    config.write_text(json.dumps({**conf, "oldest_commit": new[0]}))
    assert new_commits(config, "fixture-box") == [new[0]]  # new[1] is older: skipped
    assert unmeasurable(config, [new[1], new[0], "main"]) == [new[1]]
    assert cli.main(["measurable", "main", new[0], "--config", str(config)]) == 0
    assert cli.main(["measurable", new[1], "main", "--config", str(config)]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"moe-bench measurable: error: {new[1]}: older than the oldest commit")
    assert cli.main(["measurable", "no-such-commit", "--config", str(config)]) == 2
    assert "'no-such-commit' is no commit of" in capsys.readouterr().err
    config.write_text(json.dumps(conf))  # no oldest_commit: every commit is measurable
    assert unmeasurable(config, [new[1]]) == []


def test_nightly_script_exits_0_when_there_is_nothing_new(history, tmp_path):
    """``scripts/nightly`` in the fixture's checkout, whose history holds HEAD: it says so and
    exits 0 without calling asv (a stub that fails if called)."""
    repo, commits, config = history
    venv = Path(sys.prefix)
    if not (venv / ".installed-test,bench").exists():
        pytest.skip(
            f"{venv} was not set up by scripts/_env.sh (run the tests through scripts/test)"
        )
    shutil.copytree(ROOT / "scripts", repo / "scripts")
    shutil.copytree(FIXTURE_RESULTS, repo / "results")
    stub = tmp_path / "bin"
    stub.mkdir()
    (stub / "asv").write_text('#!/bin/sh\necho "asv $*" >&2\nexit 99\n')
    (stub / "asv").chmod(0o755)
    env = {
        **os.environ,
        "MOE_VENV": str(venv),
        "HOME": str(tmp_path),
        "MOE_BENCH_MACHINE": "fixture-box",
        "MOE_BENCH_PROFILE": "cpu",
        "PATH": f"{stub}{os.pathsep}{os.environ['PATH']}",
    }
    done = subprocess.run(
        [str(repo / "scripts" / "nightly")],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "[nightly] machine fixture-box: nothing new to measure" in done.stderr
    assert "asv " not in done.stderr
