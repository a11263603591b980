"""The quantized formats: every strategy byte-identical to its format's transcribed upstream
path on ten shapes per format, the row indices FlashInfer's own, and the contracts (in place or
not, what the input is left as)."""

from __future__ import annotations

import pytest
import torch
from conftest import requires_flashinfer

from moe_convert import FORMATS, REGISTRY, Layer, LayerShape, convert
from moe_convert.formats.layout import swap_w13_to_w31
from moe_convert.formats.registry import result_in_input
from moe_convert.formats.rows import gather_scales, row_index
from moe_convert.formats.swizzle import block_scale_interleave
from moe_convert.formats.table import random_layer
from moe_convert.formats.words import as_words

# (E, H, I, gated) per format: the smallest aligned shapes and odd ones (one expert, I not a
# power of two, H much larger or smaller than I, non-gated where the format has it).
# NVFP4: H % 64 and I % 64 (scale columns % 4), rows % 128. MXFP4: gated only, H and I % 128.
# FP8: rows % 32 only. Block-FP8: H and I % 128 (whole 128x128 scale blocks). MXFP8: H and
# I % 128 (rows % 128, 32 elements per scale, scale columns % 4), gated or not. MXINT4: gated
# only, H and I % 256 (whole 128-byte blocks of packed int4 per row).
SHAPES = {
    "nvfp4": [
        (1, 128, 64, True), (2, 256, 64, True), (3, 128, 128, True), (2, 384, 192, True),
        (2, 640, 320, True), (1, 896, 64, True), (3, 256, 576, True), (4, 256, 128, False),
        (2, 128, 384, False), (2, 1152, 128, False),
    ],
    "mxfp4": [
        (1, 128, 128, True), (2, 256, 128, True), (3, 128, 256, True), (2, 384, 384, True),
        (2, 640, 128, True), (1, 128, 640, True), (4, 256, 256, True), (2, 896, 384, True),
        (3, 1152, 128, True), (1, 384, 768, True),
    ],
    "fp8": [
        (1, 32, 16, True), (2, 64, 48, True), (2, 160, 80, True), (4, 128, 64, True),
        (3, 64, 112, True), (2, 288, 16, True), (3, 96, 32, False), (1, 224, 96, False),
        (2, 32, 160, False), (1, 96, 224, False),
    ],
    "fp8block": [
        (1, 128, 128, True), (2, 256, 128, True), (3, 128, 256, True), (2, 384, 384, True),
        (2, 640, 128, True), (1, 128, 640, True), (4, 256, 256, True), (3, 384, 128, False),
        (2, 128, 384, False), (1, 1152, 256, False),
    ],
    "mxfp8": [
        (1, 128, 128, True), (2, 256, 128, True), (3, 128, 256, True), (2, 384, 384, True),
        (2, 640, 128, True), (1, 128, 640, True), (3, 1152, 384, True), (4, 256, 128, False),
        (2, 128, 384, False), (1, 1152, 256, False),
    ],
    "mxint4": [
        (1, 256, 256, True), (2, 512, 256, True), (3, 256, 512, True), (2, 768, 256, True),
        (1, 256, 768, True), (4, 512, 512, True), (2, 1280, 256, True), (3, 256, 1280, True),
        (1, 1792, 256, True), (2, 512, 1024, True),
    ],
}  # fmt: skip
# Every quantized format's registered strategies (the old ``QUANT_STRATEGIES``).
QUANT_STRATEGIES = {name: r for name, r in REGISTRY.items() if r.format != "bf16"}
CASES = [
    LayerShape("test", 1, experts, hidden, inter, 1, gated, fmt)
    for fmt, shapes in SHAPES.items()
    for experts, hidden, inter, gated in shapes
]


# vLLM's NVFP4 paths reorder a gated w13 and its scales to [w3; w1] in place first.
REORDER_IN_PLACE = ("nvfp4-legacy", "nvfp4-preallocated")
# vLLM's block-FP8 path clamps the scales it does not copy in place: w2's, and a non-gated w13's.
CLAMP_IN_PLACE = "fp8block-legacy"
# vLLM's MXINT4 path signs both weights in place (every byte XOR 0x88), then reorders w13 and
# its scales to [w3; w1] in place.
SIGN_IN_PLACE = "mxint4-legacy"


def case_id(shape: LayerShape) -> str:
    return f"{shape.format}-E{shape.experts}H{shape.hidden}I{shape.intermediate}g{int(shape.gated)}"


