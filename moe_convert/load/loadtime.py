"""A load's costs measured on CUDA, and a replayed load's seconds predicted from them
(``moe_suite.loadtime``: the model, the records and the arithmetic, which need no torch).

``measure_event_costs`` times the allocator's three events on the device (by
``scripts/gpu-check``'s step ``load``, which records them as a ``moe_suite.loadtime.DeviceCosts``);
``predict_replayed`` prices a replayed ``RankLoad`` with them.
"""

from __future__ import annotations

import statistics
import time

import torch

from moe_suite.loadtime import EventCosts, predict_load_seconds

from ..measuring.memory import require_cuda
from .allocator import K_LARGE_BUFFER
from .wholemodel import RankLoad, allocator_max_split_size

__all__ = ["measure_event_costs", "predict_replayed"]


def predict_replayed(load: RankLoad, layer_seconds: float, events: EventCosts) -> float:
    """``predict_load_seconds`` of a replayed ``RankLoad``; ``ValueError`` for a run's."""
    if load.num_device_alloc_failed is None:
        raise ValueError(
            f"{load.strategy} on {load.shape}: a run's RankLoad lacks num_device_alloc_failed; "
            "predict from replay.replay_load's RankLoad of the same load"
        )
    return predict_load_seconds(
        layers=load.layers_converted,
        layer_seconds=layer_seconds,
        num_device_alloc=load.num_device_alloc,
        num_device_free=load.num_device_free,
        num_device_alloc_failed=load.num_device_alloc_failed,
        events=events,
    )


def measure_event_costs(*, segments: int = 64, refusals: int = 8) -> EventCosts:
    """Time the three allocator events on the current CUDA device (it fills it: run it first).

    Under ``max_split_size_mb:20`` after ``empty_cache``: ``segments`` requests of exactly
    20 MiB each take a new segment (``cudaMalloc``; no kernel is launched, so host time is the
    call's), then ``empty_cache`` gives them back (``cudaFree`` each, the device idle). A refused
    ``cudaMalloc`` as a load meets one: the device filled with 20 MiB segments (a legacy load
    holds thousands), one more fails twice (once before and once after releasing the empty cache)
    and raises ``torch.OutOfMemoryError``; half of that round, median of ``refusals``. On an H200
    that is 3.0 ms (a request beyond an empty device: 7.5 ms), while a refused-and-released round
    inside vLLM #45589's legacy load costs 0.8-1.0 ms by the run's own seconds, so the prediction
    is 2.8x that run: the costs price a load without refusals, not yet one with them
    (docs/allocator.md). The counters of ``memory_stats`` are checked to have moved by exactly
    these events, so a costlier path (a retry that released something) cannot pass for one.
    Memory: the whole device, for the refusals.
    ``RuntimeError`` without CUDA.
    """
    device = require_cuda("measure_event_costs")
    count = ("num_device_alloc", "num_device_free", "num_alloc_retries", "num_ooms")
    with allocator_max_split_size(20):
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        before = torch.cuda.memory_stats(device)
        allocs, frees = [], []
        for _ in range(3):  # three rounds; medians of the per-event means
            started = time.perf_counter()
            blocks = [
                torch.empty(K_LARGE_BUFFER, dtype=torch.uint8, device=device)
                for _ in range(segments)
            ]
            allocs.append((time.perf_counter() - started) / segments)
            del blocks
            started = time.perf_counter()
            torch.cuda.empty_cache()
            frees.append((time.perf_counter() - started) / segments)
        filling = []
        try:  # ends with one refusal and OOM of its own
            while True:
                filling.append(torch.empty(K_LARGE_BUFFER, dtype=torch.uint8, device=device))
        except torch.OutOfMemoryError:
            pass
        filled = len(filling)
        refused = []
        for _ in range(refusals):
            started = time.perf_counter()
            try:
                torch.empty(K_LARGE_BUFFER, dtype=torch.uint8, device=device)
            except torch.OutOfMemoryError:
                refused.append((time.perf_counter() - started) / 2)
        del filling
        torch.cuda.empty_cache()
        after = torch.cuda.memory_stats(device)
    moved = {key: after[key] - before[key] for key in count}
    expected = {
        "num_device_alloc": 3 * segments + filled,
        "num_device_free": 3 * segments + filled,
        "num_alloc_retries": refusals + 1,
        "num_ooms": refusals + 1,
    }
    if moved != expected:
        raise RuntimeError(f"allocator events moved by {moved}, not {expected}: costs not taken")
    return EventCosts(
        cuda_malloc_seconds=statistics.median(allocs),
        cuda_free_seconds=statistics.median(frees),
        failed_cuda_malloc_seconds=statistics.median(refused),
        samples=3 * segments,
    )
