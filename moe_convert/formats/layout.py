"""FlashInfer's BlockMajorK layout for BF16 MoE weights: row permutations and block layout.

Legend: E experts, M rows of one expert matrix, Kb bytes per row, nb = Kb / 128 K blocks.

The TRTLLM BF16 MoE kernel (``epilogue_tile_m = 128``) reads each expert's ``uint8 [M, Kb]``
byte view after two steps:

1. a row permutation ``P`` (``rows_out[r] = rows_in[P[r]]``):
   - shuffle-A: rows move inside blocks of 32 (``shuffle_row_index``);
   - w13 of a gated activation: the gated interleave composed with the shuffle, with the w3/w1
     swap folded in (``w13_row_index``);
   - w2: the shuffle only (``w2_row_index``);
2. the block layout with ``BLOCK_K = 128`` bytes: ``[M, Kb] -> [nb, M, 128]``.

Every one of these permutations is also a pure strided view (``block_layout_copies``): the
shuffle transposes an ``[8, 4]`` grid of rows inside each block of 32, the interleave transposes
``[2, M/2]`` and the swap exchanges the two halves. The index tensors serve the strategies that
gather with them (the public anchors); the views let a conversion be plain ``copy_`` calls.
"""

from __future__ import annotations

import functools

import torch

__all__ = [
    "BLOCK_K",
    "SHUFFLE_BLOCK",
    "SHUFFLE_BLOCK_TILE64",
    "shuffle_row_index",
    "gated_interleave_index",
    "w13_row_index",
    "w2_row_index",
    "to_block_layout",
    "from_block_layout",
    "block_layout_shape",
    "block_layout_view",
    "block_layout_copies",
    "swap_w13_to_w31",
]

# Bytes per K block of BlockMajorK; fixed by the kernel.
BLOCK_K = 128
# Rows shuffled together for epilogue_tile_m = 128; FlashInfer shuffles in blocks of 16 for
# any other tile (get_shuffle_block_size), as DeepSeek block-FP8's tile of 64 does.
SHUFFLE_BLOCK = 32
SHUFFLE_BLOCK_TILE64 = 16


def _shuffle_map(block: int) -> torch.Tensor:
    """Inside a block of ``block`` rows, old row ``o`` becomes new row ``map[o]``: FlashInfer's
    srcToDstBlk32RowMap ``[0, 8, 16, 24, 1, 9, ...]`` (32) and srcToDstBlk16RowMap
    ``[0, 8, 1, 9, ...]`` (16): the rows of each group of 8 dealt round-robin."""
    groups = block // 8
    old = torch.arange(block, dtype=torch.int64)
    return (old % groups) * 8 + old // groups


_CPU = torch.device("cpu")


