"""FlashInfer's own weight-preparation helpers (``fused_moe/prepare.py``, 0.7.4) as the strategies
``<format>-flashinfer`` (``moe_convert.formats.flashinfer``): each takes a BF16 layer and
gives the bytes of its format's ``-legacy`` of the helper's own quantizer's layer, as the
checkpoint stores it (``Strategy.stored``); their figures to the byte on CPU.

On CPU: ``fp8-flashinfer`` as registered (torch throughout); ``mxint4-flashinfer``'s record (its
one CUDA op, ``block_scale_interleave``, as ``swizzle.block_scale_interleave``, its torch
definition, for the bytes, and as an output-only stand-in for the figures, as the CUDA op
allocates its output only). NVFP4's and MXFP8's quantizers are CUDA ops: registered only on a
GPU (gpu-check). DeepSeek block-FP8's helper is not a strategy: not vLLM's layout.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from conftest import requires_flashinfer

from moe_convert import REGISTRY, UNAVAILABLE, Layer, LayerShape, convert, layer_tensors
from moe_convert.formats.swizzle import block_scale_interleave
from moe_convert.formats.table import (
    layer_call,
    reference_conversion,
    strategy_input,
    taken_shape,
    warm_layer_strategy,
)
from moe_convert.measuring.memory import measure_memory
from moe_convert.measuring.traffic import measure_traffic

pytestmark = requires_flashinfer

HELPERS = ("fp8-flashinfer", "mxint4-flashinfer", "nvfp4-flashinfer", "mxfp8-flashinfer")
CUDA_ONLY = HELPERS[1:]
# (E, H, I, gated): FP8 per-tensor gated or not; MXINT4 gated only, H and I % 256 (whole 128-byte
# blocks of packed int4 per row; 256 and 512 both: one block per row, or a block-layout copy).
FP8_SHAPES = [
    (1, 32, 16, True), (2, 64, 48, True), (3, 96, 32, True), (2, 160, 80, True),
    (3, 96, 32, False), (2, 32, 160, False), (1, 224, 96, False),
]  # fmt: skip
MXINT4_SHAPES = [(1, 256, 256, True), (2, 512, 256, True), (3, 256, 512, True)]


def shape_of(fmt: str, dims: tuple[int, int, int, bool]) -> LayerShape:
    experts, hidden, inter, gated = dims
    return LayerShape("helper", 1, experts, hidden, inter, 1, gated, format=fmt)


def record_of(name: str):
    return REGISTRY.get(name) or UNAVAILABLE[name]


@pytest.fixture
def mxint4_here(monkeypatch):
    """``mxint4-flashinfer`` registered here, its CUDA interleave the torch definition."""
    from flashinfer.quantization import fp4_quantization

    monkeypatch.setattr(fp4_quantization, "block_scale_interleave", block_scale_interleave)
    monkeypatch.setitem(REGISTRY, "mxint4-flashinfer", record_of("mxint4-flashinfer"))
    return fp4_quantization


def assert_legacy_bytes_of_stored(shape: LayerShape, name: str) -> None:
    """The helper's output is ``-legacy``'s of its own quantizer's layer, byte for byte, and
    its BF16 input is left as it was."""
    layer = strategy_input(shape, name, "cpu", seed=shape.experts)
    before = {key: t.clone() for key, t in layer.items()}
    got = convert(layer, strategy=name, gated=shape.gated)
    _, want = reference_conversion(shape, name)
    expected = want(layer)
    assert got.keys() == expected.keys()
    for key, tensor in expected.items():
        assert (got[key].shape, got[key].dtype) == (tensor.shape, tensor.dtype), key
        assert torch.equal(got[key].view(torch.uint8), tensor.view(torch.uint8)), key
    assert all(torch.equal(layer[key], before[key]) for key in before)  # out of place


def assert_registered_figures(shape: LayerShape, name: str) -> None:
    record = REGISTRY[name]
    assert measure_memory(layer_call(shape, name, "cpu")).peak_bytes == record.peak.evaluate(shape)
    counted = measure_traffic(layer_call(shape, name, "cpu"))
    assert counted.traffic_bytes == record.traffic.evaluate(shape)
    assert counted.launches == record.launches.evaluate(shape)


@pytest.mark.parametrize("dims", FP8_SHAPES)
def test_fp8_helper_is_fp8_legacy_of_its_quantizer(dims):
    assert_legacy_bytes_of_stored(shape_of("fp8", dims), "fp8-flashinfer")


@pytest.mark.parametrize("dims", FP8_SHAPES)
def test_fp8_helper_figures_are_its_formulas_on_cpu(dims):
    assert_registered_figures(shape_of("fp8", dims), "fp8-flashinfer")


@pytest.mark.parametrize("dims", MXINT4_SHAPES)
def test_mxint4_helper_is_mxint4_legacy_of_its_quantizer(dims, mxint4_here):
    assert_legacy_bytes_of_stored(shape_of("mxint4", dims), "mxint4-flashinfer")


@pytest.mark.parametrize("dims", MXINT4_SHAPES)
def test_mxint4_helper_figures_are_its_formulas_on_cpu(dims, mxint4_here, monkeypatch):
    # The CUDA op allocates its output only: reads the scales once, writes them once.
    monkeypatch.setattr(mxint4_here, "block_scale_interleave", torch.clone)
    assert_registered_figures(shape_of("mxint4", dims), "mxint4-flashinfer")


@pytest.mark.parametrize("tp", [8, 4])
def test_mxint4_helper_formulas_hold_at_kimi_k2_thinkings_size_on_meta(tp, monkeypatch):
    """Full size on meta, its interleave the output-only stand-in (which meta can run): what
    docs/formats.md's Kimi-K2-Thinking figures for the helper rest on."""
    from flashinfer.quantization import fp4_quantization

    from moe_convert import layer_shape

    monkeypatch.setattr(fp4_quantization, "block_scale_interleave", torch.clone)
    record = dataclasses.replace(record_of("mxint4-flashinfer"), not_on_meta="")
    monkeypatch.setitem(REGISTRY, record.name, record)
    shape = layer_shape("kimi-k2-thinking-mxint4", tp)
    assert measure_memory(layer_call(shape, record.name, "meta")).peak_bytes == (
        record.peak.evaluate(shape)
    )
    counted = measure_traffic(layer_call(shape, record.name, "meta"))
    assert counted.traffic_bytes == record.traffic.evaluate(shape)
    assert counted.launches == record.launches.evaluate(shape)


