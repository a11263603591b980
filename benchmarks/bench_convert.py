"""One MoE layer's conversion: time, peak transient memory, traffic, copy ratio, whole-model seconds.

Parametrised over model shape x strategy (``common.SHAPES`` x ``common.STRATEGY_AXIS``); each
strategy is reached only through ``moe_convert.convert(..., strategy=name)``. Time figures use
the profile's expert count (``common.profile``); memory figures are full size, on ``meta``.
"""

from __future__ import annotations

import moe_convert
from moe_convert.memory import strategy_cuda_memory, strategy_memory
from moe_convert.traffic import strategy_traffic
# the module, not its functions: asv would take a module-level ``time_call`` for a benchmark
from moe_convert import timing
from moe_convert.wholemodel import whole_model_seconds

from . import common

#: Timed calls per copy-ratio figure (each paired with the copy just before it); 9 is Google
#: Benchmark's "lowest reasonable" repetition count for a rank-based comparison.
RATIO_REPEATS = 9
#: Timed calls per whole-model figure: it is judged against budgets, not a noise band.
WHOLE_MODEL_REPEATS = 3


class _ShapeStrategy:
    """Base: the shape x strategy grid; skips strategies not registered here."""

    params = [list(common.SHAPES), list(common.STRATEGY_AXIS)]
    param_names = ["shape", "strategy"]
    timeout = 300.0

    def setup(self, shape: str, strategy: str) -> None:
        common.require_strategy(strategy)


class TimeConvert(_ShapeStrategy):
    """Wall time of ``convert`` on one layer of the profile's shape, device-synchronised.

    Inputs are built once per process (``common.pristine_weights``); an in-place strategy's
    input is restored from the pristine copy in ``setup``, which asv_runner calls before every
    timed call (one ``copy_`` per weight, not timed). asv's own timer reads the host clock around
    the method, so on CUDA a synchronize inside is the only way it covers the kernels; the
    CUDA-event figures are ``CopyRatio`` and ``WholeModel`` (``moe_convert.timing.time_once``).
    CPU: ``common.CPU_THREADS`` threads.
    """

    version = "2"  # 2: one CPU thread (was every core)
    number = 1  # one conversion per sample: setup must restore in-place inputs between calls
    repeat = (3, 5, 10.0)  # (min samples, max samples, max seconds)
    rounds = 1
    # > 0 with number = 1: asv_runner makes exactly one untimed call first (index caches, first
    # touch of the inputs); 0 would make none.
    warmup_time = 1e-6

    def setup(self, shape: str, strategy: str) -> None:
        super().setup(shape, strategy)
        if moe_convert.STRATEGIES[strategy].inplace:
            self.w13, self.w2 = common.restore(shape)
        else:
            self.w13, self.w2 = common.working_weights(shape)

    def time_convert(self, shape: str, strategy: str) -> None:
        moe_convert.convert(self.w13, self.w2, strategy=strategy)
        common.synchronize()


class PeakMemory(_ShapeStrategy):
    """Exact peak transient bytes of one full-size layer, counted at dispatch level on ``meta``.

    The row-index caches are warmed first, so the figure is each strategy's documented formula
    (e.g. ``T13 + T2`` for ``strided_copy``). Deterministic: the PR gate compares it exactly.
    """

    version = "1"
    unit = "bytes"

    def track_peak_transient_bytes(self, shape: str, strategy: str) -> int:
        return strategy_memory(common.full_shape(shape), strategy, device="meta").peak_bytes


class Traffic(_ShapeStrategy):
    """Exact work of one full-size layer, counted at dispatch level on ``meta``: no noise at all.

    ``traffic_bytes`` (bytes read + written), ``launches`` (data-moving ops; CUDA kernel
    launches) and ``traffic_ratio`` (traffic / 2 x layer bytes: 1.0 is the out-of-place floor),
    by ``moe_convert.traffic``'s counting rule. Each strategy's record states its formulas.
    Deterministic on every machine: the PR gate compares them exactly, so an extra copy, a
    per-expert loop or a lost fusion fails it whatever the machine's load.
    """

    version = "1"

    def setup(self, shape: str, strategy: str) -> None:
        super().setup(shape, strategy)
        self.full = common.full_shape(shape)
        self.measured = strategy_traffic(self.full, strategy)

    def track_traffic_bytes(self, shape: str, strategy: str) -> int:
        return self.measured.traffic_bytes

    track_traffic_bytes.unit = "bytes"

    def track_launches(self, shape: str, strategy: str) -> int:
        return self.measured.launches

    track_launches.unit = "launches"

    def track_traffic_ratio(self, shape: str, strategy: str) -> float:
        return self.measured.traffic_bytes / (2 * self.full.layer_bytes)

    track_traffic_ratio.unit = "ratio"


class CudaMemory(_ShapeStrategy):
    """CUDA caching-allocator peaks of one full-size layer (n/a without CUDA).

    ``peak_allocated`` is rounded to the allocator's blocks; ``peak_reserved`` is what the
    process holds from the driver, what an OOM is about; ``alloc_retries`` counts cache flushes
    the allocator needed (non-zero means the conversion fragmented the cache).
    """

    version = "1"
    unit = "bytes"

    def setup(self, shape: str, strategy: str) -> None:
        common.require_cuda()
        super().setup(shape, strategy)
        self.measured = strategy_cuda_memory(common.full_shape(shape), strategy)

    def track_peak_allocated_bytes(self, shape: str, strategy: str) -> int:
        return self.measured.peak_allocated_bytes

    def track_peak_reserved_bytes(self, shape: str, strategy: str) -> int:
        return self.measured.peak_reserved_bytes

    def track_alloc_retries(self, shape: str, strategy: str) -> int:
        return self.measured.num_alloc_retries

    track_alloc_retries.unit = "retries"


class CopyRatio(_ShapeStrategy):
    """Strategy time / time of a same-size ``copy_``, measured interleaved in one process.

    1.0 is one read and one write of every byte (the out-of-place limit). A ratio cancels
    most of this machine's run-to-run noise, so the PR gate compares it tightly.
    """

    version = "2"  # 2: one CPU thread, 9 calls, median of per-call ratios (was ratio of medians)
    unit = "ratio"

    def track_copy_ratio(self, shape: str, strategy: str) -> float:
        roofline = timing.measure_roofline(
            common.timed_shape(shape), strategy, device=common.device(), repeats=RATIO_REPEATS,
            threads=common.CPU_THREADS,
        )
        return roofline.copy_ratio


class WholeModel(_ShapeStrategy):
    """Seconds to convert every MoE layer of the model on one tensor-parallel rank.

    Median per-layer time of the profile's shape, scaled to the full expert count (the work
    is linear in experts; exact in the full profile), times the model's MoE layers.
    """

    version = "2"  # 2: one CPU thread (was every core), CUDA events
    unit = "seconds"

    def track_whole_model_seconds(self, shape: str, strategy: str) -> float:
        timed, full = common.timed_shape(shape), common.full_shape(shape)
        inplace = moe_convert.STRATEGIES[strategy].inplace
        samples = timing.time_call(
            lambda: moe_convert.convert(*common.working_weights(shape), strategy=strategy),
            device=common.device(),
            repeats=WHOLE_MODEL_REPEATS,
            setup=(lambda: common.restore(shape)) if inplace else None,
            threads=common.CPU_THREADS,
        )
        per_layer = samples.median * full.experts / timed.experts
        return whole_model_seconds(full, per_layer)


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
