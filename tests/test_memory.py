"""Exact memory figures: every strategy's registered peak formula, the tracker's rules, the
allocator view.

The formulas are the strategies' records (``REGISTRY[name].peak``, ``.cpu_allocator_extra``),
in the legend of ``moe_convert.formulas``.
"""

from __future__ import annotations

import pytest
import torch
from conftest import FULL_SIZE, requires_cuda

from moe_convert import LayerShape, layer_shape, strategies
from moe_convert.measuring.memory import (
    AllocationTracker,
    cuda_memory,
    measure_memory,
    profiler_memory,
    strategy_allocator_memory,
    strategy_cuda_memory,
    strategy_memory,
)

#: BF16's registered strategies (the quantized ones: tests/test_quant_memory.py).
BF16_STRATEGIES = strategies("bf16")


def peak(name: str, shape: LayerShape) -> int:
    formula = BF16_STRATEGIES[name].peak
    assert formula is not None, f"register {name!r} with its peak=Formula(...)"
    return formula.evaluate(shape)


SMALL = [
    LayerShape("small", 1, 3, 256, 128, 1),
    LayerShape("small", 1, 2, 128, 256, 1),
    LayerShape("small", 1, 2, 384, 256, 1, gated=False),
]


@pytest.mark.parametrize("shape", FULL_SIZE, ids=lambda s: f"{s.label}-g{int(s.gated)}")
@pytest.mark.parametrize("name", sorted(BF16_STRATEGIES))
def test_peak_is_the_registered_formula_on_meta_at_full_size(name, shape):
    measured = strategy_memory(shape, name, device="meta")
    assert measured.peak_bytes == peak(name, shape)
    assert measured.end_bytes == 0  # nothing outlives the call once its result is released


@pytest.mark.parametrize(
    "shape", SMALL, ids=lambda s: f"E{s.experts}H{s.hidden}I{s.intermediate}g{int(s.gated)}"
)
@pytest.mark.parametrize("name", sorted(BF16_STRATEGIES))
def test_peak_is_the_registered_formula_on_cpu(name, shape):
    assert strategy_memory(shape, name, device="cpu").peak_bytes == peak(name, shape)


@pytest.mark.parametrize(
    "shape", SMALL, ids=lambda s: f"E{s.experts}H{s.hidden}I{s.intermediate}g{int(s.gated)}"
)
@pytest.mark.parametrize("name", sorted(BF16_STRATEGIES))
def test_allocator_peak_differs_only_by_the_hidden_index_select_copy(name, shape):
    dispatch = strategy_memory(shape, name, device="cpu")
    allocator = strategy_allocator_memory(shape, name)
    extra = BF16_STRATEGIES[name].cpu_allocator_extra.evaluate(shape)  # a kernel's hidden temporary
    assert allocator.peak_bytes - dispatch.peak_bytes == extra
    assert allocator.end_bytes == 0


def test_profiler_sees_a_kernel_temporary_the_tracker_cannot():
    # index_select(dim=1) on a non-contiguous CPU view copies it first, inside the kernel.
    source = torch.zeros(64, 2, 128, dtype=torch.uint8).permute(1, 0, 2)
    index = torch.arange(64)
    out = torch.empty(2, 64, 128, dtype=torch.uint8)
    call = lambda: torch.index_select(source, 1, index, out=out)  # noqa: E731
    assert measure_memory(call).peak_bytes == 0
    assert profiler_memory(call).peak_bytes == source.nbytes


def test_profiler_events_replay_to_its_figures():
    def fn():
        a = torch.empty(1000, dtype=torch.uint8)
        b = torch.empty(500, dtype=torch.uint8)
        del a
        return b

    measured = profiler_memory(fn)
    assert (measured.peak_bytes, measured.allocations, measured.end_bytes) == (1500, 2, 0)
    assert [(e.kind, e.nbytes) for e in measured.events] == [
        ("alloc", 1000),
        ("alloc", 500),
        ("free", 1000),
        ("free", 500),
    ]


def test_tracker_counts_nothing_for_views_out_and_inplace_ops():
    a = torch.ones(4, 6)
    b = torch.ones(4, 6)
    out = torch.empty(4, 6)
    with AllocationTracker() as tracker:
        a.view(6, 4).t().select(0, 1)
        a.view(torch.uint8).permute(1, 0)
        a[1:3].contiguous()[0]  # slicing rows keeps it contiguous: no copy
        torch.add(a, b, out=out)
        a.add_(1)
        a.copy_(b)
    assert (tracker.peak, tracker.allocations, tracker.live, tracker.events) == (0, 0, 0, [])


def test_tracker_counts_a_resize_through_out():
    a = torch.ones(4, 6)
    out = torch.empty(0)
    with AllocationTracker() as tracker:
        torch.add(a, a, out=out)
    assert (tracker.allocations, tracker.peak) == (1, a.nbytes)
    assert tracker.events[0].nbytes == a.nbytes and tracker.events[0].op == "add"


def test_tracker_frees_on_release():
    with AllocationTracker() as tracker:
        a = torch.empty(100, dtype=torch.float32)
        b = a.t().contiguous()  # already contiguous: same storage, nothing new
        c = a.clone()
        assert tracker.live == 800
        del a, b
        assert tracker.live == 400  # a's storage freed only once its last view (b) went
        del c
    assert (tracker.live, tracker.peak, tracker.allocations) == (0, 800, 2)
    assert [e.kind for e in tracker.events] == ["alloc", "alloc", "free", "free"]


def test_strategy_memory_is_fast_enough_at_full_size_on_meta():
    # The whole point of meta: a 14 GiB-per-weight layer costs no memory. Exact figure, no timing.
    shape = layer_shape("deepseek-v3", 1)
    assert strategy_memory(shape, "strided_copy").peak_bytes == shape.layer_bytes


@requires_cuda
@pytest.mark.parametrize("name", sorted(BF16_STRATEGIES))
def test_cuda_requested_peak_is_the_registered_formula(name):
    shape = LayerShape("small", 1, 4, 1024, 512, 1)
    measured = strategy_cuda_memory(shape, name)
    formula = peak(name, shape)
    if name.startswith("strided_"):  # plain copy_ of views: no kernel temporary can hide
        assert measured.requested_peak_bytes == formula
    else:  # the allocator also sees what kernels allocate for themselves (unchecked on GPU)
        assert measured.requested_peak_bytes >= formula
    assert measured.peak_allocated_bytes >= measured.requested_peak_bytes
    assert measured.peak_reserved_bytes >= measured.peak_allocated_bytes
    assert measured.num_ooms == 0


@requires_cuda
def test_cuda_memory_of_a_known_allocation():
    measured = cuda_memory(lambda: torch.empty(3 * 2**20, dtype=torch.uint8, device="cuda"))
    assert measured.requested_peak_bytes == measured.peak_allocated_bytes == 3 * 2**20
    assert measured.allocations == 1
    assert measured.peak_reserved_bytes >= 3 * 2**20  # 20 MiB with the default settings


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error raised without CUDA")
def test_cuda_memory_without_cuda_says_why():
    with pytest.raises(RuntimeError, match="needs a CUDA device"):
        cuda_memory(lambda: None)