def test_the_stored_layer_is_the_checkpoints(mxint4_here):
    """MXINT4's ``stored`` is Kimi-K2-Thinking's checkpoint form: uint4b8 in int32 words,
    ``[w1; w3]``, bf16 scales ``[E, rows, K/32]``; FP8's the fp8 weights alone."""
    shape = shape_of("mxint4", (2, 256, 256, True))
    layer = strategy_input(shape, "mxint4-flashinfer", "cpu")
    stored = record_of("mxint4-flashinfer").stored(layer["w13"], layer["w2"], True)
    assert isinstance(stored, Layer)
    assert {k: (tuple(t.shape), t.dtype) for k, t in stored.items()} == {
        "w13": (shape.w13_shape, torch.int32),
        "w2": (shape.w2_shape, torch.int32),
        "w13_scale": (shape.w13_scale_shape, torch.bfloat16),
        "w2_scale": (shape.w2_scale_shape, torch.bfloat16),
    }


def test_each_helper_takes_a_bf16_layer_of_the_formats_geometry():
    shape = shape_of("fp8", (2, 64, 48, True))
    taken = taken_shape(shape, "fp8-flashinfer")
    assert (taken.format, taken.w13_shape, taken.w2_shape) == ("bf16", (2, 96, 64), (2, 64, 48))
    assert taken_shape(shape, "fp8-legacy") is shape
    for name in HELPERS:
        record = record_of(name)
        assert (record.takes, record.inplace, record.stored is not None) == ("bf16", False, True)
        assert "FlashInfer" in record.origin
        assert bool(record.not_on_meta) == (name in CUDA_ONLY)  # FP8's runs on meta
    # A helper takes a BF16 layer: its own format's layer, or any other dtype, is refused.
    for layer in (
        layer_tensors(shape, "cpu"),
        Layer(torch.zeros(2, 96, 64), torch.zeros(2, 64, 48)),
    ):
        with pytest.raises(TypeError, match="needs bfloat16 weights"):
            convert(layer, strategy=HELPERS[0])


