"""Row indices against FlashInfer's own, the strided views against index + block layout, the
inverses and the index caches (every strategy's inverse: tests/test_placement.py)."""

from __future__ import annotations

import pytest
import torch
from conftest import requires_flashinfer

from moe_convert.formats.layout import (
    block_layout_copies,
    block_layout_shape,
    block_layout_view,
    from_block_layout,
    gated_interleave_index,
    shuffle_row_index,
    to_block_layout,
    w2_row_index,
    w13_row_index,
)

EPILOGUE_TILE_M = 128
ROWS = [32, 64, 96, 256, 768, 2048]  # multiples of 32; 96 is not a power of two


def rows_bytes(rows: int, row_bytes: int = 256, *, experts: int | None = None) -> torch.Tensor:
    """Random uint8 ``[rows, row_bytes]`` (``[experts, rows, row_bytes]`` when given)."""
    shape = (rows, row_bytes) if experts is None else (experts, rows, row_bytes)
    return torch.randint(
        0, 256, shape, dtype=torch.uint8, generator=torch.Generator().manual_seed(0)
    )


def swap_halves(rows_u8: torch.Tensor) -> torch.Tensor:
    """``[w1; w3] -> [w3; w1]`` (vLLM's legacy full copy), on the last two dims."""
    top, bottom = rows_u8.chunk(2, dim=-2)
    return torch.cat([bottom, top], dim=-2)


@requires_flashinfer
@pytest.mark.parametrize("rows", ROWS)
def test_shuffle_index_matches_flashinfer(rows):
    from flashinfer.utils import get_shuffle_matrix_a_row_indices

    want = get_shuffle_matrix_a_row_indices(rows_bytes(rows), EPILOGUE_TILE_M)
    assert torch.equal(shuffle_row_index(rows), want.to(torch.int64))


@requires_flashinfer
@pytest.mark.parametrize("gated", [True, False], ids=["gated", "not-gated"])
@pytest.mark.parametrize("rows", ROWS)
def test_w13_and_w2_index_match_flashinfer(rows, gated):
    from flashinfer.fused_moe.core import (
        _maybe_get_cached_w3_w1_permute_indices,
        get_w2_permute_indices_with_cache,
    )

    weight = rows_bytes(rows)
    want13 = _maybe_get_cached_w3_w1_permute_indices(
        {}, weight, EPILOGUE_TILE_M, is_gated_act_gemm=gated
    )
    # FlashInfer's w13 index acts on rows already swapped to [w3; w1]: ours with fold_swap=False.
    assert torch.equal(w13_row_index(rows, gated, fold_swap=False), want13.to(torch.int64))
    want2 = get_w2_permute_indices_with_cache({}, weight, EPILOGUE_TILE_M)
    assert torch.equal(w2_row_index(rows), want2.to(torch.int64))


@requires_flashinfer
@pytest.mark.parametrize("rows", ROWS)
def test_gated_interleave_matches_flashinfer(rows):
    from flashinfer.fused_moe.core import get_reorder_rows_for_gated_act_gemm_row_indices

    want = get_reorder_rows_for_gated_act_gemm_row_indices(rows_bytes(rows))
    assert torch.equal(gated_interleave_index(rows), want.to(torch.int64))


