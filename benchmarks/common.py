"""Shared axes, the profile and the skip helper of the asv suite.

Legend: E experts, I intermediate size per rank, H hidden; w13 bf16 ``[E, 2I, H]``, w2 bf16
``[E, H, I]``. Parameter values are readable names: shapes ``model/tpN``, strategies by their
registry name. Nothing heavy happens at import: every input is made by ``formats.bf16.inputs``
when a benchmark measures.

The profile (``MOE_BENCH_PROFILE``: ``full`` or ``cpu``; default ``full`` where CUDA is
available, ``cpu`` elsewhere: ``moe_bench.profiles`` decides, scripts/ export it) sets how many
experts the *timed* benchmarks convert: ``full`` converts every expert of the layer, ``cpu``
keeps each expert's geometry (I, H) but only ``CPU_PROFILE_EXPERTS`` of them, so a 2-core CI
machine finishes. Memory benchmarks are always
full size, on ``meta``. ``bench_convert.Profile.track_timed_experts`` records the expert count
in the results, so a cpu-profile figure can never pass for a full one.
"""

from __future__ import annotations

import abc
import functools
from collections.abc import Callable
from typing import TypeVar

import moe_convert
from moe_bench.profiles import detect_device, profile_from_env

from . import isolation, library

shapes = library.module("formats.bf16.shapes")

__all__ = [
    "SHAPES",
    "STRATEGY_AXIS",
    "OPTIONAL_STRATEGIES",
    "CPU_PROFILE_EXPERTS",
    "CPU_THREADS",
    "CELL_TIMEOUT_S",
    "profile",
    "device",
    "full_shape",
    "timed_shape",
    "skip",
    "require_strategy",
    "require_cuda",
    "ShapeStrategyGrid",
    "RankLoadFigures",
    "LayerTimeFigures",
    "measure_cells",
    "measure_grid",
    "grid_cell",
]

T = TypeVar("T")

#: Model shapes benchmarked, ``model/tpN`` (see ``moe_convert.formats.bf16.shapes.CATALOG``).
SHAPES = (
    "qwen3-235b-a22b/tp4",
    "qwen3-30b-a3b/tp1",
    "qwen3-30b-a3b/tp2",
    "deepseek-v3/tp4",
    "deepseek-v3/tp8",
    "deepseek-v2-lite/tp1",
)

#: Strategies registered only where they can run: the registry's records with a non-empty
#: ``needs`` (``flashinfer`` where its package is installed, ``triton`` and ``triton_inplace`` where
#: Triton is and a GPU (or its interpreter) is there, the installed engines' adapters). They are
#: always on the axis (n/a where absent), so a benchmark's parameter list, and with it the keys of
#: its results history, is the same on every machine: a machine without FlashInfer shows
#: ``flashinfer`` as n/a instead of silently changing the parameter grid that the nightly history
#: is keyed by. Written out, in registration order, because the order cannot be read back from
#: the records: the registry files each record in ``STRATEGIES`` or ``UNAVAILABLE`` as it
#: registers, so where some are installed and others not (an SGLang box without vLLM) the two
#: dicts no longer tell which came first. tests/test_asv_suite.py checks that these are exactly
#: the records with ``needs``, registered here or not.
OPTIONAL_STRATEGIES = (
    "flashinfer",
    "triton",
    "triton_inplace",
    "vllm",
    "sglang-installed",
    "cycle_inplace",
)

#: Every strategy that needs nothing more (registered everywhere), in registry order, then the
#: optional ones (registered here or not), so the order too is the same on every machine.
STRATEGY_AXIS = (
    tuple(name for name, record in moe_convert.STRATEGIES.items() if not record.needs)
    + OPTIONAL_STRATEGIES
)

#: CPU threads of every timed call. One: with two threads, a busy neighbour on one of a 2-core
#: machine's cores stalls every parallel region (8 experts of qwen3-235b-a22b/tp4, strided_copy:
#: median 13.9 -> 24.0 ms, max/min 1.19 -> 2.37 with one core kept busy), while one thread
#: keeps its time within noise; the figures then measure the code, not the neighbours.
CPU_THREADS = 1

#: Experts converted per timed layer in the cpu profile: per-expert geometry kept, E reduced.
CPU_PROFILE_EXPERTS = 8

#: Seconds one cell of a grid may take before it is stopped and recorded as failed
#: (``measure_grid``). The slowest cell found, RankLoadReplay's legacy on qwen3-235b-a22b/tp4,
#: took 10.6 s on the shared 2-core machine under load 4.2 (docs/reliability.md); LayerTime's
#: whole grid, 54 cells, 43 s in the cpu profile: 120 s is room for a loaded machine, not a hang.
CELL_TIMEOUT_S = 120.0