def copy_of(layer: Layer) -> Layer:
    return Layer(**{name: t.clone() for name, t in layer.items()})


def assert_same_bytes(got: Layer, want: Layer) -> None:
    assert dict(got).keys() == dict(want).keys()
    for name, tensor in want.items():
        other = getattr(got, name)
        assert (other.shape, other.dtype) == (tensor.shape, tensor.dtype), name
        assert torch.equal(other.view(torch.uint8), tensor.view(torch.uint8)), name


def test_every_format_has_the_five_kinds():
    for fmt in SHAPES:
        kinds = {name.split("-", 1)[1] for name, r in QUANT_STRATEGIES.items() if r.format == fmt}
        # "vllm": vLLM's own function, where installed (moe_convert.formats.preparations);
        # "flashinfer": FlashInfer's helper, a BF16 layer in (tests/test_flashinfer_prepare.py)
        assert kinds - {"vllm", "flashinfer"} == {
            "legacy", "preallocated", "inplace", "fast", "streaming"
        }  # fmt: skip


@pytest.mark.parametrize("shape", CASES, ids=case_id)
def test_every_strategy_gives_the_legacy_bytes(shape):
    layer = random_layer(shape, "cpu")
    want = convert(copy_of(layer), strategy=f"{shape.format}-legacy", gated=shape.gated)
    fmt = FORMATS[shape.format]
    aligned = (
        shape.intermediate % fmt.intermediate_alignment(shape.gated) == 0
        and shape.hidden % fmt.hidden_align == 0  # MXFP8: vLLM pads H to 256 too
    )
    for name, record in QUANT_STRATEGIES.items():
        if record.format != shape.format or record.takes != shape.format:
            continue  # FlashInfer's helpers take a BF16 layer: tests/test_flashinfer_prepare.py
        if name.endswith("-vllm") and not aligned:  # vLLM pads it first: another layer's bytes
            continue
        given = copy_of(layer)
        got = convert(given, strategy=name, gated=shape.gated)
        assert_same_bytes(got, want)
        assert result_in_input(given, got) == record.inplace
        # An installed vLLM's function (formats/preparations.py) leaves its input as its
        # transcription does; in place (vLLM 0.34.0's FP8 per-tensor copy-back), w2 in its own
        # storage, and w13 unless gated (then the w1/w3 swap's copy).
        adapter, name = name.endswith("-vllm"), name.replace("-vllm", "-legacy")
        if record.inplace:  # weights and scales in their own storage
            fields = ("w2",) if adapter else ("w13", "w2", "w13_scale", "w2_scale")
            for field in fields:
                if getattr(given, field) is not None:
                    assert getattr(got, field).data_ptr() == getattr(given, field).data_ptr()
        elif name in REORDER_IN_PLACE and shape.gated:  # vLLM's reorder, in place on the input
            assert torch.equal(given.w13, swap_w13_to_w31(layer.w13))
            assert torch.equal(
                given.w13_scale.view(torch.uint8),
                swap_w13_to_w31(layer.w13_scale).view(torch.uint8),
            )
        elif name == CLAMP_IN_PLACE:  # the scales it returns uncopied are the input's, clamped
            assert got.w2_scale is given.w2_scale
            assert (got.w13_scale is given.w13_scale) == (not shape.gated)
            clamped = Layer(
                layer.w13, layer.w2, layer.w13_scale if shape.gated else want.w13_scale,
                want.w2_scale,
            )  # fmt: skip
            assert_same_bytes(given, clamped)
        elif name == SIGN_IN_PLACE:
            signed = Layer(
                swap_w13_to_w31(layer.w13.view(torch.uint8) ^ 0x88).view(torch.int32),
                (layer.w2.view(torch.uint8) ^ 0x88).view(torch.int32),
                swap_w13_to_w31(layer.w13_scale),
                layer.w2_scale,
            )
            assert_same_bytes(given, signed)
        else:
            assert_same_bytes(given, layer)


