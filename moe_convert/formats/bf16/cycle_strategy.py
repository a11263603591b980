"""In place by walking the cycles of the cell permutation: two launches per weight, no expert loop.

Legend: E experts, C cells of 128 bytes per expert, N segments per expert, L cells per segment
(``formats.bf16.cycles``: one expert's relayout is a permutation of its cells, cut into segments
of L cells along its cycles; the same table serves every expert of the weight).

Registers ``cycle_inplace`` where the Triton strategies register (``triton_strategy``): on a
CUDA GPU, or on CPU tensors under Triton's interpreter (the tests). Per weight:

1. ``index_select`` copies every segment's first cell, of every expert, into a scratch
   ``[E, N, 128]`` (row 0 of the segment table is the index);
2. one Triton launch (the op ``moe_convert::cycle_walk``) moves every segment independently:
   ``dst[c_i] = src[c_{i+1}]`` along its cells, its last source being the next segment's first
   cell, taken from the scratch (the next segment may already have overwritten it).

Each program walks a few segments of one expert in steps of ``_CHUNK`` cells: it loads the
step's sources (128 bytes each, all in flight together), waits at a barrier of its block, then
stores them. The barrier orders a cell's read before its write when two threads touch it (the
write belongs to the next position of the walk). Programs share no cells, except the first cells
that step 1 saved.
"""

from __future__ import annotations

import functools

import torch

from ...formulas import Formula
from ...units import K_MIN_LARGE_ALLOC
from ..layout import BLOCK_K, block_layout_view
from ..registry import register
from .cycles import SEGMENT_CELLS, longest_segment, segment_table
from .triton_strategy import AVAILABLE, INTERPRETED, NEEDS, run_launch, word_dtype

__all__ = ["cycle_inplace"]


@functools.cache
def _kernel():
    """The Triton kernel, compiled on first use."""
    import triton
    import triton.language as tl

    @triton.jit
    def cycle_walk_kernel(
        weight,
        saved,
        table,
        cells,
        segments,
        steps,
        SEGMENT: tl.constexpr,
        SEGS: tl.constexpr,
        CHUNK: tl.constexpr,
        WORDS: tl.constexpr,
    ):
        # weight words [E, cells, WORDS]; saved words [E, segments, WORDS];
        # table int32 [SEGMENT + 1, segments] (formats.bf16.cycles.segment_table); steps: cells of
        # the longest segment
        expert = tl.program_id(0).to(tl.int64)
        lane = tl.arange(0, SEGS * CHUNK)  # tile row: a segment x a step of its walk
        segment = tl.program_id(1) * SEGS + lane // CHUNK
        live = segment < segments
        word = tl.arange(0, WORDS)[None, :]
        expert_cells = weight + expert * cells * WORDS
        successor = tl.load(table + SEGMENT * segments + segment, mask=live, other=0)
        last_source = saved + (expert * segments + successor)[:, None] * WORDS + word
        for first in range(0, steps, CHUNK):
            position = first + lane % CHUNK
            dst = tl.load(
                table + position * segments + segment, mask=live & (position < SEGMENT), other=-1
            )
            src = tl.load(
                table + (position + 1) * segments + segment,
                mask=live & (position + 1 < SEGMENT),
                other=-1,
            )
            moves = (dst >= 0)[:, None]
            in_place = (src >= 0)[:, None]  # the source is a later cell of this segment
            value = tl.load(expert_cells + src.to(tl.int64)[:, None] * WORDS + word, mask=in_place)
            value = tl.where(
                in_place, value, tl.load(last_source, mask=moves & ~in_place)
            )  # the segment's last move: the next segment's saved first cell
            tl.debug_barrier()
            tl.store(expert_cells + dst.to(tl.int64)[:, None] * WORDS + word, value, mask=moves)

    return cycle_walk_kernel


#: Tile of one program: ``_SEGMENTS`` segments x ``_CHUNK`` cells of each per step, 16 KiB on a
#: GPU (as ``triton``'s 128 rows x 128 bytes). The interpreter runs programs one after another,
#: so there a program takes more segments and cells per step.
_SEGMENTS, _CHUNK = (64, 32) if INTERPRETED else (8, 16)
_NUM_WARPS = 4

