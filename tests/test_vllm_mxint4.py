"""Every ``mxint4-*`` strategy against vLLM's own
``prepare_static_weights_for_trtllm_mxint4_moe``, called as installed, byte for byte.

CI does not install vLLM: this skips there, saying why; docs/formats.md says how it ran against
vLLM 0.33.0 in a throwaway venv. Two CUDA-only pieces stand in: FlashInfer's
``block_scale_interleave`` by ``swizzle.block_scale_interleave`` (its torch definition, valid for
bf16 scales: tests/test_swizzle.py), and vLLM's ``convert_packed_uint4b8_to_signed_int4_inplace``
by its own installed source with its ``assert t.is_cuda`` line removed.
"""

from __future__ import annotations

import importlib.util
import inspect
import textwrap

import pytest
import torch

from moe_convert import Layer, LayerShape, convert, layer_tensors, strategies
from moe_convert.formats.swizzle import block_scale_interleave

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
def vllm_prepare(monkeypatch):
    """vLLM's function, its two CUDA-only pieces replaced as the module docstring says."""
    import flashinfer
    from vllm.model_executor.layers.quantization.utils import flashinfer_mxint4_moe, quant_utils

    monkeypatch.setattr(flashinfer, "block_scale_interleave", block_scale_interleave)
    original = quant_utils.convert_packed_uint4b8_to_signed_int4_inplace
    source = textwrap.dedent(inspect.getsource(original)).splitlines()
    assert sum("assert t.is_cuda" in line for line in source) == 1, "vLLM's source changed"
    namespace = {"torch": torch}
    exec("\n".join(line for line in source if "assert t.is_cuda" not in line), namespace)
    name = original.__name__
    monkeypatch.setattr(quant_utils, name, namespace[name])
    return flashinfer_mxint4_moe.prepare_static_weights_for_trtllm_mxint4_moe


@pytest.mark.parametrize("dims", SHAPES, ids=lambda d: "E{}H{}I{}".format(*d))
def test_every_mxint4_strategy_is_vllms_function(dims, vllm_prepare):
    layer = layer_tensors(LayerShape("vllm", 1, *dims, 1, format="mxint4"), "cpu")
    given = copy_of(layer)
    out = vllm_prepare(given.w13, given.w13_scale, given.w2, given.w2_scale)
    want = (out["gemm1_weights"], out["gemm2_weights"], out["gemm1_scales"], out["gemm2_scales"])
    names = list(strategies("mxint4"))
    assert len(names) == 4
    for name in names:
        got = convert(copy_of(layer), strategy=name)
        ours = (got.w13, got.w2, got.w13_scale, got.w2_scale)
        for tensor, reference in zip(ours, want, strict=True):
            assert (tensor.shape, tensor.dtype) == (reference.shape, reference.dtype), name
            assert torch.equal(tensor.view(torch.uint8), reference.view(torch.uint8)), name
