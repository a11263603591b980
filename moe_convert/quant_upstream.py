"""vLLM's quantized TRTLLM-gen conversions, transcribed: every temporary and its order kept.

Legend as in ``moe_convert.quant_formats`` and the formula letters of ``moe_convert.formulas``
(T13, T2 weights, F13, F2 scale factors, B13, B2 float32 biases; ``F13 // E`` one expert's).

Transcribed from the published wheels (``pip download --no-deps vllm==X``); docs/formats.md
names file, function and release for each. What differs from the engine, everywhere:

- FlashInfer's row indices (``_maybe_get_cached_w3_w1_permute_indices``,
  ``get_w2_permute_indices_with_cache``, ``reorder_rows_for_gated_act_gemm``,
  ``shuffle_matrix_a``) come from this library's cache (``layout``, ``quant_ops``): the same
  values (tests/test_quant_strategies.py holds them to FlashInfer's), computed once rather than
  per call (vLLM 0.29.0's NVFP4 cache is local to the call) or per expert (FP8);
- FlashInfer's CUDA ``nvfp4_block_scale_interleave`` is ``swizzle.block_scale_interleave``, its
  torch definition: one output allocation, as the op's;
- the padding vLLM applies before (``align_*``) is not transcribed: the inputs are the padded
  shapes.

MXFP8's gate index is a CPU tensor in vLLM (FlashInfer's helper builds it there), so each
of its two gathers also copies it to the device first; here it is cached on the device.

Each returns a ``QuantLayer`` of new tensors. The NVFP4 ones first reorder a gated w13 and its
scales to ``[w3; w1]`` in place, as vLLM does: they leave the input so. Block-FP8's clamps w2's
scales (and a non-gated w13's) in place and returns them: the input's own tensors.
"""

from __future__ import annotations

import torch

from .formulas import Formula
from .layout import (
    BLOCK_K,
    SHUFFLE_BLOCK_TILE64,
    gated_interleave_index,
    shuffle_row_index,
    swap_w13_to_w31,
    w13_row_index,
)
from .quant_layer import QuantLayer
from .quant_ops import MIN_BLOCK_SCALE
from .quant_registry import register_quant
from .swizzle import block_scale_interleave

__all__ = [
    "fp8_legacy",
    "fp8block_legacy",
    "mxfp4_legacy",
    "mxfp8_legacy",
    "nvfp4_legacy",
    "nvfp4_preallocated",
]

# FlashInfer's TRTLLM-gen kernels: "FIXME: this depends on the kernel internals" in vLLM.
EPILOGUE_TILE_M = 128  # the shuffle of rows in blocks of 32 (layout.SHUFFLE_BLOCK)


# The launches of _reorder_w1w3_to_w3w1: a clone and two copies per tensor per chunk of rows;
# M13 = X13 / 8 rows, a chunk is at most 64 MiB of rows of T13 / M13 bytes (the weight's rows
# are wider than the scales'), and at most half the rows: cdiv(M13 / 2, max(1, rows in 64 MiB)).
_REORDER_LAUNCHES = "6 cdiv(X13 // 16, max(1, 64 MiB // (8 T13 // X13)))"


