"""``w13`` and ``w2`` that share bytes: every in-place strategy refuses them before writing a
byte (it would overwrite one with the other); out-of-place ones only read them and convert
them right. Strategies are read from the registry at collection, so a new one is covered."""

from __future__ import annotations

import pytest
import torch

from moe_convert import Layer, convert, strategies
from moe_convert.formats.bf16.inputs import random_weights

BF16 = strategies("bf16")
IN_PLACE = sorted(name for name, record in BF16.items() if record.inplace)
OUT_OF_PLACE = sorted(name for name, record in BF16.items() if not record.inplace)
# E experts, I intermediate, H hidden, gated: w13 [2, 128, 128], w2 [2, 128, 64]
W13, W2 = (2, 128, 128), (2, 128, 64)
N13, N2 = 2 * 128 * 128, 2 * 128 * 64  # elements


def views(shift: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(buffer, w13, w2): two views of one bf16 buffer, w2 starting ``shift`` elements after
    w13's end (negative: inside w13)."""
    w13, w2 = random_weights(W13, W2, seed=1)
    buffer = torch.empty(N13 + max(shift, 0) + N2, dtype=torch.bfloat16)
    start2 = N13 + shift
    buffer[:N13] = w13.view(-1)
    buffer[start2 : start2 + N2] = w2.view(-1)
    return buffer, buffer[:N13].view(W13), buffer[start2 : start2 + N2].view(W2)


@pytest.mark.parametrize("name", IN_PLACE)
@pytest.mark.parametrize("shift", [-N2, -1], ids=["w2-inside-w13", "one-element-shared"])
def test_in_place_strategy_rejects_overlap_without_writing(name, shift):
    buffer, w13, w2 = views(shift)
    before = buffer.clone()
    with pytest.raises(
        ValueError, match=r"w13 \(shape \(2, 128, 128\).*w2 \(shape \(2, 128, 64\).*share memory"
    ):
        convert(Layer(w13, w2), strategy=name)
    assert torch.equal(buffer.view(torch.int16), before.view(torch.int16))


@pytest.mark.parametrize("name", IN_PLACE)
def test_in_place_strategy_rejects_overlap_on_meta(name):
    buffer = torch.empty(N13 + N2, dtype=torch.bfloat16, device="meta")
    with pytest.raises(ValueError, match="share memory"):
        layer = Layer(buffer[:N13].view(W13), buffer[N13 - 1 : N13 - 1 + N2].view(W2))
        convert(layer, strategy=name)


@pytest.mark.parametrize("name", sorted(BF16))
def test_adjacent_views_of_one_buffer_convert(name):
    """Views that touch but share no byte are fine for every strategy (no false alarm)."""
    _, w13, w2 = views(0)
    want = [
        t.view(torch.uint8)
        for t in convert(Layer(w13.clone(), w2.clone()), strategy="legacy").values()
    ]
    got = convert(Layer(w13, w2), strategy=name).values()
    assert all(torch.equal(g.view(torch.uint8), w) for g, w in zip(got, want, strict=True))


@pytest.mark.parametrize("name", OUT_OF_PLACE)
def test_out_of_place_strategy_accepts_overlap(name):
    _, w13, w2 = views(-4)  # 8 bytes shared; w2 stays 8-byte aligned, as strided_copy needs
    want = [
        t.view(torch.uint8)
        for t in convert(Layer(w13.clone(), w2.clone()), strategy="legacy").values()
    ]
    got = convert(Layer(w13, w2), strategy=name).values()
    assert all(torch.equal(g.view(torch.uint8), w) for g, w in zip(got, want, strict=True))
