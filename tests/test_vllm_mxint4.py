"""Every ``mxint4-*`` strategy against vLLM's own
``prepare_static_weights_for_trtllm_mxint4_moe``, called as installed, byte for byte.

CI does not install vLLM: this skips there, saying why; docs/formats.md says how it ran against
vLLM 0.33.0 and 0.34.0 in a throwaway venv. vLLM's two CUDA-only steps are stood in for by
``standins.cpu_steps``, built from upstream definitions (FlashInfer's ``_swizzle_sf_128x4``,
vLLM's unpack/pack), never this library's own: tests/test_standins.py holds them to second
upstream definitions.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

from moe_convert import Layer, LayerShape, convert, layer_tensors, strategies
from moe_convert.formats.standins import cpu_steps

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None or importlib.util.find_spec("flashinfer") is None,
    reason="vLLM (and FlashInfer) not installed: docs/formats.md, MXINT4, says how this ran",
)

# (E, H, I): tests/test_quant_strategies.py's first shapes, and 8 experts of Kimi-K2-Thinking
# at TP8 and TP4
SHAPES = [(1, 256, 256), (2, 512, 256), (3, 256, 512), (1, 1792, 256), (8, 7168, 256),
          (8, 7168, 512)]  # fmt: skip


def copy_of(layer: Layer) -> Layer:
    return Layer(**{name: t.clone() for name, t in layer.items()})


@pytest.fixture
def vllm_prepare():
    """vLLM's function as installed, its CUDA-only steps stood in for (``cpu_steps``)."""
    from vllm.model_executor.layers.quantization.utils import flashinfer_mxint4_moe

    def prepare(*args):
        with cpu_steps(torch.device("cpu")):
            return flashinfer_mxint4_moe.prepare_static_weights_for_trtllm_mxint4_moe(*args)

    return prepare


@pytest.mark.parametrize("dims", SHAPES, ids=lambda d: "E{}H{}I{}".format(*d))
def test_every_mxint4_strategy_is_vllms_function(dims, vllm_prepare):
    layer = layer_tensors(LayerShape("vllm", 1, *dims, 1, format="mxint4"), "cpu")
    given = copy_of(layer)
    out = vllm_prepare(given.w13, given.w13_scale, given.w2, given.w2_scale)
    want = (out["gemm1_weights"], out["gemm2_weights"], out["gemm1_scales"], out["gemm2_scales"])
    names = list(strategies("mxint4"))  # ours, the transcription and vLLM's adapter
    assert {"mxint4-legacy", "mxint4-fast", "mxint4-preallocated", "mxint4-inplace"} <= {*names}
    for name in names:
        got = convert(copy_of(layer), strategy=name)
        ours = (got.w13, got.w2, got.w13_scale, got.w2_scale)
        for tensor, reference in zip(ours, want, strict=True):
            assert (tensor.shape, tensor.dtype) == (reference.shape, reference.dtype), name
            assert torch.equal(tensor.view(torch.uint8), reference.view(torch.uint8)), name
