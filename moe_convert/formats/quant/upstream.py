"""vLLM's quantized TRTLLM-gen conversions, transcribed: every temporary and its order kept.

Legend as in ``formats.quant.formats`` and the formula letters of ``moe_convert.formulas``
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

Each returns a ``QuantLayer`` of new tensors. The NVFP4 ones first reorder a gated w13 and its
scales to ``[w3; w1]`` in place, as vLLM does: they leave the input so.

Here NVFP4's (``flashinfer_fp4_moe.py``) and MXFP4's (``oracle/mxfp4.py``); the three paths of
``flashinfer_utils.py``'s ``prepare_fp8_moe_layer_for_fi`` (FP8 per-tensor, DeepSeek block-FP8,
MXFP8) are in ``quant_upstream_fp8``, under the same rules.
"""

from __future__ import annotations

import torch

from ...formulas import Formula
from ..layout import shuffle_row_index, w13_row_index
from ..swizzle import block_scale_interleave
from .layer import QuantLayer
from .registry import register_quant

__all__ = ["mxfp4_legacy", "nvfp4_legacy", "nvfp4_preallocated"]

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
