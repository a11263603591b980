"""What the quantized format modules share: this library's three kinds as functions of the
format, vLLM's w1/w3 reorder that NVFP4's and MXINT4's engine paths both run, and the rules
every format module's transcription of an engine follows.

The engines' paths (each format module's ``<format>-legacy``, and NVFP4's ``-preallocated``) are
transcribed from the published wheels (``pip download --no-deps vllm==X``), every temporary and
its order kept; docs/formats.md names file, function and release for each. Legend: the formula
letters of ``moe_convert.formulas`` (T13, T2 weights, F13, F2 scale factors, B13, B2 float32
biases; ``F13 // E`` one expert's). What differs from the engine, everywhere:

- FlashInfer's row indices (``_maybe_get_cached_w3_w1_permute_indices``,
  ``get_w2_permute_indices_with_cache``, ``reorder_rows_for_gated_act_gemm``,
  ``shuffle_matrix_a``) come from this library's cache (``layout``, ``rows``): the same
  values (tests/test_quant_strategies.py holds them to FlashInfer's), computed once rather than
  per call (vLLM 0.29.0's NVFP4 cache is local to the call) or per expert (FP8);
- FlashInfer's CUDA ``nvfp4_block_scale_interleave`` is ``swizzle.block_scale_interleave``, its
  torch definition: one output allocation, as the op's;
- the padding vLLM applies before (``align_*``) is not transcribed: the inputs are the padded
  shapes.

This library's kinds: each is one function for
every format: the format only decides w13's row order (``rows.ROW_ORDERS``: gpt-oss's
pairs for MXFP4, ``[w1; w3]`` halves for the others when gated), which of scales and biases
there are and the relaid scales' dtype (MXFP8's stay uint8). A format module registers them as
``<format>-<kind>`` with its own traffic and launches (``register_kinds``):

- ``preallocated`` (MXFP4, FP8, MXFP8; NVFP4's is vLLM #55407's own, ``nvfp4``): the
  outputs allocated once, each expert gathered into its slot, scales through a scratch and the
  interleave, as #55407 does; no reorder pass, the w1/w3 swap folded into the index;
- ``inplace``: one scratch of an expert (at least 10 MiB); each expert's rows gathered into it
  and copied back,
  scales swizzled back by a strided copy: weights and scales come back in their own storage;
- ``fast``: one ``index_select`` per weight over every expert, and one per scale tensor with
  the row order and the swizzle folded into one flat index of 4-byte words
  (``rows.scale_word_index``).

Biases (MXFP4) are made float32 by every kind with one gather and a cast (their bytes are
0.12 % of a gpt-oss-120b layer's): a float32 bias cannot live in a bf16 one's storage.

DeepSeek block-FP8 has its own three (``fp8block``); MXINT4 its own (``mxint4``).
"""

from __future__ import annotations

import torch

from ..formulas import Formula
from ..units import K_MIN_LARGE_ALLOC
from .format import Format
from .layer import Layer
from .registry import register
from .rows import (
    gather_rows,
    gather_scales,
    relay_rows_in_place,
    relay_scales_in_place,
    row_index,
)
from .swizzle import block_scale_interleave
from .words import as_words

__all__ = [
    "REORDER_LAUNCHES",
    "SCALED_FAST",
    "SCALED_INPLACE",
    "fast",
    "inplace",
    "preallocated",
    "register_kinds",
    "reorder_w1w3_to_w3w1",
    "scratch_of",
]


def _w13_order(fmt: Format, gated: bool) -> str:
    if fmt.interleaved_w13:
        return "swap_pairs"
    return "swap_halves" if gated else "shuffle"


def _gather_bias(bias: torch.Tensor | None, index: torch.Tensor) -> torch.Tensor | None:
    """bf16 ``[E, M]`` -> its rows by ``index``, as a new float32 ``[E, M]`` (None: None)."""
    return None if bias is None else torch.index_select(bias, 1, index).to(torch.float32)


def _as_scale(scale: torch.Tensor | None, fmt: Format) -> torch.Tensor | None:
    """Relaid scales viewed as the dtype vLLM returns them in (``relaid_scale_dtype``)."""
    return None if scale is None else scale.view(fmt.relaid_scale_dtype)


def _weights(layer: Layer, order13: str):
    """(weight, scale, bias, row index) of w13, then of w2."""
    w13, w2 = layer.w13, layer.w2
    return (
        (w13, layer.w13_scale, layer.w13_bias, row_index(order13, w13.shape[1], w13.device)),
        (w2, layer.w2_scale, layer.w2_bias, row_index("shuffle", w2.shape[1], w2.device)),
    )


def preallocated(layer: Layer, gated: bool, fmt: Format) -> Layer:
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
            source, target = as_words(weight[e].view(torch.uint8), out[e])
            torch.index_select(source, 0, index, out=target)
            if scale is not None:
                torch.index_select(scale[e].view(torch.uint8), 0, index, out=scratch)
                out_scale[e].view(-1).copy_(block_scale_interleave(scratch))
        del scratch
        converted.append(
            (out.view(weight.dtype), _as_scale(out_scale, fmt), _gather_bias(bias, index))
        )
    (w13, s13, b13), (w2, s2, b2) = converted
    return Layer(w13, w2, s13, s2, b13, b2)


