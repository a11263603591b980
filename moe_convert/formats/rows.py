"""The row indices and the moves every quantized strategy is made of.

Legend: E experts, M rows of one expert matrix, K bytes per row (packed weights) or scale
factors per row (scales), S the shuffle-A row index (``layout.shuffle_row_index``), G the gated
interleave (``layout.gated_interleave_index``).

The TRTLLM-gen kernels read each expert's weight rows and scale rows in one permuted order
(``rows_out[r] = rows_in[P[r]]``), and the scales besides in the 128x4 swizzle. ``P`` is, on
the checkpoint's rows (``row_index``):

- ``"swap_halves"``: a gated ``[w1; w3]`` w13 (NVFP4, FP8, MXFP8): ``(G[S] + M/2) % M``, the w3/w1
  swap folded into FlashInfer's w3_w1 index ``G[S]``;
- ``"swap_pairs"``: gpt-oss's interleaved w13 (MXFP4): ``S ^ 1``, vLLM's
  ``swap_every_two_rows`` folded into FlashInfer's w2 index ``S`` that it applies next;
- ``"shuffle"``: w2, and a non-gated w13: ``S``;
- ``"swap"``: ``(r + M/2) % M``, vLLM's ``swap_w13_to_w31`` alone (block-FP8's w13 scale rows);
- ``"swap_halves_tile64"``, ``"shuffle_tile64"``: DeepSeek block-FP8's (no gated interleave;
  FlashInfer's shuffle for ``epilogue_tile_m`` 64, in blocks of 16 rows, ``S64``):
  ``(S64 + M/2) % M`` for a gated ``[w1; w3]`` w13, ``S64`` otherwise.

Block-FP8's weights come out in BlockMajorK, ``[E, K/128, M, 128]``: the row gather reads the
input through its ``[E, K/128, M, 128]``-permuted view, so one gather both reorders the rows
and lays the 128-byte blocks out (``gather_block_rows``).
"""

from __future__ import annotations

import functools

import torch

from .layout import BLOCK_K, SHUFFLE_BLOCK_TILE64, shuffle_row_index, w13_row_index
from .swizzle import swizzled_view
from .words import as_words

__all__ = [
    "MIN_BLOCK_SCALE",
    "ROW_ORDERS",
    "block_major_k",
    "gather_block_rows",
    "gather_rows",
    "gather_scales",
    "relay_rows_in_place",
    "relay_scales_in_place",
    "row_index",
    "scale_index",
    "scale_word_index",
]

ROW_ORDERS = (
    "swap_halves", "swap_pairs", "shuffle", "swap", "swap_halves_tile64", "shuffle_tile64"
)  # fmt: skip

_CPU = torch.device("cpu")

# vLLM's _FI_CUTLASS_MIN_BLOCK_SCALE (prepare_fp8_moe_layer_for_fi): block-FP8 scales are
# clamped up to it on every FlashInfer path, TRTLLM-gen's included (near-zero scales of dead
# experts give NaN in the CUTLASS kernel on Hopper).
MIN_BLOCK_SCALE = 1e-10


