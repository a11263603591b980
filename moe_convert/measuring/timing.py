"""Honest timing of a conversion: device-aware samples, and the same-size copy it is judged by.

A conversion has to read and write every byte of the layer at least once, so the reference for
its time is a plain same-size ``copy_`` on the same device, timed in the same process and
interleaved with it (copy, strategy, copy, strategy ...): the machine's noise (±50 % run to run
on a shared CPU) moves both alike and cancels in their ratio, ``copy_ratio``. ``time_layer``
is that measurement (``LayerTiming``): the one every time figure of a (shape, strategy) derives
from: per layer, against the copy, for the whole model.

Seconds are stored raw (``Timing.samples``); median and interquartile range are derived; units
are chosen only when printing.
"""

from __future__ import annotations

import contextlib
import os
import resource
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from ..formats.shape import LayerShape
from ..formats.table import (
    convert,
    strategy_input,
    strategy_record,
    warm_layer_strategy,
)

__all__ = [
    "LayerTiming",
    "Timing",
    "calibration_copy",
    "conversion",
    "cpu_threads",
    "restore",
    "time_call",
    "time_interleaved",
    "time_layer",
    "time_once",
    "whole_model_seconds",
]


def whole_model_seconds(shape: LayerShape, per_layer_seconds: float) -> float:
    """Seconds to convert every MoE layer of ``shape``'s model on one rank (layers in sequence).

    ``shape.moe_layers`` layers of ``shape`` (with its expert count: a shape limited by
    ``with_experts`` gives the figure for a model with that many experts per layer).
    """
    return per_layer_seconds * shape.moe_layers


@dataclass(frozen=True)
class Timing:
    """Raw wall-clock samples of one call, in seconds; statistics derived."""

    samples: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def iqr(self) -> float:
        """Interquartile range (0 for a single sample)."""
        if len(self.samples) < 2:
            return 0.0
        q1, _, q3 = statistics.quantiles(self.samples, n=4, method="inclusive")
        return q3 - q1

    @property
    def spread(self) -> float:
        """Slowest / fastest sample: 1.0 on an idle machine, 2 and more under contention."""
        return max(self.samples) / min(self.samples)


@contextlib.contextmanager
def cpu_threads(
    threads: int | None = None, *, device: torch.device | str = "cpu"
) -> Iterator[int | None]:
    """Set ``torch.set_num_threads`` for the block and restore it after; yields the count used.

    ``None`` means every core this process may run on (``os.sched_getaffinity``), stated
    explicitly rather than left to torch's default (physical cores) or to
    ``torch.utils.benchmark.Timer`` (which sets 1 unless told). On a ``device`` other than the
    CPU nothing is set and it yields ``None``: the count does not apply there.
    """
    if torch.device(device).type != "cpu":
        yield None
        return
    if threads is None:
        threads = len(os.sched_getaffinity(0))
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield threads
    finally:
        torch.set_num_threads(before)


def _minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def time_once(fn: Callable[[], object], device: torch.device) -> tuple[float, int]:
    """Seconds and minor page faults (0 on CUDA) of one ``fn()``, device work included.

    CUDA: CUDA events recorded around the call on the current stream, after a synchronize (so no
    earlier work is counted), read once the end event completes: the kernels' own time, without
    the host's launch latency after the last one. CPU: ``perf_counter``. The result is released
    after the clock stops: freeing an output is not part of the call's time.
    """
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize(device)
        start.record()
        result = fn()
        end.record()
        end.synchronize()
        del result
        return start.elapsed_time(end) / 1e3, 0
    faults = _minor_faults()
    start = time.perf_counter()
    result = fn()
    seconds = time.perf_counter() - start
    faults = _minor_faults() - faults
    del result
    return seconds, faults


def _check_counts(repeats: int, warmup: int) -> None:
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    if warmup < 0:
        raise ValueError(f"warmup must be >= 0, got {warmup}")


def time_call(
    fn: Callable[[], object],
    *,
    device: torch.device | str,
    repeats: int = 5,
    warmup: int = 1,
    setup: Callable[[], object] | None = None,
    threads: int | None = None,
) -> Timing:
    """``repeats`` timed calls of ``fn()`` after ``warmup`` untimed ones, on ``device``.

    ``setup()``, when given, runs before every call (warm-up ones too), outside the timed region
    (e.g. restoring the input of an in-place function). CUDA work is synchronized around each
    call. On CPU the thread count is set to ``threads`` (default: all cores, see
    ``cpu_threads``) for the duration and restored after.
    """
    _check_counts(repeats, warmup)
    device = torch.device(device)
    samples = []
    with cpu_threads(threads, device=device):
        for call in range(warmup + repeats):
            if setup is not None:
                setup()
            seconds, _ = time_once(fn, device)
            if call >= warmup:
                samples.append(seconds)
    return Timing(tuple(samples))


