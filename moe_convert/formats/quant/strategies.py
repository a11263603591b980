"""This library's strategies for the quantized formats, one of each kind per format.

Legend and formula letters as in ``formats.quant.upstream``. Each kind is one function for
every format: the format only decides w13's row order (``quant_ops.ROW_ORDERS``: gpt-oss's
pairs for MXFP4, ``[w1; w3]`` halves for the others when gated), which of scales and biases
there are and the relaid scales' dtype (MXFP8's stay uint8). Registered as
``<format>-<kind>``:

- ``preallocated`` (MXFP4, FP8, MXFP8; NVFP4's is vLLM #55407's own, ``quant_upstream``): the
  outputs allocated once, each expert gathered into its slot, scales through a scratch and the
  interleave, as #55407 does; no reorder pass, the w1/w3 swap folded into the index;
- ``inplace``: one scratch of an expert (at least 10 MiB); each expert's rows gathered into it
  and copied back,
  scales swizzled back by a strided copy: weights and scales come back in their own storage;
- ``fast``: one ``index_select`` per weight over every expert, and one per scale tensor with
  the row order and the swizzle folded into one flat index (``quant_ops.scale_index``).

Biases (MXFP4) are made float32 by every kind with one gather and a cast (their bytes are
0.12 % of a gpt-oss-120b layer's): a float32 bias cannot live in a bf16 one's storage.

DeepSeek block-FP8 (``fp8block-*``) has its own three: its weights come out in BlockMajorK
(``quant_ops.gather_block_rows``) and its float32 scales are only reordered and clamped, never
swizzled. ``block_preallocated``, ``block_inplace`` and ``block_fast`` are the same kinds for it.
"""

from __future__ import annotations

import torch

from ...formulas import Formula
from ...load.allocator import K_MIN_LARGE_ALLOC
from ..layout import BLOCK_K
from ..quant_ops import (
    MIN_BLOCK_SCALE,
    block_major_k,
    gather_block_rows,
    gather_rows,
    gather_scales,
    relay_rows_in_place,
    relay_scales_in_place,
    row_index,
)
from ..swizzle import block_scale_interleave
from .formats import FORMATS
from .layer import QuantLayer
from .registry import register_quant

__all__ = ["block_fast", "block_inplace", "block_preallocated", "fast", "inplace", "preallocated"]


def _w13_order(fmt: str, gated: bool) -> str:
    if fmt == "mxfp4":
        return "swap_pairs"
    return "swap_halves" if gated else "shuffle"


def _gather_bias(bias: torch.Tensor | None, index: torch.Tensor) -> torch.Tensor | None:
    """bf16 ``[E, M]`` -> its rows by ``index``, as a new float32 ``[E, M]`` (None: None)."""
    return None if bias is None else torch.index_select(bias, 1, index).to(torch.float32)


def _as_scale(scale: torch.Tensor | None, fmt: str) -> torch.Tensor | None:
    """Relaid scales viewed as the dtype vLLM returns them in (``relaid_scale_dtype``)."""
    return None if scale is None else scale.view(FORMATS[fmt].relaid_scale_dtype)


def _weights(layer: QuantLayer, order13: str):
    """(weight, scale, bias, row index) of w13, then of w2."""
    w13, w2 = layer.w13, layer.w2
    return (
        (w13, layer.w13_scale, layer.w13_bias, row_index(order13, w13.shape[1], w13.device)),
        (w2, layer.w2_scale, layer.w2_bias, row_index("shuffle", w2.shape[1], w2.device)),
    )


def preallocated(layer: QuantLayer, gated: bool, fmt: str) -> QuantLayer:
    """Outputs allocated once; per expert, rows ``index_select``-ed into the expert's slot and
    scale rows into a scratch whose interleave is copied into the slot (vLLM #55407's loop).

    Out of place: new tensors; the input is unchanged. Peak transient: the outputs, the
    scratch of the weight being converted, one interleave result, and the biases.
    """
    converted = []
    for weight, scale, bias, index in _weights(layer, _w13_order(fmt, gated)):
        out = torch.empty(weight.shape, dtype=torch.uint8, device=weight.device)
        out_scale = scratch = None
        if scale is not None:
            out_scale = torch.empty(scale.shape, dtype=torch.uint8, device=scale.device)
            scratch = torch.empty(scale.shape[1:], dtype=torch.uint8, device=scale.device)
        for e in range(weight.shape[0]):
            torch.index_select(weight[e].view(torch.uint8), 0, index, out=out[e])
            if scale is not None:
                torch.index_select(scale[e].view(torch.uint8), 0, index, out=scratch)
                out_scale[e].view(-1).copy_(block_scale_interleave(scratch))
        del scratch
        converted.append(
            (out.view(weight.dtype), _as_scale(out_scale, fmt), _gather_bias(bias, index))
        )
    (w13, s13, b13), (w2, s2, b2) = converted
    return QuantLayer(w13, w2, s13, s2, b13, b2)


