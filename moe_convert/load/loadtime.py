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
from ..units import MiB
from .allocator import K_LARGE_BUFFER
from .wholemodel import RankLoad, allocator_max_split_size

__all__ = ["ROUND_REQUEST_BYTES", "measure_event_costs", "predict_replayed"]


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


#: The request of ``measure_event_costs``' refused rounds: 1-10 MiB, so it takes a 20 MiB segment
#: (``get_allocation_size``), and under 20 MiB, so a free 20 MiB segment, oversize under
#: ``max_split_size_mb:20``, cannot serve it (a legacy load's per-expert requests are such).
ROUND_REQUEST_BYTES = 4 * MiB


def measure_event_costs(*, segments: int = 64, refusals: int = 32) -> EventCosts:
    """Time the three allocator events on the current CUDA device (it fills it: run it first).

    Under ``max_split_size_mb:20`` after ``empty_cache``: ``segments`` requests of exactly
    20 MiB each take a new segment (``cudaMalloc``; no kernel is launched, so host time is the
    call's), then ``empty_cache`` gives them back (``cudaFree`` each, the device idle); medians
    of three rounds' means. A refused ``cudaMalloc`` as a load meets one: the device filled
    with 20 MiB segments until it refuses one (one retry and OOM of its own), one of them freed
    back to the cache, then ``refusals`` requests of ``ROUND_REQUEST_BYTES``, each freed before
    the next: each is refused a new segment, frees the cached one
    (``release_available_cached_blocks``) and retries with success, the round vLLM #45589's
    legacy load makes 4,695 times, with no OOM. The refusal's cost is the round's median less
    one ``cudaMalloc`` and one ``cudaFree`` (half an OOM's round priced it 3x too high on an
    H200: docs/allocator.md). The counters of ``memory_stats`` are checked to have moved by
    exactly these events, so a costlier path (an OOM, a retry that released everything) cannot
    pass for one. Memory: the whole device.
    ``RuntimeError`` without CUDA.
    """
    device = require_cuda("measure_event_costs")
    count = ("num_device_alloc", "num_device_free", "num_alloc_retries", "num_ooms")
    with allocator_max_split_size(20):
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        before = torch.cuda.memory_stats(device)
        allocs, frees = [], []
        for _ in range(3):
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
        try:  # ends with one refusal, one retry and one OOM of its own
            while True:
                filling.append(torch.empty(K_LARGE_BUFFER, dtype=torch.uint8, device=device))
        except torch.OutOfMemoryError:
            pass
        filled = len(filling)
        del filling[-1]  # one whole free 20 MiB segment in the cache
        rounds = []
        for _ in range(refusals):
            started = time.perf_counter()
            request = torch.empty(ROUND_REQUEST_BYTES, dtype=torch.uint8, device=device)
            rounds.append(time.perf_counter() - started)
            del request  # its segment whole and free again: the next request's round
        del filling
        torch.cuda.empty_cache()
        after = torch.cuda.memory_stats(device)
    moved = {key: after[key] - before[key] for key in count}
    expected = {
        "num_device_alloc": 3 * segments + filled + refusals,
        "num_device_free": 3 * segments + filled + refusals,
        "num_alloc_retries": 1,
        "num_ooms": 1,
    }
    if moved != expected:
        raise RuntimeError(f"allocator events moved by {moved}, not {expected}: costs not taken")
    cuda_malloc, cuda_free = statistics.median(allocs), statistics.median(frees)
    return EventCosts(
        cuda_malloc_seconds=cuda_malloc,
        cuda_free_seconds=cuda_free,
        failed_cuda_malloc_seconds=statistics.median(rounds) - cuda_malloc - cuda_free,
        samples=3 * segments,
    )