@dataclass(frozen=True)
class LayerTiming:
    """One layer's conversion timed interleaved with a same-size ``copy_``: every time figure.

    The one measurement of a (shape, strategy) that the suite, the CLI's ``measure`` and
    ``moe_bench.gpucheck`` take: the time of one layer (``seconds``), its ratio to the copy
    (``copy_ratio``) and the whole-model seconds (``whole_model_seconds``) all derive from these
    samples. Seconds raw; statistics derived.
    """

    strategy: str
    # the layer timed (the cpu profile times fewer experts than the model's)
    shape: LayerShape
    device: str
    strategy_time: Timing
    copy_time: Timing
    minor_faults: int | None  # median minor page faults per strategy call (CPU only)
    threads: int | None = None  # CPU threads used (None on other devices)
    model_experts: int | None = None  # experts per layer of the model; None: ``shape.experts``

    @property
    def experts(self) -> int:
        """Experts of the layer timed."""
        return self.shape.experts

    @property
    def seconds(self) -> float:
        """Median seconds of one conversion of the layer timed."""
        return self.strategy_time.median

    @property
    def copy_ratio(self) -> float:
        """Median over the calls of strategy time / the copy's just before it: 1.0 is the limit.

        Paired call by call, so load that comes and goes within the measurement moves both
        sides of a pair alike and cancels, where a ratio of the two medians would not pair them.
        """
        return statistics.median(
            strategy / copy
            for strategy, copy in zip(
                self.strategy_time.samples, self.copy_time.samples, strict=True
            )
        )

    @property
    def bytes_moved(self) -> int:
        """``2 (T13 + T2)``: every byte of the layer read once and written once."""
        return 2 * self.shape.layer_bytes

    @property
    def gbps(self) -> float:
        """Achieved GB/s (1e9 B/s): bytes read + written by a perfect conversion / median time."""
        return self.bytes_moved / self.strategy_time.median / 1e9

    @property
    def copy_gbps(self) -> float:
        """GB/s of the ``copy_`` reference itself: the device's practical bandwidth here."""
        return self.bytes_moved / self.copy_time.median / 1e9

    @property
    def _expert_scale(self) -> float:
        """Model experts / experts timed: the work is linear in experts (1.0 at full size)."""
        return (self.model_experts or self.shape.experts) / self.shape.experts

    @property
    def whole_model_seconds(self) -> float:
        """Median seconds per layer, scaled to ``model_experts``, times the MoE layers of a rank."""
        return whole_model_seconds(self.shape, self.strategy_time.median * self._expert_scale)

    @property
    def whole_model_copy_seconds(self) -> float:
        """The same for the ``copy_`` reference: the bandwidth-bound time of the whole model."""
        return whole_model_seconds(self.shape, self.copy_time.median * self._expert_scale)


def time_layer(
    shape: LayerShape,
    strategy: str,
    *,
    device: torch.device | str = "cpu",
    repeats: int = 5,
    warmup: int = 1,
    threads: int | None = None,
    model_experts: int | None = None,
) -> LayerTiming:
    """Time ``strategy`` on a fresh ``shape`` layer against a same-size ``copy_``, interleaved.

    A shape of any format with one of its format's strategies (``formats.table.convert``: BF16's
    w13 and w2, a quantized format's weights, scale factors and biases, seeded). The reference
    copies every tensor of the layer (``dst.copy_(src)`` into tensors allocated and touched
    once, in warm-up): ``2 (T13 + T2)`` bytes read and written, ``2 layer_bytes`` in general.
    Calls alternate copy, strategy, copy, strategy ... in this process, ``warmup`` rounds
    untimed first; each call is timed by ``time_once`` (CUDA events on CUDA). On CPU with
    ``threads`` threads (``cpu_threads``). ``model_experts``: the expert count of the model's
    layers, when ``shape`` has fewer (the whole-model figure is scaled to it).

    What the strategy's time includes, honestly:

    - out-of-place strategies allocate their outputs on every call, and that allocation (on CPU
      also its minor page faults: a fresh large buffer is mapped anew, ``minor_faults`` tells how
      many) is part of their cost, exactly as it is in a model load. The outputs are freed after
      the clock stops.
    - in-place strategies overwrite their input: it is restored from a pristine copy before
      every call (``w13.copy_(pristine13)``), outside the timed region and not counted.

    Memory needed on ``device``: the layer, the copy destination, the strategy's peak transient,
    and for in-place strategies a pristine copy of the layer.
    """
    tensors, run, inplace = conversion(shape, strategy, torch.device(device))
    return time_interleaved(
        shape,
        strategy,
        tensors,
        run,
        inplace=inplace,
        repeats=repeats,
        warmup=warmup,
        threads=threads,
        model_experts=model_experts,
    )


