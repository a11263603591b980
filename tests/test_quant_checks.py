"""Bad quantized input: the right exception, one line naming the tensor, its shape and what was
expected, and no byte written; and the quantized catalog's shapes."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from moe_convert import FORMATS, REGISTRY, Layer, LayerShape, convert, layer_shape, layer_tensors
from moe_convert.formats.catalog import catalog_shapes

NVFP4 = LayerShape("bad", 1, 2, 256, 128, 1, format="nvfp4")  # w13 [2, 256, 128], w2 [2, 256, 64]
MXFP4 = LayerShape("bad", 1, 2, 256, 128, 1, format="mxfp4")
FP8 = LayerShape("bad", 1, 2, 64, 32, 1, format="fp8")
# w13 [2, 512, 256], w2 [2, 256, 256]; scales float32 [2, 4, 2], [2, 2, 2]
FP8BLOCK = LayerShape("bad", 1, 2, 256, 256, 1, format="fp8block")
# w13 [2, 256, 256], w2 [2, 256, 128]; e8m0 scales uint8 [2, 256, 8], [2, 256, 4]
MXFP8 = LayerShape("bad", 1, 2, 256, 128, 1, format="mxfp8")
# w13 int32 [2, 512, 32], w2 int32 [2, 256, 32]; bf16 scales [2, 512, 8], [2, 256, 8]
MXINT4 = LayerShape("bad", 1, 2, 256, 256, 1, format="mxint4")


def nvfp4(**changes: torch.Tensor | None) -> Layer:
    return dataclasses.replace(layer_tensors(NVFP4, "cpu"), **changes)


def fp8block(**changes: torch.Tensor | None) -> Layer:
    return dataclasses.replace(layer_tensors(FP8BLOCK, "cpu"), **changes)


def mxfp8(**changes: torch.Tensor | None) -> Layer:
    return dataclasses.replace(layer_tensors(MXFP8, "cpu"), **changes)


def mxint4(**changes: torch.Tensor | None) -> Layer:
    return dataclasses.replace(layer_tensors(MXINT4, "cpu"), **changes)


def f32(*shape: int) -> torch.Tensor:
    return torch.ones(shape, dtype=torch.float32)


def u8(*shape: int) -> torch.Tensor:
    return torch.zeros(shape, dtype=torch.uint8)


def e4m3(*shape: int) -> torch.Tensor:
    return u8(*shape).view(torch.float8_e4m3fn)


# id -> (strategy format, make the layer, gated, exception, fragments the message must hold)
BAD = {
    "bf16-weights-as-nvfp4": (
        "nvfp4",
        lambda: nvfp4(w13=torch.zeros(2, 256, 128, dtype=torch.bfloat16)),
        True,
        TypeError,
        ["w13", "(2, 256, 128)", "torch.bfloat16", "torch.uint8"],
    ),
    "scale-wrong-dtype": (
        "nvfp4",
        lambda: nvfp4(w2_scale=u8(2, 256, 8)),
        True,
        TypeError,
        ["w2_scale", "(2, 256, 8)", "torch.uint8", "float8_e4m3fn"],
    ),
    "scale-wrong-shape": (
        "nvfp4",
        lambda: nvfp4(w13_scale=e4m3(2, 256, 8)),
        True,
        ValueError,
        ["w13_scale", "(2, 256, 8)", "(2, 256, 16)"],
    ),
    "scale-of-another-layer": (
        "nvfp4",
        lambda: nvfp4(w2_scale=e4m3(3, 256, 8)),
        True,
        ValueError,
        ["w2_scale", "(3, 256, 8)", "(2, 256, 8)"],
    ),
    "odd-packed-width": (
        "nvfp4",
        lambda: nvfp4(w13=u8(2, 256, 132)),
        True,
        ValueError,
        ["w13", "(2, 256, 132)", "264 elements", "16"],
    ),
    "rows-not-128": (
        "nvfp4",
        lambda: Layer(u8(2, 192, 128), u8(2, 256, 48), e4m3(2, 192, 16), e4m3(2, 256, 6)),
        True,
        ValueError,
        ["w13", "(2, 192, 128)", "multiple of 128"],
    ),
    "mxfp4-not-gated": (
        "mxfp4",
        lambda: layer_tensors(MXFP4, "cpu"),
        False,
        ValueError,
        ["mxfp4", "gated"],
    ),
    "mxfp4-bias-missing": (
        "mxfp4",
        lambda: dataclasses.replace(layer_tensors(MXFP4, "cpu"), w2_bias=None),
        True,
        ValueError,
        ["w2_bias", "missing", "bfloat16"],
    ),
    "fp8-with-block-scales": (
        "fp8",
        lambda: dataclasses.replace(layer_tensors(FP8, "cpu"), w13_scale=e4m3(2, 64, 4)),
        True,
        ValueError,
        ["w13_scale", "(2, 64, 4)", "fp8 has no w13_scale"],
    ),
    "fp8-weights-as-uint8": (
        "fp8",
        lambda: dataclasses.replace(layer_tensors(FP8, "cpu"), w2=u8(2, 64, 32)),
        True,
        TypeError,
        ["w2", "(2, 64, 32)", "float8_e4m3fn"],
    ),
    "fp8block-scales-as-e4m3": (
        "fp8block",
        lambda: fp8block(w13_scale=e4m3(2, 4, 2)),
        True,
        TypeError,
        ["w13_scale", "(2, 4, 2)", "torch.float8_e4m3fn", "torch.float32"],
    ),
    "fp8block-scales-per-row": (
        "fp8block",
        lambda: fp8block(w2_scale=f32(2, 256, 2)),
        True,
        ValueError,
        ["w2_scale", "(2, 256, 2)", "(2, 2, 2)"],
    ),
    "fp8block-scales-missing": (
        "fp8block",
        lambda: fp8block(w2_scale=None),
        True,
        ValueError,
        ["w2_scale", "missing", "torch.float32"],
    ),
    "fp8block-width-not-whole-blocks": (
        "fp8block",
        lambda: fp8block(w2=e4m3(2, 256, 192)),
        True,
        ValueError,
        ["w2", "(2, 256, 192)", "192 elements", "multiple of 128"],
    ),
    "fp8block-rows-not-whole-blocks": (
        "fp8block",
        lambda: Layer(e4m3(2, 192, 256), e4m3(2, 256, 128), f32(2, 1, 2), f32(2, 2, 1)),
        False,
        ValueError,
        ["w13", "(2, 192, 256)", "multiple of 128", "128-row scale blocks"],
    ),
    "mxfp8-scales-as-e4m3": (
        "mxfp8",
        lambda: mxfp8(w13_scale=e4m3(2, 256, 8)),
        True,
        TypeError,
        ["w13_scale", "(2, 256, 8)", "torch.float8_e4m3fn", "torch.uint8"],
    ),
    "mxfp8-packed-fp4-weights": (
        "mxfp8",
        lambda: mxfp8(w2=u8(2, 256, 64)),
        True,
        TypeError,
        ["w2", "(2, 256, 64)", "torch.uint8", "float8_e4m3fn"],
    ),
    "mxfp8-nvfp4-scale-blocks": (
        "mxfp8",
        lambda: mxfp8(w2_scale=u8(2, 256, 8)),
        True,
        ValueError,
        ["w2_scale", "(2, 256, 8)", "(2, 256, 4)"],
    ),
    "mxfp8-scale-columns-not-4": (
        "mxfp8",
        # I 192: scale columns 6 (vLLM pads I to 128 first)
        lambda: Layer(e4m3(2, 384, 256), e4m3(2, 256, 192), u8(2, 384, 8), u8(2, 256, 6)),
        True,
        ValueError,
        ["w2_scale", "(2, 256, 6)", "multiple of 4"],
    ),
    "nvfp4-nongated-intermediate-64": (
        "nvfp4",
        # I 64 pads to 128 in vLLM when not gated (64 is the gated alignment: 2I rows)
        lambda: Layer(u8(2, 64, 128), u8(2, 256, 32), e4m3(2, 64, 16), e4m3(2, 256, 4)),
        False,
        ValueError,
        ["w13", "(2, 64, 128)", "multiple of 128", "intermediate to one of 128"],
    ),
    "mxint4-weights-repacked-as-bytes": (
        "mxint4",
        lambda: mxint4(w2=u8(2, 256, 128)),
        True,
        TypeError,
        ["w2", "(2, 256, 128)", "torch.uint8", "torch.int32"],
    ),
    "mxint4-rows-not-whole-128-byte-blocks": (
        "mxint4",
        # I 128 (Kimi-K2-Thinking at TP16): w2's rows are 64 bytes
        lambda: Layer(
            torch.zeros(2, 256, 32, dtype=torch.int32),
            torch.zeros(2, 256, 16, dtype=torch.int32),
            torch.zeros(2, 256, 8, dtype=torch.bfloat16),
            torch.zeros(2, 256, 4, dtype=torch.bfloat16),
        ),
        True,
        ValueError,
        ["w2", "(2, 256, 16)", "64 bytes per row", "blockK", "multiples of 256"],
    ),
    "mxint4-not-gated": (
        "mxint4",
        lambda: mxint4(),
        False,
        ValueError,
        ["mxint4", "gated"],
    ),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_input_is_one_line_before_any_byte_is_written(case):
    fmt, make, gated, exception, fragments = BAD[case]
    for name, record in REGISTRY.items():
        if record.format != fmt or record.takes != fmt:  # FlashInfer's helpers take BF16's
            continue
        layer = make()
        before = {key: t.clone() for key, t in layer.items()}
        with pytest.raises(exception) as raised:
            convert(layer, strategy=name, gated=gated)
        message = str(raised.value)
        assert "\n" not in message
        for fragment in fragments:
            assert fragment in message, (fragment, message)
        for key, tensor in layer.items():
            assert torch.equal(tensor.view(torch.uint8), before[key].view(torch.uint8)), key


# vLLM 0.33.0's padding of I per rank, (gated, not gated): flashinfer_fp4_moe.py (NVFP4: "64 if
# is_gated else 128"), flashinfer_utils.py (FP8 per-tensor: "16 if is_gated else 128"; MXFP8:
# 128), oracle/fp8.py (block-FP8: whole 128-row blocks); MXFP4 and MXINT4 exist only gated
# (MXINT4: vLLM pads nothing, FlashInfer asserts whole 128-byte rows: Format.weight_row_align).
VLLM_INTERMEDIATE_ALIGN = {
    "nvfp4": (64, 128),
    "fp8": (16, 128),
    "mxfp8": (128, 128),
    "fp8block": (128, 128),
    "mxfp4": (128, None),
    "mxint4": (1, None),
}


def test_intermediate_alignment_is_vllms_gated_and_not():
    assert VLLM_INTERMEDIATE_ALIGN.keys() == FORMATS.keys() - {"bf16"}
    for name, (gated, not_gated) in VLLM_INTERMEDIATE_ALIGN.items():
        fmt = FORMATS[name]
        assert fmt.intermediate_alignment(True) == gated, name
        if not_gated is None:
            assert fmt.gated_only, name
        else:
            assert fmt.intermediate_alignment(False) == not_gated, name


def test_unknown_strategy_names_the_valid_ones():
    with pytest.raises(ValueError, match="nvfp4-fast"):
        convert(nvfp4(), strategy="nvfp4-nope")


def test_catalog_shapes_are_vllms_padded_ones():
    kimi = layer_shape("kimi-k2-nvfp4", 8)
    assert kimi.w13_shape == (384, 512, 3584) and kimi.w13_scale_shape == (384, 512, 448)
    assert kimi.w2_shape == (384, 7168, 128) and kimi.w2_scale_shape == (384, 7168, 16)
    oss = layer_shape("gpt-oss-120b-mxfp4", 1)  # H 2880 -> 3072, I 2880 -> 2944
    assert oss.w13_shape == (128, 5888, 1536) and oss.w13_bias_shape == (128, 5888)
    assert layer_shape("gpt-oss-120b-mxfp4", 2).intermediate == 1536  # 1440 -> 1536
    maverick = layer_shape("llama-4-maverick-fp8", 8)
    assert maverick.w13_shape == (128, 2048, 5120) and maverick.w13_scale_shape is None
    r1 = layer_shape("deepseek-r1-fp8block", 8)  # I 2048 / 8 = 256: whole 128-row blocks
    assert r1.w13_shape == (256, 512, 7168) and r1.w13_scale_shape == (256, 4, 56)
    assert r1.w2_shape == (256, 7168, 256) and r1.w2_scale_shape == (256, 56, 2)
    assert (r1.w13_bytes, r1.w13_scale_bytes, r1.w2_scale_bytes) == (939524096, 229376, 114688)
    m3 = layer_shape("minimax-m3-mxfp8", 4)  # I 3072 / 4 = 768; an e8m0 scale per 32
    assert m3.w13_shape == (128, 1536, 6144) and m3.w13_scale_shape == (128, 1536, 192)
    assert m3.w2_shape == (128, 6144, 768) and m3.w2_scale_shape == (128, 6144, 24)
    assert m3.fmt.scale_dtype == torch.uint8 and m3.w13_bytes == 1207959552
    k2t = layer_shape("kimi-k2-thinking-mxint4", 8)  # eight int4 per int32 word
    assert k2t.w13_shape == (384, 512, 896) and k2t.w13_scale_shape == (384, 512, 224)
    assert k2t.w2_shape == (384, 7168, 32) and k2t.w2_scale_shape == (384, 7168, 8)
    assert (k2t.w13_bytes, k2t.w13_expert_bytes, k2t.w13_scale_bytes) == (
        704643072, 1835008, 88080384
    )  # fmt: skip
    with pytest.raises(ValueError, match="kimi-k2-nvfp4"):
        layer_shape("kimi-k2", 8)
    # every quantized catalog shape converts (on meta: no memory)
    for shape in [s for s in catalog_shapes() if s.format != "bf16"]:
        layer = layer_tensors(shape, "meta")
        convert(layer, strategy=f"{shape.format}-fast", gated=shape.gated)
