"""MXINT4 (W4A16: Kimi-K2-Thinking's int4 experts) on the TRTLLM-gen MoE: vLLM 0.33.0's
preparation transcribed (``mxint4-legacy``) and this library's kinds (``-fast``,
``-preallocated``, ``-inplace``). Its record, ``MXINT4``, is defined here first.

Legend as in ``moe_convert.formats.format``: E experts, H hidden, I intermediate per rank,
M13 = 2I rows of w13 (gated only: vLLM's ``TrtLlmMxint4ExpertsMonolithic`` has no non-gated
form), K packed bytes per row (H/2 for w13, I/2 for w2).

In, as vLLM 0.33.0 loads a compressed-tensors ``pack-quantized`` checkpoint: weights int32
``[E, M13, H/8]``, ``[E, H, I/8]``, each word eight uint4b8 nibbles (the value plus 8), w13's
halves ``[w1; w3]``; scales bf16 ``[E, M13, H/32]``, ``[E, H, I/32]``. Out: weights uint8 in
BlockMajorK, ``[E, H/256, M13, 128]`` and ``[E, I/256, H, 128]``, each nibble the signed int4
the kernel takes; scales bf16, flat per expert, ``[E, M13 H/32]`` and ``[E, H I/32]``, in the
128x4 swizzle. Rows (weights and scales alike) in FlashInfer's order: w13's halves swapped to
``[w3; w1]``, interleaved for the gated activation and shuffled (``epilogue_tile_m`` 128); w2's
shuffled.

Two facts make our kinds one pass. vLLM's sign step (``(nibble - 8) & 0xF`` on each of the eight
nibbles) is ``nibble ^ 8``: every byte XOR ``0x88``. And every row order here is a reshape: the
shuffle reads rows ``32c + 4q + a`` into ``32c + 8a + q`` (a ``[8, 4]`` transpose), the gated
interleave takes ``[w3_0, w1_0, w3_1, ...]``, so with BlockMajorK and the swizzle, also views,
each tensor's relayout is a strided copy of its input view into its output view
(``_source``/``_destination``): ``bitwise_xor(..., out=)`` for weights, ``copy_`` for scales.
"""

from __future__ import annotations

import torch

from ..formulas import Formula
from .format import Format
from .kinds import REORDER_LAUNCHES, reorder_w1w3_to_w3w1, scratch_of
from .layer import Layer, check_layer
from .layout import BLOCK_K, shuffle_row_index, w13_row_index
from .registry import register
from .swizzle import COLS_PER_TILE, ROWS_PER_TILE, block_scale_interleave
from .words import as_words

__all__ = ["MXINT4", "mxint4_fast", "mxint4_inplace", "mxint4_legacy", "mxint4_preallocated"]

# vLLM's uint4b8 -> int4 on both nibbles of a byte: (n - 8) & 0xF == n ^ 8.
SIGN_FLIP = 0x88

# Compressed-tensors' int32 words of eight uint4b8 nibbles, bf16 scales per 32 elements.
# vLLM 0.33.0 and 0.34.0 pad nothing on its path (no alignment here: the catalog gives the
# model's own sizes); FlashInfer's convert_to_block_layout(block_k=128) needs H/2 and I/2 bytes
# in whole 128-byte blocks (prepare_trtllm_mxint4_weights: H and I % 256), gated only.
MXINT4 = Format(
    name="mxint4",
    title="MXINT4",
    check=check_layer,
    upstream="mxint4-legacy",
    weight_dtype=torch.int32,
    elements_per_item=8,
    scale_dtype=torch.bfloat16,
    scale_block=32,
    relaid_scale_dtype=torch.bfloat16,
    gated_only=True,
    weight_row_align=128,
    weight_row_rule="vLLM's MXINT4 preparation pads nothing, and FlashInfer's "
    'convert_to_block_layout(block_k=128) asserts "K must be divisible by blockK"',
    block_major_k=True,
    converted_weight_dtype=torch.uint8,
    sign_flip=SIGN_FLIP,
    flat_scales=True,
)


def _convert_packed_uint4b8_to_signed_int4_inplace(t: torch.Tensor) -> torch.Tensor:
    """vLLM 0.33.0 ``quant_utils.convert_packed_uint4b8_to_signed_int4_inplace`` (its CUDA
    assert dropped): per nibble a shift, a mask, then the nibble cleared and rewritten in place.
    Three tensors of ``t``'s size are alive at once (the nibble and two of its temporaries)."""
    for i in range(8):
        shift = 4 * i
        nib = (t >> shift) & 0xF
        t &= ~(0xF << shift)
        t |= ((nib - 8) & 0xF) << shift
    return t


