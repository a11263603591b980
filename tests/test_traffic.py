"""Exact work figures: every strategy's registered traffic and launch formulas, and the counting
rule itself.

The formulas are the strategies' records (``REGISTRY[name].traffic``, ``.launches``), in the
legend of ``moe_convert.formulas``; the rule is ``moe_convert.measuring.traffic``'s docstring.
"""

from __future__ import annotations

import pytest
import torch
from conftest import FULL_SIZE

from moe_convert import REGISTRY, LayerShape, strategies
from moe_convert.measuring.traffic import measure_traffic, strategy_traffic


@pytest.mark.parametrize("shape", FULL_SIZE, ids=lambda s: f"{s.label}-g{int(s.gated)}")
@pytest.mark.parametrize("name", sorted(strategies("bf16")))
def test_traffic_is_the_registered_formula_on_meta_at_full_size(name, shape):
    record = REGISTRY[name]
    assert record.traffic is not None and record.launches is not None, (
        f"register {name!r} with its traffic=Formula(...) and launches=Formula(...)"
    )
    measured = strategy_traffic(shape, name)
    assert measured.traffic_bytes == record.traffic.evaluate(shape)
    assert measured.launches == record.launches.evaluate(shape)


@pytest.mark.parametrize("name", sorted(strategies("bf16")))
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
