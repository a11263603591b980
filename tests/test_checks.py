"""Bad input: the right exception, a message naming the tensor, its shape or dtype, the rule and
the fix, and no byte written (issue 2, item 5)."""

from __future__ import annotations

import pytest
import torch

from moe_convert import REGISTRY, Layer, check_weights, convert, strategies
from moe_convert.formats.bf16.inputs import random_weights

BF16 = torch.bfloat16


def zeros(*shape: int, dtype: torch.dtype = BF16, device: str = "cpu") -> torch.Tensor:
    return torch.zeros(shape, dtype=dtype, device=device)


def non_contiguous(experts: int, rows: int, cols: int) -> torch.Tensor:
    """bf16 ``[experts, rows, cols]`` with transposed strides (the right shape, not contiguous)."""
    return zeros(experts, cols, rows).transpose(1, 2)


# id -> (make w13, make w2, gated, exception, fragments the message must hold).
# The valid pair they depart from: w13 [2, 256, 128], w2 [2, 128, 128], gated.
BAD_INPUTS = {
    "w13-fp16": (
        lambda: zeros(2, 256, 128, dtype=torch.float16),
        lambda: zeros(2, 128, 128),
        True,
        TypeError,
        ["w13", "(2, 256, 128)", "torch.float16", "bfloat16", "Fix:", "to(torch.bfloat16)"],
    ),
    "w2-fp32": (
        lambda: zeros(2, 256, 128),
        lambda: zeros(2, 128, 128, dtype=torch.float32),
        True,
        TypeError,
        ["w2", "(2, 128, 128)", "torch.float32", "bfloat16", "Fix:"],
    ),
    "w13-2d": (
        lambda: zeros(256, 128),
        lambda: zeros(2, 128, 128),
        True,
        ValueError,
        ["w13", "(256, 128)", "3-D", "got 2-D", "Fix:", "stacked along dim 0"],
    ),
    "w2-4d": (
        lambda: zeros(2, 256, 128),
        lambda: zeros(2, 128, 128, 1),
        True,
        ValueError,
        ["w2", "(2, 128, 128, 1)", "3-D", "got 4-D", "Fix:"],
    ),
    "w13-empty": (
        lambda: zeros(0, 256, 128),
        lambda: zeros(0, 128, 128),
        True,
        ValueError,
        ["w13", "(0, 256, 128)", "non-zero", "Fix:"],
    ),
    "experts-differ": (
        lambda: zeros(2, 256, 128),
        lambda: zeros(3, 128, 128),
        True,
        ValueError,
        ["expert counts differ", "w13 (2, 256, 128) has 2", "w2 (3, 128, 128) has 3", "Fix:"],
    ),
    "hidden-differs": (
        lambda: zeros(2, 256, 128),
        lambda: zeros(2, 256, 128),
        True,
        ValueError,
        ["hidden sizes differ", "w13 (2, 256, 128)", "H = 128", "H = 256", "Fix:"],
    ),
    "intermediate-differs": (
        lambda: zeros(2, 256, 128),
        lambda: zeros(2, 128, 64),
        True,
        ValueError,
        ["intermediate sizes differ", "I = 64", "needs 128 rows", "has 256", "Fix:", "gated=False"],
    ),
    "not-gated-w13-with-gated": (
        lambda: zeros(2, 128, 128),
        lambda: zeros(2, 128, 128),
        True,
        ValueError,
        ["intermediate sizes differ", "needs 256 rows", "gated=False"],
    ),
    "gated-w13-with-not-gated": (
        lambda: zeros(2, 256, 128),
        lambda: zeros(2, 128, 128),
        False,
        ValueError,
        ["intermediate sizes differ", "needs 128 rows", "gated=True"],
    ),
    "rows-not-multiple-of-32": (
        lambda: zeros(2, 16, 128),
        lambda: zeros(2, 128, 8),
        True,
        ValueError,
        ["w13", "(2, 16, 128)", "rows per expert (16)", "multiple of 32", "Fix:", "pad"],
    ),
    "rows-not-multiple-of-32-not-gated": (
        lambda: zeros(2, 48, 128),
        lambda: zeros(2, 128, 48),
        False,
        ValueError,
        ["w13", "rows per expert (48)", "multiple of 32"],
    ),
    "gated-rows-odd": (
        lambda: zeros(2, 257, 128),
        lambda: zeros(2, 128, 128),
        True,
        ValueError,
        ["w13", "(2, 257, 128)", "even number of rows", "got 257", "Fix:", "gated=False"],
    ),
    "w13-row-bytes": (
        lambda: zeros(2, 256, 96),
        lambda: zeros(2, 96, 128),
        True,
        ValueError,
        ["w13", "(2, 256, 96)", "bytes per row (192)", "multiple of 128", "Fix:", "64"],
    ),
    "w2-row-bytes": (
        lambda: zeros(2, 64, 128),
        lambda: zeros(2, 128, 32),
        True,
        ValueError,
        ["w2", "(2, 128, 32)", "bytes per row (64)", "multiple of 128", "Fix:"],
    ),
    "w13-non-contiguous": (
        lambda: non_contiguous(2, 256, 128),
        lambda: zeros(2, 128, 128),
        True,
        ValueError,
        ["w13", "(2, 256, 128)", "not contiguous", "strides", "Fix:", ".contiguous()"],
    ),
    "w2-non-contiguous": (
        lambda: zeros(2, 256, 128),
        lambda: non_contiguous(2, 128, 128),
        True,
        ValueError,
        ["w2", "not contiguous", ".contiguous()"],
    ),
    "different-devices": (
        lambda: zeros(2, 256, 128, device="meta"),
        lambda: zeros(2, 128, 128),
        True,
        ValueError,
        ["w13 is on meta", "w2 on cpu", "one device", "Fix:", ".to(device)"],
    ),
    "w13-not-a-tensor": (
        lambda: [[0.0]],
        lambda: zeros(2, 128, 128),
        True,
        TypeError,
        ["w13", "torch.Tensor", "list"],
    ),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_message(case):
    make13, make2, gated, exc, fragments = BAD_INPUTS[case]
    with pytest.raises(exc) as info:
        check_weights(make13(), make2(), gated=gated)
    message = str(info.value)
    missing = [fragment for fragment in fragments if fragment not in message]
    assert not missing, f"message {message!r} lacks {missing}"


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_convert_checks_before_any_strategy(case):
    make13, make2, gated, exc, _ = BAD_INPUTS[case]
    with pytest.raises(exc):
        convert(Layer(make13(), make2()), strategy="legacy", gated=gated)


def test_unknown_strategy_lists_valid_names():
    w13, w2 = zeros(2, 256, 128), zeros(2, 128, 128)
    with pytest.raises(ValueError, match="unknown strategy 'in_place'") as info:
        convert(Layer(w13, w2), strategy="in_place")
    for name in REGISTRY:  # every format's: convert takes a layer of any
        assert name in str(info.value)


def test_valid_shapes_pass():
    check_weights(zeros(2, 256, 128), zeros(2, 128, 128), gated=True)
    check_weights(zeros(2, 128, 128), zeros(2, 128, 128), gated=False)
    check_weights(zeros(1, 64, 64), zeros(1, 64, 64), gated=False)  # smallest: 64 cols = 128 bytes
    # metadata only: meta tensors at full Qwen3-235B TP4 size need no memory
    check_weights(
        zeros(128, 768, 4096, device="meta"), zeros(128, 4096, 384, device="meta"), gated=True
    )


def same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit equality (random bits include NaNs, which ``torch.equal`` on floats calls unequal)."""
    return torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


# (w13 broken or w2 broken): each pair has one valid tensor with real bytes that must survive.
INTACT_CASES = {
    "w2-fp32": lambda w13, w2: (w13, w2.float()),
    "w2-row-bytes": lambda w13, w2: (w13, w2[:, :, :32].contiguous()),
    "w13-odd-rows": lambda w13, w2: (torch.cat([w13, w13[:, :1]], dim=1), w2),
    "experts-differ": lambda w13, w2: (w13, w2[:1].contiguous()),
    "w2-non-contiguous": lambda w13, w2: (w13, w2.transpose(1, 2).contiguous().transpose(1, 2)),
}


@pytest.mark.parametrize("case", list(INTACT_CASES))
@pytest.mark.parametrize("name", sorted(strategies("bf16")))
def test_raising_call_writes_nothing(name, case):
    good13, good2 = random_weights((2, 256, 128), (2, 128, 128), seed=3)
    w13, w2 = INTACT_CASES[case](good13.clone(), good2.clone())
    before13, before2 = w13.clone(), w2.clone()
    with pytest.raises((TypeError, ValueError)):
        convert(Layer(w13, w2), strategy=name, gated=True)
    assert same_bytes(w13, before13) and same_bytes(w2, before2)
