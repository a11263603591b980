"""The asv suite: coverage of every strategy and shape, ``asv check``, and a quick real run of a
small subset (existing environment, so no asv environment is built) read back with
``moe_bench.results``."""

from __future__ import annotations

import dataclasses
import importlib
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from asv.util import load_json

import moe_convert
from moe_bench.results import load_results
from moe_convert import REGISTRY, layer_shape
from moe_convert.load.refit import refit_memory, refit_traffic
from moe_convert.load.replay import _meta_conversion, replay_load  # the trace cache, cleared below
from moe_convert.load.wholemodel import PR45589_HEADROOM_BYTES
from moe_convert.measuring.traffic import strategy_traffic
from moe_suite import metrics, selection
from moe_suite.profiles import TIMED_EXPERTS

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the suite is a folder of asv, not an installed package

from benchmarks import bench_allocator, bench_convert, bench_refit, common, formats  # noqa: E402


def bf16_records() -> dict:
    """BF16's strategies, registered here or not (``needs`` says what is missing), read now."""
    return {**moe_convert.strategies("bf16"), **moe_convert.strategies("bf16", available=False)}


GRID_CLASSES = [
    bench_convert.LayerTime,
    bench_convert.PeakMemory,
    bench_convert.Traffic,
    bench_convert.CudaMemory,
    bench_allocator.SleepModeReplay,
]

#: The strategy axis, on every machine: asv keys each benchmark's results history by its
#: parameter list, so a name may be added at the end of its group but never moved or dropped.
STRATEGY_AXIS = (
    "legacy",
    "preallocated",
    "inplace",
    "batched",
    "strided_copy",
    "strided_inplace",
    "sglang",
    "trtllm",
    "streaming",
    "flashinfer",
    "triton",
    "triton_inplace",
    "vllm",
    "sglang-installed",
    "cycle_inplace",
)


def test_every_registered_strategy_and_shape_is_benchmarked():
    for cls in GRID_CLASSES:
        shapes, strategies = cls.params
        assert set(moe_convert.strategies("bf16")) <= set(strategies), cls.__name__
        # on the axis everywhere, n/a where not installed
        assert set(common.OPTIONAL_STRATEGIES) <= set(strategies), cls.__name__
        assert list(shapes) == list(common.SHAPES), cls.__name__
        assert cls.param_names == ["shape", "strategy"]
        assert cls.version, cls.__name__


def test_optional_strategies_are_the_records_that_need_something():
    records = bf16_records()
    assert {name for name, record in records.items() if record.needs} == set(
        common.OPTIONAL_STRATEGIES
    )
    assert set(records) == set(common.STRATEGY_AXIS)
    assert common.STRATEGY_AXIS == STRATEGY_AXIS


@pytest.mark.parametrize("installed", ["nothing optional", "everything"])
def test_strategy_axis_is_the_same_whatever_is_installed(monkeypatch, installed):
    # as if the optional strategies' packages (and a GPU) were missing, or all there
    records = bf16_records()
    registered = {
        name: record
        for name, record in records.items()
        if installed == "everything" or not record.needs
    }
    monkeypatch.setattr(moe_convert, "REGISTRY", registered)
    try:
        assert importlib.reload(common).STRATEGY_AXIS == STRATEGY_AXIS
    finally:
        monkeypatch.undo()
        importlib.reload(common)


def test_every_benchmarked_shape_is_a_catalog_shape_the_kernel_runs():
    for label in common.SHAPES:
        shape = formats.full_shape(label)
        assert shape.label == label and shape.valid, label