def skip(reason: str) -> None:
    """Skip the current benchmark (asv shows n/a): raise from ``setup`` with the reason."""
    raise NotImplementedError(reason)


@functools.cache
def device() -> str:
    """``cuda`` where a CUDA device is available, else ``cpu``. Sets nothing: what times CPU
    calls sets ``CPU_THREADS`` threads itself (``moe_convert.measuring.timing``'s ``threads=``)."""
    return detect_device()


@functools.cache
def profile() -> str:
    """The profile in use: ``MOE_BENCH_PROFILE``, else the device's (``moe_bench.profiles``)."""
    return profile_from_env(device())


def full_shape(label: str) -> shapes.LayerShape:
    """The full per-rank layer shape of ``label`` (``model/tpN``)."""
    return shapes.shape_from_label(label)


def timed_shape(label: str) -> shapes.LayerShape:
    """The layer shape the timed benchmarks convert under the current profile."""
    shape = full_shape(label)
    return shape.with_experts(CPU_PROFILE_EXPERTS) if profile() == "cpu" else shape


def require_strategy(name: str) -> None:
    """Skip unless strategy ``name`` is registered here (optional ones need their package)."""
    if name not in moe_convert.STRATEGIES:
        skip(
            f"strategy {name!r} is not registered here (its package is not installed, or it "
            "needs a GPU)"
        )


def require_cuda() -> None:
    """Skip unless a CUDA device is available."""
    if device() != "cuda":
        skip("needs a CUDA device; none is available here")


class ShapeStrategyGrid:
    """Base of the benchmarks over ``SHAPES`` x ``STRATEGY_AXIS``; skips a strategy not
    registered here. No benchmark itself: asv runs only methods named ``time_``/``track_``."""

    params = [list(SHAPES), list(STRATEGY_AXIS)]
    param_names = ["shape", "strategy"]
    timeout = 300.0

    def setup(self, shape: str, strategy: str) -> None:
        require_strategy(strategy)


class RankLoadFigures(abc.ABC):
    """The figures of a replayed rank load (``load.wholemodel.RankLoad``), shared by every
    grid that replays one (``bench_allocator.RankLoadReplay``, each format's ``RankLoadGB200``
    and ``RankLoadH200``: ``benchmarks.quant``); ``self.result`` is the cell's load, set by the
    grid's ``setup``.

    Every figure counts the conversions' events (from the end of loading), as
    ``torch.cuda.memory_stats()`` names them: ``num_device_alloc`` (segments made:
    ``cudaMalloc``), ``num_device_free`` (segments given back: ``cudaFree``, each waiting for the
    device), ``num_device_alloc_failed`` (``cudaMalloc`` calls the full device refused: the
    model's own count) and ``num_alloc_retries`` (full releases of the cache); then the peak
    reserved bytes and the layers an OOM left unconverted (0 when the load fits).

    Abstract (asv skips it): a grid says which load in its own ``setup_cache``, which must be
    written in each class, since asv shares one ``setup_cache`` between the classes that inherit
    it (its cache key is the function's file and line).
    """

    result: object  # the cell's RankLoad

    @abc.abstractmethod
    def setup_cache(self) -> dict: ...

    def track_num_device_alloc(self, loads: dict, shape: str, strategy: str) -> int:
        return self.result.num_device_alloc

    track_num_device_alloc.unit = "calls"

    def track_num_device_free(self, loads: dict, shape: str, strategy: str) -> int:
        return self.result.num_device_free

    track_num_device_free.unit = "calls"

    def track_num_device_alloc_failed(self, loads: dict, shape: str, strategy: str) -> int:
        return self.result.num_device_alloc_failed

    track_num_device_alloc_failed.unit = "calls"

    def track_num_alloc_retries(self, loads: dict, shape: str, strategy: str) -> int:
        return self.result.num_alloc_retries

    track_num_alloc_retries.unit = "retries"

    def track_peak_reserved_bytes(self, loads: dict, shape: str, strategy: str) -> int:
        return self.result.peak_reserved_bytes

    track_peak_reserved_bytes.unit = "bytes"

    def track_layers_lost_to_oom(self, loads: dict, shape: str, strategy: str) -> int:
        return self.result.layers - self.result.layers_converted

    track_layers_lost_to_oom.unit = "layers"


