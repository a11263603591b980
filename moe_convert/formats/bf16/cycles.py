"""One expert's relayout as a permutation of 128-byte cells: its cycles, cut into segments.

Legend: M rows of one expert matrix, nb = Kb / 128 K blocks per row, C = M nb cells per expert,
L = ``SEGMENT_CELLS``, N segments per expert.

An expert ``uint8 [M, Kb]`` is ``C`` cells of 128 bytes, cell ``r nb + b`` holding block ``b`` of
row ``r``. Its converted bytes ``[nb, M, 128]`` are the same cells reordered: output cell
``b M + n`` (block ``b`` of output row ``n``) is input cell ``P(n) nb + b``, with ``P`` the
weight's row index (``layout.w13_row_index``, ``layout.w2_row_index``). Written over the same
bytes, position ``j`` receives the cell at position ``pi(j)``: a permutation of ``C`` positions,
the same for every expert of a weight, decomposed here into cycles ``c_0, c_1 = pi(c_0), ...``
(``dst[c_i] = src[c_{i+1}]``, the last one wrapping to ``c_0``). Cycles of length 1 are cells
that stay where they are.

Every cycle of two or more cells is cut into segments of ``L`` consecutive cells (the last one
shorter). A segment's moves need no other segment's cells except its successor's first cell, so
once every segment's first cell is saved, all segments can move at once
(``formats.bf16.cycle_strategy``). The table of that walk is computed here on the host, once per
expert shape (``segment_table``); nothing here depends on the number of experts.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from ..layout import BLOCK_K, shuffle_row_index, w13_row_index

__all__ = [
    "SEGMENT_CELLS",
    "CycleStats",
    "cell_permutation",
    "cycle_stats",
    "longest_segment",
    "segment_count",
    "segment_table",
]

#: L: cells per segment (32 KiB). The saved first cells are about 1/L of a weight (T / 256:
#: 3 MiB for qwen3-235b-a22b/tp4's 768 MiB w13); fewer, longer segments would shrink that and
#: the table but leave fewer independent walks to spread over a GPU's programs.
SEGMENT_CELLS = 256

_CPU = torch.device("cpu")


def cell_permutation(rows: int, cols: int, interleave: bool) -> torch.Tensor:
    """``pi`` (int64 ``[C]``): position ``j`` of an expert's converted bytes receives input cell
    ``pi[j]``.

    One expert is ``rows`` x ``cols`` bf16 (``M`` x ``Kb / 2``). ``interleave``: a gated w13,
    whose row index is ``w13_row_index(rows, True)``; otherwise (w2, a non-gated w13) the
    shuffle alone, ``shuffle_row_index(rows)``. A new CPU tensor.
    """
    index = w13_row_index(rows, True) if interleave else shuffle_row_index(rows)
    nblocks = 2 * cols // BLOCK_K
    # output cell (b, n) at b M + n  <-  input cell (P(n), b) at P(n) nb + b
    return (index[None, :] * nblocks + torch.arange(nblocks)[:, None]).reshape(-1)


def _cycles(permutation: torch.Tensor) -> list[list[int]]:
    """The cycles of two or more positions, each in walk order from its smallest position."""
    successor = permutation.tolist()
    seen = bytearray(len(successor))
    cycles = []
    for start in range(len(successor)):
        if seen[start] or successor[start] == start:
            continue
        cycle, position = [], start
        while not seen[position]:
            seen[position] = 1
            cycle.append(position)
            position = successor[position]
        cycles.append(cycle)
    return cycles


@functools.cache
def _segments(rows: int, cols: int, interleave: bool) -> tuple[torch.Tensor, int]:
    """The host table of ``segment_table`` and the longest segment's length."""
    columns: list[list[int]] = []
    longest = 0
    for cycle in _cycles(cell_permutation(rows, cols, interleave)):
        first = len(columns)
        pieces = [cycle[i : i + SEGMENT_CELLS] for i in range(0, len(cycle), SEGMENT_CELLS)]
        longest = max(longest, len(pieces[0]))
        for k, piece in enumerate(pieces):
            successor = first + (k + 1) % len(pieces)  # the next segment of the cycle, wrapping
            columns.append(piece + [-1] * (SEGMENT_CELLS - len(piece)) + [successor])
    return torch.tensor(columns, dtype=torch.int32).t().contiguous(), longest


@functools.cache
def segment_table(
    rows: int, cols: int, interleave: bool, device: torch.device = _CPU
) -> torch.Tensor:
    """The segments of one expert's cycles: int32 ``[L + 1, N]``, cached per shape and device.

    Column ``s`` is segment ``s``: rows ``0 .. L-1`` its cells in walk order (``-1`` past its
    end), row ``L`` the column of the segment after it in its cycle (its own first cell, once
    saved, is this segment's last source). Row 0 (contiguous) is every segment's first cell.
    Arguments as ``cell_permutation``. The cached tensor is shared: never write to it.
    """
    return _segments(rows, cols, interleave)[0].to(device)


def segment_count(rows: int, cols: int, interleave: bool) -> int:
    """N: segments of one expert (arguments as ``cell_permutation``); host only, cached."""
    return _segments(rows, cols, interleave)[0].shape[1]


def longest_segment(rows: int, cols: int, interleave: bool) -> int:
    """Cells of the longest segment (at most L; shorter when every cycle is); host only, cached."""
    return _segments(rows, cols, interleave)[1]


@dataclass(frozen=True)
class CycleStats:
    """The cycle structure of one expert's cell permutation (``cycle_stats``)."""

    cells: int  # C
    fixed: int  # cells that stay where they are
    cycles: int  # cycles of two or more cells
    longest: int  # cells of the longest cycle
    segments: int  # N


def cycle_stats(rows: int, cols: int, interleave: bool) -> CycleStats:
    """Counts of ``cell_permutation``'s cycles and segments (arguments as there)."""
    cycles = _cycles(cell_permutation(rows, cols, interleave))
    cells = rows * 2 * cols // BLOCK_K
    return CycleStats(
        cells=cells,
        fixed=cells - sum(map(len, cycles)),
        cycles=len(cycles),
        longest=max(map(len, cycles), default=0),
        segments=segment_count(rows, cols, interleave),
    )