def test_layer_time_derives_every_time_figure_from_one_measurement(monkeypatch):
    # setup_cache times the grid once (here one shape, two strategies); setup and the three
    # track_ methods read that one measurement, as asv passes it to every parameter's process.
    monkeypatch.setenv("MOE_BENCH_PROFILE", "cpu")
    monkeypatch.setattr(formats, "FORMAT_OF", {"qwen3-30b-a3b/tp2": "bf16"})
    monkeypatch.setattr(common, "STRATEGY_AXIS", ("strided_copy", "no-such-strategy"))
    monkeypatch.setattr(formats, "REPEATS", 2)
    common.profile.cache_clear()
    try:
        bench = bench_convert.LayerTime()
        timings = bench.setup_cache()
        assert _measured(timings) == {("qwen3-30b-a3b/tp2", "strided_copy")}  # unregistered: n/a
        bench.setup(timings, "qwen3-30b-a3b/tp2", "strided_copy")
        measured = timings["qwen3-30b-a3b/tp2", "strided_copy"]
        assert len(measured.strategy_time.samples) == 2
        cell = (timings, "qwen3-30b-a3b/tp2", "strided_copy")
        assert bench.track_layer_seconds(*cell) == measured.seconds
        assert bench.track_copy_ratio(*cell) == measured.copy_ratio
        full = formats.full_shape("qwen3-30b-a3b/tp2")  # 8 of 128 experts timed, 48 layers
        assert bench.track_whole_model_seconds(*cell) == (
            pytest.approx(measured.seconds * full.experts / TIMED_EXPERTS["cpu"] * 48)
        )
        with pytest.raises(NotImplementedError):  # n/a where the strategy is not registered
            bench.setup(timings, "qwen3-30b-a3b/tp2", "no-such-strategy")
        with pytest.raises(RuntimeError, match="boom"):  # a strategy that raised fails its cell
            bench.setup(
                {("qwen3-30b-a3b/tp2", "strided_copy"): "RuntimeError: boom"},
                "qwen3-30b-a3b/tp2",
                "strided_copy",
            )
    finally:
        common.profile.cache_clear()


#: Every module of the suite with a grid, as asv names them.
GRID_MODULES = ("bench_convert", "bench_allocator", "bench_refit") + tuple(
    f"bench_{fmt}" for fmt in formats.FORMAT_SHAPES if fmt != "bf16"
)


@pytest.mark.parametrize(
    "regex",
    [
        r"bench_fp8\.PeakMemory.*'legacy'",
        r"bench_convert\.Traffic.*qwen3-30b-a3b/tp2",
        r"RankLoadGB200\.track_peak_reserved_bytes\('deepseek-v3/tp8'",
        r"^bench_refit\.RefitByEP",
        r"LayerTime.*strided_copy|Profile",
        r"no such benchmark",
    ],
)
def test_a_runs_selection_is_what_its_grids_measure(monkeypatch, regex):
    """A run's ``--bench`` (``moe_suite.selection``, set by scripts/compare and gpu-check): each
    ``setup_cache`` measures the cells that asv runs a benchmark of, of the classes sharing it,
    matched as asv matches them (asv's own ``Benchmarks`` selection here)."""
    from asv.benchmarks import Benchmarks
    from asv.config import Config

    monkeypatch.setattr(common, "measure_cells", lambda measure, cells, **_: {})  # no measuring
    modules = {name: importlib.import_module(f"benchmarks.{name}") for name in GRID_MODULES}
    classes = {
        f"{name}.{cls_name}": cls
        for name, module in modules.items()
        for cls_name, cls in vars(module).items()
        if isinstance(cls, type) and cls.__module__ == module.__name__ and hasattr(cls, "params")
    }
    listed = [
        {"name": f"{name}.{method}", "params": [[repr(v) for v in p] for p in cls.params]}
        for name, cls in classes.items()
        for method in dir(cls)
        if method.startswith("track_")
    ]
    conf = Config()
    conf.benchmark_dir = str(ROOT / "benchmarks")
    runs = Benchmarks(conf, listed, regex=regex)  # asv's own selection
    params = {b["name"]: b["params"] for b in listed}
    caches = {}  # setup_cache function -> (every cell, the cells asv runs a benchmark at)
    for name, cls in classes.items():
        if not hasattr(cls, "setup_cache"):
            continue
        every, chosen = caches.setdefault(cls.setup_cache, (set(), set()))
        monkeypatch.delenv(selection.ENV, raising=False)
        every |= set(cls().setup_cache())
        for method in (m for m in dir(cls) if m.startswith("track_")):
            combos = list(itertools.product(*params[f"{name}.{method}"]))
            for index in runs.benchmark_selection.get(f"{name}.{method}") or ():
                chosen.add(tuple(eval(v) for v in combos[index]))  # asv's repr'd values
    monkeypatch.setenv(selection.ENV, regex)
    for setup_cache, (every, chosen) in caches.items():
        reader = next(c for c in classes.values() if getattr(c, "setup_cache", None) is setup_cache)
        assert set(reader().setup_cache()) == every & chosen, reader.__qualname__
    assert any(chosen for _, chosen in caches.values()) == (regex != "no such benchmark")