@pytest.mark.parametrize(
    ("cols", "offset", "integer", "word"),
    [(64, 0, False, torch.complex128), (64, 0, True, torch.int64), (24, 0, False, torch.int64),
     (12, 0, False, torch.int32), (64, 4, False, torch.int32), (6, 0, False, torch.int16),
     (7, 0, False, torch.uint8), (64, 1, False, torch.uint8)],
)  # fmt: skip
def test_as_words_takes_the_widest_word_the_views_allow(cols, offset, integer, word):
    """The word is the widest dividing the last dim and the storage offset of every tensor
    (integers only where asked); a row gather and a copy through the views give the uint8
    moves' bytes, NaN patterns of complex128 words included (the bytes are random)."""
    storage = torch.randint(0, 256, (5 * cols + offset,), dtype=torch.uint8)
    storage[offset : offset + 8] = 0xFF  # a NaN double, as a complex128 word's real part
    rows = storage[offset:].view(5, cols)
    out = torch.empty(3, 2 * cols, dtype=torch.uint8)[:, :cols]  # strided, like an out[e] slot
    source, target = as_words(rows, out, integer=integer)
    assert source.dtype == target.dtype == word
    index = torch.tensor([4, 0, 2])
    torch.index_select(source, 0, index, out=target)
    assert torch.equal(out, rows[index])
    copied = torch.empty_like(rows)
    into, out_of = as_words(copied, rows, integer=integer)
    into.copy_(out_of)
    assert torch.equal(copied, rows)
    # One tensor that allows no word keeps every tensor in bytes.
    assert as_words(rows, torch.empty(3, 1, dtype=torch.uint8))[0].dtype == torch.uint8


@pytest.mark.parametrize("order", ["swap_halves", "shuffle"])
def test_scales_off_a_word_boundary_gather_the_same_bytes(order):
    """``gather_scales`` in 4-byte words, and in bytes for scales starting 1 byte into a shared
    buffer (no word view there): the same bytes either way."""
    experts, rows, cols = 3, 256, 12
    buffer = torch.randint(0, 256, (experts * rows * cols + 1,), dtype=torch.uint8)
    shifted = buffer[1:].view(experts, rows, cols)
    assert torch.equal(gather_scales(shifted, order), gather_scales(shifted.clone(), order))


