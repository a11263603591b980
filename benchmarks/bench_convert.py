"""One MoE layer's conversion: time, copy ratio, whole-model seconds, peak memory, traffic.

Parametrised over model shape x strategy (``common.SHAPES`` x ``common.STRATEGY_AXIS``); each
strategy is reached only through ``moe_convert.convert(..., strategy=name)``. Time figures use
the profile's expert count (``common.profile``) and come from one measurement per shape x
strategy (``LayerTime``); memory figures are full size, on ``meta``.
"""

from __future__ import annotations

import dataclasses

# the module, not its functions: asv would take a module-level ``time_layer`` for a benchmark
from . import common, library

memory = library.module("measuring.memory")
timing = library.module("measuring.timing")
traffic = library.module("measuring.traffic")

#: Timed calls per shape x strategy, each paired with the same-size copy just before it. One
#: count for every time figure, since they all come from the same calls: 9 is Google Benchmark's
#: "lowest reasonable" repetition count for a rank-based comparison (the copy ratio is a median
#: of per-call ratios), and the layer's and the whole model's seconds are medians of those calls.
REPEATS = 9


class PeakMemory(common.ShapeStrategyGrid):
    """Exact peak transient bytes of one full-size layer, counted at dispatch level on ``meta``.

    The row-index caches are warmed first, so the figure is each strategy's documented formula
    (e.g. ``T13 + T2`` for ``strided_copy``). Deterministic: the PR gate compares it exactly.
    """

    version = "1"
    unit = "bytes"

    def track_peak_transient_bytes(self, shape: str, strategy: str) -> int:
        return memory.strategy_memory(common.full_shape(shape), strategy, device="meta").peak_bytes


def _count_traffic(shape: str, strategy: str) -> traffic.TrafficMeasurement:
    """``traffic.strategy_traffic`` of the full-size ``shape`` on ``meta``, its totals only: the
    per-op list is no figure, and every cell's process loads the cache it goes into."""
    return dataclasses.replace(traffic.strategy_traffic(common.full_shape(shape), strategy), ops=())


class Traffic(common.ShapeStrategyGrid, common.TrafficFigures):
    """Exact work of one full-size layer, counted at dispatch level on ``meta``: no noise at all.

    ``traffic_bytes`` (bytes read + written), ``launches`` (data-moving ops; CUDA kernel
    launches) and ``traffic_ratio`` (traffic / 2 x layer bytes: 1.0 is the out-of-place floor),
    by ``measuring.traffic``'s counting rule. Each strategy's record states its formulas.
    Deterministic on every machine: the PR gate compares them exactly, so an extra copy, a
    per-expert loop or a lost fusion fails it whatever the machine's load.

    The whole grid is counted once per asv run, in ``setup_cache`` (as ``LayerTime``), and the
    three figures of a cell read that one count.
    """

    # 1: counted once in setup_cache instead of once per method's process: the same
    # strategy_traffic calls, so the same values.
    version = "1"

    def setup_cache(self) -> dict[tuple[str, str], traffic.TrafficMeasurement | str]:
        return common.measure_grid(_count_traffic)

    # The whole grid in one process: 54 cells took about 6 s on the shared 2-core machine, where
    # each cell in a process of its own took 1.1 s on average (cold caches), three times over.
    setup_cache.timeout = 300.0

    def setup(self, counts: dict, shape: str, strategy: str) -> None:
        self.measured = common.grid_cell(counts, shape, strategy)
        self.full = common.full_shape(shape)


class CudaMemory(common.ShapeStrategyGrid, common.CudaMemoryFigures):
    """CUDA caching-allocator peaks of one full-size layer (n/a without CUDA):
    ``common.CudaMemoryFigures``."""

    version = "1"

    def setup(self, shape: str, strategy: str) -> None:
        common.require_cuda()
        super().setup(shape, strategy)
        self.measured = memory.strategy_cuda_memory(common.full_shape(shape), strategy)


def _time_cell(shape: str, strategy: str) -> timing.LayerTiming:
    """``timing.time_layer`` of one cell of the grid: on ``common.device()`` with
    ``common.CPU_THREADS`` threads, the profile's expert count, the whole-model figure scaled to
    the model's experts."""
    return timing.time_layer(
        common.timed_shape(shape),
        strategy,
        device=common.device(),
        repeats=REPEATS,
        threads=common.CPU_THREADS,
        model_experts=common.full_shape(shape).experts,
    )


class LayerTime(common.ShapeStrategyGrid, common.LayerTimeFigures):
    """One layer's time, its ratio to a same-size ``copy_`` and the whole model's seconds.

    One measurement per shape x strategy (``measuring.timing.time_layer``: ``REPEATS`` calls,
    each timed with CUDA events on CUDA and paired with the copy just before it; in-place inputs
    restored before every call, untimed), read by three figures (``common.LayerTimeFigures``):

    - ``layer_seconds``: the median seconds of one conversion of the profile's layer;
    - ``copy_ratio``: the median of strategy / copy per call (1.0 is one read and one write of
      every byte: the out-of-place limit). A ratio cancels most of this machine's run-to-run noise;
    - ``whole_model_seconds``: the per-layer median scaled to the model's experts (the work is
      linear in experts; exact in the full profile), times the model's MoE layers, one rank.

    The whole grid is measured once per asv run, in ``setup_cache`` (one process; asv passes its
    result to every method and parameter), so the three figures of a cell are the same calls and
    no asv process is added for them. ``setup_cache`` takes no parameters: a run that selects a
    few cells (``-b``) still measures the whole grid.
    """

    version = "1"  # 1: one measurement for three figures (were TimeConvert, CopyRatio, WholeModel)

    def setup_cache(self) -> dict[tuple[str, str], timing.LayerTiming | str]:
        return common.measure_grid(_time_cell)

    # The whole grid in one process: 54 cells of the cpu profile took 43 s on the shared 2-core
    # machine (niced, beside other jobs); the full profile on an H200 about 20 s (gpu-check step 5).
    setup_cache.timeout = 900.0

    def setup(self, timings: dict, shape: str, strategy: str) -> None:
        self.measured = common.grid_cell(timings, shape, strategy)


class Profile:
    """The number of experts the timed benchmarks convert per layer under the profile in use.

    Full profile: the model's expert count; cpu profile: ``common.CPU_PROFILE_EXPERTS``. Stored
    beside every run so that time figures of the two profiles are never read as one series.
    """

    version = "1"
    unit = "experts"
    params = [list(common.SHAPES)]
    param_names = ["shape"]

    def track_timed_experts(self, shape: str) -> int:
        return common.timed_shape(shape).experts
