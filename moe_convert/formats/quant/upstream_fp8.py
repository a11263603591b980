"""vLLM's ``prepare_fp8_moe_layer_for_fi`` (``quantization/utils/flashinfer_utils.py``, 0.33.0)
transcribed for TRTLLM-gen: FP8 per-tensor, DeepSeek block-FP8 and MXFP8, every temporary and its
order kept, under ``quant_upstream``'s rules (legend, formula letters, what differs from the
engine everywhere).

MXFP8's gate index is a CPU tensor in vLLM (FlashInfer's helper builds it there), so each
of its two gathers also copies it to the device first; here it is cached on the device.

Each returns a ``QuantLayer`` of new tensors, but block-FP8's clamps w2's scales (and a
non-gated w13's) in place and returns them: the input's own tensors.
"""

from __future__ import annotations

import torch

from ...formulas import Formula
from ..layout import (
    BLOCK_K,
    SHUFFLE_BLOCK_TILE64,
    gated_interleave_index,
    shuffle_row_index,
    swap_w13_to_w31,
)
from ..quant_ops import MIN_BLOCK_SCALE
from ..swizzle import block_scale_interleave
from .layer import QuantLayer
from .registry import register_quant

__all__ = ["fp8_legacy", "fp8block_legacy", "mxfp8_legacy"]


@register_quant(
    "fp8-legacy",
    inplace=False,
    origin="vLLM 0.33.0, transcribed",
    peak=Formula("4 T13 + T2", "3 T13 + 2 T2"),
    traffic=Formula("10 T13 + 4 T2 + E (2 X13 + X2)", "6 T13 + 4 T2 + E (X13 + X2)"),
    launches=Formula("3 E + 4", "2 E + 3"),
)
def fp8_legacy(layer: QuantLayer, gated: bool) -> QuantLayer:
    """vLLM 0.33.0 ``rotate_weights_for_fi_trtllm_fp8_per_tensor_moe``, after its caller's swap.

    ``prepare_fp8_moe_layer_for_fi`` swaps a gated w13 to ``[w3; w1]`` (a full copy); then per
    expert the gated row reorder into a list (a copy each; the expert itself when not gated),
    one stack; per expert ``shuffle_matrix_a`` of w13 and w2 into two lists; two stacks.
    ``gemm1_weights.data = stack`` releases the swap copy after the first of them. Peak
    transient, gated: the swap copy, the reordered stack, both lists and the w13 stack.
    """
    w13 = swap_w13_to_w31(layer.w13) if gated else layer.w13
    gemm1_weights, gemm2_weights = w13, layer.w2
    del w13
    num_experts = gemm1_weights.shape[0]
    hidden_size = gemm1_weights.shape[-1]
    intermediate_size = gemm1_weights.shape[1] // 2
    device = gemm1_weights.device
    reorder = gated_interleave_index(gemm1_weights.shape[1], device)

    gemm1_weights_fp8_interleaved = []
    for i in range(num_experts):
        gemm1_weights_fp8_interleaved.append(
            gemm1_weights[i][reorder] if gated else gemm1_weights[i]
        )
    gemm1_weights_fp8_interleaved = torch.stack(gemm1_weights_fp8_interleaved).reshape(
        num_experts, 2 * intermediate_size, hidden_size
    )

    index13 = shuffle_row_index(gemm1_weights.shape[1], device)
    index2 = shuffle_row_index(gemm2_weights.shape[1], device)
    gemm1_weights_fp8_shuffled = []
    gemm2_weights_fp8_shuffled = []
    for i in range(num_experts):
        gemm1_weights_fp8_shuffled.append(
            gemm1_weights_fp8_interleaved[i].view(torch.uint8)[index13]
        )
        gemm2_weights_fp8_shuffled.append(gemm2_weights[i].view(torch.uint8)[index2])

    w13_out = torch.stack(gemm1_weights_fp8_shuffled).view(torch.float8_e4m3fn)
    del gemm1_weights  # `gemm1_weights.data = ...`: the swap copy's storage is released here
    w2_out = torch.stack(gemm2_weights_fp8_shuffled).view(torch.float8_e4m3fn)
    return QuantLayer(w13_out, w2_out)