def _measured(cache: dict) -> set[tuple[str, str]]:
    """The cells of a grid's ``setup_cache`` that were measured: not n/a here."""
    return {cell for cell, value in cache.items() if not isinstance(value, formats._NotHere)}


def _grid_cache(monkeypatch, bench, label: str, strategies: tuple[str, ...]) -> dict:
    """``bench.setup_cache()`` over ``label`` x ``strategies`` and an unregistered name: only the
    registered cells are measured, the other is n/a, and a cell whose measurement raised fails."""
    monkeypatch.setattr(formats, "FORMAT_OF", {label: "bf16"})
    monkeypatch.setattr(common, "STRATEGY_AXIS", (*strategies, "no-such-strategy"))
    cache = bench.setup_cache()
    assert _measured(cache) == {(label, strategy) for strategy in strategies}
    with pytest.raises(NotImplementedError):
        bench.setup(cache, label, "no-such-strategy")
    with pytest.raises(RuntimeError, match="boom"):
        bench.setup({(label, strategies[0]): "RuntimeError: boom"}, label, strategies[0])
    return cache


@pytest.mark.usefixtures("warm_grids")  # forks a grid's measuring worker
def test_sleep_mode_replay_reads_both_figures_from_one_replay_per_cell(monkeypatch):
    # each cell's figures are those of replay_load called as the benchmark always called it
    label, bench = "qwen3-30b-a3b/tp2", bench_allocator.SleepModeReplay()
    loads = _grid_cache(monkeypatch, bench, label, ("inplace", "strided_inplace"))
    for strategy in ("inplace", "strided_inplace"):
        want = replay_load(
            formats.full_shape(label),
            strategy,
            max_split_size_mb=20,
            pool="sleep",
            device_bytes=None,
        )
        bench.setup(loads, label, strategy)
        assert bench.track_peak_reserved_bytes(loads, label, strategy) == want.peak_reserved_bytes
        assert (
            bench.track_reserved_growth_per_layer_bytes(loads, label, strategy)
            == want.reserved_growth_per_layer_bytes
        )


@pytest.mark.usefixtures("warm_grids")  # forks a grid's measuring worker
def test_rank_load_replay_reads_every_figure_from_one_replay_per_cell(monkeypatch):
    # the default pool at 20 MiB, the rank's weights plus PR #45589's headroom
    label, bench = "qwen3-30b-a3b/tp2", bench_allocator.RankLoadReplay()
    loads = _grid_cache(monkeypatch, bench, label, ("legacy", "preallocated"))
    full = formats.full_shape(label)
    for strategy in ("legacy", "preallocated"):
        want = replay_load(
            full,
            strategy,
            max_split_size_mb=20,
            pool="default",
            device_bytes=full.model_bytes + PR45589_HEADROOM_BYTES,
        )
        bench.setup(loads, label, strategy)
        figures = {
            name: getattr(bench, f"track_{name}")(loads, label, strategy)
            for name in (
                "num_device_alloc",
                "num_device_free",
                "num_device_alloc_failed",
                "num_alloc_retries",
                "peak_reserved_bytes",
                "layers_lost_to_oom",
            )
        }
        assert figures == {
            "num_device_alloc": want.num_device_alloc,
            "num_device_free": want.num_device_free,
            "num_device_alloc_failed": want.num_device_alloc_failed,
            "num_alloc_retries": want.num_alloc_retries,
            "peak_reserved_bytes": want.peak_reserved_bytes,
            "layers_lost_to_oom": 0,
        }
        # preallocated: two outputs and a small-pool segment; legacy strands segments per layer
        if strategy == "preallocated":
            assert figures["num_device_alloc"] == 3
        else:
            assert figures["num_device_alloc"] > full.moe_layers