def scratch_of(layer: Layer) -> torch.Tensor:
    """The in-place kinds' uint8 scratch: one expert of the larger weight, at least 10 MiB."""
    experts = layer.w13.shape[0]
    expert_bytes = max(layer.w13.nbytes, layer.w2.nbytes) // experts
    # At least 10 MiB, as strategies.strided_inplace's and for its reason: a smaller scratch
    # gets a slice of a 20 MiB segment that max_split_size_mb=20 strands after every layer
    # (replay_load: 20 MiB growth per layer for kimi-k2-nvfp4/tp8); a large one is reused.
    return torch.empty(
        max(expert_bytes, K_MIN_LARGE_ALLOC), dtype=torch.uint8, device=layer.w13.device
    )


def inplace(layer: Layer, gated: bool, fmt: Format) -> Layer:
    """One scratch of one expert's weight; per expert, rows gathered into it and copied back;
    scale rows gathered into it and swizzled back by a strided ``copy_``.

    In place: weights and scales are returned in the input's own storage (``data_ptr``
    unchanged; scales viewed as vLLM returns them); biases are new float32 tensors. Peak
    transient: the scratch, ``max(S13, S2, 10 MiB)`` (a weight expert holds more bytes than its
    scales), and the biases.
    """
    scratch = scratch_of(layer)
    biases = []
    for weight, scale, bias, index in _weights(layer, _w13_order(fmt, gated)):
        relay_rows_in_place(weight, index, scratch)
        if scale is not None:
            relay_scales_in_place(scale, index, scratch)
        biases.append(_gather_bias(bias, index))
    del scratch
    return Layer(
        layer.w13,
        layer.w2,
        _as_scale(layer.w13_scale, fmt),
        _as_scale(layer.w2_scale, fmt),
        *biases,
    )


def fast(layer: Layer, gated: bool, fmt: Format) -> Layer:
    """One gather per weight over all experts; one per scale tensor, the swizzle folded in.

    Out of place: new tensors; the input is unchanged. Peak transient: the outputs, nothing
    else (the flat scale index is cached: 2 bytes per scale factor of one expert).
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
    return Layer(w13, w2, s13, s2, b13, b2)


# The launches of reorder_w1w3_to_w3w1: a clone and two copies per tensor per chunk of rows;
# M13 = X13 / 8 rows, a chunk is at most 64 MiB of rows of T13 / M13 bytes (the weight's rows
# are wider than the scales'), and at most half the rows: cdiv(M13 / 2, max(1, rows in 64 MiB)).
REORDER_LAUNCHES = "6 cdiv(X13 // 16, max(1, 64 MiB // (8 T13 // X13)))"


def reorder_w1w3_to_w3w1(weight: torch.Tensor, scale: torch.Tensor) -> None:
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


# Each kind's record but its work: function, origin, in place, peak. Peak: the bias terms are
# the float32 biases, each made from a bf16 gather (half its bytes) freed after the cast; the
# last one made, w2's, sits on top of the rest.
_KINDS = {
    "preallocated": (
        preallocated,
        "ours, vLLM #55407's form",
        False,
        Formula("T13 + T2 + F13 + F2 + B13 + max(2 (F2 // E), B2 + B2 // 2)"),
    ),
    "inplace": (
        inplace,
        "ours",
        True,
        Formula("max(S13, S2, 10 MiB) + B13 + max(B13 // 2, B2 + B2 // 2)"),
    ),
    "fast": (fast, "ours", False, Formula("T13 + T2 + F13 + F2 + B13 + B2 + B2 // 2")),
}
# NVFP4 and MXFP8 move the same tensors the same way (1-D block scales, no biases): one figure
# of (traffic, launches) per kind.
SCALED_INPLACE = ("4 (T13 + T2 + F13 + F2) + 2 E (X13 + X2)", "8 E")
SCALED_FAST = ("2 (T13 + T2 + F13 + F2) + 2 (F13 // E + F2 // E) + X13 + X2", "4")


def _bind(function, fmt: Format):
    return lambda layer, gated: function(layer, gated, fmt)


def register_kinds(fmt: Format, work: dict[str, tuple[str, str]]) -> None:
    """Register this library's kinds for the format ``fmt`` (its record) as
    ``<format>-<kind>``: ``work`` maps each kind
    to register to its (traffic, launches) formulas for the format, in the letters of
    ``moe_convert.formulas``; the peak, origin and contract are the kind's."""
    for kind, (traffic, launches) in work.items():
        function, origin, inplace, peak = _KINDS[kind]
        register(
            f"{fmt.name}-{kind}",
            format=fmt.name,
            inplace=inplace,
            origin=origin,
            peak=peak,
            traffic=Formula(traffic),
            launches=Formula(launches),
        )(_bind(function, fmt))