@pytest.mark.skipif(torch.cuda.is_available(), reason="registered where CUDA is")
def test_the_cuda_ones_are_unavailable_here_with_the_reason():
    for name in CUDA_ONLY:
        assert name in UNAVAILABLE and name not in REGISTRY
        assert UNAVAILABLE[name].format != "bf16"  # a quantized format's
        assert "CUDA" in UNAVAILABLE[name].needs


def test_a_helper_that_cannot_run_on_meta_says_why(monkeypatch):
    shape = shape_of("fp8", (2, 64, 48, True))
    record = dataclasses.replace(record_of("fp8-flashinfer"), not_on_meta="a CUDA op")
    monkeypatch.setitem(REGISTRY, "fp8-flashinfer", record)
    with pytest.raises(ValueError, match="cannot run on meta tensors .a CUDA op."):
        warm_layer_strategy(shape, "fp8-flashinfer", torch.device("meta"))


def test_fp8s_helper_runs_on_meta_then_on_cpu_in_one_process():
    """On meta its host reads answer as for finite weights, so the helper as installed runs at
    full size there; its module's permute-index cache (keyed by shape, not device) is kept per
    device, so meta indices never reach a later CPU call of the same geometry."""
    shape = shape_of("fp8", (2, 128, 256, True))
    on_meta = layer_call(shape, "fp8-flashinfer", "meta")()
    assert {name: (t.device.type, t.dtype) for name, t in on_meta.items()} == {
        "w13": ("meta", torch.float8_e4m3fn),
        "w2": ("meta", torch.float8_e4m3fn),
    }
    assert_legacy_bytes_of_stored(shape, "fp8-flashinfer")  # the same geometry, on CPU


def test_a_non_finite_bf16_layer_is_refused_by_the_helper():
    shape = shape_of("fp8", (1, 32, 16, True))
    layer = strategy_input(shape, "fp8-flashinfer", "cpu")
    layer["w13"][0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="finite"):
        convert(layer, strategy="fp8-flashinfer")


def test_deepseek_fp8_helper_leaves_weights_unshuffled():
    """Not vLLM's layout, so not a strategy: vLLM's block-FP8 path shuffles the rows (tile 64)
    into BlockMajorK; the helper returns its quantizer's MajorK weights as they are."""
    from flashinfer.fused_moe.api import QuantConfig, QuantFormat
    from flashinfer.fused_moe.prepare import (
        _deepseek_fp8_quantize_weights,
        prepare_trtllm_fp8_block_weights,
    )

    experts, hidden, inter = 2, 256, 256
    gen = torch.Generator().manual_seed(0)
    w13 = torch.randn(experts, 2 * inter, hidden, generator=gen).to(torch.bfloat16)
    w2 = torch.randn(experts, hidden, inter, generator=gen).to(torch.bfloat16)
    got = prepare_trtllm_fp8_block_weights(
        w13, w2, quant=QuantConfig(weight=QuantFormat.DeepSeekFp8,
                                   activation=QuantFormat.DeepSeekFp8),
        num_local_experts=experts, hidden_size=hidden, intermediate_size=inter,
    )  # fmt: skip
    want = _deepseek_fp8_quantize_weights(w13)[0]
    assert torch.equal(got["gemm1_weights"].view(torch.uint8), want.view(torch.uint8))
    assert got["gemm1_weights"].dim() == 3  # MajorK [E, M, K], not BlockMajorK [E, K/128, M, 128]
    assert "fp8block-flashinfer" not in {*REGISTRY, *UNAVAILABLE}
