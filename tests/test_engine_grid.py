"""The engine suite's grid (``engine_benchmarks/``): every format's vLLM adapter on it, made from
the adapters' records, BF16's names kept, each figure judged as the main suite's (issue 37 item
1). Fast: nothing is measured (tests/test_engine_asv.py runs the suite on a tiny engine)."""

from __future__ import annotations

import importlib
import importlib.metadata
import itertools
import json
import re
import sys
from pathlib import Path

import pytest
from asv.benchmarks import Benchmarks
from asv.config import Config
from asv_runner.benchmarks._base import get_setup_cache_key

import moe_convert
from moe_bench import engine, engine_env, machine
from moe_convert.formats.catalog import shape_from_label
from moe_convert.formats.preparations import PREPARATIONS
from moe_suite import selection
from moe_suite.metrics import ENGINE_FIGURES, METRICS, format_figure

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def suite():
    """``engine_benchmarks`` imported as asv imports it (a package): module name -> module."""
    sys.path.insert(0, str(ROOT))
    try:
        return {
            path.stem: importlib.import_module(f"engine_benchmarks.{path.stem}")
            for path in sorted((ROOT / "engine_benchmarks").glob("bench_*.py"))
        }
    finally:
        sys.path.pop(0)


def _benchmarks(module) -> dict[str, list]:
    """asv's names of ``module``'s benchmarks (``class.method``) -> their params."""
    return {
        f"{name}.{method}": cls.params
        for name, cls in vars(module).items()
        if isinstance(cls, type) and not name.startswith("_")
        for method in dir(cls)
        if method.startswith("track_")
    }


def test_bf16_cells_keep_their_names(suite):
    """Recorded histories are keyed by these names and params."""
    params = [
        ["qwen3-235b-a22b/tp4"],
        ["vllm", "sglang-installed", "flashinfer", "legacy", "preallocated", "inplace"],
    ]
    assert _benchmarks(suite["bench_engine"]) == {
        "PeakMemory.track_peak_transient_bytes": params,
        "Traffic.track_traffic_bytes": params,
        "Traffic.track_launches": params,
        "LayerTime.track_layer_seconds": params,
        "LayerTime.track_copy_ratio": params,
        "Refit.track_reload_safe": params,
    }


def test_every_vllm_preparation_has_a_module_and_grid(suite):
    """One module per adapter's format, its grid the adapter's kind then its forms'
    transcriptions', at one catalog shape of the format."""
    bench_engine = suite["bench_engine"]
    assert set(suite) == {"bench_engine"} | {f"bench_{e.format}" for e in PREPARATIONS}
    for adapter in PREPARATIONS:
        module = suite[f"bench_{adapter.format}"]
        (shape,) = bench_engine.GRIDS[adapter.format].shapes
        assert shape_from_label(shape).format == adapter.format
        assert set(_benchmarks(module)) == set(_benchmarks(bench_engine))
        for params in _benchmarks(module).values():
            assert params == [[shape], ["vllm", "legacy"]]
        grid = bench_engine.GRIDS[adapter.format]
        assert [grid.strategy(v) for v in grid.strategies] == [
            adapter.strategy,
            f"{adapter.format}-legacy",
        ]


def test_one_setup_cache_measures_every_format(suite):
    """asv keys ``setup_cache`` by its function's file and line: one for every class of every
    module, so the engine is imported and the grid measured once per commit."""
    keys = {
        get_setup_cache_key(cls.setup_cache)
        for module in suite.values()
        for cls in vars(module).values()
        if isinstance(cls, type) and hasattr(cls, "track_launches")
    }
    assert len(keys) == 1


def test_the_grid_measures_every_registered_cell_once(suite, monkeypatch):
    """Every grid's registered cells, keyed ``(shape, axis value)``; the engine's cells not
    registered here (no vLLM) are n/a, saying what they need."""
    bench_engine = suite["bench_engine"]
    measured = []
    monkeypatch.setattr(
        bench_engine,
        "measure",
        lambda shape, strategy, classes: measured.append(strategy) or strategy,
    )
    monkeypatch.delenv(selection.ENV, raising=False)  # a nightly's run: every cell
    cells = bench_engine.measure_grid()
    expected = [
        grid.strategy(value)
        for grid in bench_engine.GRIDS.values()
        for value in grid.strategies
        if grid.strategy(value) in moe_convert.REGISTRY
    ]
    assert measured == expected and "fp8-legacy" in expected
    assert cells["llama-4-maverick-fp8/tp8", "legacy"] == "fp8-legacy"
    if "fp8-vllm" not in moe_convert.REGISTRY:
        peak = suite["bench_fp8"].PeakMemory()
        with pytest.raises(NotImplementedError, match="'fp8-vllm' is not registered.*vllm"):
            peak.setup(cells, "llama-4-maverick-fp8/tp8", "vllm")


