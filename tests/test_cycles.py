"""The cell permutation of one expert, its cycles and the segment table
(``moe_convert.formats.bf16.cycles``).

Host-side facts only; the kernel that walks the table is tested with every strategy
(``test_strategies.py``) and in ``test_triton_strategy.py``.
"""

from __future__ import annotations

import pytest
import torch

from benchmarks.common import SHAPES
from benchmarks.formats import full_shape
from moe_convert.formats.bf16.cycles import (
    SEGMENT_CELLS,
    cell_permutation,
    cycle_stats,
    longest_segment,
    segment_count,
    segment_table,
)
from moe_convert.formats.layout import BLOCK_K, shuffle_row_index, to_block_layout, w13_row_index

# (rows M, cols, interleave): gated and not, one K block per row, 6 shuffle blocks of 32 rows,
# and a gated w13 whose longest cycle (364 cells) is cut into two segments.
CASES = [(256, 256, True), (256, 128, False), (64, 64, False), (192, 64, True), (384, 256, True)]


@pytest.mark.parametrize("rows, cols, interleave", CASES)
def test_the_permutation_is_the_row_index_then_the_block_layout(rows, cols, interleave):
    expert = torch.randint(0, 256, (rows, 2 * cols), dtype=torch.uint8)
    index = w13_row_index(rows, True) if interleave else shuffle_row_index(rows)
    cells = expert.view(-1, BLOCK_K)
    permuted = cells[cell_permutation(rows, cols, interleave)]
    assert torch.equal(permuted.view(-1), to_block_layout(expert[index]).view(-1))


@pytest.mark.parametrize("rows, cols, interleave", CASES)
def test_the_table_walks_every_moving_cell_once_along_its_cycle(rows, cols, interleave):
    successor = cell_permutation(rows, cols, interleave).tolist()
    table = segment_table(rows, cols, interleave)
    assert table.dtype == torch.int32 and table.shape == (SEGMENT_CELLS + 1, table.shape[1])
    walked = []
    for column in table.t().tolist():
        cells, after = [c for c in column[:-1] if c >= 0], column[-1]
        assert column[: len(cells)] == cells  # no gap before the padding
        assert all(successor[a] == b for a, b in zip(cells, cells[1:], strict=False))
        assert successor[cells[-1]] == table[0, after]  # the last source: the next one's start
        walked += cells
    moving = [cell for cell, source in enumerate(successor) if source != cell]
    assert sorted(walked) == moving
    assert segment_count(rows, cols, interleave) == table.shape[1]
    assert longest_segment(rows, cols, interleave) == max((table[:-1] >= 0).sum(0).tolist())


def test_a_cycle_longer_than_a_segment_is_cut():
    stats = cycle_stats(384, 256, True)
    assert stats.longest == 364 > SEGMENT_CELLS and stats.segments > stats.cycles
    assert longest_segment(384, 256, True) == SEGMENT_CELLS


def test_the_cycles_of_qwen3_235b_tp4_as_issue_19_counted_them():
    # 768 x 64 cells: 22 cycles, the longest 19,890; w2 4096 x 6: 16 with its 2 fixed cells
    w13 = cycle_stats(768, 4096, True)
    assert (w13.cells, w13.fixed, w13.cycles, w13.longest) == (49_152, 0, 22, 19_890)
    w2 = cycle_stats(4096, 384, False)
    assert (w2.cells, w2.fixed, w2.cycles, w2.longest) == (24_576, 2, 14, 11_868)


@pytest.mark.parametrize("label", SHAPES)
def test_every_asv_shape_saves_its_starts_within_two_experts_or_16_mib(label):
    # issue 19's scratch budget: cycle_inplace's saved cells of all experts at once
    shape = full_shape(label)
    budget = max(2 * shape.w13_expert_bytes, 2 * shape.w2_expert_bytes, 16 * 2**20)
    for rows, cols, interleave in (
        (shape.w13_shape[1], shape.hidden, shape.gated),
        (shape.hidden, shape.intermediate, False),
    ):
        assert shape.experts * segment_count(rows, cols, interleave) * BLOCK_K <= budget