def conversion(
    shape: LayerShape, strategy: str, device: torch.device
) -> tuple[list[torch.Tensor], Callable[[], object], bool]:
    """A fresh, seeded layer of what ``strategy`` takes for ``shape`` (``strategy_input``) on
    ``device`` (every tensor of it), one conversion of it with ``strategy`` (its caches warmed)
    and whether that conversion is in place (then ``restore`` the tensors before each call):
    what ``time_layer`` times, and each side of the engine PR's paired timing
    (``engine_benchmarks/worker.py``). New tensors, the same bytes on every call."""
    layer = strategy_input(shape, strategy, device)
    warm_layer_strategy(shape, strategy, layer.w13.device)
    return (
        list(layer.values()),
        lambda: convert(layer, strategy=strategy, gated=shape.gated),
        strategy_record(shape, strategy).inplace,
    )


def time_interleaved(
    shape: LayerShape,
    strategy: str,
    tensors: list[torch.Tensor],
    run: Callable[[], object],
    *,
    inplace: bool,
    repeats: int,
    warmup: int,
    threads: int | None,
    model_experts: int | None,
) -> LayerTiming:
    """``time_layer``'s measurement of ``run()``: one conversion of ``tensors`` (every input of a
    ``shape`` layer, the strategy's caches already warm), interleaved with their copy; also a
    refit's (``load.refit.time_refit``: ``tensors`` the new checkpoint weights it takes in).
    ``inplace``: ``run`` overwrites ``tensors``, restored from a pristine copy before every
    call, untimed. Memory: the layer, the copy destination, the strategy's peak transient, and
    for in-place strategies a pristine copy of the layer."""
    _check_counts(repeats, warmup)
    device = tensors[0].device
    if device.type == "meta":
        raise ValueError("device 'meta' has no time: time_layer needs cpu or cuda")
    copies = [torch.empty_like(t) for t in tensors]

    def copy() -> None:
        for dst, src in zip(copies, tensors, strict=True):
            dst.copy_(src)

    pristine = [t.clone() for t in tensors] if inplace else []
    copy_samples, strategy_samples, faults = [], [], []
    with cpu_threads(threads, device=device) as used_threads:
        for call in range(warmup + repeats):
            copy_seconds, _ = time_once(copy, device)
            restore(tensors, pristine)
            strategy_seconds, strategy_faults = time_once(run, device)
            if call >= warmup:
                copy_samples.append(copy_seconds)
                strategy_samples.append(strategy_seconds)
                faults.append(strategy_faults)
    return LayerTiming(
        strategy=strategy,
        shape=shape,
        device=str(device),
        strategy_time=Timing(tuple(strategy_samples)),
        copy_time=Timing(tuple(copy_samples)),
        minor_faults=round(statistics.median(faults)) if device.type == "cpu" else None,
        threads=used_threads,
        model_experts=model_experts,
    )


def restore(tensors: list[torch.Tensor], pristine: list[torch.Tensor]) -> None:
    """Copy ``pristine`` back into ``tensors`` (an in-place conversion's input, before each
    timed call, untimed); nothing where ``pristine`` is empty (an out-of-place one's)."""
    for dst, src in zip(tensors, pristine, strict=bool(pristine)):
        dst.copy_(src)


#: Bytes of the calibration copy: far above CPU caches and GPU L2, far below any device's memory.
CALIBRATION_BYTES = 64 * 2**20


def calibration_copy(
    *, device: torch.device | str, repeats: int = 15, threads: int | None = None
) -> Timing:
    """``repeats`` timed ``copy_`` calls of ``CALIBRATION_BYTES``: how noisy the machine is now.

    Recorded beside every run (``Timing.spread``: slowest / fastest) so a reader of the history
    can tell a noisy night from a regression: the same code's figures move with it.
    """
    device = torch.device(device)
    src = torch.ones(CALIBRATION_BYTES, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    return time_call(lambda: dst.copy_(src), device=device, repeats=repeats, threads=threads)