def _scratch(layer: QuantLayer) -> torch.Tensor:
    """The in-place kinds' uint8 scratch: one expert of the larger weight, at least 10 MiB."""
    experts = layer.w13.shape[0]
    expert_bytes = max(layer.w13.nbytes, layer.w2.nbytes) // experts
    # At least 10 MiB, as strategies.strided_inplace's and for its reason: a smaller scratch
    # gets a slice of a 20 MiB segment that max_split_size_mb=20 strands after every layer
    # (replay_load: 20 MiB growth per layer for kimi-k2-nvfp4/tp8); a large one is reused.
    return torch.empty(
        max(expert_bytes, K_MIN_LARGE_ALLOC), dtype=torch.uint8, device=layer.w13.device
    )


def inplace(layer: QuantLayer, gated: bool, fmt: str) -> QuantLayer:
    """One scratch of one expert's weight; per expert, rows gathered into it and copied back;
    scale rows gathered into it and swizzled back by a strided ``copy_``.

    In place: weights and scales are returned in the input's own storage (``data_ptr``
    unchanged; scales viewed as vLLM returns them); biases are new float32 tensors. Peak
    transient: the scratch, ``max(S13, S2, 10 MiB)`` (a weight expert holds more bytes than its
    scales), and the biases.
    """
    scratch = _scratch(layer)
    biases = []
    for weight, scale, bias, index in _weights(layer, _w13_order(fmt, gated)):
        relay_rows_in_place(weight, index, scratch)
        if scale is not None:
            relay_scales_in_place(scale, index, scratch)
        biases.append(_gather_bias(bias, index))
    del scratch
    return QuantLayer(
        layer.w13,
        layer.w2,
        _as_scale(layer.w13_scale, fmt),
        _as_scale(layer.w2_scale, fmt),
        *biases,
    )


def fast(layer: QuantLayer, gated: bool, fmt: str) -> QuantLayer:
    """One gather per weight over all experts; one per scale tensor, the swizzle folded in.

    Out of place: new tensors; the input is unchanged. Peak transient: the outputs, nothing
    else (the flat scale index is cached: 8 bytes per scale factor of one expert).
    """
    order13 = _w13_order(fmt, gated)
    converted = []
    for (weight, scale, bias, index), order in zip(
        _weights(layer, order13), (order13, "shuffle"), strict=True
    ):
        converted.append(
            (
                gather_rows(weight, index),
                None if scale is None else _as_scale(gather_scales(scale, order), fmt),
                _gather_bias(bias, index),
            )
        )
    (w13, s13, b13), (w2, s2, b2) = converted
    return QuantLayer(w13, w2, s13, s2, b13, b2)


def _block_weights(layer: QuantLayer, gated: bool):
    """(weight, row index) of w13, then of w2, in block-FP8's row orders (tile 64)."""
    order13 = "swap_halves_tile64" if gated else "shuffle_tile64"
    return [
        (weight, row_index(order, weight.shape[1], weight.device))
        for weight, order in ((layer.w13, order13), (layer.w2, "shuffle_tile64"))
    ]


def _block_scales(layer: QuantLayer, gated: bool) -> tuple[torch.Tensor, torch.Tensor]:
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


