"""MXFP8 (uint8 block scales): vLLM's path and this library's kinds.

Its record, ``MXFP8``, is defined here first and used directly. ``mxfp8-legacy``: vLLM 0.33.0's
``prepare_fp8_moe_layer_for_fi``, its MXFP8 path for TRTLLM-gen, transcribed under ``shared``'s
rules: a ``Layer`` of new tensors. vLLM's gate index is a CPU tensor (FlashInfer's helper
builds it there), so each of its two gathers also copies it to the device first; here it is
cached on the device. Ours: ``mxfp8-preallocated``, ``-inplace``, ``-fast`` (``shared``'s kinds).
"""

from __future__ import annotations

import torch

from ..formulas import Formula
from .format import Format
from .kinds import SCALED_FAST, SCALED_INPLACE, register_kinds
from .layer import Layer, check_layer
from .layout import (
    gated_interleave_index,
    shuffle_row_index,
    swap_w13_to_w31,
)
from .registry import register
from .swizzle import block_scale_interleave

__all__ = ["MXFP8", "mxfp8_legacy"]

# OCP microscaling (MiniMax-M3's checkpoint): one e8m0 scale (uint8) per 32 elements of a row,
# relaid and swizzled as NVFP4's are. flashinfer_utils.py::prepare_fp8_moe_layer_for_fi, MXFP8
# on TRTLLM-gen: align_mxfp8_moe_weights_for_fi_trtllm pads I to 128 (gated or not), H to 256.
MXFP8 = Format(
    name="mxfp8",
    title="MXFP8",
    check=check_layer,
    upstream="mxfp8-legacy",
    weight_dtype=torch.float8_e4m3fn,
    scale_dtype=torch.uint8,
    scale_block=32,
    relaid_scale_dtype=torch.uint8,
    hidden_align=256,
    intermediate_align=128,
)


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


@register(
    "mxfp8-legacy",
    format="mxfp8",
    inplace=False,
    origin="vLLM 0.33.0, transcribed",
    peak=Formula("3 T13 + T2 + 3 F13 + 2 F2", "T13 + T2 + F13 + 2 F2"),
    traffic=Formula(
        "6 T13 + 2 T2 + 8 F13 + 4 F2 + 4 X13 + 2 X2", "2 (T13 + T2) + 4 (F13 + F2) + 2 (X13 + X2)"
    ),
    launches=Formula("10", "6"),
)
def mxfp8_legacy(layer: Layer, gated: bool) -> Layer:
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
    return Layer(w13, w2, w13_scale, w2_scale)


register_kinds(
    MXFP8,
    {
        "preallocated": ("2 (T13 + T2) + 6 (F13 + F2) + 2 E (X13 + X2)", "8 E"),
        "inplace": SCALED_INPLACE,
        "fast": SCALED_FAST,
    },
)