@pytest.mark.usefixtures("warm_grids")  # forks a grid's measuring worker
def test_refit_reads_each_ways_figures_and_both_classes_from_one_cell(monkeypatch):
    label, bench = "qwen3-30b-a3b/tp2", bench_refit.Refit()
    monkeypatch.setattr(formats, "REFIT_SHAPES", {"bf16": (label,)})
    monkeypatch.setattr(formats, "REFIT_STRATEGIES", ("legacy", "inplace"))
    cache = bench.setup_cache()
    full = formats.full_shape(label)
    for strategy in ("legacy", "inplace"):
        bench.setup(cache, label, strategy)
        for way in metrics.REFIT_WAYS:
            counted = refit_traffic(full, strategy, way)
            want = (refit_memory(full, strategy, way).peak_bytes, counted.traffic_bytes)
            got = tuple(
                getattr(bench, f"track_{way}_{figure}")(cache, label, strategy)
                for figure in ("peak_transient_bytes", "traffic_bytes", "launches")
            )
            assert got == (*want, counted.launches), (strategy, way)
        # legacy's direct refit gives w13 and w2 new storage: not reload-safe; both reversible
        assert bench.track_reload_safe(cache, label, strategy) == (strategy == "inplace")
        assert bench.track_reversible_in_place(cache, label, strategy) == 1
    # inplace's direct refit holds its one expert's scratch: 3 MiB at this shape
    bench.setup(cache, label, "inplace")
    assert bench.track_direct_peak_transient_bytes(cache, label, "inplace") == 3 * 2**20


@pytest.mark.usefixtures("warm_grids")  # forks a grid's measuring worker
def test_refit_time_reads_each_timed_ways_figures_from_one_timing(monkeypatch):
    # the cpu profile times REFIT_CPU_PROFILE_SHAPES' cells only, each way against its copy
    label, bench = "qwen3-30b-a3b/tp2", bench_refit.RefitTime()
    monkeypatch.setenv("MOE_BENCH_PROFILE", "cpu")
    common.profile.cache_clear()
    monkeypatch.setattr(formats, "REFIT_SHAPES", {"bf16": (label, "qwen3-30b-a3b/tp1")})
    monkeypatch.setattr(formats, "REFIT_STRATEGIES", ("inplace",))
    monkeypatch.setattr(formats, "REFIT_CPU_PROFILE_SHAPES", (label,))
    try:
        cache = bench.setup_cache()
    finally:
        common.profile.cache_clear()
    assert list(cache) == [(label, "inplace")]
    bench.setup(cache, label, "inplace")
    for way in metrics.REFIT_TIME_WAYS:
        timing = cache[label, "inplace"][way]
        assert timing.experts == TIMED_EXPERTS["cpu"]
        assert len(timing.strategy_time.samples) == formats.REPEATS
        assert getattr(bench, f"track_{way}_seconds")(cache, label, "inplace") == timing.seconds
        ratio = getattr(bench, f"track_{way}_copy_ratio")(cache, label, "inplace")
        assert ratio == timing.copy_ratio
    with pytest.raises(NotImplementedError, match="not time qwen3-30b-a3b/tp1 .REFIT_CPU_PROFILE"):
        bench.setup(cache, "qwen3-30b-a3b/tp1", "inplace")


def test_rank_load_time_is_n_a_without_cuda(monkeypatch):
    monkeypatch.setattr(common, "device", lambda: "cpu")
    bench = bench_allocator.RankLoadTime()
    assert bench.setup_cache() == {}
    with pytest.raises(NotImplementedError, match="needs a CUDA device"):
        bench.setup({}, "qwen3-30b-a3b/tp2", "legacy")