@functools.cache
def shuffle_row_index(
    rows: int, device: torch.device = _CPU, *, block: int = SHUFFLE_BLOCK
) -> torch.Tensor:
    """Shuffle-A row index ``S`` (int64 ``[M]``, ``S[new] = old``), cached per (rows, device,
    block): FlashInfer's ``get_shuffle_matrix_a_row_indices`` for ``epilogue_tile_m`` 128
    (``block`` 32) or 64 (``block`` 16, ``SHUFFLE_BLOCK_TILE64``).

    Needs ``rows % block == 0``. The cached tensor is shared: never write to it.
    """
    if block not in (SHUFFLE_BLOCK, SHUFFLE_BLOCK_TILE64):
        raise ValueError(f"block must be {SHUFFLE_BLOCK} or {SHUFFLE_BLOCK_TILE64}, got {block}")
    if rows % block:
        raise ValueError(f"rows ({rows}) must be a multiple of {block} for the row shuffle")
    old = torch.arange(rows, dtype=torch.int64)
    new = (old // block) * block + _shuffle_map(block)[old % block]
    index = torch.empty(rows, dtype=torch.int64)
    index[new] = old
    return index.to(device)


@functools.cache
def gated_interleave_index(rows: int, device: torch.device = _CPU) -> torch.Tensor:
    """Gated-activation interleave ``G = [0, M/2, 1, M/2 + 1, ...]`` (int64 ``[M]``), cached."""
    if rows % 2:
        raise ValueError(f"rows ({rows}) must be even for the gated interleave")
    return torch.arange(rows, dtype=torch.int64).view(2, rows // 2).t().reshape(rows).to(device)


@functools.cache
def w13_row_index(
    rows: int, gated: bool, device: torch.device = _CPU, *, fold_swap: bool = True
) -> torch.Tensor:
    """Row index of w13 (int64 ``[M]``), cached per (rows, gated, device, fold_swap).

    Gated, ``fold_swap=True``: ``(G[S] + M/2) % M``, applied to the checkpoint's ``[w1; w3]``
    rows. Gated, ``fold_swap=False``: ``G[S]``, applied to rows already swapped to ``[w3; w1]``
    (FlashInfer's own w3_w1 index). Both give identical bytes. Not gated: ``S`` (no interleave,
    no swap). The cached tensor is shared: never write to it.
    """
    index = shuffle_row_index(rows)
    if gated:
        index = gated_interleave_index(rows)[index]
        if fold_swap:
            index = (index + rows // 2) % rows
    return index.to(device)


def w2_row_index(rows: int, device: torch.device = _CPU) -> torch.Tensor:
    """Row index of w2 (int64 ``[M]``): the shuffle alone (``shuffle_row_index``, cached)."""
    return shuffle_row_index(rows, device)


def swap_w13_to_w31(w13: torch.Tensor) -> torch.Tensor:
    """vLLM's ``swap_w13_to_w31``: ``[w1; w3] -> [w3; w1]`` per expert of a gated w13.

    ``w13`` ``[E, 2I, H]`` (any dtype) -> a new contiguous ``[E, 2I, H]``: a full copy. Its own
    inverse (swapping twice restores the order). The order FlashInfer's helper, SGLang's and
    TensorRT-LLM's loaders keep gemm1 in; ``w13_row_index`` folds it into the row index instead.
    """
    return w13.reshape(-1, 2, w13.shape[-2] // 2, w13.shape[-1]).flip(dims=[1]).reshape(w13.shape)


def to_block_layout(rows_u8: torch.Tensor) -> torch.Tensor:
    """``uint8 [..., M, Kb] -> uint8 [..., nb, M, 128]``: contiguous, a copy when ``nb > 1``.

    With one block per row (``Kb == 128``) both layouts are the same bytes and ``.contiguous()``
    returns a view of the input, as FlashInfer's ``convert_to_block_layout`` does.
    The inverse is ``from_block_layout``.
    """
    *lead, rows, row_bytes = rows_u8.shape
    blocks = rows_u8.view(*lead, rows, row_bytes // BLOCK_K, BLOCK_K)
    return blocks.transpose(-3, -2).contiguous()


def from_block_layout(blocks_u8: torch.Tensor) -> torch.Tensor:
    """``uint8 [..., nb, M, 128] -> uint8 [..., M, Kb]``: contiguous, a copy when ``nb > 1``.

    With ``nb == 1`` a view of the input (the same bytes). The inverse of ``to_block_layout``.
    """
    *lead, nblocks, rows, block = blocks_u8.shape
    return blocks_u8.transpose(-3, -2).reshape(*lead, rows, nblocks * block)


def block_layout_shape(weight: torch.Tensor) -> tuple[int, int, int, int]:
    """The uint8 block-layout shape ``(E, nb, M, 128)`` of ``weight`` bf16 ``[E, M, cols]``.

    ``nb = 2 cols / 128`` (a row of ``cols`` bf16 is ``Kb = 2 cols`` bytes): the shape of the
    ``uint8`` output (or scratch) a strategy writes the converted weight into. A shape, no tensor.
    """
    experts, rows, cols = weight.shape
    return (experts, 2 * cols // BLOCK_K, rows, BLOCK_K)


def block_layout_view(weight: torch.Tensor) -> torch.Tensor:
    """bf16 ``[E, nb, M, 64]`` view over the storage of ``weight`` bf16 ``[E, M, cols]``.

    A view, never a copy (``data_ptr`` unchanged): what an in-place strategy returns once it has
    written the block-layout bytes into the weight's own storage. It reinterprets the bytes; it
    does not move them (``to_block_layout`` does). ``weight`` must be contiguous.
    """
    experts, rows, cols = weight.shape
    return weight.view(experts, 2 * cols // BLOCK_K, rows, BLOCK_K // 2)


def _shuffled_source(rows_u8: torch.Tensor, minor: int) -> torch.Tensor:
    """View ``uint8 [..., R, Kb]`` as ``[..., nb, R / (8 minor), minor, 8, 128]`` (no copy).

    Row ``8 minor b + minor c + a`` lands at ``(b, a, c)``: a transpose of an ``[8, minor]`` grid
    of rows inside each group of ``8 minor``, with the 128-byte K blocks moved in front.
    ``minor = 4`` is the shuffle of 32 rows; ``minor = 2`` on one half of a gated w13 is the
    interleave and the shuffle together.
    """
    *lead, rows, row_bytes = rows_u8.shape
    n = len(lead)
    grid = rows_u8.view(*lead, rows // (8 * minor), 8, minor, row_bytes // BLOCK_K, BLOCK_K)
    return grid.permute(*range(n), n + 3, n, n + 2, n + 1, n + 4)


def block_layout_copies(
    rows_u8: torch.Tensor, blocks_u8: torch.Tensor, *, interleave: bool
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(destination, source) view pairs; ``dst.copy_(src)`` for each pair converts the weight.

    ``rows_u8`` is ``uint8 [..., M, Kb]`` in checkpoint row order and ``blocks_u8`` the
    ``uint8 [..., nb, M, 128]`` output with the same leading dims; all returned tensors are views
    (no copy, no index tensor). The copies give exactly the bytes of indexing the rows with
    ``w13_row_index`` / ``w2_row_index`` and then ``to_block_layout``:

    - ``interleave=False`` (w2; w13 of a non-gated activation): index ``S``; one pair.
    - ``interleave=True`` (w13, gated): index ``(G[S] + M/2) % M``; two pairs, one per half.
      Output row ``32 b + 8 (2 a1 + a0) + c`` takes checkpoint row ``h M/2 + 16 b + 2 c + a1``
      with ``h = 1 - a0`` (the swap puts w3, the second half, first).

    Source and destination must not overlap: in-place strategies go through a scratch buffer.
    """
    *lead, rows, row_bytes = rows_u8.shape
    nblocks = row_bytes // BLOCK_K
    if not interleave:
        dst = blocks_u8.view(*lead, nblocks, rows // SHUFFLE_BLOCK, 4, 8, BLOCK_K)
        return [(dst, _shuffled_source(rows_u8, 4))]
    halves = rows_u8.view(*lead, 2, rows // 2, row_bytes)
    dst = blocks_u8.view(*lead, nblocks, rows // SHUFFLE_BLOCK, 2, 2, 8, BLOCK_K)
    return [(dst.select(-3, a0), _shuffled_source(halves.select(-3, 1 - a0), 2)) for a0 in (0, 1)]
