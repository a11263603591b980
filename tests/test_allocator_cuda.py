"""On CUDA: the allocator model reserves exactly what PyTorch's caching allocator reserves.

Everything runs inside a fresh ``torch.cuda.MemPool`` (``use_mem_pool``), as vLLM's sleep mode
loads, with ``max_split_size_mb:20`` set at run time as vLLM does (#41268) and the previous
settings restored afterwards. The pool's own segments (``MemPool.snapshot``) are compared with the
model after every step, and the device-wide peak (``memory_stats``) at the end. No allocation may
fail here, so the failure path (where a plain ``MemPool`` and vLLM's CuMem pool differ) is not
exercised; the model runs with an unbounded device.

Where PyTorch breaks a size tie between free blocks by address, the model uses segment creation
order; the sequences here give the same figures with either tie order (checked on CPU by
reversing the model's order), so the result does not depend on where cudaMalloc puts segments.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator

import pytest
import torch
from conftest import requires_cuda

from moe_convert import FORMATS, REGISTRY, layer_shape, strategies
from moe_convert.formats.catalog import catalog_shapes
from moe_convert.load.allocator import Allocator, MiB
from moe_convert.load.replay import layer_trace, replay_load
from moe_convert.load.wholemodel import RUN_POOLS, run_load

pytestmark = requires_cuda

MAX_SPLIT_MB = 20
# Per-expert geometry of Qwen3-235B-A22B TP4 (w13 expert 6 MiB, w2 expert 3 MiB), 8 experts per
# layer and 3 layers: the legacy load's allocation pattern (vLLM #45589) at a size any CUDA
# device holds.
SMALL_QWEN = dataclasses.replace(layer_shape("qwen3-235b-a22b", 4).with_experts(8), moe_layers=3)
# Per format, its first catalog shape's per-expert geometry, 8 experts and 3 layers likewise.
SMALL_QUANT = {
    fmt: dataclasses.replace(catalog_shapes(fmt)[0].with_experts(8), moe_layers=3)
    for fmt in FORMATS
    if fmt != "bf16"
}
#: Every quantized format's registered strategies.
QUANT_STRATEGIES = {name: record for name, record in REGISTRY.items() if record.format != "bf16"}

# (kind, key, bytes): the notes' worked example, then one step per rule (see test_allocator.py).
RULE_STEPS = [
    ("alloc", 0, 6 * MiB),
    ("alloc", 1, 6 * MiB),
    ("alloc", 2, 6 * MiB),
    ("free", 0, 0),
    ("free", 1, 0),
    ("free", 2, 0),
    ("alloc", 3, 6 * MiB),  # the merged 20 MiB block is oversize: a second segment, 40 MiB
    ("alloc", 4, 100),
    ("alloc", 5, 1 * MiB),  # small pool: one 2 MiB segment, split
    ("alloc", 6, 64 * MiB),
    ("free", 6, 0),
    ("alloc", 7, 48 * MiB),
    ("free", 7, 0),  # 64 < 48 + 20: served whole
    ("alloc", 8, 40 * MiB),  # 64 >= 40 + 20: refused, a new segment
    ("alloc", 9, 3 * MiB),
    ("alloc", 10, 11 * MiB),  # the 14 MiB remainder, split 3 + 11
    ("alloc", 11, 12 * MiB),  # nothing below 20 MiB is free: a 12 MiB segment
    ("free", 9, 0),
    ("free", 10, 0),
    ("free", 3, 0),  # a second stranded 20 MiB segment
    ("alloc", 12, 25 * MiB),
    ("free", 12, 0),
    ("alloc", 13, 26 * MiB),  # a 26 MiB segment reused
    ("free", 5, 0),
    ("free", 4, 0),
    ("alloc", 14, 700_000),  # the small segment reused
]


def legacy_load_steps() -> list[tuple[str, object, int]]:
    """SMALL_QWEN loaded and converted by ``legacy``, as ``replay_load`` sequences it."""
    trace = layer_trace(SMALL_QWEN, "legacy")
    steps = []
    for layer in range(SMALL_QWEN.moe_layers):
        steps += [
            ("alloc", ("w13", layer), SMALL_QWEN.w13_bytes),
            ("alloc", ("w2", layer), SMALL_QWEN.w2_bytes),
        ]
    for layer in range(SMALL_QWEN.moe_layers):
        steps += [(event.kind, (layer, event.block), event.nbytes) for event in trace.events]
        steps += [("free", ("w13", layer), 0), ("free", ("w2", layer), 0)]
    return steps


@contextlib.contextmanager
def max_split_size_mb(value: int) -> Iterator[None]:
    """``max_split_size_mb:value`` for the block (every other setting at its default), then the
    previous settings string back, exactly."""
    getter = getattr(torch._C, "_accelerator_getAllocatorSettings", None)
    setter = getattr(torch._C, "_accelerator_setAllocatorSettings", None)
    if getter is None or setter is None:
        pytest.skip(
            f"torch {torch.__version__} cannot change allocator settings at run time "
            "(no torch._C._accelerator_setAllocatorSettings)"
        )
    previous = getter()
    setter(f"expandable_segments:False,max_split_size_mb:{value}")  # MemPool needs them off
    try:
        yield
    finally:
        setter(previous)


def pool_bytes(pool: torch.cuda.MemPool) -> tuple[int, int]:
    """(reserved, allocated) bytes of ``pool``'s own segments."""
    segments = [
        s for s in pool.snapshot() if tuple(s.get("segment_pool_id", pool.id)) == tuple(pool.id)
    ]
    return sum(s["total_size"] for s in segments), sum(s["allocated_size"] for s in segments)


