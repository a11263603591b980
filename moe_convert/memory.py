"""Exact peak transient memory of a call, counted at the dispatch level (cpu, meta or cuda).

A ``TorchDispatchMode`` sees every aten op. Each output storage that is new (not the storage of
any input, not one already counted) is an allocation of its ``nbytes``; ``weakref.finalize`` on
the storage's Python object, which lives exactly as long as the C++ storage, records its free.
Views, ``out=`` and in-place ops return an input's storage and add nothing; a resize through
``out=`` counts its growth. On ``meta`` storages have sizes but no memory, so full-size models
are measured exactly at no cost.

Blind spots (see ``measurement.md``): memory a kernel allocates for itself (the CPU
``index_select(dim=1)`` hidden copy) and direct ``UntypedStorage.resize_``.
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

__all__ = ["MemoryEvent", "MemoryMeasurement", "AllocationTracker", "measure_memory"]


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