@pytest.mark.parametrize(
    "regex",
    [
        engine.cell_regex("bench_fp8.Traffic.track_launches", "llama-4-maverick-fp8/tp8", "legacy"),
        r"^bench_(engine|fp8)\.",
        r"PeakMemory.*'inplace'",
        r"bench_mxint4\.(Refit|LayerTime)",
        r"no such benchmark",
    ],
)
def test_a_runs_selection_is_what_it_measures(suite, monkeypatch, regex):
    """A run's ``--bench`` (``moe_suite.selection``, set by a PR run and a bisection): the grid
    measures the cells asv runs, matched as asv matches them, and of each cell the classes
    whose benchmarks it runs; nothing where it selects none."""
    bench_engine = suite["bench_engine"]
    measured = {}
    monkeypatch.setattr(
        bench_engine,
        "measure",
        lambda shape, strategy, classes: measured.setdefault((shape, strategy), set(classes)),
    )
    monkeypatch.setenv(selection.ENV, regex)
    bench_engine.measure_grid()
    params = {
        f"{module}.{name}": values
        for module in suite
        for name, values in _benchmarks(suite[module]).items()
    }
    conf = Config()
    conf.benchmark_dir = str(ROOT / "engine_benchmarks")
    listed = [{"name": n, "params": [[repr(v) for v in p] for p in ps]} for n, ps in params.items()]
    runs = Benchmarks(conf, listed, regex=regex)  # asv's own selection
    expected = {}
    for name in runs:
        module, cls, _ = name.split(".")
        grid = suite[module].LayerTime.grid
        cells = list(itertools.product(*params[name]))
        for shape, value in (cells[i] for i in runs.benchmark_selection[name]):
            if grid.strategy(value) in moe_convert.REGISTRY:
                expected.setdefault((shape, grid.strategy(value)), set()).add(cls)
    assert measured == expected
    assert bool(expected) == (regex != "no such benchmark")


def test_every_figure_is_judged_as_the_main_suites():
    """BF16's as ``bench_convert``'s (listed), a quantized module's as the main suite's module of
    its format (``format_figure``): the same rules, so an extra copy regresses exactly."""
    figures = engine.engine_benchmarks()
    assert set(figures.values()) == {"bf16"} | {e.format for e in PREPARATIONS}
    for name, fmt in figures.items():
        if fmt == "bf16":
            assert name.startswith("bench_engine.") and name in METRICS
        else:
            assert METRICS[name] == format_figure(name)
            bf16 = next(f for f in ENGINE_FIGURES if f.partition(".")[2] == name.partition(".")[2])
            assert METRICS[name].rule == METRICS[bf16].rule
    thresholds, never = engine._thresholds("vllm")
    assert thresholds["bench_fp8\\.LayerTime\\.track_copy_ratio"] == pytest.approx(1.5)
    assert "bench_mxint4\\.LayerTime\\.track_layer_seconds" in never


def test_asv_judges_the_engines_own_cells_only():
    """asv's regressions skip a cell as its name matches a ``regressions_first_commits`` pattern
    set to None (``re.match`` of ``name('shape', 'strategy')``): every reference line's."""
    _, never = engine._thresholds("vllm")

    def skipped(name: str, shape: str, strategy: str) -> bool:
        return any(re.match(p, f"{name}('{shape}', '{strategy}')") for p in never)

    peak = "bench_engine.PeakMemory.track_peak_transient_bytes"
    fp8 = "bench_fp8.Traffic.track_launches"
    for strategy in ("legacy", "preallocated", "inplace", "flashinfer", "sglang-installed"):
        assert skipped(peak, "qwen3-235b-a22b/tp4", strategy), strategy
    assert skipped(fp8, "llama-4-maverick-fp8/tp8", "legacy")
    assert not skipped(peak, "qwen3-235b-a22b/tp4", "vllm")
    assert not skipped(fp8, "llama-4-maverick-fp8/tp8", "vllm")


