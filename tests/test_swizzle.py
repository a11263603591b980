"""The 128x4 block-scale swizzle against hand-computed offsets (FlashInfer's ``swizzle_sf``
definition; its ``test_block_scale_interleave`` holds the CUDA op bit-equal to it)."""

from __future__ import annotations

import pytest
import torch
from conftest import requires_flashinfer

from moe_convert.formats.swizzle import (
    block_scale_interleave,
    swizzle_offset,
    swizzled_size,
    unswizzle,
)


def random_scales(*shape: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(sum(shape))
    return torch.randint(1, 256, shape, dtype=torch.uint8, generator=gen)  # no 0: padding shows


def test_offsets_by_hand():
    # (m, k) -> offset, worked out from the [Mp/128, 4, 32, Kp/4, 4] view transposed (1, 3).
    assert swizzle_offset(0, 0, 8) == 0
    assert swizzle_offset(0, 3, 8) == 3
    assert swizzle_offset(1, 0, 8) == 16  # the next row of a group of 32: 16 bytes on
    assert swizzle_offset(32, 0, 8) == 4  # the next group of 32 rows: 4 bytes on
    assert swizzle_offset(0, 4, 8) == 512  # the next 4 columns: the next 512-byte tile
    assert swizzle_offset(128, 0, 8) == 2 * 512  # the next 128 rows: after every column tile
    assert swizzle_offset(127, 7, 8) == 512 + 31 * 16 + 3 * 4 + 3
    assert swizzle_offset(0, 0, 6) == 0 and swizzle_offset(128, 0, 6) == 1024  # Kp = 8


# FlashInfer's own shapes (test_block_scale_interleave), then unaligned columns and 3 experts.
@pytest.mark.parametrize(
    "shape", [(128, 64), (256, 128), (120, 64), (200, 256), (128, 6), (3, 130, 5)], ids=str
)
def test_every_element_lands_at_its_offset_and_the_padding_is_zero(shape):
    sf = random_scales(*shape)
    rows, cols = shape[-2:]
    out = block_scale_interleave(sf)
    per_expert = swizzled_size(rows, cols)
    experts = sf.view(-1, rows, cols)
    assert out.shape == (experts.shape[0] * per_expert,) and out.dtype == torch.uint8
    expected = torch.zeros_like(out)
    for e, expert in enumerate(experts):
        for m in range(rows):
            for k in range(cols):
                expected[e * per_expert + swizzle_offset(m, k, cols)] = expert[m, k]
    assert torch.equal(out, expected)
    assert torch.equal(unswizzle(out, rows, cols), experts)


def test_aligned_input_is_one_allocation_the_output():
    from moe_convert.measuring.memory import measure_memory

    sf = torch.empty(256, 64, dtype=torch.uint8, device="meta")
    measured = measure_memory(block_scale_interleave, sf)
    assert (measured.allocations, measured.peak_bytes) == (1, 256 * 64)


# MXINT4's scales are bf16: FlashInfer's CUDA kernel (block_scale_interleave_kernel<T>, uint8 and
# __nv_bfloat16 instances) moves whole elements to the same offsets, as its own torch reference
# for the b12x MoE does, which accepts bf16; ours must agree element for element.
@requires_flashinfer
@pytest.mark.parametrize("shape", [(128, 64), (120, 64), (200, 256), (2048, 224), (3, 512, 224)])
def test_bf16_scales_swizzle_as_flashinfers_torch_reference(shape):
    from flashinfer.experimental.b12x.moe._shared.kernels.reference_flashinfer import (
        _block_scale_interleave_128x4_torch,
    )

    gen = torch.Generator().manual_seed(sum(shape))
    bf16 = torch.randint(-(2**15), 2**15, shape, dtype=torch.int16, generator=gen)
    scales = bf16.view(torch.bfloat16)
    got = block_scale_interleave(scales)
    assert got.dtype == torch.bfloat16
    assert torch.equal(
        got.view(torch.int16), _block_scale_interleave_128x4_torch(scales).view(torch.int16)
    )
