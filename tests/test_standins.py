"""The stand-ins for vLLM's CUDA-only steps (``moe_convert.formats.standins``), each held byte
for byte to a second upstream definition, on every scale shape the suite uses: the catalog's
NVFP4, MXFP8 and MXINT4 shapes and the tests' (test_quant_strategies.py, test_vllm_mxint4.py,
the engines' check layer). Torch and FlashInfer only: these run in CI.

- ``block_scale_interleave`` (FlashInfer's ``_swizzle_sf_128x4``) against vLLM's
  ``swizzle_blockscale`` (transcribed below), FlashInfer's b12x torch reference of the op, and
  FlashInfer's inverse ``_unswizzle_batched_sf_128x4``.
- ``signed_int4_inplace`` (vLLM's unpack/pack) against vLLM's own sign step (transcribed below;
  and as installed, where vLLM is).
"""

from __future__ import annotations

import importlib.util
import inspect
import textwrap

import pytest
import torch
from conftest import requires_flashinfer
from test_quant_strategies import SHAPES
from test_vllm_mxint4 import SHAPES as VLLM_MXINT4_SHAPES

from moe_convert import LayerShape
from moe_convert.formats.catalog import catalog_shapes
from moe_convert.formats.engines import CHECK_EXPERTS, CHECK_HIDDEN, CHECK_INTERMEDIATE
from moe_convert.formats.standins import block_scale_interleave, cpu_steps, signed_int4_inplace
from moe_convert.measuring.memory import measure_memory
from moe_convert.measuring.traffic import measure_traffic

# The scale dtype each vLLM path hands the interleave: NVFP4's e4m3 and MXFP8's e8m0 as uint8,
# MXINT4's bf16.
INTERLEAVED = {"nvfp4": torch.uint8, "mxfp8": torch.uint8, "mxint4": torch.bfloat16}


def _suite_shapes() -> list[LayerShape]:
    tests = [
        LayerShape("test", 1, e, h, i, 1, gated, fmt)
        for fmt in INTERLEAVED
        for e, h, i, gated in SHAPES[fmt]
    ]
    vllm_mxint4 = [LayerShape("vllm", 1, *dims, 1, format="mxint4") for dims in VLLM_MXINT4_SHAPES]
    check = [
        LayerShape(
            "check", 1, CHECK_EXPERTS, CHECK_HIDDEN, CHECK_INTERMEDIATE, 1, gated=gated, format=fmt
        )
        for fmt in INTERLEAVED
        for gated in (True, False)
    ]
    catalog = [shape for fmt in INTERLEAVED for shape in catalog_shapes(fmt)]
    return [*catalog, *tests, *vllm_mxint4, *check]


#: (rows, columns, dtype) of one expert's scale matrix, every one the suite converts.
SCALE_SHAPES = sorted(
    {
        (*scales[1:], INTERLEAVED[shape.format])
        for shape in _suite_shapes()
        for scales in (shape.w13_scale_shape, shape.w2_scale_shape)
    },
    key=str,
)


