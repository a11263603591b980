"""MXFP4 (gpt-oss): vLLM's path and this library's kinds.

Its record, ``MXFP4``, is defined here first and used directly. ``mxfp4-legacy``: vLLM 0.33.0's
``oracle/mxfp4.py`` transcribed under ``shared``'s rules, a ``Layer`` of new tensors.
Ours: ``mxfp4-preallocated``, ``-inplace``, ``-fast`` (``shared``'s kinds, w13 in gpt-oss's
row pairs).
"""

from __future__ import annotations

import torch

from ..formulas import Formula
from .format import Format
from .kinds import register_kinds
from .layer import Layer, check_layer
from .layout import shuffle_row_index
from .registry import register
from .swizzle import block_scale_interleave

__all__ = ["MXFP4", "mxfp4_legacy"]

# oracle/mxfp4.py::mxfp4_round_up_hidden_size_and_intermediate_size, TRTLLM backends.
MXFP4 = Format(
    name="mxfp4",
    title="MXFP4",
    check=check_layer,
    upstream="mxfp4-legacy",
    weight_dtype=torch.uint8,
    elements_per_item=2,
    scale_dtype=torch.uint8,
    scale_block=32,
    has_bias=True,
    gated_only=True,
    hidden_align=256,
    intermediate_align=128,
    interleaved_w13=True,
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


@register(
    "mxfp4-legacy",
    format="mxfp4",
    inplace=False,
    origin="vLLM 0.33.0, transcribed",
    peak=Formula("3 T13 + T2 + 2 F13 + F2 + 2 B13 + 2 B2"),
    traffic=Formula("6 T13 + 4 T2 + 8 F13 + 6 F2 + (23 B13 + 19 B2) // 2 + 3 E (X13 + X2)"),
    launches=Formula("12 E + 11"),
)
def mxfp4_legacy(layer: Layer, gated: bool) -> Layer:
    """vLLM 0.33.0 ``convert_gpt_oss_weight_to_mxfp4_moe_kernel_format``, the TRTLLM-gen branch.

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
    return Layer(w13_weight, w2_weight, w13_weight_scale, w2_weight_scale, w13_bias, w2_bias)


# A bias costs 5/2 B (the gather, then the cast) and its index, in four launches; a scale gather
# reads 2 bytes of index per scale factor of one expert (rows.scale_word_index).
_BIAS_TRAFFIC = "5 (B13 + B2) // 2 + X13 + X2"
register_kinds(
    MXFP4,
    {
        "preallocated": (
            f"2 (T13 + T2) + 6 (F13 + F2) + 2 E (X13 + X2) + {_BIAS_TRAFFIC}",
            "8 E + 4",
        ),
        "inplace": (f"4 (T13 + T2 + F13 + F2) + 2 E (X13 + X2) + {_BIAS_TRAFFIC}", "8 E + 4"),
        "fast": (
            "2 (T13 + T2 + F13 + F2) + 2 (F13 // E + F2 // E) + 2 (X13 + X2) + 5 (B13 + B2) // 2",
            "8",
        ),
    },
)