@register_quant(
    "fp8block-legacy",
    inplace=False,
    origin="vLLM 0.33.0, transcribed",
    peak=Formula("2 T13 + T2 + F13", "T13 + T2"),
    traffic=Formula("4 T13 + 2 T2 + 4 F13 + 2 F2 + X13 + X2", "2 (T13 + T2 + F13 + F2) + X13 + X2"),
    launches=Formula("6", "4"),
)
def fp8block_legacy(layer: QuantLayer, gated: bool) -> QuantLayer:
    """vLLM 0.33.0 ``prepare_fp8_moe_layer_for_fi``, DeepSeek block-FP8 on TRTLLM-gen.

    Gated, ``swap_w13_to_w31`` copies of w13 and its scales; ``_shuffle_deepseek_fp8_moe_weights``:
    per weight one gather of the rows (``shuffle_matrix_a``'s index, ``epilogue_tile_m`` 64)
    through the ``[E, K/128, M, 128]``-permuted view, which is BlockMajorK already
    (``.contiguous()`` copies nothing); then both scales ``clamp_``-ed in place (the swap copy
    of w13's, the input's own w2 scales). The weights' swap copy lives until both gathers are
    done. Peak transient, gated: the swap copies and both gathers.
    """
    w13, w2, w13_scale, w2_scale = layer.w13, layer.w2, layer.w13_scale, layer.w2_scale
    if gated:
        w13 = swap_w13_to_w31(w13)
        w13_scale = swap_w13_to_w31(w13_scale)

    def shuffle_to_block_major_k(w: torch.Tensor) -> torch.Tensor:
        num_experts, m, k = w.shape
        rows = shuffle_row_index(m, w.device, block=SHUFFLE_BLOCK_TILE64)
        blocked = w.view(torch.uint8).view(num_experts, m, k // BLOCK_K, BLOCK_K)
        out = blocked.permute(0, 2, 1, 3)[:, :, rows, :].contiguous()
        return out.view(torch.float8_e4m3fn)

    w13, w2 = shuffle_to_block_major_k(w13), shuffle_to_block_major_k(w2)
    w13_scale.clamp_(min=MIN_BLOCK_SCALE)
    w2_scale.clamp_(min=MIN_BLOCK_SCALE)
    return QuantLayer(w13, w2, w13_scale, w2_scale)


def _shuffle_mxfp8_moe_weights(
    w13: torch.Tensor,
    w2: torch.Tensor,
    w13_scale: torch.Tensor,
    w2_scale: torch.Tensor,
    is_gated: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """vLLM 0.33.0's ``_shuffle_mxfp8_moe_weights``: the gate/up row interleave, then
    ``shuffle_matrix_a``'s rows (``epilogue_tile_m`` 128), each one gather over all experts; a
    scale's shuffle gathered, then ``block_scale_interleave``-d (the gather freed after it).

    The interleaved copies stay alive (``w13_u``, ``w13_scale``) until return, beside the
    caller's swap copies.
    """
    w13_u = w13.view(torch.uint8)
    w2_u = w2.view(torch.uint8)

    if is_gated:
        gate_idx = gated_interleave_index(w13_u.shape[1], w13_u.device)
        w13_u = w13_u[:, gate_idx]
        w13_scale = w13_scale[:, gate_idx]

    def shuffle_weights(t: torch.Tensor) -> torch.Tensor:
        idx = shuffle_row_index(t.shape[1], t.device)
        return t[:, idx].view(torch.float8_e4m3fn)

    def shuffle_scales(s: torch.Tensor) -> torch.Tensor:
        idx = shuffle_row_index(s.shape[1], s.device)
        interleaved = block_scale_interleave(s[:, idx])
        return interleaved.reshape(s.shape)

    return (
        shuffle_weights(w13_u),
        shuffle_weights(w2_u),
        shuffle_scales(w13_scale),
        shuffle_scales(w2_scale),
    )


@register_quant(
    "mxfp8-legacy",
    inplace=False,
    origin="vLLM 0.33.0, transcribed",
    peak=Formula("3 T13 + T2 + 3 F13 + 2 F2", "T13 + T2 + F13 + 2 F2"),
    traffic=Formula(
        "6 T13 + 2 T2 + 8 F13 + 4 F2 + 4 X13 + 2 X2", "2 (T13 + T2) + 4 (F13 + F2) + 2 (X13 + X2)"
    ),
    launches=Formula("10", "6"),
)
def mxfp8_legacy(layer: QuantLayer, gated: bool) -> QuantLayer:
    """vLLM 0.33.0 ``prepare_fp8_moe_layer_for_fi``, MXFP8 (uint8 scales) on TRTLLM-gen.

    Gated, ``swap_w13_to_w31`` copies of w13 and of its scales (the caller holds them until it
    returns), then ``_shuffle_mxfp8_moe_weights``. Peak transient, gated: at w2's interleave,
    the three w13 copies (swap, interleave, shuffle), w2's shuffle, w13's swapped, interleaved
    and relaid scales, w2's gathered scales and their interleave (``3 F13 + 2 F2``: as much as
    the ``4 F13`` at w13's interleave, since gated ``F13 = 2 F2``). Scales come back uint8.
    """
    w13, w2, w13_scale, w2_scale = layer.w13, layer.w2, layer.w13_scale, layer.w2_scale
    if gated:
        w13 = swap_w13_to_w31(w13)
        w13_scale = swap_w13_to_w31(w13_scale)
    w13, w2, w13_scale, w2_scale = _shuffle_mxfp8_moe_weights(w13, w2, w13_scale, w2_scale, gated)
    return QuantLayer(w13, w2, w13_scale, w2_scale)