@functools.cache
def row_index(order: str, rows: int, device: torch.device = _CPU) -> torch.Tensor:
    """The row index ``P`` of ``order`` (one of ``ROW_ORDERS``), int64 ``[rows]``, cached.

    The cached tensor is shared: never write to it.
    """
    if order == "swap_halves":
        return w13_row_index(rows, True, device)
    if order == "swap_pairs":
        return shuffle_row_index(rows, device) ^ 1
    if order == "shuffle":
        return shuffle_row_index(rows, device)
    if order == "swap":
        return (torch.arange(rows, dtype=torch.int64) + rows // 2).remainder(rows).to(device)
    if order == "swap_halves_tile64":
        return row_index("swap", rows)[shuffle_row_index(rows, block=SHUFFLE_BLOCK_TILE64)].to(
            device
        )
    if order == "shuffle_tile64":
        return shuffle_row_index(rows, device, block=SHUFFLE_BLOCK_TILE64)
    raise ValueError(f"unknown row order {order!r}; one of {', '.join(ROW_ORDERS)}")


@functools.cache
def scale_index(order: str, rows: int, cols: int, device: torch.device = _CPU) -> torch.Tensor:
    """Flat int64 ``[rows cols]`` index: the row permutation and the swizzle as one gather.

    ``out.view(-1)[j] = sf.view(-1)[index[j]]`` for one expert's ``[rows, cols]`` scale matrix
    gives the bytes of gathering its rows with ``row_index(order, rows)`` and then
    ``swizzle.block_scale_interleave`` (``rows % 128 == 0``, ``cols % 4 == 0``). Cached (8
    bytes per scale factor of one expert); never write to it.
    """
    flat = torch.arange(rows * cols, dtype=torch.int64).view(rows, cols)
    rows_first = flat[row_index(order, rows)]
    return swizzled_view(rows_first).reshape(-1).to(device)


@functools.cache
def scale_word_index(order: str, rows: int, cols: int, device: torch.device = _CPU) -> torch.Tensor:
    """``scale_index`` over 4-byte words, int64 ``[rows cols / 4]``: the 128x4 swizzle moves
    a row's 4 bytes of one 4-column tile together, so the gather moves whole words. Cached (2
    bytes per scale factor of one expert); never write to it."""
    return scale_index(order, rows, cols)[::4].div(4, rounding_mode="floor").to(device)


def gather_rows(weight: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Every expert's rows of ``weight [E, M, K]`` by ``index``, in one ``index_select``.

    A new contiguous tensor of ``weight``'s shape and dtype (bytes moved in the widest word
    the rows allow, ``words.as_words``).
    """
    out = torch.empty(weight.shape, dtype=torch.uint8, device=weight.device)
    source, target = as_words(weight.view(torch.uint8), out)
    torch.index_select(source, 1, index, out=target)
    return out.view(weight.dtype)


def gather_scales(scale: torch.Tensor, order: str) -> torch.Tensor:
    """Every expert's scales ``[E, M, K]``, rows by ``order`` and swizzled, in one gather of
    4-byte words (``scale_word_index``; of bytes, ``scale_index``, for scales that start off a
    4-byte boundary: a view into a shared buffer).

    A new contiguous ``[E, M, K]`` uint8 tensor (the swizzled bytes of each expert, as vLLM
    reshapes them; the caller views it as its format returns scales).
    """
    experts, rows, cols = scale.shape
    out = torch.empty(scale.shape, dtype=torch.uint8, device=scale.device)
    flat = scale.view(torch.uint8).view(experts, rows * cols)
    out_flat = out.view(experts, rows * cols)
    if flat.storage_offset() % 4:
        torch.index_select(flat, 1, scale_index(order, rows, cols, scale.device), out=out_flat)
    else:
        index = scale_word_index(order, rows, cols, scale.device)
        torch.index_select(flat.view(torch.int32), 1, index, out=out_flat.view(torch.int32))
    return out


def block_major_k(rows_u8: torch.Tensor) -> torch.Tensor:
    """``uint8 [..., M, K] -> [..., K/128, M, 128]``: a permuted view of the same storage (no
    copy), which a row gather along dim -2 turns into BlockMajorK."""
    *lead, rows, cols = rows_u8.shape
    blocked = rows_u8.view(*lead, rows, cols // BLOCK_K, BLOCK_K)
    return blocked.transpose(-3, -2)


def gather_block_rows(weight: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Every expert's rows of ``weight [E, M, K]`` by ``index``, in BlockMajorK, in one
    ``index_select``: a new contiguous ``[E, K/128, M, 128]`` tensor of ``weight``'s dtype."""
    experts, rows, cols = weight.shape
    out = torch.empty(
        (experts, cols // BLOCK_K, rows, BLOCK_K), dtype=torch.uint8, device=weight.device
    )
    source, target = as_words(block_major_k(weight.view(torch.uint8)), out)
    torch.index_select(source, 2, index, out=target)
    return out.view(weight.dtype)


def relay_rows_in_place(weight: torch.Tensor, index: torch.Tensor, scratch: torch.Tensor) -> None:
    """Each expert of ``weight [E, M, K]`` gathered by ``index`` into ``scratch``, copied back.

    ``scratch``: uint8, at least one expert's bytes. The result is in ``weight``'s own storage.
    """
    experts = weight.view(torch.uint8)  # K bytes per row of any dtype (float32 scales: 4 K)
    _, rows, cols = experts.shape
    expert_scratch = scratch[: rows * cols].view(rows, cols)
    for expert in experts:
        words, scratch_words = as_words(expert, expert_scratch)
        torch.index_select(words, 0, index, out=scratch_words)
        words.copy_(scratch_words)


def relay_scales_in_place(scale: torch.Tensor, index: torch.Tensor, scratch: torch.Tensor) -> None:
    """Each expert of ``scale [E, M, K]``: rows gathered into ``scratch``, swizzled back.

    The swizzle is a strided ``copy_`` from the scratch into the expert's own bytes
    (``swizzle.swizzled_view``), so nothing but ``scratch`` is allocated.
    """
    _, rows, cols = scale.shape
    expert_scratch = scratch[: rows * cols].view(rows, cols)
    for expert in scale.view(torch.uint8):
        torch.index_select(expert, 0, index, out=expert_scratch)
        swizzled = swizzled_view(expert_scratch)
        expert.view(swizzled.shape).copy_(swizzled)
