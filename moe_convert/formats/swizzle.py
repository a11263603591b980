"""FlashInfer's 128x4 block-scale swizzle (``block_scale_interleave``) in torch.

Legend: M rows and K columns of one scale matrix (one byte per scale factor), Mp = M rounded up
to 128, Kp = K rounded up to 4.

FlashInfer's ``block_scale_interleave`` (alias ``nvfp4_block_scale_interleave``) is a CUDA op;
its definition is the torch ``swizzle_sf`` of FlashInfer's ``tests/utils/test_fp4_quantize.py``,
which that test holds bit-equal to the op: zero-pad ``[M, K]`` to ``[Mp, Kp]``, view it as
``[Mp/128, 4, 32, Kp/4, 4]``, transpose dims 1 and 3, make it contiguous. Scale ``(m, k)`` then
lands at flat offset

    ((m // 128) (Kp / 4) + k // 4) 512 + (m % 32) 16 + ((m % 128) // 32) 4 + k % 4

(``swizzle_offset``). The inverse is ``unswizzle``. Every TRTLLM-gen MoE conversion here keeps
``M % 128 == 0`` and ``K % 4 == 0`` (FlashInfer asserts the first, vLLM's reshape of the stacked
result needs the second): then the swizzle is a pure permutation of the bytes and
``swizzled_view`` writes it with one ``copy_``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = [
    "ROWS_PER_TILE",
    "COLS_PER_TILE",
    "block_scale_interleave",
    "swizzle_offset",
    "swizzled_size",
    "swizzled_view",
    "unswizzle",
]

# The tile of the layout: 128 rows (4 groups of 32) by 4 scale columns, 512 bytes.
ROWS_PER_TILE = 128
COLS_PER_TILE = 4


def _padded(rows: int, cols: int) -> tuple[int, int]:
    return -(-rows // ROWS_PER_TILE) * ROWS_PER_TILE, -(-cols // COLS_PER_TILE) * COLS_PER_TILE


def swizzled_size(rows: int, cols: int) -> int:
    """Elements of the swizzled ``[rows, cols]`` scale matrix: ``Mp Kp`` (the padding included)."""
    padded_rows, padded_cols = _padded(rows, cols)
    return padded_rows * padded_cols


def swizzle_offset(row: int, col: int, cols: int) -> int:
    """Flat offset of scale ``(row, col)`` of a ``[M, cols]`` matrix in its swizzled layout.

    The formula of the module docstring, written out; the tests hold ``block_scale_interleave``
    to it element by element.
    """
    tiles_per_row = _padded(0, cols)[1] // COLS_PER_TILE
    tile = (row // ROWS_PER_TILE) * tiles_per_row + col // COLS_PER_TILE
    return tile * 512 + (row % 32) * 16 + ((row % ROWS_PER_TILE) // 32) * 4 + col % COLS_PER_TILE


def swizzled_view(sf: torch.Tensor) -> torch.Tensor:
    """``[..., M, K]`` (``M % 128 == 0``, ``K % 4 == 0``) as a view in swizzled element order.

    Returns ``[..., M/128, K/4, 32, 4, 4]``, a view of ``sf`` (no copy): its elements read in
    row-major order are the swizzled bytes, so ``out.view(dst.shape).copy_(swizzled_view(sf))``
    swizzles into ``out`` without a temporary. ``sf`` must be contiguous in its last two dims.
    """
    *lead, rows, cols = sf.shape
    tiles = sf.view(*lead, rows // ROWS_PER_TILE, 4, 32, cols // COLS_PER_TILE, COLS_PER_TILE)
    return tiles.transpose(-4, -2)


def block_scale_interleave(sf: torch.Tensor) -> torch.Tensor:
    """FlashInfer's ``block_scale_interleave`` on any device: ``[M, K]`` or ``[E, M, K]`` -> flat.

    ``sf`` uint8 (or bf16) ``[M, K]`` or ``[E, M, K]`` -> a new contiguous 1-D tensor of
    ``E Mp Kp`` elements, each expert's swizzled matrix after the other, padding zero, as the
    CUDA op returns it. Aligned input (``M % 128 == 0``, ``K % 4 == 0``) costs one copy, the
    output; otherwise the zero-padded input is a temporary first. The inverse is ``unswizzle``.
    """
    rows, cols = sf.shape[-2:]
    padded_rows, padded_cols = _padded(rows, cols)
    if (padded_rows, padded_cols) != (rows, cols):
        sf = F.pad(sf, (0, padded_cols - cols, 0, padded_rows - rows))
    return swizzled_view(sf).contiguous().view(-1)


def unswizzle(flat: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """The inverse of ``block_scale_interleave``: flat ``E Mp Kp`` -> a new ``[E, rows, cols]``.

    The padding is dropped. A copy.
    """
    padded_rows, padded_cols = _padded(rows, cols)
    tiles = flat.view(-1, padded_rows // ROWS_PER_TILE, padded_cols // COLS_PER_TILE, 32, 4, 4)
    padded = tiles.transpose(-4, -2).reshape(-1, padded_rows, padded_cols)
    return padded[:, :rows, :cols].contiguous()