# FlashInfer's pure-torch helpers, called as vLLM calls them: the row indices are theirs.
@requires_flashinfer
@pytest.mark.parametrize("rows", [128, 256, 384, 1024])
def test_row_indices_are_flashinfers(rows):
    from flashinfer.fused_moe.core import (
        _maybe_get_cached_w3_w1_permute_indices,
        get_w2_permute_indices_with_cache,
    )
    from flashinfer.utils import get_shuffle_matrix_a_row_indices

    weight = torch.empty(rows, 64, dtype=torch.uint8)
    scale = torch.empty(rows, 8, dtype=torch.uint8)
    w3_w1 = _maybe_get_cached_w3_w1_permute_indices({}, weight, 128)
    w3_w1_sf = _maybe_get_cached_w3_w1_permute_indices({}, scale, 128, num_elts_per_sf=16)
    shuffle = get_w2_permute_indices_with_cache({}, weight, 128)
    shuffle_sf = get_w2_permute_indices_with_cache({}, scale, 128, num_elts_per_sf=16)
    assert torch.equal(w3_w1, w3_w1_sf) and torch.equal(shuffle, shuffle_sf)
    # Applied to [w3; w1] rows (swap_w13_to_w31) = applied to [w1; w3] rows with the swap folded.
    assert torch.equal(row_index("swap_halves", rows), (w3_w1 + rows // 2) % rows)
    assert torch.equal(row_index("shuffle", rows), shuffle)
    # Block-FP8: shuffle_matrix_a's rows for epilogue_tile_m 64 (blocks of 16), after the swap.
    tile64 = get_shuffle_matrix_a_row_indices(weight, 64)
    assert torch.equal(row_index("shuffle_tile64", rows), tile64)
    assert torch.equal(row_index("swap_halves_tile64", rows), (tile64 + rows // 2) % rows)
    # gpt-oss: the w2 index applied to swap_every_two_rows' output.
    assert torch.equal(
        row_index("swap_pairs", rows), torch.arange(rows).view(-1, 2).flip(1).reshape(-1)[shuffle]
    )


def flashinfer_fp8(layer: Layer, gated: bool) -> Layer:
    """vLLM's FP8 per-tensor path on FlashInfer's own ``reorder_rows_for_gated_act_gemm`` and
    ``shuffle_matrix_a`` (pure torch)."""
    from flashinfer import reorder_rows_for_gated_act_gemm, shuffle_matrix_a

    w13 = swap_w13_to_w31(layer.w13) if gated else layer.w13
    w13 = torch.stack([reorder_rows_for_gated_act_gemm(x) if gated else x for x in w13])
    out13 = torch.stack([shuffle_matrix_a(x.view(torch.uint8), 128) for x in w13])
    out2 = torch.stack([shuffle_matrix_a(x.view(torch.uint8), 128) for x in layer.w2])
    return Layer(out13.view(torch.float8_e4m3fn), out2.view(torch.float8_e4m3fn))


def flashinfer_fp8block(layer: Layer, gated: bool) -> Layer:
    """vLLM 0.33.0's block-FP8 path, its weights two ways on FlashInfer's own helpers: the
    batched gather on ``get_shuffle_matrix_a_row_indices`` (as vLLM calls it) and, per
    expert, ``shuffle_matrix_a`` then ``convert_to_block_layout`` (the form it replaced); the
    scales as vLLM relays them."""
    from flashinfer import shuffle_matrix_a
    from flashinfer.fused_moe.core import convert_to_block_layout
    from flashinfer.utils import get_shuffle_matrix_a_row_indices

    w13 = swap_w13_to_w31(layer.w13) if gated else layer.w13
    s13 = swap_w13_to_w31(layer.w13_scale) if gated else layer.w13_scale.clone()
    weights = []
    for w in (w13, layer.w2):
        experts, m, k = w.shape
        rows = get_shuffle_matrix_a_row_indices(w[0].view(torch.uint8), 64)
        blocked = w.view(torch.uint8).view(experts, m, k // 128, 128)
        batched = blocked.permute(0, 2, 1, 3)[:, :, rows, :].contiguous()
        per_expert = torch.stack(
            [convert_to_block_layout(shuffle_matrix_a(x.view(torch.uint8), 64), 128) for x in w]
        )
        assert torch.equal(batched, per_expert)
        weights.append(batched.view(torch.float8_e4m3fn))
    scales = [s.clamp_(min=1e-10) for s in (s13, layer.w2_scale.clone())]
    return Layer(*weights, *scales)


def flashinfer_nvfp4(layer: Layer, gated: bool) -> Layer:
    """vLLM 0.29.0's NVFP4 path on FlashInfer's index helpers; the interleave (a CUDA op) is
    ``block_scale_interleave``, its torch definition."""
    from flashinfer.fused_moe.core import (
        _maybe_get_cached_w3_w1_permute_indices,
        get_w2_permute_indices_with_cache,
    )

    cache: dict = {}
    w13 = swap_w13_to_w31(layer.w13) if gated else layer.w13
    s13 = swap_w13_to_w31(layer.w13_scale.view(torch.uint8)) if gated else layer.w13_scale
    out = {key: [] for key in ("w13", "w2", "s13", "s2")}
    for e in range(w13.shape[0]):
        i13 = _maybe_get_cached_w3_w1_permute_indices(cache, w13[e], 128, is_gated_act_gemm=gated)
        out["w13"].append(w13[e][i13])
        out["s13"].append(block_scale_interleave(s13[e].view(torch.uint8)[i13]))
        i2 = get_w2_permute_indices_with_cache(cache, layer.w2[e], 128)
        out["w2"].append(layer.w2[e][i2])
        out["s2"].append(block_scale_interleave(layer.w2_scale[e].view(torch.uint8)[i2]))
    scales = [
        torch.stack(out[key]).view(torch.float8_e4m3fn).view(tensor.shape)
        for key, tensor in (("s13", layer.w13_scale), ("s2", layer.w2_scale))
    ]
    return Layer(torch.stack(out["w13"]), torch.stack(out["w2"]), *scales)


def flashinfer_mxfp8(layer: Layer, gated: bool) -> Layer:
    """vLLM 0.33.0's MXFP8 path on FlashInfer's index helpers, called as vLLM calls them (one
    gather per tensor), and held to the per-expert form its docstring says it equals:
    ``reorder_rows_for_gated_act_gemm`` then ``shuffle_matrix_a`` per weight expert, scale rows
    by ``get_shuffle_matrix_sf_a_row_indices`` (32 elements per scale); the interleave (a CUDA
    op) is ``block_scale_interleave``, its torch definition."""
    from flashinfer import reorder_rows_for_gated_act_gemm, shuffle_matrix_a
    from flashinfer.fused_moe.core import get_reorder_rows_for_gated_act_gemm_row_indices
    from flashinfer.utils import (
        get_shuffle_matrix_a_row_indices,
        get_shuffle_matrix_sf_a_row_indices,
    )

    w13 = (swap_w13_to_w31(layer.w13) if gated else layer.w13).view(torch.uint8)
    s13 = swap_w13_to_w31(layer.w13_scale) if gated else layer.w13_scale
    if gated:
        gate_idx = get_reorder_rows_for_gated_act_gemm_row_indices(w13[0])
        per_expert = torch.stack([reorder_rows_for_gated_act_gemm(x) for x in w13])
        w13, s13 = w13[:, gate_idx], s13[:, gate_idx]
        assert torch.equal(w13, per_expert)
    out = []
    for w in (w13, layer.w2.view(torch.uint8)):
        batched = w[:, get_shuffle_matrix_a_row_indices(w[0], 128)]
        assert torch.equal(batched, torch.stack([shuffle_matrix_a(x, 128) for x in w]))
        out.append(batched.view(torch.float8_e4m3fn))
    for s in (s13, layer.w2_scale):
        batched = block_scale_interleave(s[:, get_shuffle_matrix_a_row_indices(s[0], 128)])
        sf_rows = get_shuffle_matrix_sf_a_row_indices(s[0], 128, num_elts_per_sf=32)
        assert torch.equal(batched, torch.cat([block_scale_interleave(x[sf_rows]) for x in s]))
        out.append(batched.reshape(s.shape))
    return Layer(*out)


def flashinfer_mxint4(layer: Layer, gated: bool) -> Layer:
    """vLLM 0.33.0's MXINT4 path on FlashInfer's index helpers and ``convert_to_block_layout``,
    called as vLLM calls them (scales: ``num_elts_per_sf`` 32 for w13, 16 for w2); the sign step
    as arithmetic on the nibbles (``n - 8`` modulo 16); the interleave (a CUDA op) is
    ``block_scale_interleave``, its torch definition."""
    from flashinfer.fused_moe.core import (
        _maybe_get_cached_w3_w1_permute_indices,
        convert_to_block_layout,
        get_w2_permute_indices_with_cache,
    )

    def signed(weight: torch.Tensor) -> torch.Tensor:
        u8 = weight.view(torch.uint8)
        low, high = (u8 & 0xF).to(torch.int16), (u8 >> 4).to(torch.int16)
        low, high = (low - 8).remainder(16), (high - 8).remainder(16)
        return (low | (high << 4)).to(torch.uint8)

    cache: dict = {}
    w13, s13 = swap_w13_to_w31(signed(layer.w13)), swap_w13_to_w31(layer.w13_scale)
    w2, s2 = signed(layer.w2), layer.w2_scale
    out = {key: [] for key in ("w13", "w2", "s13", "s2")}
    for e in range(w13.shape[0]):
        i13 = _maybe_get_cached_w3_w1_permute_indices(cache, w13[e], 128)
        sf13 = _maybe_get_cached_w3_w1_permute_indices(cache, s13[e], 128, num_elts_per_sf=32)
        i2 = get_w2_permute_indices_with_cache(cache, w2[e], 128)
        sf2 = get_w2_permute_indices_with_cache(cache, s2[e], 128, num_elts_per_sf=16)
        out["w13"].append(convert_to_block_layout(w13[e][i13].contiguous(), 128))
        out["s13"].append(block_scale_interleave(s13[e][sf13].contiguous()))
        out["w2"].append(convert_to_block_layout(w2[e][i2].contiguous(), 128))
        out["s2"].append(block_scale_interleave(s2[e][sf2].contiguous()))
    return Layer(*(torch.stack(out[key]) for key in ("w13", "w2", "s13", "s2")))


@requires_flashinfer
@pytest.mark.parametrize(
    "shape",
    [s for s in CASES if s.format in ("fp8", "nvfp4", "fp8block", "mxfp8", "mxint4")][::3],
    ids=case_id,
)
def test_legacy_is_vllm_on_flashinfers_helpers(shape):
    layer = random_layer(shape, "cpu")
    reference = {
        "fp8": flashinfer_fp8,
        "nvfp4": flashinfer_nvfp4,
        "fp8block": flashinfer_fp8block,
        "mxfp8": flashinfer_mxfp8,
        "mxint4": flashinfer_mxint4,
    }
    reference = reference[shape.format]
    want = reference(layer, shape.gated)
    got = convert(copy_of(layer), strategy=f"{shape.format}-legacy", gated=shape.gated)
    assert_same_bytes(got, want)
