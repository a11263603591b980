"""DeepSeek block-FP8 (128x128 float32 block scales): vLLM's path and this library's kinds.

Its record, ``FP8BLOCK``, is defined here first and used directly. ``fp8block-legacy``: vLLM
0.33.0's ``prepare_fp8_moe_layer_for_fi``, its block-FP8 path for TRTLLM-gen, transcribed under
``shared``'s rules: new weights, but it clamps w2's scales (and a non-gated w13's) in place and
returns them, the input's own tensors. Ours, its own three (``shared``'s kinds do not fit: the
weights come out in BlockMajorK, ``rows.gather_block_rows``, and the float32 scales are
only reordered and clamped, never swizzled): ``fp8block-preallocated``, ``-inplace``, ``-fast``.
"""

from __future__ import annotations

import torch

from ..formulas import Formula
from .format import Format
from .kinds import scratch_of
from .layer import Layer, check_layer
from .layout import (
    BLOCK_K,
    SHUFFLE_BLOCK_TILE64,
    shuffle_row_index,
    swap_w13_to_w31,
)
from .registry import register
from .rows import (
    MIN_BLOCK_SCALE,
    block_major_k,
    gather_block_rows,
    relay_rows_in_place,
    row_index,
)
from .words import as_words

__all__ = ["FP8BLOCK", "block_fast", "block_inplace", "block_preallocated", "fp8block_legacy"]

# DeepSeek block-FP8 (weight_block_size [128, 128]): float32 scales per 128x128 block.
# prepare_fp8_moe_layer_for_fi pads nothing for block quantization; oracle/fp8.py's
# pad_tp_shard_to_weight_blocks rounds I per rank up to whole blocks for TRTLLM-gen, and H must
# already be a multiple of 128 (it raises otherwise).
FP8BLOCK = Format(
    name="fp8block",
    title="DeepSeek block-FP8",
    check=check_layer,
    upstream="fp8block-legacy",
    weight_dtype=torch.float8_e4m3fn,
    scale_dtype=torch.float32,
    scale_block=128,
    scale_block_rows=128,
    intermediate_align=128,
    block_major_k=True,
    shuffle_block=SHUFFLE_BLOCK_TILE64,
    scale_min=MIN_BLOCK_SCALE,
)


@register(
    "fp8block-legacy",
    format="fp8block",
    inplace=False,
    origin="vLLM 0.33.0, transcribed",
    peak=Formula("2 T13 + T2 + F13", "T13 + T2"),
    traffic=Formula("4 T13 + 2 T2 + 4 F13 + 2 F2 + X13 + X2", "2 (T13 + T2 + F13 + F2) + X13 + X2"),
    launches=Formula("6", "4"),
)
def fp8block_legacy(layer: Layer, gated: bool) -> Layer:
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
    return Layer(w13, w2, w13_scale, w2_scale)


def _block_weights(layer: Layer, gated: bool):
    """(weight, row index) of w13, then of w2, in block-FP8's row orders (tile 64)."""
    order13 = "swap_halves_tile64" if gated else "shuffle_tile64"
    return [
        (weight, row_index(order, weight.shape[1], weight.device))
        for weight, order in ((layer.w13, order13), (layer.w2, "shuffle_tile64"))
    ]