def test_index_values_from_the_notes():
    # shuffle: old row o goes to (o // 32) * 32 + m[o % 32]; S[new] = old
    assert shuffle_row_index(32)[:8].tolist() == [0, 4, 8, 12, 16, 20, 24, 28]
    assert shuffle_row_index(64)[32:36].tolist() == [32, 36, 40, 44]
    assert gated_interleave_index(8).tolist() == [0, 4, 1, 5, 2, 6, 3, 7]
    # w13, gated: (G[S] + M/2) % M, folded swap
    rows = 64
    want = (gated_interleave_index(rows)[shuffle_row_index(rows)] + rows // 2) % rows
    assert torch.equal(w13_row_index(rows, True), want)
    assert torch.equal(w13_row_index(rows, False), shuffle_row_index(rows))


@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("gated", [True, False], ids=["gated", "not-gated"])
def test_indices_are_permutations(rows, gated):
    for index in (shuffle_row_index(rows), w13_row_index(rows, gated), w2_row_index(rows)):
        assert index.dtype == torch.int64
        assert torch.equal(index.sort().values, torch.arange(rows))


@pytest.mark.parametrize("rows", ROWS)
def test_folded_swap_equals_swap_then_index(rows):
    weight = rows_bytes(rows)
    folded = weight[w13_row_index(rows, True)]
    swapped = swap_halves(weight)[w13_row_index(rows, True, fold_swap=False)]
    assert torch.equal(folded, swapped)


@pytest.mark.parametrize("rows", [31, 48, 100])
def test_shuffle_index_rejects_rows_not_multiple_of_32(rows):
    with pytest.raises(ValueError, match=rf"rows \({rows}\) must be a multiple of 32"):
        shuffle_row_index(rows)


def test_gated_interleave_rejects_odd_rows():
    with pytest.raises(ValueError, match=r"rows \(33\) must be even"):
        gated_interleave_index(33)


def test_indices_are_cached():
    assert shuffle_row_index(64) is shuffle_row_index(64)
    assert gated_interleave_index(64) is gated_interleave_index(64)
    assert w13_row_index(64, True) is w13_row_index(64, True)
    assert w13_row_index(64, True, fold_swap=False) is w13_row_index(64, True, fold_swap=False)
    cpu = torch.device("cpu")
    assert w2_row_index(64, cpu) is w2_row_index(64, cpu) is shuffle_row_index(64, cpu)
    assert w13_row_index(64, True) is not w13_row_index(64, True, fold_swap=False)
    assert w13_row_index(64, True) is not w13_row_index(64, False)
    assert shuffle_row_index(64) is not shuffle_row_index(96)
    meta = shuffle_row_index(64, torch.device("meta"))
    assert meta.device.type == "meta" and meta is shuffle_row_index(64, torch.device("meta"))


@pytest.mark.parametrize("experts", [None, 3], ids=["one-expert-2d", "experts-3d"])
@pytest.mark.parametrize("row_bytes", [128, 384, 1024])
@pytest.mark.parametrize("rows", [32, 96, 256])
@pytest.mark.parametrize("interleave", [True, False], ids=["interleave", "shuffle-only"])
def test_block_layout_copies_equal_index_then_block_layout(interleave, rows, row_bytes, experts):
    weight = rows_bytes(rows, row_bytes, experts=experts)
    index = w13_row_index(rows, True) if interleave else w2_row_index(rows)
    want = to_block_layout(weight[..., index, :])
    got = torch.empty_like(want)
    pairs = block_layout_copies(weight, got, interleave=interleave)
    assert len(pairs) == (2 if interleave else 1)
    for dst, src in pairs:
        # views only: the pair's tensors share storage with the given tensors
        assert dst.untyped_storage().data_ptr() == got.untyped_storage().data_ptr()
        assert src.untyped_storage().data_ptr() == weight.untyped_storage().data_ptr()
        dst.copy_(src)
    assert torch.equal(got, want)


@pytest.mark.parametrize("row_bytes", [128, 256, 1024])
def test_block_layout_shape_and_inverse(row_bytes):
    weight = rows_bytes(64, row_bytes, experts=2)
    blocks = to_block_layout(weight)
    assert blocks.shape == (2, row_bytes // 128, 64, 128) and blocks.is_contiguous()
    # block b, row m holds bytes [128 b, 128 b + 128) of row m
    assert torch.equal(blocks[1, -1, 5], weight[1, 5, -128:])
    restored = from_block_layout(blocks)
    assert restored.shape == weight.shape and restored.is_contiguous()
    assert torch.equal(restored, weight)


def test_block_layout_shape_and_view_of_a_bf16_weight():
    # w2 of 2 experts, H = 64 rows, I = 192 bf16 columns: 384 bytes a row, 3 K blocks
    weight = rows_bytes(64, 384, experts=2).view(torch.bfloat16)
    assert (
        block_layout_shape(weight)
        == (2, 3, 64, 128)
        == to_block_layout(weight.view(torch.uint8)).shape
    )
    view = block_layout_view(weight)
    assert view.shape == (2, 3, 64, 64) and view.dtype == torch.bfloat16
    assert view.data_ptr() == weight.data_ptr()  # a view of the same bytes, no copy
    assert torch.equal(view.reshape(weight.shape).view(torch.uint8), weight.view(torch.uint8))


def test_block_layout_copies_only_when_there_are_several_k_blocks():
    # With one 128-byte block per row both layouts are the same bytes: like FlashInfer's
    # convert_to_block_layout (``.contiguous()`` of a view), a view comes back, not a copy.
    one = rows_bytes(32, 128)
    assert to_block_layout(one).data_ptr() == one.data_ptr()
    assert from_block_layout(one.view(1, 32, 128)).data_ptr() == one.data_ptr()
    several = rows_bytes(32, 256)
    blocks = to_block_layout(several)
    assert blocks.data_ptr() != several.data_ptr()
    assert from_block_layout(blocks).data_ptr() != blocks.data_ptr()
