"""Exact memory traffic and launch count of a call, counted at the dispatch level (meta is free).

Deterministic work figures: unlike a time, they do not move with the machine's load, so they are
gated exactly and catch an extra copy, a per-expert loop or a lost fusion on any machine.

The counting rule (the one definition; every strategy's "Traffic" line follows it). For each aten
op seen by a ``TorchDispatchMode`` during the call:

- **written** = the bytes of every new output tensor plus the bytes of every argument the op
  mutates (its schema marks it ``is_write``: ``copy_``'s destination, ``out=``, in-place ops);
- **read** = for a gather (``index``, ``index_select``, ``gather``, ``take``): the bytes it
  selects (equal to the bytes written) plus its index tensor's; for every other op: the bytes of
  its tensor arguments other than those it only writes (``out=`` arguments and the destination of
  ``copy_``/``fill_``/``zero_``). So a ``copy_`` of T bytes moves 2T, and so do ``clone``,
  ``contiguous`` and ``stack`` of T bytes;
- views, ``empty`` and other metadata ops move nothing (an op whose every output aliases an input
  and that mutates nothing; factories that only allocate).

A tensor's bytes are ``numel * element_size`` of the view the op receives. ``traffic_bytes`` is
read + written over all ops; ``launches`` is the number of ops that moved data (on CUDA, one kernel
launch each). The traffic ratio ``traffic_bytes / (2 x layer bytes)`` is 1.0 at the out-of-place
floor (every byte read once and written once); an in-place relayout through a scratch is 2.0.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from ..formats.shape import LayerShape
from ..formats.table import layer_call

__all__ = [
    "OpTraffic",
    "TrafficCounter",
    "TrafficMeasurement",
    "measure_traffic",
    "strategy_traffic",
]

#: Ops that select part of an input with an index tensor: they read what they select, not all of it.
_GATHERS = frozenset({"index", "index_select", "gather", "take", "_unsafe_index"})
#: Ops whose mutated ``self`` is only written, never read.
_OVERWRITES = frozenset({"copy_", "fill_", "zero_"})
#: Ops that allocate or describe a tensor without touching its bytes.
_NO_DATA = frozenset(
    {
        "empty",
        "empty_like",
        "empty_strided",
        "new_empty",
        "new_empty_strided",
        "resize_",
        "set_",
        "lift_fresh",
    }
)


@dataclass(frozen=True)
class OpTraffic:
    """One data-moving op: its name and the bytes it read and wrote."""

    op: str
    read_bytes: int
    written_bytes: int


@dataclass(frozen=True)
class TrafficMeasurement:
    """What one call moved, by the module's counting rule."""

    traffic_bytes: int  # read + written, every op
    launches: int  # data-moving ops
    ops: tuple[OpTraffic, ...]  # in call order


def _nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


def _storage_keys(tree: Any) -> set[int]:
    return {
        leaf.untyped_storage()._cdata
        for leaf in tree_leaves(tree)
        if isinstance(leaf, torch.Tensor)
    }


class TrafficCounter(TorchDispatchMode):
    """Record every data-moving aten op inside the ``with`` block (``ops``, in call order)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[OpTraffic] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = func.overloadpacket.__name__
        if name in _NO_DATA:
            return out
        written_args, read_args, index_args = [], [], []
        values = dict(zip((a.name for a in func._schema.arguments), args, strict=False))
        values.update(kwargs)
        for argument in func._schema.arguments:
            value = values.get(argument.name)
            tensors = [leaf for leaf in tree_leaves(value) if isinstance(leaf, torch.Tensor)]
            mutated = argument.alias_info is not None and argument.alias_info.is_write
            if argument.name in ("index", "indices"):
                index_args += tensors
                continue
            if mutated:
                written_args += tensors
            if not mutated or not (argument.kwarg_only or name in _OVERWRITES):
                read_args += tensors
        inputs = _storage_keys((args, kwargs))
        new_outputs = [
            leaf
            for leaf in tree_leaves(out)
            if isinstance(leaf, torch.Tensor) and leaf.untyped_storage()._cdata not in inputs
        ]
        written = sum(map(_nbytes, written_args)) + sum(map(_nbytes, new_outputs))
        if written == 0:  # a view, or an op on empty tensors: nothing moved
            return out
        if name in _GATHERS:
            read = written + sum(map(_nbytes, index_args))
        else:
            read = sum(map(_nbytes, read_args + index_args))
        self.ops.append(OpTraffic(name, read, written))
        return out


def measure_traffic(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> TrafficMeasurement:
    """Run ``fn(*args, **kwargs)`` under a ``TrafficCounter``; its result is dropped."""
    with TrafficCounter() as counter:
        fn(*args, **kwargs)
    ops = tuple(counter.ops)
    return TrafficMeasurement(sum(op.read_bytes + op.written_bytes for op in ops), len(ops), ops)


def strategy_traffic(
    shape: LayerShape, strategy: str, *, device: torch.device | str = "meta"
) -> TrafficMeasurement:
    """Traffic and launches of one conversion of a fresh ``shape`` layer of any format (caches
    warmed first).

    On ``meta`` it is exact at full model size with no memory, like ``memory.strategy_memory``;
    ``traffic_bytes`` is the figure each strategy's record states (``strided_copy``:
    ``2 (T13 + T2)``).
    """
    return measure_traffic(layer_call(shape, strategy, device))