def test_find_reads_the_format_from_the_shape(monkeypatch):
    assert (
        engine.figure_benchmark("launches", "llama-4-maverick-fp8/tp8")
        == "bench_fp8.Traffic.track_launches"
    )
    assert (
        engine.figure_benchmark("peak_transient_bytes", "qwen3-235b-a22b/tp4")
        == "bench_engine.PeakMemory.track_peak_transient_bytes"
    )
    assert (
        engine.figure_benchmark("launches", "gpt-oss-120b-mxfp4/tp2")
        == "bench_mxfp4.Traffic.track_launches"
    )
    # every format has its module today: a format without one, as a new format would be
    measured = {n: f for n, f in engine.engine_benchmarks().items() if f != "mxfp4"}
    monkeypatch.setattr(engine, "engine_benchmarks", lambda: measured)
    with pytest.raises(engine.EngineError, match="mxfp4, is not measured by the engine suite"):
        engine.figure_benchmark("launches", "gpt-oss-120b-mxfp4/tp2")


def test_an_engine_history_keeps_its_environments_versions_out_of_the_machine(
    tmp_path, monkeypatch
):
    """The machine's entry leaves out the versions an engine's environments hold (this
    suite's would read ``vllm: not installed``): each commit's install step records them
    beside the results (``engine_env.MEASURED``), read back merged per commit."""
    monkeypatch.setenv("HOME", str(tmp_path))  # asv's machine file: ~/.asv-machine.json
    name = machine.record_machine("cpu", "engine-box", environment=False)
    recorded = json.loads((tmp_path / ".asv-machine.json").read_text())[name]
    assert not set(machine.ENVIRONMENT_FACTS) & set(recorded) and recorded["profile"] == "cpu"
    engine_env.record(tmp_path, "a", flashinfer="0.7.4", flashinfer_pinned="0.7.3", torch="2.13")
    engine.record_suite_commit(tmp_path, ["a", "b"], "suite1")
    assert engine_env.read_measured(tmp_path) == {
        "a": {
            "flashinfer": "0.7.4",
            "flashinfer_pinned": "0.7.3",
            "torch": "2.13",
            "suite": "suite1",
        },
        "b": {"suite": "suite1"},
    }


def test_the_reload_class_is_read_from_the_cell_with_its_reason(suite, capsys):
    """1 where the cell's strategy is reload-safe; 0 where not, its reason in the run's log
    (tests/test_engines.py shows the class follow the installed form)."""
    bench_engine = suite["bench_engine"]
    refit = suite["bench_fp8"].Refit()
    shape = "llama-4-maverick-fp8/tp8"
    for safety, want in (
        ("reload-safe", 1),
        ("not reload-safe: direct: w13 in new storage (E2 H64 I64)", 0),
    ):
        figures = bench_engine.Figures(1, 2, 3, None, safety)
        refit.figures = figures
        assert refit.track_reload_safe({}, shape, "legacy") == want
    assert capsys.readouterr().err == (
        f"{shape} fp8-legacy: not reload-safe: direct: w13 in new storage (E2 H64 I64)\n"
    )


def test_the_pr_times_the_engines_own_cell_of_every_grid(suite):
    """``engine_paired.cells``: the cell named as the engine in every grid that has it, at the
    grid's shapes (vLLM: BF16's and every adapter's; FlashInfer: BF16's), selected by its
    format's names of the timed figures."""
    import re

    from benchmarks import engine_paired

    grids = suite["bench_engine"].GRIDS
    assert engine_paired.cells("vllm") == [
        (fmt, shape, "vllm") for fmt, grid in grids.items() for shape in grid.shapes
    ]
    assert engine_paired.cells("flashinfer") == [("bf16", "qwen3-235b-a22b/tp4", "flashinfer")]
    assert engine_paired.cells("vllm", re.compile(r"bench_fp8\.LayerTime")) == [
        ("fp8", "llama-4-maverick-fp8/tp8", "vllm")
    ]
    assert engine_paired.judged("fp8") == (
        "bench_fp8.LayerTime.track_layer_seconds",
        "bench_fp8.LayerTime.track_copy_ratio",
    )


def test_a_nightly_names_the_cells_that_failed(tmp_path):
    """What a nightly's non-zero exit is about, one line per commit (from its results)."""
    from fixtures.engine_results import MXINT4_FAILS_AT, make_engine_results

    config, hashes = make_engine_results(tmp_path)
    results = json.loads(config.read_text())["results_dir"]
    lines = engine.failed_cells(results, "engine-box", hashes)
    failing = hashes[MXINT4_FAILS_AT]
    assert len(lines) == 1 and lines[0].startswith(f"{failing[:8]}: ")
    assert "bench_mxint4.Traffic.track_launches (kimi-k2-thinking-mxint4/tp8 vllm)" in lines[0]
    assert engine.failed_cells(results, "engine-box", [hashes[0]]) == []
