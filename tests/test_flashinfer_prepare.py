"""FlashInfer 0.7.4's own weight-preparation helpers (``fused_moe/prepare.py``) against this
library's transcriptions of vLLM: where their output layout is vLLM's, the helper's result is
``-legacy``'s on the helper's own quantized weights, given as the checkpoint stores them.

The helpers take canonical BF16 weights (w13 ``[up, gate]``, i.e. ``[w3; w1]``) and quantize them
themselves, so they are checked here, not registered as strategies of a quantized layer
(docs/formats.md, "Not done yet"). On CPU: FP8 per-tensor's and DeepSeek block-FP8's helpers
(torch throughout) as installed; MXINT4's with its one CUDA op, ``block_scale_interleave``, as
``swizzle.block_scale_interleave`` (its torch definition, as tests/test_quant_strategies.py does
for vLLM's paths). NVFP4's and MXFP8's quantizers are CUDA ops: not here.
"""

from __future__ import annotations

import pytest
import torch
from conftest import requires_flashinfer

from moe_convert import QuantLayer, convert_quant
from moe_convert.formats.layout import swap_w13_to_w31
from moe_convert.formats.swizzle import block_scale_interleave

pytestmark = requires_flashinfer

SHAPES = [(1, 256, 256), (2, 512, 256), (3, 256, 512)]  # (E, H, I): whole 128-byte int4 rows


def bf16_weights(experts: int, hidden: int, inter: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Seeded canonical BF16 weights: w13 ``[E, 2I, H]`` as ``[up, gate]``, w2 ``[E, H, I]``."""
    gen = torch.Generator().manual_seed(experts * hidden + inter)
    w13 = torch.randn(experts, 2 * inter, hidden, generator=gen).to(torch.bfloat16)
    w2 = torch.randn(experts, hidden, inter, generator=gen).to(torch.bfloat16)
    return w13, w2


def same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.equal(a.view(torch.uint8), b.view(torch.uint8))


@pytest.mark.parametrize("dims", SHAPES)
def test_fp8_per_tensor_helper_lays_weights_out_as_vllm(dims):
    from flashinfer.fused_moe.prepare import (
        _quantize_fp8_per_expert,
        prepare_trtllm_fp8_per_tensor_weights,
    )

    experts, hidden, inter = dims
    w13, w2 = bf16_weights(*dims)
    got = prepare_trtllm_fp8_per_tensor_weights(
        w13, w2, hidden_states_scale_global=1.0, intermediate_scale_global=1.0,
        num_local_experts=experts, hidden_size=hidden, intermediate_size=inter,
    )  # fmt: skip
    q13, q2 = _quantize_fp8_per_expert(w13)[0], _quantize_fp8_per_expert(w2)[0]
    # The checkpoint's w13 is [w1; w3]: the helper's [up, gate] halves swapped back.
    want = convert_quant(QuantLayer(swap_w13_to_w31(q13), q2), strategy="fp8-legacy")
    assert same_bytes(got["gemm1_weights"], want.w13)
    assert same_bytes(got["gemm2_weights"], want.w2)


@pytest.mark.parametrize("dims", SHAPES)
def test_mxint4_helper_is_vllms_layout(dims, monkeypatch):
    from flashinfer.fused_moe.prepare import _mxint4_quantize, prepare_trtllm_mxint4_weights
    from flashinfer.quantization import fp4_quantization

    monkeypatch.setattr(fp4_quantization, "block_scale_interleave", block_scale_interleave)
    experts, hidden, inter = dims
    w13, w2 = bf16_weights(*dims)
    got = prepare_trtllm_mxint4_weights(
        w13, w2, num_local_experts=experts, hidden_size=hidden, intermediate_size=inter,
        device="cpu",
    )  # fmt: skip
    stored = []
    for weight in (w13, w2):
        packed, scales = _mxint4_quantize(weight)  # signed int4 nibbles; bf16 [.., K/32, 1]
        # As the checkpoint stores them: uint4b8 nibbles (XOR 8) in int32 words.
        stored.append(((packed ^ 0x88).view(torch.int32), scales.reshape(*weight.shape[:2], -1)))
    (q13, s13), (q2, s2) = stored
    layer = QuantLayer(swap_w13_to_w31(q13), q2, swap_w13_to_w31(s13), s2)
    want = convert_quant(layer, strategy="mxint4-legacy")
    assert same_bytes(got["gemm1_weights"], want.w13)
    assert same_bytes(got["gemm2_weights"], want.w2)
    assert same_bytes(got["gemm1_weights_scale"], want.w13_scale)
    assert same_bytes(got["gemm2_weights_scale"], want.w2_scale)


def test_deepseek_fp8_helper_leaves_weights_unshuffled():
    """Not vLLM's layout: vLLM's block-FP8 path shuffles the rows (tile 64) into BlockMajorK;
    the helper returns its quantizer's MajorK weights as they are."""
    from flashinfer.fused_moe.api import QuantConfig, QuantFormat
    from flashinfer.fused_moe.prepare import (
        _deepseek_fp8_quantize_weights,
        prepare_trtllm_fp8_block_weights,
    )

    experts, hidden, inter = 2, 256, 256
    w13, w2 = bf16_weights(experts, hidden, inter)
    got = prepare_trtllm_fp8_block_weights(
        w13, w2, quant=QuantConfig(weight=QuantFormat.DeepSeekFp8,
                                   activation=QuantFormat.DeepSeekFp8),
        num_local_experts=experts, hidden_size=hidden, intermediate_size=inter,
    )  # fmt: skip
    assert same_bytes(got["gemm1_weights"], _deepseek_fp8_quantize_weights(w13)[0])
    assert got["gemm1_weights"].dim() == 3  # MajorK [E, M, K], not BlockMajorK [E, K/128, M, 128]