def block_preallocated(layer: QuantLayer, gated: bool) -> QuantLayer:
    """Block-FP8: the BlockMajorK outputs allocated once; per expert, its rows gathered through
    its BlockMajorK view into its slot (no swap copy: the swap is in the index); new scales.

    Out of place: new tensors, ``QuantLayer``'s shapes; the input is unchanged. Peak transient:
    the outputs.
    """
    weights = []
    for weight, index in _block_weights(layer, gated):
        experts, rows, cols = weight.shape
        out = torch.empty(
            (experts, cols // BLOCK_K, rows, BLOCK_K), dtype=torch.uint8, device=weight.device
        )
        for e in range(experts):
            torch.index_select(block_major_k(weight[e].view(torch.uint8)), 1, index, out=out[e])
        weights.append(out.view(weight.dtype))
    return QuantLayer(*weights, *_block_scales(layer, gated))


def block_inplace(layer: QuantLayer, gated: bool) -> QuantLayer:
    """Block-FP8: one scratch of one expert (at least 10 MiB); per expert, its rows gathered
    through its BlockMajorK view into the scratch and copied back; a gated w13's scale rows
    swapped the same way (``relay_rows_in_place``), then both scales clamped in place.

    In place: weights come back as BlockMajorK views of the input's storage, scales as the
    input's tensors. Peak transient: the scratch, ``max(S13, S2, 10 MiB)``.
    """
    scratch = _scratch(layer)
    weights = []
    for weight, index in _block_weights(layer, gated):
        experts, rows, cols = weight.shape
        blocks = (cols // BLOCK_K, rows, BLOCK_K)
        expert_scratch = scratch[: rows * cols].view(blocks)
        for expert in weight.view(torch.uint8):
            torch.index_select(block_major_k(expert), 1, index, out=expert_scratch)
            expert.view(blocks).copy_(expert_scratch)
        weights.append(weight.view(experts, *blocks))
    s13, s2 = layer.w13_scale, layer.w2_scale
    if gated:
        relay_rows_in_place(s13, row_index("swap", s13.shape[1], s13.device), scratch)
    del scratch
    s13.clamp_(min=MIN_BLOCK_SCALE)
    s2.clamp_(min=MIN_BLOCK_SCALE)
    return QuantLayer(*weights, s13, s2)


def block_fast(layer: QuantLayer, gated: bool) -> QuantLayer:
    """Block-FP8: one gather per weight over all experts, straight into BlockMajorK
    (``gather_block_rows``, the swap folded into the index); new scales.

    Out of place: new tensors; the input is unchanged. Peak transient: the outputs.
    """
    weights = [gather_block_rows(weight, index) for weight, index in _block_weights(layer, gated)]
    return QuantLayer(*weights, *_block_scales(layer, gated))


# Each kind's figures. Peak: the bias terms are the float32 biases, each made from a bf16
# gather (half its bytes) freed after the cast; the last one made, w2's, sits on top of the
# rest. Traffic and launches per format: a bias costs 5/2 B (the gather, then the cast) and its
# index, in four launches; a scale gather reads 8 bytes of index per scale factor of one expert
# (quant_ops.scale_index).
_BIAS_TRAFFIC = "5 (B13 + B2) // 2 + X13 + X2"
# NVFP4 and MXFP8 move the same tensors the same way (1-D block scales, no biases): one figure.
_SCALED_INPLACE = ("4 (T13 + T2 + F13 + F2) + 2 E (X13 + X2)", "8 E")
_SCALED_FAST = ("2 (T13 + T2 + F13 + F2) + 8 (F13 // E + F2 // E) + X13 + X2", "4")
_KINDS = {
    "preallocated": (
        preallocated,
        "ours, vLLM #55407's form",
        False,
        Formula("T13 + T2 + F13 + F2 + B13 + max(2 (F2 // E), B2 + B2 // 2)"),
        {
            "mxfp4": (
                f"2 (T13 + T2) + 6 (F13 + F2) + 2 E (X13 + X2) + {_BIAS_TRAFFIC}",
                "8 E + 4",
            ),
            "fp8": ("2 (T13 + T2) + E (X13 + X2)", "2 E"),
            "mxfp8": ("2 (T13 + T2) + 6 (F13 + F2) + 2 E (X13 + X2)", "8 E"),
        },
    ),
    "inplace": (
        inplace,
        "ours",
        True,
        Formula("max(S13, S2, 10 MiB) + B13 + max(B13 // 2, B2 + B2 // 2)"),
        {
            "nvfp4": _SCALED_INPLACE,
            "mxfp4": (f"4 (T13 + T2 + F13 + F2) + 2 E (X13 + X2) + {_BIAS_TRAFFIC}", "8 E + 4"),
            "fp8": ("4 (T13 + T2) + E (X13 + X2)", "4 E"),
            "mxfp8": _SCALED_INPLACE,
        },
    ),
    "fast": (
        fast,
        "ours",
        False,
        Formula("T13 + T2 + F13 + F2 + B13 + B2 + B2 // 2"),
        {
            "nvfp4": _SCALED_FAST,
            "mxfp4": (
                "2 (T13 + T2 + F13 + F2) + 8 (F13 // E + F2 // E) + 2 (X13 + X2) "
                "+ 5 (B13 + B2) // 2",
                "8",
            ),
            "fp8": ("2 (T13 + T2) + X13 + X2", "2"),
            "mxfp8": _SCALED_FAST,
        },
    ),
}


def _bind(function, fmt: str):
    return lambda layer, gated: function(layer, gated, fmt)


for _kind, (_function, _origin, _inplace, _peak, _work) in _KINDS.items():
    for _fmt, (_traffic, _launches) in _work.items():
        register_quant(
            f"{_fmt}-{_kind}",
            inplace=_inplace,
            origin=_origin,
            peak=_peak,
            traffic=Formula(_traffic),
            launches=Formula(_launches),
        )(_bind(_function, _fmt))


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
    register_quant(
        f"fp8block-{_kind}",
        inplace=_inplace,
        origin=_origin,
        peak=_peak,
        traffic=_traffic,
        launches=_launches,
    )(_function)