# Declared with a schema, as triton_strategy's op: ``weight`` is read and written (``a!``),
# ``saved`` and ``table`` are read. The namespace is the package's own name (paired runs).
_OP = f"{__name__.partition('.')[0]}::cycle_walk"
torch.library.define(_OP, "(Tensor(a!) weight, Tensor saved, Tensor table, int steps) -> ()")


@torch.library.impl(_OP, ("cpu", "cuda"))
def _cycle_walk(weight: torch.Tensor, saved: torch.Tensor, table: torch.Tensor, steps: int) -> None:
    """Move ``weight`` bf16 ``[E, M, cols]``'s cells along the segments of ``table``.

    ``saved`` uint8 ``[E, N, 128]`` holds each segment's first cell (``table[0]``) as it was
    before the call; ``table`` int32 ``[L + 1, N]`` is ``cycles.segment_table`` of one expert,
    ``steps`` its longest segment (``cycles.longest_segment``: no program walks further).
    One kernel launch; afterwards ``weight``'s bytes are the block layout ``[E, nb, M, 128]``.
    """
    experts, segments = saved.shape[0], saved.shape[1]
    word = word_dtype(weight, saved)
    words = BLOCK_K // word.itemsize
    run_launch(
        functools.partial(
            _kernel()[(experts, -(-segments // _SEGMENTS))],
            weight.view(word),
            saved.view(word),
            table,
            weight[0].nbytes // BLOCK_K,
            segments,
            steps,
            SEGMENT=table.shape[0] - 1,
            SEGS=_SEGMENTS,
            CHUNK=_CHUNK,
            WORDS=words,
            num_warps=_NUM_WARPS,
        )
    )


@torch.library.register_fake(_OP)
def _cycle_walk_fake(
    weight: torch.Tensor, saved: torch.Tensor, table: torch.Tensor, steps: int
) -> None:
    return None


cycle_walk = getattr(torch.ops, _OP.partition("::")[0]).cycle_walk


@register(
    "cycle_inplace",
    format="bf16",
    inplace=True,
    origin="ours",
    needs=NEEDS,
    available=AVAILABLE,
    peak=Formula("max(10 MiB, 128 E max(N13, N2))"),
    # per weight: the save reads its cells and the index (4 N), writes its cells; the walk reads
    # and writes the weight, reads the saved cells and the table (4 (L + 1) N)
    traffic=Formula(f"2 (T13 + T2) + (384 E + {4 * (SEGMENT_CELLS + 2)}) (N13 + N2)"),
    launches=Formula("4"),
)
def cycle_inplace(
    w13: torch.Tensor, w2: torch.Tensor, gated: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Ours, in place: every cycle of the cell permutation walked at once, from saved starts.

    Per weight (module docstring): one ``index_select`` saves each segment's first cell of
    every expert into one scratch, then one Triton launch moves every cell to its place. 4
    launches per layer, whatever E; every moved cell read once and written once, plus the saved
    cells (about 1/256 of a weight) written, read back, and the segment table read.

    In place: returns 4-D bf16 views of the inputs' storages (``data_ptr`` unchanged). Peak
    transient: the scratch, ``128 E N`` bytes for the larger weight (about ``T / 256``: 3.2
    MiB for qwen3-235b-a22b/tp4), at least 10 MiB so that on CUDA it gets a segment of its own
    rather than stranding a shared 20 MiB one under ``max_split_size_mb=20``
    (``strategies.strided_inplace``). The segment tables are cached per shape and device, as
    the row indices are.
    """
    plans = [
        (weight, segment_table(*weight.shape[1:], interleave, weight.device), interleave)
        for weight, interleave in ((w13, gated), (w2, False))
    ]
    experts = w13.shape[0]
    scratch = torch.empty(
        max(K_MIN_LARGE_ALLOC, *(experts * table.shape[1] * BLOCK_K for _, table, _ in plans)),
        dtype=torch.uint8,
        device=w13.device,
    )
    for weight, table, interleave in plans:
        segments = table.shape[1]
        saved = scratch[: experts * segments * BLOCK_K].view(experts, segments, BLOCK_K)
        word = word_dtype(weight, saved)
        cells = weight.view(word).view(experts, -1, BLOCK_K // word.itemsize)
        torch.index_select(cells, 1, table[0], out=saved.view(word))
        cycle_walk(weight, saved, table, longest_segment(*weight.shape[1:], interleave))
    return block_layout_view(w13), block_layout_view(w2)
