"""Property-based (hypothesis): any shape the layout rules admit converts byte-exact with every
strategy, and any other input raises ``ValueError``/``TypeError`` and leaves the input unchanged.

The rules are written out here, independently of ``check_weights``: w13 ``[E, 2I, H]`` (``[E, I,
H]`` not gated) and w2 ``[E, H, I]``, bf16, with E >= 1, rows a multiple of 32 (the row shuffle)
and rows of whole 128-byte blocks (cols a multiple of 64). Sizes stay small: a few experts of at
most 384 x 384.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from moe_convert import Layer, convert, strategies

# Sizes around the rules' edges: multiples of 32 and 64 and a few that break them.
from moe_convert.formats.bf16 import inputs, reference

SIZES = st.sampled_from([0, 1, 32, 64, 96, 128, 160, 192, 256, 384])
DTYPES = st.sampled_from(
    [torch.bfloat16, torch.bfloat16, torch.bfloat16, torch.float16, torch.float32]
)
FEW = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def convertible(w13_shape, w2_shape, dtype, gated: bool) -> bool:
    if dtype != torch.bfloat16 or len(w13_shape) != 3 or len(w2_shape) != 3:
        return False
    (e13, m13, h13), (e2, h2, i2) = w13_shape, w2_shape
    return (
        e13 == e2 >= 1
        and h13 == h2
        and i2 >= 1
        and m13 == (2 if gated else 1) * i2
        and m13 % 32 == 0
        and h2 % 32 == 0
        and h13 % 64 == 0
        and i2 % 64 == 0
    )


def oracle(w13: torch.Tensor, w2: torch.Tensor, gated: bool) -> list[torch.Tensor]:
    if reference.AVAILABLE:
        out = reference.flashinfer_reference(w13, w2, gated=gated)
    else:
        out = convert(Layer(w13.clone(), w2.clone()), strategy="legacy", gated=gated).values()
    return [t.view(torch.uint8) for t in out]


@st.composite
def valid_inputs(draw):
    experts = draw(st.integers(1, 3))
    inter = draw(st.sampled_from([64, 128, 192, 256]))
    hidden = draw(st.sampled_from([64, 128, 192, 256, 384]))
    gated = draw(st.booleans())
    return (experts, (2 if gated else 1) * inter, hidden), (experts, hidden, inter), gated


@st.composite
def any_inputs(draw):
    """Mostly near-valid shapes with one size, the dtype or the rank off; some valid ones."""
    w13_shape, w2_shape, gated = draw(valid_inputs())
    w13_shape, w2_shape = list(w13_shape), list(w2_shape)
    which = draw(st.sampled_from(["w13", "w2"]))
    target = w13_shape if which == "w13" else w2_shape
    target[draw(st.integers(0, 2))] = draw(SIZES)
    if draw(st.integers(0, 9)) == 0:
        target.append(1)  # a 4-D tensor
    return tuple(w13_shape), tuple(w2_shape), draw(DTYPES), draw(st.booleans()), gated


@FEW
@given(valid_inputs(), st.sampled_from(sorted(strategies("bf16"))), st.integers(0, 2**16))
def test_valid_shapes_convert_byte_exact(shapes, name, seed):
    w13_shape, w2_shape, gated = shapes
    w13, w2 = inputs.random_weights(w13_shape, w2_shape, seed=seed)
    want = oracle(w13, w2, gated)
    got = convert(Layer(w13.clone(), w2.clone()), strategy=name, gated=gated).values()
    assert all(torch.equal(g.view(torch.uint8), w) for g, w in zip(got, want, strict=True))


@FEW
@given(any_inputs(), st.sampled_from(sorted(strategies("bf16"))))
def test_invalid_inputs_raise_and_leave_the_input_unchanged(inputs, name):
    w13_shape, w2_shape, dtype, contiguous, gated = inputs
    w13 = torch.randint(-100, 100, w13_shape).to(dtype)
    w2 = torch.randint(-100, 100, w2_shape).to(dtype)
    if not contiguous and w13.dim() == 3 and min(w13.shape) > 1:
        w13 = w13.transpose(1, 2).contiguous().transpose(1, 2)  # same shape, other strides
    before = [w13.clone(), w2.clone()]
    if convertible(w13_shape, w2_shape, dtype, gated) and w13.is_contiguous():
        convert(
            Layer(w13, w2), strategy=name, gated=gated
        )  # valid: no error (bytes: the test above)
        return
    with pytest.raises((ValueError, TypeError)):
        convert(Layer(w13, w2), strategy=name, gated=gated)
    assert all(torch.equal(a, b) for a, b in zip((w13, w2), before, strict=True))
