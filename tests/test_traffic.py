"""Exact work figures: every strategy's traffic and launch formulas, and the counting rule itself.

Formulas use the legend of ``tests/formulas.py``; the rule is ``moe_convert.traffic``'s docstring.
"""

from __future__ import annotations

import pytest
import torch
from formulas import FULL_SIZE, evaluate

from moe_convert import STRATEGIES, LayerShape
from moe_convert.traffic import measure_traffic, strategy_traffic

# Each strategy's traffic (bytes read + written) and launches, as its docstring states them:
# (gated, not gated).
TRAFFIC_FORMULAS = {
    "legacy": ("10*T13 + 8*T2 + E*(X13 + X2)", "8*T13 + 8*T2 + E*(X13 + X2)"),
    "flashinfer": ("8*T13 + 6*T2 + E*(X13 + X2)", "6*T13 + 6*T2 + E*(X13 + X2)"),
    "preallocated": ("2*(T13 + T2) + E*(5*X13 + X2)", "2*(T13 + T2) + E*(X13 + X2)"),
    "inplace": ("4*(T13 + T2) + E*(X13 + X2)", "4*(T13 + T2) + E*(X13 + X2)"),
    "batched": ("4*(T13 + T2) + X13 + X2", "4*(T13 + T2) + X13 + X2"),
    "strided_copy": ("2*(T13 + T2)", "2*(T13 + T2)"),
    "strided_inplace": ("4*(T13 + T2)", "4*(T13 + T2)"),
    "triton": ("2*(T13 + T2)", "2*(T13 + T2)"),
    "triton_inplace": ("4*(T13 + T2)", "4*(T13 + T2)"),
    "sglang": ("8*(T13 + T2) + E*(X13 + X2)", "8*(T13 + T2) + E*(X13 + X2)"),
    "trtllm": ("6*(T13 + T2) + E*(X13 + X2)", "6*(T13 + T2) + E*(X13 + X2)"),
    # the installed engines (moe_convert.engines), where installed
    "vllm": ("4*(T13 + T2) + E*(5*X13 + X2)", "4*(T13 + T2) + E*(X13 + X2)"),
    "sglang-installed": ("12*T13 + 8*T2 + E*(X13 + X2)", "8*(T13 + T2) + E*(X13 + X2)"),
}
# triton_inplace: a copy and a kernel per group of max(1, 16 MiB // S) experts (ceil by -(-a // b))
_TRITON_INPLACE_LAUNCHES = "2*(-(-E // max(1, 16*MiB // S13)) - (-E // max(1, 16*MiB // S2)))"
LAUNCH_FORMULAS = {
    "legacy": ("6*E + 3", "6*E + 2"),
    "flashinfer": ("4*E + 3", "4*E + 2"),
    "preallocated": ("4*E", "2*E"),
    "inplace": ("4*E", "4*E"),
    "batched": ("4", "4"),
    "strided_copy": ("3", "2"),
    "strided_inplace": ("5*E", "4*E"),
    "triton": ("2", "2"),
    "triton_inplace": (_TRITON_INPLACE_LAUNCHES, _TRITON_INPLACE_LAUNCHES),
    "sglang": ("8*E", "8*E"),
    "trtllm": ("4*E + 2", "4*E + 2"),
    "vllm": ("6*E", "4*E"),
    "sglang-installed": ("8*E + 2", "8*E"),
}


def test_every_strategy_has_traffic_and_launch_formulas():
    assert set(STRATEGIES) <= set(TRAFFIC_FORMULAS) & set(LAUNCH_FORMULAS), (
        "add the new strategy's traffic and launch formulas here (and to its docstring)")


@pytest.mark.parametrize("shape", FULL_SIZE, ids=lambda s: f"{s.label}-g{int(s.gated)}")
@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_traffic_is_the_docstring_formula_on_meta_at_full_size(name, shape):
    measured = strategy_traffic(shape, name)
    assert measured.traffic_bytes == evaluate(TRAFFIC_FORMULAS, name, shape)
    assert measured.launches == evaluate(LAUNCH_FORMULAS, name, shape)


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_traffic_is_the_same_on_cpu_as_on_meta(name):
    shape = LayerShape("small", 1, 3, 256, 128, 1)
    assert strategy_traffic(shape, name, device="cpu") == strategy_traffic(shape, name)


def test_the_counting_rule():
    a = torch.ones(4, 8)  # 128 bytes
    b = torch.ones(4, 8)
    out = torch.empty(4, 8)
    index = torch.tensor([3, 0])  # 16 bytes
    calls = [
        (lambda: a.view(8, 4).t().select(0, 1), []),  # views: nothing
        (lambda: torch.empty(100), []),  # allocates, moves nothing
        (lambda: a.copy_(b), [("copy_", 128, 128)]),  # the destination is only written
        (lambda: a.clone(), [("clone", 128, 128)]),
        (lambda: a.t().contiguous(), [("clone", 128, 128)]),
        (lambda: torch.add(a, b, out=out), [("add", 256, 128)]),  # out= is only written
        (lambda: a.add_(1), [("add_", 128, 128)]),  # in place: self read and written
        (lambda: torch.stack([a, b]), [("stack", 256, 256)]),
        (lambda: a[index], [("index", 64 + 16, 64)]),  # a gather reads what it selects
        (lambda: torch.index_select(a, 0, index, out=out[:2]), [("index_select", 64 + 16, 64)]),
    ]
    for call, expected in calls:
        measured = measure_traffic(call)
        assert [(op.op, op.read_bytes, op.written_bytes) for op in measured.ops] == expected
        assert measured.launches == len(expected)
        assert measured.traffic_bytes == sum(read + written for _, read, written in expected)