def random_scales(dtype: torch.dtype, *shape: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(sum(shape))
    if dtype == torch.uint8:
        return torch.randint(1, 256, shape, dtype=torch.uint8, generator=gen)  # 0: padding
    return torch.randint(1, 2**15, shape, dtype=torch.int16, generator=gen).view(dtype)


def swizzle_blockscale(scale: torch.Tensor) -> torch.Tensor:
    """vLLM 0.33.0 and 0.34.0 ``swizzle_blockscale`` (identical;
    ``vllm/model_executor/layers/quantization/utils/nvfp4_utils.py``), its e4m3 assert and
    ``.cuda()`` dropped: it moves whole elements, of any dtype."""
    scale_ndim = scale.ndim
    if scale_ndim == 2:
        scale = scale.unsqueeze(0)  # (1, M, K)
    assert scale.ndim == 3, "Expected a 2-D or 3-D tensor for block scales."

    B, M, K = scale.shape

    M_padded = -(-M // 128) * 128  # round_up(M, 128)
    K_padded = -(-K // 4) * 4  # round_up(K, 4)

    padded = torch.zeros((B, M_padded, K_padded), dtype=scale.dtype, device=scale.device)
    padded[:B, :M, :K] = scale

    # Reshape / permute to the layout required by the kernel.
    padded = padded.reshape(B, M_padded // 128, 4, 32, K_padded // 4, 4)
    swizzled = padded.permute(0, 1, 4, 3, 2, 5).contiguous()

    if scale_ndim == 2:
        return swizzled.reshape(M_padded, K_padded)
    return swizzled.reshape(B, M_padded, K_padded)


def test_the_suite_has_scale_shapes_of_every_interleaved_format():
    assert {dtype for *_, dtype in SCALE_SHAPES} == {torch.uint8, torch.bfloat16}
    assert (512, 448, torch.uint8) in SCALE_SHAPES  # kimi-k2-nvfp4/tp8's w13
    assert len(SCALE_SHAPES) > 40


@requires_flashinfer
@pytest.mark.parametrize("experts", [None, 3], ids=["2d", "3d"])
@pytest.mark.parametrize("dims", SCALE_SHAPES, ids=lambda d: "x".join(map(str, d[:2])) + str(d[2]))
def test_interleave_is_vllms_swizzle_and_flashinfers_torch_reference(dims, experts):
    from flashinfer.experimental.b12x.moe._shared.kernels.reference_flashinfer import (
        _block_scale_interleave_128x4_torch,
    )
    from flashinfer.trace.templates.gemm import _unswizzle_batched_sf_128x4

    rows, cols, dtype = dims
    sf = random_scales(dtype, *((experts,) if experts else ()), rows, cols)
    got = block_scale_interleave(sf)
    assert got.dtype == dtype and got.dim() == 1
    as_bytes = got.view(torch.uint8)
    assert torch.equal(as_bytes, swizzle_blockscale(sf).reshape(-1).view(torch.uint8))
    assert torch.equal(as_bytes, _block_scale_interleave_128x4_torch(sf).view(torch.uint8))
    back = _unswizzle_batched_sf_128x4(got, experts or 1, rows, cols)
    assert torch.equal(back.reshape(sf.shape).view(torch.uint8), sf.view(torch.uint8))


@requires_flashinfer
@pytest.mark.parametrize("dtype", [torch.uint8, torch.bfloat16], ids=str)
@pytest.mark.parametrize("shape", [(512, 448), (3, 7168, 16), (120, 6)], ids=str)
def test_interleave_on_meta_allocates_what_the_cuda_op_returns(shape, dtype):
    """FlashInfer's ``block_scale_interleave_sm100``: ``torch.empty((E *
    _compute_swizzled_layout_sf_size(M, K, 128),), dtype=input's)``, then the kernel."""
    from flashinfer.quantization.fp4_quantization import _compute_swizzled_layout_sf_size

    sf = torch.empty(shape, dtype=dtype, device="meta")
    experts = shape[0] if len(shape) == 3 else 1
    size = experts * _compute_swizzled_layout_sf_size(*shape[-2:], 128)
    got = block_scale_interleave(sf)
    assert (got.shape, got.dtype, got.device.type) == ((size,), dtype, "meta")
    measured = measure_memory(block_scale_interleave, sf)
    assert (measured.allocations, measured.peak_bytes) == (1, size * dtype.itemsize)
    moved = measure_traffic(block_scale_interleave, sf)  # one kernel: reads sf, writes the output
    assert (moved.launches, moved.traffic_bytes) == (1, (sf.numel() + size) * dtype.itemsize)


def test_interleave_names_a_dtype_the_op_refuses():
    with pytest.raises(TypeError, match=r"unswizzled_sf is torch\.float32; FlashInfer's op takes"):
        block_scale_interleave(torch.zeros(128, 4))


def vllm_sign_step(t: torch.Tensor) -> torch.Tensor:
    """vLLM 0.33.0 and 0.34.0 ``convert_packed_uint4b8_to_signed_int4_inplace`` (identical;
    ``quant_utils.py``), its ``assert t.is_cuda`` dropped."""
    assert t.dtype == torch.int32, f"expected int32 packed weights but got {t.dtype}"

    # loop through the 8 4-bit nibbles in each int32 entry
    for i in range(8):
        shift = 4 * i
        # extract the i-th 4-bit nibble
        nib = (t >> shift) & 0xF
        # clear the original nibble by masking out
        t &= ~(0xF << shift)
        # convert int4b8 [0..15] to signed int4 [-8..7] by subtracting 8
        # and update in-place
        t |= ((nib - 8) & 0xF) << shift

    return t


def installed_vllm_sign_step():
    """vLLM's own function as installed, its CUDA assert line dropped (vLLM is not in CI)."""
    from vllm.model_executor.layers.quantization.utils import quant_utils

    original = quant_utils.convert_packed_uint4b8_to_signed_int4_inplace
    source = textwrap.dedent(inspect.getsource(original)).splitlines()
    assert sum("assert t.is_cuda" in line for line in source) == 1, "vLLM's source changed"
    namespace = {"torch": torch}
    exec("\n".join(line for line in source if "assert t.is_cuda" not in line), namespace)
    return namespace[original.__name__]


SIGN_DEFINITIONS = [
    pytest.param(lambda: vllm_sign_step, id="transcribed"),
    pytest.param(
        installed_vllm_sign_step,
        id="installed",
        marks=pytest.mark.skipif(
            importlib.util.find_spec("vllm") is None,
            reason="vLLM is not installed (CI does not install it; docs/formats.md, MXINT4)",
        ),
    ),
]


# Packed int32 weights of every MXINT4 shape the suite converts: [E, rows, H/8] and [E, H, I/8].
WEIGHT_SHAPES = sorted(
    {
        (min(shape.experts, 2), *dims[1:])
        for shape in _suite_shapes()
        if shape.format == "mxint4"
        for dims in (shape.w13_shape, shape.w2_shape)
    }
)


@pytest.mark.parametrize("definition", SIGN_DEFINITIONS)
@pytest.mark.parametrize("shape", WEIGHT_SHAPES, ids=str)
def test_sign_step_is_vllms(shape, definition):
    gen = torch.Generator().manual_seed(sum(shape))
    words = torch.randint(-(2**31), 2**31, shape, dtype=torch.int32, generator=gen)
    want = definition()(words.clone())
    given = words.clone()
    assert signed_int4_inplace(given) is given  # in place, as vLLM's
    assert torch.equal(given, want)


def test_sign_step_on_meta_allocates_what_vllms_loop_allocates():
    t = torch.empty(4, 512, 112, dtype=torch.int32, device="meta")
    ours, vllms = measure_memory(signed_int4_inplace, t), measure_memory(vllm_sign_step, t)
    assert (ours.allocations, ours.peak_bytes) == (vllms.allocations, vllms.peak_bytes)
    assert ours.peak_bytes == 3 * t.numel() * 4  # the nibble and two temporaries
    ours, vllms = measure_traffic(signed_int4_inplace, t), measure_traffic(vllm_sign_step, t)
    assert (ours.launches, ours.traffic_bytes) == (vllms.launches, vllms.traffic_bytes)


@requires_flashinfer
def test_cpu_steps_stand_in_off_cuda_and_put_back():
    import flashinfer
    from flashinfer.quantization import fp4_quantization

    original = flashinfer.block_scale_interleave
    with cpu_steps(torch.device("cpu")):
        for module in (flashinfer, fp4_quantization):
            assert module.block_scale_interleave is block_scale_interleave
            assert module.nvfp4_block_scale_interleave is block_scale_interleave
    assert flashinfer.block_scale_interleave is original
    with pytest.raises(RuntimeError, match="raised inside"):
        with cpu_steps(torch.device("meta")):
            raise RuntimeError("raised inside")
    assert fp4_quantization.nvfp4_block_scale_interleave is original
    with cpu_steps(torch.device("cuda", 0)):  # the real ops run on CUDA
        assert flashinfer.block_scale_interleave is original
