"""Exact peak transient memory of a call, counted at the dispatch level (cpu, meta or cuda).

A ``TorchDispatchMode`` sees every aten op. Each output storage that is new (not the storage of
any input, not one already counted) is an allocation of its ``nbytes``; ``weakref.finalize`` on
the storage's Python object, which lives exactly as long as the C++ storage, records its free.
Views, ``out=`` and in-place ops return an input's storage and add nothing; a resize through
``out=`` counts its growth. On ``meta`` storages have sizes but no memory, so full-size models
are measured exactly at no cost.

Blind spots (docs/measurement.md): memory a kernel allocates for itself (the CPU
``index_select(dim=1)`` hidden copy) and direct ``UntypedStorage.resize_``.

Two more views of the same call cover them:

- ``profiler_memory`` (CPU): every allocation and free the CPU allocator sees, from
  ``torch.profiler``'s memory events, kernel temporaries included.
- ``cuda_memory`` (CUDA): the caching allocator's own figures (allocated, reserved, requested,
  retries, OOMs), taken the documented way.

``strategy_memory``, ``strategy_allocator_memory`` and ``strategy_cuda_memory`` apply them to one
strategy on fresh weights of a ``LayerShape``, with the strategy's caches warmed first
(``inputs.strategy_call``).
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch.profiler import ProfilerActivity, profile
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from ..formats.shape import LayerShape
from ..formats.table import layer_call

__all__ = [
    "AllocationTracker",
    "CudaMemoryMeasurement",
    "MemoryEvent",
    "MemoryMeasurement",
    "cuda_memory",
    "measure_memory",
    "profiler_memory",
    "require_cuda",
    "strategy_allocator_memory",
    "strategy_cuda_memory",
    "strategy_memory",
]


@dataclass(frozen=True)
class MemoryEvent:
    """One allocation or free seen by the tracker, in call order."""

    kind: Literal["alloc", "free"]
    block: int  # id of the storage, unique within one tracker
    nbytes: int
    op: str  # the aten op that allocated it ("" for a free)


@dataclass(frozen=True)
class MemoryMeasurement:
    """What one tracked call allocated. Bytes are exact storage sizes (no allocator rounding)."""

    peak_bytes: int  # peak of live tracked bytes above the start of the call
    allocations: int  # number of new storages
    end_bytes: int  # tracked bytes still alive at the end (e.g. out-of-place outputs)
    events: tuple[MemoryEvent, ...]


def _storages(tree: Any) -> dict[int, torch.UntypedStorage]:
    return {
        leaf.untyped_storage()._cdata: leaf.untyped_storage()
        for leaf in tree_leaves(tree)
        if isinstance(leaf, torch.Tensor)
    }


class AllocationTracker(TorchDispatchMode):
    """Count live bytes of new storages made by aten ops inside the ``with`` block.

    ``live``, ``peak``, ``allocations`` and ``events`` are readable during and after the block.
    Storages still alive when the block exits keep being tracked until freed.
    """

    def __init__(self) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0
        self.allocations = 0
        self.events: list[MemoryEvent] = []
        self._sizes: dict[int, int] = {}  # block id -> bytes currently counted
        self._blocks: dict[int, int] = {}  # storage _cdata -> block id, while alive
        self._ids = itertools.count()

    def block_of(self, tensor: torch.Tensor) -> int | None:
        """The id of the live tracked storage ``tensor`` lives in (its ``events``' ``block``), or
        ``None`` for a storage made before the ``with`` block or already freed."""
        return self._blocks.get(tensor.untyped_storage()._cdata)

    def _alloc(self, key: int, storage: torch.UntypedStorage, nbytes: int, op: str) -> None:
        block = self._blocks.get(key)
        if block is None:
            block = next(self._ids)
            self._blocks[key] = block
            self._sizes[block] = 0
            weakref.finalize(storage, self._free, key, block)
        self._sizes[block] += nbytes
        self.live += nbytes
        self.peak = max(self.peak, self.live)
        self.allocations += 1
        self.events.append(MemoryEvent("alloc", block, nbytes, op))

    def _free(self, key: int, block: int) -> None:
        nbytes = self._sizes.pop(block)
        self._blocks.pop(key, None)
        self.live -= nbytes
        self.events.append(MemoryEvent("free", block, nbytes, ""))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        inputs = _storages((args, kwargs))
        sizes_before = {key: storage.nbytes() for key, storage in inputs.items()}
        out = func(*args, **kwargs)
        op = str(func.overloadpacket.__name__)
        for key, storage in _storages(out).items():
            if key in inputs:
                growth = storage.nbytes() - sizes_before[key]
                if growth > 0:  # resized through out=: its buffer grew
                    self._alloc(key, storage, growth, op)
            elif key not in self._blocks:
                self._alloc(key, storage, storage.nbytes(), op)
        return out


def measure_memory(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> MemoryMeasurement:
    """Run ``fn(*args, **kwargs)`` under an ``AllocationTracker``; its result is dropped first.

    The peak includes whatever the call returns (out-of-place outputs are alive at its end);
    ``end_bytes`` is what is still alive once the result is released.
    """
    with AllocationTracker() as tracker:
        result = fn(*args, **kwargs)
        del result
    return MemoryMeasurement(tracker.peak, tracker.allocations, tracker.live, tuple(tracker.events))


def require_cuda(what: str) -> torch.device:
    """The current CUDA device, or ``RuntimeError`` saying that ``what`` needs one and why."""
    if not torch.cuda.is_available():
        raise RuntimeError(
            f"{what} needs a CUDA device; torch {torch.__version__} sees none "
            f"(CUDA build: {torch.version.cuda or 'no'}). Run it on a GPU machine."
        )
    return torch.device("cuda", torch.cuda.current_device())


def strategy_memory(
    shape: LayerShape, strategy: str, *, device: torch.device | str = "meta"
) -> MemoryMeasurement:
    """Dispatch-level peak transient memory of one conversion of a fresh ``shape`` layer (any
    format's: ``formats.layer_call``).

    The weights are made first (not counted) and the strategy's caches warmed, then one
    ``convert`` call is measured with ``measure_memory``: ``peak_bytes`` is the figure each
    strategy's record states (``REGISTRY[name].peak``, ``T13 + T2`` for ``strided_copy``). On
    ``meta`` it is exact at full model size with no memory (DeepSeek-V3 TP1, T13 = 14 GiB: well
    under a second).
    """
    return measure_memory(layer_call(shape, strategy, device))


def _allocator_events(prof: profile) -> list[tuple[int, int, int, str]]:
    """(time ns, signed bytes, allocation id, parent op) of every CPU allocation and free.

    Private API, kept to this one function: ``experimental_event_tree`` of the profiler's
    results, whose ``[memory]`` nodes (``_EventType.Allocation``) carry ``alloc_size`` (negative
    for a free) and sit under the op that made them. The public ``prof.events()`` drops the
    nested ones, and ``export_memory_timeline`` is deprecated.
    """
    from torch._C._profiler import _EventType

    events = []
    roots = prof.profiler.kineto_results.experimental_event_tree()
    stack = [(node, "") for node in reversed(roots)]
    while stack:  # pre-order walk: events come out in tree order
        node, parent = stack.pop()
        if node.tag == _EventType.Allocation and node.extra_fields.device.type == "cpu":
            fields = node.extra_fields
            events.append((node.start_time_ns, fields.alloc_size, fields.allocation_id, parent))
        stack.extend((child, node.name) for child in reversed(node.children))
    events.sort(key=lambda event: event[0])  # stable: same-time events keep tree order
    return events


def profiler_memory(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> MemoryMeasurement:
    """Allocator-level peak of ``fn(*args, **kwargs)`` on CPU, from profiler memory events.

    Every allocation and free of the CPU allocator during the call, in time order, kernel
    temporaries included; bytes are the requested sizes (the CPU allocator does not round).
    ``events`` use the allocator's allocation ids as ``block`` and the op that allocated as ``op``.
    The result of ``fn`` is dropped inside the profiled region, as in ``measure_memory``.

    Where it differs from the dispatch level (``measure_memory``), for one conversion on CPU:

    - ``preallocated`` and ``inplace``: ``index_select(dim=1, out=...)`` on the non-contiguous
      ``[nb, M, 128]`` block view first makes the view contiguous, a hidden copy of one expert
      (``S13`` for w13, ``S2`` for w2) freed when the kernel returns. ``inplace``: allocator peak =
      dispatch peak ``+ S13`` (the scratch ``max(S13, S2) = S13`` plus the copy). ``preallocated``
      not gated: ``+ S13``; gated, the dispatch peak is at the index arithmetic
      (``T13 + T2 + 2 X13``) while the allocator's is at the w13 gather (``T13 + T2 + X13 +
      S13``): the difference is ``S13 - X13``.
    - every other strategy (``legacy``, ``batched``, ``strided_copy``, ``strided_inplace``,
      ``flashinfer``): the two levels agree to the byte (tested).
    """
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        result = fn(*args, **kwargs)
        del result
    live = peak = allocations = 0
    events = []
    for _, nbytes, block, op in _allocator_events(prof):
        live += nbytes
        peak = max(peak, live)
        if nbytes > 0:
            allocations += 1
            events.append(MemoryEvent("alloc", block, nbytes, op))
        else:
            events.append(MemoryEvent("free", block, -nbytes, ""))
    return MemoryMeasurement(peak, allocations, live, tuple(events))


def strategy_allocator_memory(shape: LayerShape, strategy: str) -> MemoryMeasurement:
    """``profiler_memory`` of one conversion of a fresh CPU ``shape`` layer (caches warmed)."""
    return profiler_memory(layer_call(shape, strategy, "cpu"))


@dataclass(frozen=True)
class CudaMemoryMeasurement:
    """The CUDA caching allocator's view of one call; bytes above the start of the call."""

    peak_allocated_bytes: int  # allocated blocks, each rounded up to 512 B
    peak_reserved_bytes: int  # segments held by the allocator (what the device lends)
    requested_peak_bytes: int  # unrounded requests: comparable to the dispatch-level peak
    num_alloc_retries: int  # failed raw allocations answered by freeing the cache and retrying
    num_ooms: int
    allocations: int  # allocation requests during the call


def cuda_memory(fn: Callable[[], object]) -> CudaMemoryMeasurement:
    """Run ``fn()`` on the current CUDA device and read the caching allocator's figures.

    The documented way: synchronize, ``empty_cache``, ``reset_peak_memory_stats``, take the base;
    run; synchronize; peaks minus base, counters as deltas. The result of ``fn`` is dropped
    before the figures are read (its bytes are in the peaks). ``RuntimeError`` without CUDA.
    """
    device = require_cuda("cuda_memory")
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_stats(device)
    base_allocated = torch.cuda.memory_allocated(device)
    base_reserved = torch.cuda.memory_reserved(device)
    result = fn()
    torch.cuda.synchronize(device)
    del result
    after = torch.cuda.memory_stats(device)

    def delta(key: str) -> int:
        return after.get(key, 0) - before.get(key, 0)

    return CudaMemoryMeasurement(
        peak_allocated_bytes=torch.cuda.max_memory_allocated(device) - base_allocated,
        peak_reserved_bytes=torch.cuda.max_memory_reserved(device) - base_reserved,
        requested_peak_bytes=after["requested_bytes.all.peak"]
        - before["requested_bytes.all.current"],
        num_alloc_retries=delta("num_alloc_retries"),
        num_ooms=delta("num_ooms"),
        allocations=delta("allocation.all.allocated"),
    )


def strategy_cuda_memory(shape: LayerShape, strategy: str) -> CudaMemoryMeasurement:
    """``cuda_memory`` of one conversion of a fresh ``shape`` layer on the current CUDA device."""
    return cuda_memory(layer_call(shape, strategy, require_cuda("strategy_cuda_memory")))
