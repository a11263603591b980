"""NVFP4 (``modelopt_fp4``, ``compressed-tensors`` nvfp4): vLLM's paths and this library's kinds.

Its record, ``NVFP4``, is defined here first and used directly. vLLM's ``flashinfer_fp4_moe.py``
transcribed under ``shared``'s rules: ``nvfp4-legacy`` (0.29.0) and ``nvfp4-preallocated``
(#55407, 0.33.0), each returning a ``Layer`` of new tensors after reordering a gated w13
and its scales to ``[w3; w1]`` in place, as vLLM does: they leave the input so. Ours:
``nvfp4-inplace``, ``nvfp4-fast`` (``shared``'s kinds).
"""

from __future__ import annotations

import torch

from ..formulas import Formula
from .format import Format
from .kinds import (
    REORDER_LAUNCHES,
    SCALED_FAST,
    SCALED_INPLACE,
    register_kinds,
    reorder_w1w3_to_w3w1,
)
from .layer import Layer, check_layer
from .layout import shuffle_row_index, w13_row_index
from .registry import register
from .swizzle import block_scale_interleave

__all__ = ["NVFP4", "nvfp4_legacy", "nvfp4_preallocated"]

# flashinfer_fp4_moe.py: trtllm_hidden_alignment=256; the intermediate to 64 gated, 128 not
# (align_fp4_moe_weights_for_fi's min_alignment "64 if is_gated else 128", so that w13's rows
# are a multiple of 128).
NVFP4 = Format(
    name="nvfp4",
    title="NVFP4",
    check=check_layer,
    upstream="nvfp4-legacy",
    weight_dtype=torch.uint8,
    elements_per_item=2,
    scale_dtype=torch.float8_e4m3fn,
    scale_block=16,
    hidden_align=256,
    intermediate_align=64,
    nongated_intermediate_align=128,
)


@register(
    "nvfp4-legacy",
    format="nvfp4",
    inplace=False,
    origin="vLLM 0.29.0, transcribed",
    peak=Formula("2 T13 + T2 + F13 + F2"),
    traffic=Formula(
        "7 T13 + 4 T2 + 9 F13 + 6 F2 + 2 E (X13 + X2)",
        "4 T13 + 4 T2 + 6 F13 + 6 F2 + 2 E (X13 + X2)",
    ),
    launches=Formula(f"6 E + 4 + {REORDER_LAUNCHES}", "6 E + 4"),
)
def nvfp4_legacy(layer: Layer, gated: bool) -> Layer:
    """vLLM 0.29.0 ``prepare_static_weights_for_trtllm_fp4_moe``, after the in-place reorder.

    Per expert: weight rows gathered (``.contiguous()``), scale rows gathered and interleaved,
    for w13 then w2; four lists; each stacked, and the list freed as its name is rebound.
    Peak transient: the four lists, and the w13 stack beside them.
    """
    w13, w2, s13, s2 = layer.w13, layer.w2, layer.w13_scale, layer.w2_scale
    if gated:
        reorder_w1w3_to_w3w1(w13, s13)
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
    return Layer(
        gemm1_weights_fp4_shuffled,
        gemm2_weights_fp4_shuffled,
        gemm1_scales_fp4_shuffled,
        gemm2_scales_fp4_shuffled,
    )


@register(
    "nvfp4-preallocated",
    format="nvfp4",
    inplace=False,
    origin="vLLM #55407 (0.30.0 to 0.33.0), transcribed",
    peak=Formula("T13 + T2 + F13 + F2 + 2 (F13 // E) + F2 // E"),
    traffic=Formula(
        "5 T13 + 2 T2 + 9 F13 + 6 F2 + 2 E (X13 + X2)",
        "2 (T13 + T2) + 6 (F13 + F2) + 2 E (X13 + X2)",
    ),
    launches=Formula(f"8 E + {REORDER_LAUNCHES}", "8 E"),
)
def nvfp4_preallocated(layer: Layer, gated: bool) -> Layer:
    """vLLM #55407 (0.33.0's ``prepare_static_weights_for_trtllm_fp4_moe``), after the reorder.

    The four outputs allocated once (``torch.empty_like``) and one scale scratch per weight;
    per expert: the weight rows ``index_select``-ed into their slot, the scale rows into the
    scratch, then the interleave of the scratch (a new expert-sized tensor) copied into the
    slot. Peak transient: the outputs, both scratches and one interleave result.
    """
    w13, w2, s13, s2 = layer.w13, layer.w2, layer.w13_scale, layer.w2_scale
    if gated:
        reorder_w1w3_to_w3w1(w13, s13)
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
    return Layer(
        gemm1_weights_fp4_shuffled,
        gemm2_weights_fp4_shuffled,
        gemm1_scales_fp4_shuffled,
        gemm2_scales_fp4_shuffled,
    )


register_kinds(NVFP4, {"inplace": SCALED_INPLACE, "fast": SCALED_FAST})