class TrafficFigures(abc.ABC):
    """The figures of a layer's counted traffic (``measuring.traffic.TrafficMeasurement``),
    shared by ``bench_convert.Traffic`` and each format's (``benchmarks.quant``):
    ``self.measured`` is the cell's count and ``self.full`` its full-size shape, set by the
    grid's ``setup``. The ratio is to a copy of the layer (every byte read and written once).
    Abstract as ``RankLoadFigures`` is, for the same reasons."""

    measured: object  # the cell's TrafficMeasurement
    full: object  # the cell's full-size shape (its layer_bytes)

    @abc.abstractmethod
    def setup_cache(self) -> dict: ...

    def track_traffic_bytes(self, counts: dict, shape: str, strategy: str) -> int:
        return self.measured.traffic_bytes

    track_traffic_bytes.unit = "bytes"

    def track_launches(self, counts: dict, shape: str, strategy: str) -> int:
        return self.measured.launches

    track_launches.unit = "launches"

    def track_traffic_ratio(self, counts: dict, shape: str, strategy: str) -> float:
        return self.measured.traffic_bytes / (2 * self.full.layer_bytes)

    track_traffic_ratio.unit = "ratio"


class CudaMemoryFigures(abc.ABC):
    """CUDA caching-allocator peaks of one full-size layer's conversion
    (``measuring.memory.CudaMemoryMeasurement``), shared by ``bench_convert.CudaMemory`` and
    each format's (``benchmarks.quant``); ``self.measured`` is set by ``setup``, which skips
    without CUDA (asv shows n/a). Abstract (asv skips it): each grid writes its ``setup``.

    ``peak_allocated`` is rounded to the allocator's blocks; ``peak_reserved`` is what the
    process holds from the driver, what an OOM is about; ``alloc_retries`` counts cache flushes
    the allocator needed (non-zero means the conversion fragmented the cache).
    """

    unit = "bytes"
    measured: object  # the cell's CudaMemoryMeasurement

    @abc.abstractmethod
    def setup(self, shape: str, strategy: str) -> None: ...

    def track_peak_allocated_bytes(self, shape: str, strategy: str) -> int:
        return self.measured.peak_allocated_bytes

    def track_peak_reserved_bytes(self, shape: str, strategy: str) -> int:
        return self.measured.peak_reserved_bytes

    def track_alloc_retries(self, shape: str, strategy: str) -> int:
        return self.measured.num_alloc_retries

    track_alloc_retries.unit = "retries"


class LayerTimeFigures(abc.ABC):
    """The three figures of a timed layer (``moe_convert.measuring.timing.LayerTiming``), shared by
    ``bench_convert.LayerTime`` and each format's (``benchmarks.quant``); ``self.measured`` is the
    cell's timing, set by the grid's ``setup``. Abstract as ``RankLoadFigures`` is, for the
    same reasons."""

    measured: object  # the cell's LayerTiming

    @abc.abstractmethod
    def setup_cache(self) -> dict: ...

    def track_layer_seconds(self, timings: dict, shape: str, strategy: str) -> float:
        return self.measured.seconds

    track_layer_seconds.unit = "seconds"

    def track_copy_ratio(self, timings: dict, shape: str, strategy: str) -> float:
        return self.measured.copy_ratio

    track_copy_ratio.unit = "ratio"

    def track_whole_model_seconds(self, timings: dict, shape: str, strategy: str) -> float:
        return self.measured.whole_model_seconds

    track_whole_model_seconds.unit = "seconds"


def measure_cells(
    measure: Callable[[str, str], T],
    cells: list[tuple[str, str]],
    *,
    timeout_s: float = CELL_TIMEOUT_S,
) -> dict[tuple[str, str], T | str]:
    """``measure(*cell)`` of each cell, one after another in a worker process
    (``isolation.measure_cells``): a cell whose call raises, kills its process or runs past
    ``timeout_s`` gets the reason's text instead, so it fails its own figures (``grid_cell``)
    and not the grid's. On CUDA ``measure`` must be a module-level function (the worker is
    spawned and imports it)."""
    # fork: torch is imported already, the worker starts at once; CUDA cannot be used after it
    start_method = "spawn" if device() == "cuda" else "fork"
    return isolation.measure_cells(measure, cells, timeout_s=timeout_s, start_method=start_method)


def measure_grid(
    measure: Callable[[str, str], T], *, timeout_s: float = CELL_TIMEOUT_S
) -> dict[tuple[str, str], T | str]:
    """``measure_cells`` of every ``SHAPES`` x ``STRATEGY_AXIS`` cell whose strategy is
    registered here: what a grid benchmark's ``setup_cache`` returns (asv hands it to every
    cell's process)."""
    cells = [
        (shape, strategy)
        for shape in SHAPES
        for strategy in STRATEGY_AXIS
        if strategy in moe_convert.STRATEGIES
    ]
    return measure_cells(measure, cells, timeout_s=timeout_s)


def grid_cell(results: dict[tuple[str, str], T | str], shape: str, strategy: str) -> T:
    """The cell's result from ``measure_grid``'s: skips a strategy not registered here (n/a);
    raises ``RuntimeError`` with the reason's text where its measurement failed."""
    require_strategy(strategy)
    measured = results[shape, strategy]
    if isinstance(measured, str):
        raise RuntimeError(f"{shape} {strategy} failed: {measured}")
    return measured