def _convert_to_block_layout(input_tensor: torch.Tensor, block_k: int) -> torch.Tensor:
    """FlashInfer 0.7.4 ``fused_moe.core.convert_to_block_layout``: ``[M, K]`` -> a new
    ``[K/block_k, M, block_k]``."""
    m, k = input_tensor.shape
    return input_tensor.view(m, k // block_k, block_k).permute(1, 0, 2).contiguous()


# convert_to_block_layout copies an expert unless its rows are one 128-byte block (then the
# permuted view is already contiguous): 1 when K = 8 S / X (bytes per row) is over 128, else 0.
RELAID13 = "(1 - 16 X13 // S13)"
RELAID2 = "(1 - 16 X2 // S2)"


@register(
    "mxint4-legacy",
    format="mxint4",
    inplace=False,
    origin="vLLM 0.33.0, transcribed",
    peak=Formula("max(3 T13, T13 + S13 + 2 T2 + 2 F13 + F2 // E, 2 T13 + T2 + F13 + F2)"),
    traffic=Formula(
        f"127 T13 + 124 T2 + 9 F13 + 6 F2 + 2 E (X13 + X2) + 2 T13 {RELAID13} + 2 T2 {RELAID2}"
    ),
    launches=Formula(f"116 + {REORDER_LAUNCHES} + E (6 + {RELAID13} + {RELAID2})"),
)
def mxint4_legacy(layer: Layer, gated: bool) -> Layer:
    """vLLM 0.33.0 ``flashinfer_mxint4_moe.prepare_static_weights_for_trtllm_mxint4_moe``.

    The sign step in place on both int32 weights, ``reorder_w1w3_to_w3w1`` in place on w13 and
    its scales (64 MiB chunks), then per expert: w13's rows gathered, its scale rows gathered
    and interleaved, the same for w2, both weights relaid by ``convert_to_block_layout``; four
    lists; four stacks, each list freed as its name is rebound (the loop's last two relaid
    experts stay referenced until return). Leaves the input signed and ``[w3; w1]``.
    Peak transient: the sign step's three w13-sized tensors, or the lists with the stacks.
    """
    gemm1_weights, gemm2_weights = layer.w13, layer.w2
    gemm1_scales, gemm2_scales = layer.w13_scale, layer.w2_scale
    device = gemm1_weights.device
    # vLLM converts only when both are int32, which check_layer guarantees.
    _convert_packed_uint4b8_to_signed_int4_inplace(gemm1_weights)
    _convert_packed_uint4b8_to_signed_int4_inplace(gemm2_weights)
    reorder_w1w3_to_w3w1(gemm1_weights, gemm1_scales)

    num_experts = gemm1_weights.shape[0]
    gemm1_weights_mxint4 = gemm1_weights.view(torch.uint8)
    gemm2_weights_mxint4 = gemm2_weights.view(torch.uint8)
    # FlashInfer's w3_w1 index (the gated interleave, then the shuffle) and its w2 index,
    # from this library's cache; the scales' (num_elts_per_sf 32 and 16) are the same rows.
    permute13 = w13_row_index(gemm1_weights.shape[1], gated, device, fold_swap=False)
    permute2 = shuffle_row_index(gemm2_weights.shape[1], device)

    block_k = 128
    gemm1_weights_mxint4_shuffled = []
    gemm1_scales_shuffled = []
    gemm2_weights_mxint4_shuffled = []
    gemm2_scales_shuffled = []
    for i in range(num_experts):
        gemm1_weights_shuffled = gemm1_weights_mxint4[i][permute13].contiguous()
        gemm1_scales_shuffled.append(
            block_scale_interleave(gemm1_scales[i][permute13].contiguous())
        )
        gemm2_weights_shuffled = gemm2_weights_mxint4[i][permute2].contiguous()
        gemm2_scales_shuffled.append(block_scale_interleave(gemm2_scales[i][permute2].contiguous()))
        gemm1_weights_shuffled = _convert_to_block_layout(
            gemm1_weights_shuffled.view(torch.uint8), block_k
        )
        gemm2_weights_shuffled = _convert_to_block_layout(
            gemm2_weights_shuffled.view(torch.uint8), block_k
        )
        gemm1_weights_mxint4_shuffled.append(gemm1_weights_shuffled)
        gemm2_weights_mxint4_shuffled.append(gemm2_weights_shuffled)

    gemm1_weights_mxint4_shuffled = torch.stack(gemm1_weights_mxint4_shuffled)
    gemm2_weights_mxint4_shuffled = torch.stack(gemm2_weights_mxint4_shuffled)
    gemm1_scales_shuffled = torch.stack(gemm1_scales_shuffled).view(torch.bfloat16)
    gemm2_scales_shuffled = torch.stack(gemm2_scales_shuffled).view(torch.bfloat16)
    return Layer(
        gemm1_weights_mxint4_shuffled,
        gemm2_weights_mxint4_shuffled,
        gemm1_scales_shuffled,
        gemm2_scales_shuffled,
    )


# Our kinds. A row m of the relaid order is m = 128 t + 32 g + 16 a1 + 8 a0 + q (q < 8): the
# shuffle's block c = 4 t + g, its transposed pair a = 2 a1 + a0. Both sides are viewed with
# the rows split so, as [E, t, g, a1, a0, q, *k], and the row's bytes (or scales) split as the
# output lays them out (*k: [K/128, 128] for BlockMajorK, [K/4, 4] for the swizzle).
_ROW_SPLIT = (4, 2, 2, 8)  # g, a1, a0, q: the rows of one 128-row tile


def _destination(out: torch.Tensor, rows: int, scale: bool) -> torch.Tensor:
    """``out``'s storage as ``[E, t, g, a1, a0, q, *k]``: a view (BlockMajorK for weights
    ``[E, K/128, M, 128]``, the 128x4 swizzle for flat scales ``[E, M K]``)."""
    experts = out.shape[0]
    tiles = rows // ROWS_PER_TILE
    if scale:
        # Swizzled offset of (m, k): ((t (K/4) + k // 4) 512 + (m % 32) 16 + g 4 + k % 4.
        swizzled = out.view(experts, tiles, -1, 2, 2, 8, 4, COLS_PER_TILE)
        return swizzled.permute(0, 1, 6, 3, 4, 5, 2, 7)
    by_rows = out.view(experts, -1, rows, BLOCK_K).transpose(1, 2)
    return by_rows.unflatten(1, (tiles, *_ROW_SPLIT))


def _source(
    tensor: torch.Tensor, scale: bool, gated: bool
) -> list[tuple[int | None, torch.Tensor]]:
    """``tensor [E, M, K]`` in the relaid row order, as ``(a0, view)`` pairs: the view of the
    rows that land at ``a0`` (``None``: every row, one view), dims ``[E, t, g, a1, (a0,) q, *k]``.

    w2 (and a non-gated w13): output row ``32c + 8a + q`` reads row ``32c + 4q + a``. A gated
    w13: row ``32c + 16 a1 + 8 a0 + q`` reads row ``(1 - a0) M/2 + 16c + 2q + a1`` (the w1/w3
    swap, FlashInfer's gated interleave and the shuffle, as ``layout.w13_row_index``).
    """
    experts, rows, cols = tensor.shape
    k = (cols // COLS_PER_TILE, COLS_PER_TILE) if scale else (cols // BLOCK_K, BLOCK_K)
    tiles = rows // ROWS_PER_TILE
    if not gated:
        split = tensor.view(experts, tiles, 4, 8, 2, 2, *k)  # t, g, q, a1, a0
        return [(None, split.permute(0, 1, 2, 4, 5, 3, 6, 7))]
    halves = tensor.view(experts, 2, tiles, 4, 8, 2, *k)  # half, t, g, q, a1
    return [(a0, halves[:, 1 - a0].permute(0, 1, 2, 4, 3, 5, 6)) for a0 in (0, 1)]


def _relay(src: torch.Tensor, dst: torch.Tensor, scale: bool, gated: bool) -> None:
    """Write ``src``'s relaid bytes into ``dst`` (views of ``_destination``'s shape); weights
    are sign-flipped on the way (one ``bitwise_xor`` per view), scales copied. Both move in
    the widest word the views allow (``words.as_words``), the flip repeated over its bytes."""
    for a0, view in _source(src, scale, gated):
        target = dst if a0 is None else dst[:, :, :, :, a0]
        source, target = as_words(view, target, integer=not scale)  # integers to XOR
        if scale:
            target.copy_(source)
        else:
            flip = int.from_bytes(
                bytes([SIGN_FLIP]) * source.element_size(), "little", signed=source.is_signed()
            )
            torch.bitwise_xor(source, flip, out=target)


def _tensors(layer: Layer, gated: bool):
    """(weight as uint8 ``[E, M, K]``, its scales, whether its rows take the gated order) of
    w13, then of w2."""
    return (
        (layer.w13.view(torch.uint8), layer.w13_scale, gated),
        (layer.w2.view(torch.uint8), layer.w2_scale, False),
    )


def _out_of_place(layer: Layer, gated: bool, per_expert: bool) -> Layer:
    """The outputs allocated once; each tensor relaid into its output by ``_relay``, over all
    experts at once or expert by expert into its slot."""
    converted = []
    for weight, scale, order_gated in _tensors(layer, gated):
        experts, rows, cols = weight.shape
        out = torch.empty((experts, cols // BLOCK_K, rows, BLOCK_K), dtype=torch.uint8,
                          device=weight.device)  # fmt: skip
        out_scale = torch.empty((experts, scale[0].numel()), dtype=scale.dtype, device=scale.device)
        for tensor, target, is_scale in ((weight, out, False), (scale, out_scale, True)):
            dst = _destination(target, rows, is_scale)
            slots = [slice(e, e + 1) for e in range(experts)] if per_expert else [slice(None)]
            for slot in slots:
                _relay(tensor[slot], dst[slot], is_scale, order_gated)
        converted.append((out, out_scale))
    (w13, s13), (w2, s2) = converted
    return Layer(w13, w2, s13, s2)


def mxint4_fast(layer: Layer, gated: bool) -> Layer:
    """Per tensor one strided pass from its input view into its output view: weights
    sign-flipped, relaid and in BlockMajorK (``bitwise_xor(..., out=)``), scales relaid and
    swizzled (``copy_``); a gated w13's two halves one pass each. No index is read.

    Out of place: new tensors; the input is unchanged. Peak transient: the outputs.
    """
    return _out_of_place(layer, gated, per_expert=False)


def mxint4_preallocated(layer: Layer, gated: bool) -> Layer:
    """vLLM #55407's form: the outputs allocated once, each expert relaid into its slot (the
    passes of ``mxint4_fast``, one expert at a time).

    Out of place: new tensors; the input is unchanged. Peak transient: the outputs.
    """
    return _out_of_place(layer, gated, per_expert=True)


def mxint4_inplace(layer: Layer, gated: bool) -> Layer:
    """One scratch of one expert's weight (at least 10 MiB); per expert and tensor, its relaid
    bytes written into the scratch by ``_relay`` (a one-expert view), then copied back.

    In place: weights come back as BlockMajorK uint8 views of the input's storage, scales as
    flat bf16 views of theirs. Peak transient: the scratch, ``max(S13, S2, 10 MiB)``.
    """
    scratch = scratch_of(layer)
    converted = []
    for weight, scale, order_gated in _tensors(layer, gated):
        experts, rows, cols = weight.shape
        for tensor, is_scale in ((weight, False), (scale, True)):
            flat = tensor.view(experts, -1)
            expert_scratch = scratch[: flat[0].nbytes].view(tensor.dtype).view(1, -1)
            if not is_scale:
                expert_scratch = expert_scratch.view(1, cols // BLOCK_K, rows, BLOCK_K)
            target = _destination(expert_scratch, rows, is_scale)
            for e in range(experts):
                _relay(tensor[e : e + 1], target, is_scale, order_gated)
                flat[e].copy_(expert_scratch.view(-1))
        converted.append(
            (weight.view(experts, cols // BLOCK_K, rows, BLOCK_K), scale.view(experts, -1))
        )
    del scratch
    (w13, s13), (w2, s2) = converted
    return Layer(w13, w2, s13, s2)


# Our kinds' figures: (function, origin, in place, peak, traffic, launches). None reads an
# index; a gated w13 is two passes per tensor (its halves), w2 one.
_KINDS = {
    "fast": (mxint4_fast, "ours", False, "T13 + T2 + F13 + F2", "2 (T13 + T2 + F13 + F2)", "6"),
    "preallocated": (
        mxint4_preallocated,
        "ours, vLLM #55407's form",
        False,
        "T13 + T2 + F13 + F2",
        "2 (T13 + T2 + F13 + F2)",
        "6 E",
    ),
    "inplace": (
        mxint4_inplace,
        "ours",
        True,
        "max(S13, S2, 10 MiB)",
        "4 (T13 + T2 + F13 + F2)",
        "10 E",
    ),
}
for _kind, (_function, _origin, _inplace, _peak, _traffic, _launches) in _KINDS.items():
    register(
        f"mxint4-{_kind}",
        format="mxint4",
        inplace=_inplace,
        origin=_origin,
        peak=Formula(_peak),
        traffic=Formula(_traffic),
        launches=Formula(_launches),
    )(_function)