@pytest.mark.usefixtures("warm_grids")  # forks a grid's measuring worker
def test_traffic_reads_its_three_figures_from_one_count_per_cell(monkeypatch):
    label, bench = "qwen3-30b-a3b/tp2", bench_convert.Traffic()
    counts = _grid_cache(monkeypatch, bench, label, ("strided_copy", "legacy"))
    full = formats.full_shape(label)
    for strategy in ("strided_copy", "legacy"):
        want = strategy_traffic(full, strategy)
        bench.setup(counts, label, strategy)
        assert bench.track_traffic_bytes(counts, label, strategy) == want.traffic_bytes
        assert bench.track_launches(counts, label, strategy) == want.launches
        assert bench.track_traffic_ratio(counts, label, strategy) == want.traffic_bytes / (
            2 * full.layer_bytes
        )
        assert counts[label, strategy].ops == ()  # totals only: every cell's process loads them


@pytest.mark.parametrize(("profile", "experts"), [("cpu", 8), ("smoke", 1)])
def test_a_reduced_profile_keeps_expert_geometry(monkeypatch, profile, experts):
    monkeypatch.setenv("MOE_BENCH_PROFILE", profile)
    common.profile.cache_clear()
    try:
        full, timed = formats.full_shape("deepseek-v3/tp4"), formats.timed_shape("deepseek-v3/tp4")
        assert timed.experts == experts < full.experts == 256
        assert formats.timed_shape("minimax-m3-mxfp8/tp4") is None  # not in CPU_PROFILE_SHAPES
        assert (timed.hidden, timed.intermediate) == (full.hidden, full.intermediate) == (7168, 512)
        monkeypatch.setenv("MOE_BENCH_PROFILE", "fast")
        common.profile.cache_clear()
        with pytest.raises(ValueError, match="MOE_BENCH_PROFILE='fast'"):
            common.profile()
    finally:
        common.profile.cache_clear()