def _block_scales(layer: Layer, gated: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """New float32 scales of the input's shapes: w13's row halves swapped when gated, both
    clamped to ``MIN_BLOCK_SCALE``. Each gated half is clamped straight into its swapped
    place (two launches, no index); w2's is one clamp. The input is unchanged."""
    s13, s2 = layer.w13_scale, layer.w2_scale
    if gated:
        out13 = torch.empty_like(s13)
        half = s13.shape[1] // 2
        torch.clamp(s13[:, half:], min=MIN_BLOCK_SCALE, out=out13[:, :half])
        torch.clamp(s13[:, :half], min=MIN_BLOCK_SCALE, out=out13[:, half:])
    else:
        out13 = torch.clamp(s13, min=MIN_BLOCK_SCALE)
    return out13, torch.clamp(s2, min=MIN_BLOCK_SCALE)


def block_preallocated(layer: Layer, gated: bool) -> Layer:
    """Block-FP8: the BlockMajorK outputs allocated once; per expert, its rows gathered through
    its BlockMajorK view into its slot (no swap copy: the swap is in the index); new scales.

    Out of place: new tensors, ``Layer``'s shapes; the input is unchanged. Peak transient:
    the outputs.
    """
    weights = []
    for weight, index in _block_weights(layer, gated):
        experts, rows, cols = weight.shape
        out = torch.empty(
            (experts, cols // BLOCK_K, rows, BLOCK_K), dtype=torch.uint8, device=weight.device
        )
        for e in range(experts):
            source, target = as_words(block_major_k(weight[e].view(torch.uint8)), out[e])
            torch.index_select(source, 1, index, out=target)
        weights.append(out.view(weight.dtype))
    return Layer(*weights, *_block_scales(layer, gated))


def block_inplace(layer: Layer, gated: bool) -> Layer:
    """Block-FP8: one scratch of one expert (at least 10 MiB); per expert, its rows gathered
    through its BlockMajorK view into the scratch and copied back; a gated w13's scale rows
    swapped the same way (``relay_rows_in_place``), then both scales clamped in place.

    In place: weights come back as BlockMajorK views of the input's storage, scales as the
    input's tensors. Peak transient: the scratch, ``max(S13, S2, 10 MiB)``.
    """
    scratch = scratch_of(layer)
    weights = []
    for weight, index in _block_weights(layer, gated):
        experts, rows, cols = weight.shape
        blocks = (cols // BLOCK_K, rows, BLOCK_K)
        expert_scratch = scratch[: rows * cols].view(blocks)
        for expert in weight.view(torch.uint8):
            source, target, words = as_words(
                block_major_k(expert), expert_scratch, expert.view(blocks)
            )
            torch.index_select(source, 1, index, out=target)
            words.copy_(target)
        weights.append(weight.view(experts, *blocks))
    s13, s2 = layer.w13_scale, layer.w2_scale
    if gated:
        relay_rows_in_place(s13, row_index("swap", s13.shape[1], s13.device), scratch)
    del scratch
    s13.clamp_(min=MIN_BLOCK_SCALE)
    s2.clamp_(min=MIN_BLOCK_SCALE)
    return Layer(*weights, s13, s2)


def block_fast(layer: Layer, gated: bool) -> Layer:
    """Block-FP8: one gather per weight over all experts, straight into BlockMajorK
    (``gather_block_rows``, the swap folded into the index); new scales.

    Out of place: new tensors; the input is unchanged. Peak transient: the outputs.
    """
    weights = [gather_block_rows(weight, index) for weight, index in _block_weights(layer, gated)]
    return Layer(*weights, *_block_scales(layer, gated))


# Block-FP8's figures. Scales: -preallocated and -fast clamp into new tensors (2 F13 + 2 F2 in
# 3 launches gated, 2 not); -inplace swaps a gated w13's scale rows through the scratch (an
# index of M13 / 128 rows, X13 // 128 bytes, per expert) and clamps both in place.
_BLOCK_KINDS = {
    "preallocated": (
        block_preallocated,
        "ours, vLLM #55407's form",
        False,
        Formula("T13 + T2 + F13 + F2"),
        Formula("2 (T13 + T2 + F13 + F2) + E (X13 + X2)"),
        Formula("2 E + 3", "2 E + 2"),
    ),
    "inplace": (
        block_inplace,
        "ours",
        True,
        Formula("max(S13, S2, 10 MiB)"),
        Formula(
            "4 (T13 + T2) + 6 F13 + 2 F2 + E (X13 + X2 + X13 // 128)",
            "4 (T13 + T2) + 2 (F13 + F2) + E (X13 + X2)",
        ),
        Formula("6 E + 2", "4 E + 2"),
    ),
    "fast": (
        block_fast,
        "ours",
        False,
        Formula("T13 + T2 + F13 + F2"),
        Formula("2 (T13 + T2 + F13 + F2) + X13 + X2"),
        Formula("5", "4"),
    ),
}
for _kind, (_function, _origin, _inplace, _peak, _traffic, _launches) in _BLOCK_KINDS.items():
    register(
        f"fp8block-{_kind}",
        format="fp8block",
        inplace=_inplace,
        origin=_origin,
        peak=_peak,
        traffic=_traffic,
        launches=_launches,
    )(_function)