@contextlib.contextmanager
def fresh_pool() -> Iterator[tuple[torch.cuda.MemPool, dict]]:
    """A new ``MemPool`` at max_split_size_mb:20, and device figures around it: ``figures``
    gets ``peak_reserved`` (above the start), ``num_alloc_retries`` and ``num_ooms`` (deltas)."""
    figures: dict = {}
    with max_split_size_mb(MAX_SPLIT_MB):
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_stats()
        pool = torch.cuda.MemPool()
        try:
            yield pool, figures
            torch.cuda.synchronize()
            after = torch.cuda.memory_stats()
            figures["peak_reserved"] = (
                after["reserved_bytes.all.peak"] - before["reserved_bytes.all.current"]
            )
            for key in ("num_alloc_retries", "num_ooms"):
                figures[key] = after[key] - before[key]
        finally:
            del pool
            torch.cuda.empty_cache()


@pytest.mark.parametrize("sequence", ["rules", "legacy-load"])
def test_reserved_bytes_match_pytorch_step_by_step(sequence):
    steps = RULE_STEPS if sequence == "rules" else legacy_load_steps()
    model = Allocator(capacity_bytes=None, max_split_size=MAX_SPLIT_MB * MiB, pool="sleep")
    model_blocks, tensors = {}, {}
    with fresh_pool() as (pool, figures):
        with torch.cuda.use_mem_pool(pool):
            for index, (kind, key, nbytes) in enumerate(steps):
                if kind == "alloc":
                    if nbytes == 0:  # an empty storage: no allocator call on either side
                        continue
                    tensors[key] = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
                    model_blocks[key] = model.malloc(nbytes)
                elif key in model_blocks:
                    del tensors[key]
                    model.free(model_blocks.pop(key))
                want = (model.reserved_bytes, model.allocated_bytes)
                assert pool_bytes(pool) == want, f"step {index}: {kind} {key} {nbytes} bytes"
            tensors.clear()
    assert figures["peak_reserved"] == model.peak_reserved_bytes
    assert (figures["num_alloc_retries"], figures["num_ooms"]) == (0, 0)
    if sequence == "rules":  # two stranded 20 MiB segments and the free 64 MiB one
        assert model.stats().stranded_segments == 3


@pytest.mark.parametrize("pool", RUN_POOLS)
@pytest.mark.parametrize("strategy", sorted(strategies("bf16")))
def test_replay_matches_a_real_rank_load(strategy, pool):
    """The rank load run on CUDA (``run_load``: the real conversion, layer after layer, in the
    default pool or a MemPool) against the same load replayed for the device it found
    (``replay_load``, whose trace is recorded on ``meta``), field by field and event by event:
    a kernel that allocates for itself would show here."""
    got = run_load(SMALL_QWEN, strategy, max_split_size_mb=MAX_SPLIT_MB, pool=pool)
    want = replay_load(
        SMALL_QWEN,
        strategy,
        max_split_size_mb=MAX_SPLIT_MB,
        pool=pool,
        device_bytes=got.device_bytes,
    )
    assert want.differences(got) == {}


@pytest.mark.parametrize("pool", RUN_POOLS)
@pytest.mark.parametrize("strategy", sorted(QUANT_STRATEGIES))
def test_replay_matches_a_real_quantized_rank_load(strategy, pool):
    """The quantized rank load run on CUDA (``run_load`` of a quantized ``LayerShape``: weights,
    scales and biases each loaded, then each layer converted) against ``replay_load`` for
    the device it found, field by field and event by event."""
    shape = SMALL_QUANT[QUANT_STRATEGIES[strategy].format]
    got = run_load(shape, strategy, max_split_size_mb=MAX_SPLIT_MB, pool=pool)
    want = replay_load(
        shape, strategy, max_split_size_mb=MAX_SPLIT_MB, pool=pool, device_bytes=got.device_bytes
    )
    assert want.differences(got) == {}