def _asv(tmp_path: Path, *args: str, config: Path) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "ASV_PYTHONPATH": str(ROOT),
        "HOME": str(tmp_path),
        "MOE_BENCH_PROFILE": "cpu",
    }
    return subprocess.run(
        [sys.executable, "-m", "asv", "--config", str(config), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        # A guard against a hang, not a speed target.
        timeout=600,
    )


@pytest.fixture(scope="module")
def scratch_config(tmp_path_factory) -> tuple[Path, Path]:
    """asv.conf.json with results, html and environments in a temporary folder."""
    tmp = tmp_path_factory.mktemp("asv")
    conf = load_json(str(ROOT / "asv.conf.json"), js_comments=True)
    conf.update(
        repo=str(ROOT),
        benchmark_dir=str(ROOT / "benchmarks"),
        results_dir=str(tmp / "results"),
        html_dir=str(tmp / "html"),
        env_dir=str(tmp / "env"),
    )
    path = tmp / "asv.conf.json"
    path.write_text(json.dumps(conf))
    return tmp, path


def test_asv_check_passes(scratch_config):
    tmp, config = scratch_config
    done = _asv(tmp, "check", "-E", f"existing:{sys.executable}", config=config)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "No problems found" in done.stdout


@pytest.mark.slow
def test_quick_run_of_a_subset_is_read_back(scratch_config, monkeypatch):
    tmp, config = scratch_config
    recorded = subprocess.run(
        [sys.executable, "-m", "moe_bench", "machine", "--profile", "cpu", "--name", "ci-box"],
        env={**os.environ, "HOME": str(tmp)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert recorded.stdout.strip() == "ci-box"
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    subset = (
        r"Profile.*qwen3-30b-a3b/tp2"
        r"|(PeakMemory|Traffic).*qwen3-30b-a3b/tp2.*strided_copy"
    )
    monkeypatch.setenv(selection.ENV, subset)  # as scripts/compare tells the grids
    done = _asv(
        tmp,
        "run",
        "--quick",
        "-E",
        f"existing:{sys.executable}",
        "--set-commit-hash",
        commit,
        "--machine",
        "ci-box",
        "--launch-method",
        "forkserver",
        "--show-stderr",
        "-b",
        subset,
        config=config,
    )
    assert done.returncode == 0, done.stdout + done.stderr

    frame = load_results(tmp / "results").dropna(subset=["value"]).fillna({"strategy": ""})
    assert set(frame["profile"]) == {"cpu"}
    got = {
        (row.benchmark.split(".")[1], row.strategy): (row.value, row.unit)
        for row in frame.itertuples()
    }
    shape = formats.full_shape("qwen3-30b-a3b/tp2")
    assert got[("PeakMemory", "strided_copy")] == (shape.w13_bytes + shape.w2_bytes, "bytes")
    got.update(
        {
            (row.benchmark.split(".")[2], row.strategy): (row.value, row.unit)
            for row in frame.itertuples()
            if ".Traffic." in row.benchmark
        }
    )
    assert got[("track_traffic_bytes", "strided_copy")] == (2 * shape.layer_bytes, "bytes")
    assert got[("track_launches", "strided_copy")] == (3, "launches")
    assert got[("track_traffic_ratio", "strided_copy")] == (1.0, "ratio")
    assert len(frame) == 5  # Profile, PeakMemory and Traffic's three
    assert got[("Profile", "")] == (TIMED_EXPERTS["cpu"], "experts")
    assert set(frame["commit"]) == {commit}


# Run in a fresh interpreter whose `moe_convert` and `moe_bench` are the oldest measurable
# commit's (LIB first on sys.path): every benchmark of the checkout's suite on one small cell.
_SUITE_AGAINST = """
import inspect, os, sys
lib, root = sys.argv[1], sys.argv[2]
sys.path[:0] = [lib, root]
# as in asv's environment, where the commit's wheel is installed: no editable install of this
# checkout to answer for a module the commit lacks
sys.meta_path[:] = [f for f in sys.meta_path if "__editable__" not in repr(f)]
import moe_convert
assert moe_convert.__file__.startswith(lib), moe_convert.__file__
from benchmarks import bench_allocator, bench_convert, bench_noise, common, formats
shape = "qwen3-30b-a3b/tp2"
formats.FORMAT_OF = {shape: "bf16", "llama-4-maverick-fp8/tp8": "fp8"}
formats.REFIT_SHAPES = {"bf16": (shape,), "fp8": ("llama-4-maverick-fp8/tp8",)}
common.STRATEGY_AXIS = ("strided_copy", "inplace")
formats.REPEATS = 1
formats._peak(shape, "inplace")  # each grid's forked worker inherits the imports (warm_grids)
cells = {("shape", "strategy"): (shape, "inplace"), ("shape",): (shape,)}
ran = []
for module in (bench_allocator, bench_convert, bench_noise):
    for name, cls in inspect.getmembers(module, inspect.isclass):
        methods = [m for m in dir(cls) if m.startswith(("time_", "track_"))]
        if cls.__module__ != module.__name__ or not methods:
            continue
        bench = cls()
        cache = (bench.setup_cache(),) if hasattr(cls, "setup_cache") else ()
        for value in (cache[0].values() if cache else ()):
            assert not isinstance(value, str), (name, value)  # a cell whose measurement raised
            # n/a here: the quantized formats' cells, and the devices LOAD_DEVICES later named
            assert not isinstance(value, formats._NotHere) or (
                "layers (moe_convert.FORMATS)" in value.reason
            )
        cell = cells.get(tuple(getattr(cls, "param_names", ())), ())
        try:
            if hasattr(bench, "setup"):
                bench.setup(*cache, *cell)
        except NotImplementedError:  # skipped here (CUDA), as asv shows n/a
            continue
        for method in methods:
            getattr(bench, method)(*cache, *cell)
            ran.append(f"{name}.{method}")
from benchmarks import paired  # noqa: F401  (asv imports every module of the suite)
from benchmarks import bench_fp8  # importable; every cell n/a before the formats
for name, cls in inspect.getmembers(bench_fp8, inspect.isclass):
    if cls.__module__ != bench_fp8.__name__:
        continue
    cache = (cls().setup_cache(),) if hasattr(cls, "setup_cache") else ()
    try:
        cls().setup(*cache, *[values[0] for values in cls.params])
    except NotImplementedError:
        ran.append(f"{name}:n/a")
from benchmarks import bench_refit  # importable; every cell n/a before the refit
refits = bench_refit.Refit().setup_cache()
try:
    bench_refit.Refit().setup(refits, shape, "inplace")
except NotImplementedError as skipped:
    assert "no refit" in str(skipped), skipped
    ran.append("Refit:n/a")
print(" ".join(ran))
"""


@pytest.mark.slow
def test_the_suite_runs_against_the_oldest_commit_it_can_measure(tmp_path, monkeypatch):
    # asv takes benchmarks/ from the checkout and the library from the measured commit: a
    # benchmark that needs a newer library than `oldest_commit` must move that commit forward.
    oldest = load_json(str(ROOT / "asv.conf.json"), js_comments=True)["oldest_commit"]
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", oldest, "moe_convert", "moe_bench"],
        capture_output=True,
        check=True,
    )
    subprocess.run(["tar", "-x", "-C", str(tmp_path)], input=archive.stdout, check=True)
    monkeypatch.setenv("MOE_BENCH_PROFILE", "cpu")
    done = subprocess.run(
        [sys.executable, "-c", _SUITE_AGAINST, str(tmp_path), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"the suite fails against {oldest[:8]}:\n{done.stderr[-3000:]}"
    ran = done.stdout.split()
    assert (
        "LayerTime.track_copy_ratio" in ran and "SleepModeReplay.track_peak_reserved_bytes" in ran
    )
    assert {"PeakMemory:n/a", "RankLoadH200:n/a", "LayerTime:n/a", "Profile:n/a"} <= set(ran)
    assert {"Refit:n/a", "RefitTime:n/a"} <= set(ran)


#: A commit whose library has the formats (the last measured before each format had a module),
#: and a script measuring one quantized cell's exact figures with it: the benchmarks read the
#: library through what every such commit has, whatever module holds it now.
FORMATS_COMMIT = "9a8916695829f15523c1fcb88cf0d370719d4938"
_QUANT_AGAINST = """
import sys
sys.path[:0] = sys.argv[1:3]
sys.meta_path[:] = [f for f in sys.meta_path if "__editable__" not in repr(f)]  # as above
import moe_convert
assert moe_convert.__file__.startswith(sys.argv[1]), moe_convert.__file__
from benchmarks import formats
label = "qwen3-235b-a22b-nvfp4/tp4"
print(formats.full_shape(label).experts, formats._peak(label, "fast"),
      formats._traffic(label, "fast").launches, formats._rank_loads(label, "fast")["H200"].layers)
"""


def test_the_quantized_suite_measures_a_library_from_before_its_modules(tmp_path):
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", FORMATS_COMMIT, "moe_convert", "moe_bench"],
        capture_output=True,
        check=True,
    )
    subprocess.run(["tar", "-x", "-C", str(tmp_path)], input=archive.stdout, check=True)
    done = subprocess.run(
        [sys.executable, "-c", _QUANT_AGAINST, str(tmp_path), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    experts, peak, launches, layers = map(int, done.stdout.split())
    shape = layer_shape("qwen3-235b-a22b-nvfp4", 4)  # this checkout's: the same figures
    fast = REGISTRY["nvfp4-fast"]
    assert (experts, peak, launches) == (
        shape.experts,
        fast.peak.evaluate(shape),
        fast.launches.evaluate(shape),
    )
    assert layers == shape.moe_layers


def test_bringing_back_per_expert_temporaries_fails_the_gate_without_a_gpu(monkeypatch):
    """A change that makes ``preallocated`` clone, gather and stack per expert again (``legacy``'s
    body under its name) regresses the replayed driver calls, exactly, on any machine."""
    label = "qwen3-30b-a3b/tp2"
    base = formats._rank_loads(label, "preallocated")["Replay"]
    reverted = dataclasses.replace(
        moe_convert.REGISTRY["preallocated"], function=moe_convert.REGISTRY["legacy"].function
    )
    monkeypatch.setitem(moe_convert.REGISTRY, "preallocated", reverted)
    _meta_conversion.cache_clear()
    try:
        head = formats._rank_loads(label, "preallocated")["Replay"]
    finally:
        _meta_conversion.cache_clear()
    verdict = metrics.judge(
        metrics.metric(f"{metrics.RANK_LOAD_REPLAY}.track_num_device_alloc"),
        base.num_device_alloc,
        head.num_device_alloc,
    )
    assert (base.num_device_alloc, verdict) == (3, "regressed")
