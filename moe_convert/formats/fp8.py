"""FP8 per-tensor: vLLM's path and this library's kinds.

Its record, ``FP8``, is defined here first and used directly. ``fp8-legacy``: vLLM 0.33.0's
``prepare_fp8_moe_layer_for_fi`` (``quantization/utils/flashinfer_utils.py``), its per-tensor
path for TRTLLM-gen, transcribed under ``shared``'s rules: a ``Layer`` of new tensors.
Ours: ``fp8-preallocated``, ``-inplace``, ``-fast`` (``shared``'s kinds).
"""

from __future__ import annotations

import torch

from ..formulas import Formula
from .format import Format
from .kinds import register_kinds
from .layer import Layer, check_layer
from .layout import (
    gated_interleave_index,
    shuffle_row_index,
    swap_w13_to_w31,
)
from .registry import register

__all__ = ["FP8", "fp8_legacy"]

# Its scales are one float per expert, never relaid: a layer of it is its weights alone.
# flashinfer_utils.py::prepare_fp8_moe_layer_for_fi: align_moe_weights_for_fi's min_alignment
# "16 if is_gated else 128".
FP8 = Format(
    name="fp8",
    title="FP8 per-tensor",
    check=check_layer,
    upstream="fp8-legacy",
    weight_dtype=torch.float8_e4m3fn,
    intermediate_align=16,
    nongated_intermediate_align=128,
)


@register(
    "fp8-legacy",
    format="fp8",
    inplace=False,
    origin="vLLM 0.33.0, transcribed",
    peak=Formula("4 T13 + T2", "3 T13 + 2 T2"),
    traffic=Formula("10 T13 + 4 T2 + E (2 X13 + X2)", "6 T13 + 4 T2 + E (X13 + X2)"),
    launches=Formula("3 E + 4", "2 E + 3"),
)
def fp8_legacy(layer: Layer, gated: bool) -> Layer:
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
    return Layer(w13_out, w2_out)


register_kinds(
    FP8,
    {
        "preallocated": ("2 (T13 + T2) + E (X13 + X2)", "2 E"),
        "inplace": ("4 (T13 + T2) + E (X13 + X2)", "4 E"),
        "fast": ("2 (T13 + T2) + X13 + X2", "2"),
    },
)
