"""A row order as strided copies (``moe_convert.formats.strided``): derived from the index, they
put every position where the index says and write nothing else, for every row order and the
scale swizzle at every size the formats convert; an index with no structure still comes out
exact, in more copies."""

from __future__ import annotations

import pytest
import torch

from moe_convert.formats.placement import Move, copies_per_slice, placement_index
from moe_convert.formats.rows import ROW_ORDERS
from moe_convert.formats.strided import copy_strided, strided_copies

# Rows of one expert matrix: multiples of 128 (the swizzle's tile, the shuffles' blocks), and
# of an odd number of 128-row tiles (I = 384 per rank), as the catalog has.
ROWS = (128, 256, 384, 768, 1536)
SCALE_COLS = (4, 12, 24, 256)


def placed(index: torch.Tensor, *, row_bytes: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows ``0..n-1`` (each ``row_bytes`` wide) copied by ``strided_copies(index)`` into a
    target of ``max(index) + 2`` rows filled with 255: (target, what the index says)."""
    n = index.numel()
    source = (torch.arange(n * row_bytes) % 251).to(torch.uint8).view(n, row_bytes)
    target = torch.full((int(index.max()) + 2, row_bytes), 255, dtype=torch.uint8)
    want = target.clone()
    want[index] = source
    copy_strided(target, source, 0, strided_copies(index))
    return target, want


@pytest.mark.parametrize("order", ROW_ORDERS)
def test_every_row_order_whole_and_by_halves_lands_where_its_index_says(order):
    for rows in ROWS:
        index = placement_index(order, rows, 1, False)
        for part in (index, index[: rows // 2], index[rows // 2 :]):
            for row_bytes in (3, 16):  # bytes, and runs copied as int64
                target, want = placed(part, row_bytes=row_bytes)
                assert torch.equal(target, want), (order, rows, part.numel(), row_bytes)


@pytest.mark.parametrize("order", ["swap_halves", "swap_pairs", "shuffle"])
def test_the_scale_swizzle_with_each_order_lands_where_its_index_says(order):
    for rows in ROWS:
        for cols in SCALE_COLS:
            index = placement_index(order, rows, cols, True)
            for part in (index, index[: index.numel() // 2]):
                target, want = placed(part, row_bytes=1)
                assert torch.equal(target, want), (order, rows, cols)


def test_an_index_without_structure_is_exact_in_more_copies():
    index = torch.randperm(96, generator=torch.Generator().manual_seed(0)) * 2
    target, want = placed(index)
    assert torch.equal(target, want)
    assert len(strided_copies(index)) > 2


def test_a_whole_swapped_tensor_is_two_copies_and_anything_else_one():
    """The counts ``copies_per_slice`` gives (and the figures count), the same at every size:
    a swap of halves or of pairs two copies, either half one, the shuffle one."""
    for rows in ROWS:
        for order in ROW_ORDERS:
            index = placement_index(order, rows, 1, False)
            whole = 1 if order.startswith("shuffle") else 2
            assert len(strided_copies(index)) == whole, (order, rows)
            halves = 2 if order == "swap_pairs" else 1
            assert len(strided_copies(index[: rows // 2])) == halves, (order, rows)
            move = Move(order, "rows", torch.uint8)
            assert copies_per_slice(move, 1) == whole and copies_per_slice(move, 2) == halves
        for cols in SCALE_COLS:
            index = placement_index("swap_halves", rows, cols, True)
            half = index[: index.numel() // 2]
            assert len(strided_copies(index)) == 2 and len(strided_copies(half)) == 1


def test_the_copies_reversed_gather_back():
    index = placement_index("swap_halves", 256, 1, False)
    source = torch.arange(256 * 4, dtype=torch.int64).to(torch.uint8).view(256, 4)
    target = torch.empty_like(source)
    copies = strided_copies(index)
    copy_strided(target, source, 0, copies)
    back = torch.empty_like(source)
    copy_strided(back, target, 0, tuple(c.inverse for c in copies))
    assert torch.equal(back, source)