def _reorder_w1w3_to_w3w1(weight: torch.Tensor, scale: torch.Tensor) -> None:
    """vLLM's ``reorder_w1w3_to_w3w1`` (vLLM #46276, in place, dim -2, 64 MiB chunks)."""
    size = weight.size(-2)
    half = size // 2
    bytes_per_row = max(
        weight.numel() // size * weight.element_size(),
        scale.numel() // size * scale.element_size(),
    )
    chunk = max(1, min(half, (64 << 20) // max(bytes_per_row, 1)))
    for off in range(0, half, chunk):
        end = min(off + chunk, half)
        for t in (weight, scale):
            tmp = t[:, half + off : half + end].clone()
            t[:, half + off : half + end] = t[:, off:end]
            t[:, off:end] = tmp


@register_quant(
    "nvfp4-legacy",
    inplace=False,
    origin="vLLM 0.29.0, transcribed",
    peak=Formula("2 T13 + T2 + F13 + F2"),
    traffic=Formula(
        "7 T13 + 4 T2 + 9 F13 + 6 F2 + 2 E (X13 + X2)",
        "4 T13 + 4 T2 + 6 F13 + 6 F2 + 2 E (X13 + X2)",
    ),
    launches=Formula(f"6 E + 4 + {_REORDER_LAUNCHES}", "6 E + 4"),
)
def nvfp4_legacy(layer: QuantLayer, gated: bool) -> QuantLayer:
    """vLLM 0.29.0 ``prepare_static_weights_for_trtllm_fp4_moe``, after the in-place reorder.

    Per expert: weight rows gathered (``.contiguous()``), scale rows gathered and interleaved,
    for w13 then w2; four lists; each stacked, and the list freed as its name is rebound.
    Peak transient: the four lists, and the w13 stack beside them.
    """
    w13, w2, s13, s2 = layer.w13, layer.w2, layer.w13_scale, layer.w2_scale
    if gated:
        _reorder_w1w3_to_w3w1(w13, s13)
    num_experts, rows13, packed13 = w13.shape
    hidden_size, intermediate_size = w2.shape[1], w2.shape[2] * 2
    gemm1_weights_fp4 = w13.view(torch.float8_e4m3fn)
    gemm1_scales_linear_fp4 = s13.view(torch.float8_e4m3fn)
    gemm2_weights_fp4 = w2.view(torch.float8_e4m3fn)
    gemm2_scales_linear_fp4 = s2.view(torch.float8_e4m3fn)
    index13 = w13_row_index(rows13, gated, w13.device, fold_swap=False)
    index2 = shuffle_row_index(hidden_size, w2.device)

    gemm1_weights_fp4_shuffled = []
    gemm1_scales_fp4_shuffled = []
    gemm2_weights_fp4_shuffled = []
    gemm2_scales_fp4_shuffled = []
    for i in range(num_experts):
        gemm1_weights_fp4_shuffled.append(
            gemm1_weights_fp4[i].view(torch.uint8)[index13].contiguous()
        )
        gemm1_scales_fp4_shuffled.append(
            block_scale_interleave(
                gemm1_scales_linear_fp4[i].view(torch.uint8)[index13].contiguous()
            )
        )
        gemm2_weights_fp4_shuffled.append(
            gemm2_weights_fp4[i].view(torch.uint8)[index2].contiguous()
        )
        gemm2_scales_fp4_shuffled.append(
            block_scale_interleave(
                gemm2_scales_linear_fp4[i].view(torch.uint8)[index2].contiguous()
            )
        )

    gemm1_weights_fp4_shuffled = torch.stack(gemm1_weights_fp4_shuffled)
    gemm1_scales_fp4_shuffled = (
        torch.stack(gemm1_scales_fp4_shuffled)
        .view(torch.float8_e4m3fn)
        .reshape(num_experts, rows13, packed13 * 2 // 16)
    )
    gemm2_weights_fp4_shuffled = torch.stack(gemm2_weights_fp4_shuffled)
    gemm2_scales_fp4_shuffled = (
        torch.stack(gemm2_scales_fp4_shuffled)
        .view(torch.float8_e4m3fn)
        .reshape(num_experts, hidden_size, intermediate_size // 16)
    )
    return QuantLayer(
        gemm1_weights_fp4_shuffled,
        gemm2_weights_fp4_shuffled,
        gemm1_scales_fp4_shuffled,
        gemm2_scales_fp4_shuffled,
    )


@register_quant(
    "nvfp4-preallocated",
    inplace=False,
    origin="vLLM #55407 (0.30.0 to 0.33.0), transcribed",
    peak=Formula("T13 + T2 + F13 + F2 + 2 (F13 // E) + F2 // E"),
    traffic=Formula(
        "5 T13 + 2 T2 + 9 F13 + 6 F2 + 2 E (X13 + X2)",
        "2 (T13 + T2) + 6 (F13 + F2) + 2 E (X13 + X2)",
    ),
    launches=Formula(f"8 E + {_REORDER_LAUNCHES}", "8 E"),
)
def nvfp4_preallocated(layer: QuantLayer, gated: bool) -> QuantLayer:
    """vLLM #55407 (0.33.0's ``prepare_static_weights_for_trtllm_fp4_moe``), after the reorder.

    The four outputs allocated once (``torch.empty_like``) and one scale scratch per weight;
    per expert: the weight rows ``index_select``-ed into their slot, the scale rows into the
    scratch, then the interleave of the scratch (a new expert-sized tensor) copied into the
    slot. Peak transient: the outputs, both scratches and one interleave result.
    """
    w13, w2, s13, s2 = layer.w13, layer.w2, layer.w13_scale, layer.w2_scale
    if gated:
        _reorder_w1w3_to_w3w1(w13, s13)
    num_experts, rows13, _ = w13.shape
    gemm1_weights_fp4 = w13.view(torch.float8_e4m3fn)
    gemm1_scales_linear_fp4 = s13.view(torch.float8_e4m3fn)
    gemm2_weights_fp4 = w2.view(torch.float8_e4m3fn)
    gemm2_scales_linear_fp4 = s2.view(torch.float8_e4m3fn)
    gemm1_weight_indices = gemm1_scale_indices = w13_row_index(
        rows13, gated, w13.device, fold_swap=False
    )
    gemm2_weight_indices = gemm2_scale_indices = shuffle_row_index(w2.shape[1], w2.device)

    gemm1_weights_fp4_shuffled = torch.empty_like(gemm1_weights_fp4, dtype=torch.uint8)
    gemm1_scales_fp4_shuffled = torch.empty_like(gemm1_scales_linear_fp4)
    gemm2_weights_fp4_shuffled = torch.empty_like(gemm2_weights_fp4, dtype=torch.uint8)
    gemm2_scales_fp4_shuffled = torch.empty_like(gemm2_scales_linear_fp4)
    gemm1_scale_scratch = torch.empty_like(gemm1_scales_linear_fp4[0], dtype=torch.uint8)
    gemm2_scale_scratch = torch.empty_like(gemm2_scales_linear_fp4[0], dtype=torch.uint8)

    for expert_id in range(num_experts):
        torch.index_select(
            gemm1_weights_fp4[expert_id].view(torch.uint8),
            0,
            gemm1_weight_indices,
            out=gemm1_weights_fp4_shuffled[expert_id],
        )
        torch.index_select(
            gemm1_scales_linear_fp4[expert_id].view(torch.uint8),
            0,
            gemm1_scale_indices,
            out=gemm1_scale_scratch,
        )
        gemm1_scales_fp4_shuffled[expert_id].view(torch.uint8).reshape(-1).copy_(
            block_scale_interleave(gemm1_scale_scratch)
        )
        torch.index_select(
            gemm2_weights_fp4[expert_id].view(torch.uint8),
            0,
            gemm2_weight_indices,
            out=gemm2_weights_fp4_shuffled[expert_id],
        )
        torch.index_select(
            gemm2_scales_linear_fp4[expert_id].view(torch.uint8),
            0,
            gemm2_scale_indices,
            out=gemm2_scale_scratch,
        )
        gemm2_scales_fp4_shuffled[expert_id].view(torch.uint8).reshape(-1).copy_(
            block_scale_interleave(gemm2_scale_scratch)
        )
    return QuantLayer(
        gemm1_weights_fp4_shuffled,
        gemm2_weights_fp4_shuffled,
        gemm1_scales_fp4_shuffled,
        gemm2_scales_fp4_shuffled,
    )


def _swap_every_two_rows(x: torch.Tensor, axis: int = -1) -> torch.Tensor:
    """vLLM's ``swap_every_two_rows`` (oracle/mxfp4.py): rows ``2j`` and ``2j+1`` exchanged.

    A new tensor (the ``flip`` copies); its own inverse.
    """
    shape = x.shape
    if axis < 0:
        axis = len(shape) + axis
    new_shape = list(shape)
    new_shape[axis] = shape[axis] // 2
    new_shape.insert(axis + 1, 2)
    x = x.reshape(*new_shape)
    x = x.flip(axis + 1)
    new_shape = list(shape)
    return x.reshape(*new_shape)


def _w2_permute_indices(rows: torch.Tensor) -> torch.Tensor:
    """``get_w2_permute_indices_with_cache(cache, rows, 128)`` with the index cached: ``S``.

    Takes the tensor vLLM passes, so that an argument vLLM builds for the call (a ``clone``)
    is built, and freed, here too.
    """
    return shuffle_row_index(rows.shape[0], rows.device)


@register_quant(
    "mxfp4-legacy",
    inplace=False,
    origin="vLLM 0.33.0, transcribed",
    peak=Formula("3 T13 + T2 + 2 F13 + F2 + 2 B13 + 2 B2"),
    traffic=Formula("6 T13 + 4 T2 + 8 F13 + 6 F2 + (23 B13 + 19 B2) // 2 + 3 E (X13 + X2)"),
    launches=Formula("12 E + 11"),
)
def mxfp4_legacy(layer: QuantLayer, gated: bool) -> QuantLayer:
    """vLLM 0.33.0 ``convert_to_mxfp4_moe_kernel_format``, the TRTLLM-gen branch.

    Biases made float32; ``swap_every_two_rows`` copies of w13's scales, weights and bias;
    per expert six lists (weight rows, scale rows interleaved, bias rows: for w13 and w2; each
    bias cloned twice, once only to compute its index), all alive until the function returns;
    then six stacks. Peak transient: at the w13 weight stack, the swapped copies, the
    float32 biases, the six lists and that stack.
    """
    num_experts = layer.w13.shape[0]
    hidden_size, intermediate_size = layer.w2.shape[1], layer.w2.shape[2] * 2
    sf_block_size = 32
    w13_weight, w2_weight = layer.w13, layer.w2
    w13_weight_scale, w2_weight_scale = layer.w13_scale, layer.w2_scale
    w13_bias = layer.w13_bias.to(torch.float32)
    w2_bias = layer.w2_bias.to(torch.float32)

    w13_weight_scale = _swap_every_two_rows(w13_weight_scale, -2)
    w13_weight = _swap_every_two_rows(w13_weight, -2)
    w13_bias = _swap_every_two_rows(w13_bias, -1)

    gemm1_weights_shuffled = []
    gemm1_scales_shuffled = []
    gemm2_weights_shuffled = []
    gemm2_scales_shuffled = []
    gemm1_bias_shuffled = []
    gemm2_bias_shuffled = []
    for i in range(num_experts):
        permute_indices = _w2_permute_indices(w13_weight[i].view(torch.uint8))
        gemm1_weights_shuffled.append(w13_weight[i].view(torch.uint8)[permute_indices].contiguous())
        permute_sf_indices = _w2_permute_indices(w13_weight_scale[i].view(torch.uint8))
        gemm1_scales_shuffled.append(
            block_scale_interleave(
                w13_weight_scale[i].view(torch.uint8)[permute_sf_indices].contiguous()
            )
        )
        permute_bias_indices = _w2_permute_indices(w13_bias[i].clone().reshape(-1, 1))
        gemm1_bias_shuffled.append(
            w13_bias[i].clone().reshape(-1, 1)[permute_bias_indices].contiguous()
        )
        permute_indices = _w2_permute_indices(w2_weight[i].view(torch.uint8))
        gemm2_weights_shuffled.append(w2_weight[i].view(torch.uint8)[permute_indices].contiguous())
        permute_sf_indices = _w2_permute_indices(w2_weight_scale[i].view(torch.uint8))
        gemm2_scales_shuffled.append(
            block_scale_interleave(
                w2_weight_scale[i].view(torch.uint8)[permute_sf_indices].contiguous()
            )
        )
        permute_indices = _w2_permute_indices(w2_bias[i].clone().reshape(-1, 1))
        gemm2_bias_shuffled.append(w2_bias[i].clone().reshape(-1, 1)[permute_indices].contiguous())

    w13_weight = torch.stack(gemm1_weights_shuffled)
    w13_weight_scale = (
        torch.stack(gemm1_scales_shuffled)
        .reshape(num_experts, 2 * intermediate_size, hidden_size // sf_block_size)
        .view(torch.float8_e4m3fn)
    )
    w2_weight = torch.stack(gemm2_weights_shuffled)
    w2_weight_scale = (
        torch.stack(gemm2_scales_shuffled)
        .reshape(num_experts, hidden_size, intermediate_size // sf_block_size)
        .view(torch.float8_e4m3fn)
    )
    w13_bias = torch.stack(gemm1_bias_shuffled).reshape(num_experts, -1)
    w2_bias = torch.stack(gemm2_bias_shuffled).reshape(num_experts, -1)
    return QuantLayer(w13_weight, w2_weight, w13_weight_scale, w2_weight_scale, w13_bias, w2_bias)


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
