"""A permutation of rows as a few strided ``copy_`` calls, derived from its index.

Legend: n positions of a source (rows, or elements of a swizzled scale), Q the index (int64
``[n]``: where source position ``j`` lands in the target), a digit one factor of a mixed-radix
split of ``j`` (``j = sum d_i N_i``, ``N_i`` the product of the sizes before it).

Every row order here (``rows.ROW_ORDERS``: FlashInfer's shuffle, the gated interleave, the
half and pair swaps) and the 128x4 scale swizzle moves whole digits of a position: Q is a sum
of one function per digit, ``Q(j) = Q(0) + sum f_i(d_i)``. A digit whose ``f_i`` is ``d s_i``
(``s_i > 0``) is a dimension of a strided view on both sides (source stride ``N_i``, target
stride ``s_i``); any other digit (a swap: ``f(1) < 0``) is enumerated, one ``copy_`` per value.
So a placement is ``len(copies)`` strided copies, each vectorized over whole rows, where an
``index_copy_`` by Q moves one byte at a time on a CPU; the shuffle and a half of a gated w13
are one copy, a whole swapped w13 (the half swap, gpt-oss's pair swap) two.

``strided_copies`` finds the digits from Q alone (``Q`` separates at ``N`` when
``Q(j) = Q(j mod N) + Q(N (j // N)) - Q(0)`` for every ``j``: the cuts, smallest first), so the
copies give Q's bytes for any index that separates, and more copies where one does not (a
position per copy at worst): never other bytes (tests/test_strided.py holds every order to its
index).
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass

import torch

from .words import WIDEST_WORD_BYTES, widest

__all__ = ["StridedCopy", "copy_strided", "strided_copies"]


@dataclass(frozen=True)
class StridedCopy:
    """One ``copy_`` of ``strided_copies``: digits of ``sizes`` (outermost first), their strides
    in the source's and the target's indexed dim, and the first position on each side."""

    sizes: tuple[int, ...]
    source_strides: tuple[int, ...]
    target_strides: tuple[int, ...]
    source_offset: int
    target_offset: int

    @property
    def inverse(self) -> StridedCopy:
        """The same positions copied back, target to source (``Q``'s inverse)."""
        return StridedCopy(self.sizes, self.target_strides, self.source_strides,
                           self.target_offset, self.source_offset)  # fmt: skip


def _cuts(index: torch.Tensor) -> list[int]:
    """The chain ``N_0 = 1 < N_1 < ... = n`` along which ``index`` separates, each cut the
    smallest multiple of the previous one that divides n and separates."""
    n = index.numel()
    chain = [1]
    while chain[-1] < n:
        step = chain[-1]
        for cut in range(2 * step, n + 1, step):
            if n % cut:
                continue
            grid = index.view(n // cut, cut)
            if torch.equal(grid, grid[:1] + grid[:, :1] - index[0]):
                chain.append(cut)
                break
    return chain


def strided_copies(index: torch.Tensor) -> tuple[StridedCopy, ...]:
    """Q (``index``, int64 ``[n]``, distinct positions) as strided copies: ``target[Q[j]] =
    source[j]`` for every ``j`` is ``copy_strided`` of them. One copy per value of the digits
    that are no view (module docstring), in ascending order; adjacent digits that make one
    stride on both sides merged."""
    chain = _cuts(index)
    first = int(index[0])
    views, enumerated = [], []
    for step, cut in itertools.pairwise(chain):
        size = cut // step
        moves = (index[:cut:step] - first).tolist()
        stride = moves[1]
        if not (stride > 0 and moves == [d * stride for d in range(size)]):
            enumerated.append((size, step, moves))
            continue
        if views and (views[-1][1] * views[-1][0], views[-1][2] * views[-1][0]) == (step, stride):
            inner, step, stride = views.pop()  # one digit: the inner one's strides, both sizes
            size *= inner
        views.append((size, step, stride))
    sizes, source, target = (tuple(v[i] for v in reversed(views)) for i in range(3))
    copies = []
    for digits in itertools.product(*(range(size) for size, _, _ in enumerated)):
        source_offset = sum(d * step for d, (_, step, _) in zip(digits, enumerated, strict=True))
        target_offset = first + sum(m[d] for d, (_, _, m) in zip(digits, enumerated, strict=True))
        copies.append(StridedCopy(sizes, source, target, source_offset, target_offset))
    return tuple(copies)


#: A view's geometry, in elements of its tensor: sizes, strides, storage offset.
Geometry = tuple[tuple[int, ...], tuple[int, ...], int]


def _digits(geometry: Geometry, dim: int, copy: StridedCopy, target: bool) -> Geometry:
    """``geometry`` with dim ``dim`` replaced by ``copy``'s digits on its target (or source)
    side, from that side's first position."""
    sizes, strides, offset = geometry
    unit = strides[dim]
    digit_strides, first = (
        (copy.target_strides, copy.target_offset)
        if target
        else (copy.source_strides, copy.source_offset)
    )
    return (
        (*sizes[:dim], *copy.sizes, *sizes[dim + 1 :]),
        (*strides[:dim], *(s * unit for s in digit_strides), *strides[dim + 1 :]),
        offset + first * unit,
    )


def _widest(target: Geometry, source: Geometry) -> tuple[Geometry, Geometry, torch.dtype]:
    """Two uint8 views of one shape, their trailing dims merged where both are contiguous
    there, and the widest integer (``words.widest``) that divides the merged run, every other
    stride and both offsets: the same bytes as fewer elements (a swizzled scale's 4-byte runs
    as one int32 each, not four bytes)."""
    pair = [target, source]
    while len(pair[0][0]) > 1 and all(st[-2] == st[-1] * sz[-1] for sz, st, _ in pair):
        pair = [((*sz[:-2], sz[-2] * sz[-1]), (*st[:-2], st[-1]), at) for sz, st, at in pair]
    runs = [pair[0][0][-1], *(x for _, st, at in pair for x in (at, *st[:-1]))]
    contiguous = all(st[-1] == 1 for _, st, _ in pair)
    return pair[0], pair[1], widest(runs) if contiguous else torch.uint8


@functools.cache
def _plan(
    copies: tuple[StridedCopy, ...], dim: int, target: Geometry, source: Geometry
) -> tuple[tuple[Geometry, Geometry, torch.dtype], ...]:
    """Each copy's target and source views (``_widest``'s), from the geometries of the two
    uint8 tensors (their offsets taken modulo ``WIDEST_WORD_BYTES``, as alignment is all that
    depends on them)."""
    return tuple(
        _widest(_digits(target, dim, copy, True), _digits(source, dim, copy, False))
        for copy in copies
    )


def _layout(t: torch.Tensor) -> tuple[Geometry, int]:
    """``t``'s geometry, its offset modulo ``WIDEST_WORD_BYTES``, and what that leaves out."""
    offset = t.storage_offset()
    aligned = offset - offset % WIDEST_WORD_BYTES
    return (tuple(t.shape), t.stride(), offset - aligned), aligned


def copy_strided(
    target: torch.Tensor, source: torch.Tensor, dim: int, copies: tuple[StridedCopy, ...]
) -> None:
    """``target`` at Q's positions along ``dim`` gets ``source``'s (``copies``:
    ``strided_copies(Q)``; their ``inverse`` for the other way), every other dim as it is.
    uint8 tensors, one ``copy_`` each, their views cached by the tensors' geometry; nothing
    allocated, nothing else written."""
    (into, into_base), (out_of, out_of_base) = _layout(target), _layout(source)
    for (t_sizes, t_strides, t_at), (s_sizes, s_strides, s_at), dtype in _plan(
        copies, dim, into, out_of
    ):
        target.as_strided(t_sizes, t_strides, into_base + t_at).view(dtype).copy_(
            source.as_strided(s_sizes, s_strides, out_of_base + s_at).view(dtype)
        )
