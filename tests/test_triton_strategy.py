"""The Triton strategies: registered only where they can run, one op per launch at dispatch level.

Their bytes are checked with every other strategy in ``test_strategies.py`` (under Triton's
interpreter here: ``conftest`` sets ``TRITON_INTERPRET=1`` where no GPU is present).
"""

from __future__ import annotations

import math
import os
import subprocess
import sys

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from moe_convert import Layer, LayerShape, convert, layer_shape
from moe_convert.formats.bf16 import cycles, triton_strategy
from moe_convert.formats.bf16.inputs import layer_weights

pytestmark = pytest.mark.skipif(
    not triton_strategy.AVAILABLE,
    reason=f"triton strategies n/a: {triton_strategy.UNAVAILABLE_REASON}",
)


class OpLog(TorchDispatchMode):
    """The aten (and custom) ops of a call, by name."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


def data_ops(strategy: str, shape) -> list[str]:
    w13, w2 = layer_weights(shape, "meta")
    with OpLog() as log:
        convert(Layer(w13, w2), strategy=strategy, gated=shape.gated)
    moving = ("triton_block_layout", "cycle_walk", "copy_", "index_select")
    return [op for op in log.ops if op in moving]


def test_out_of_place_is_one_launch_per_weight_at_full_size():
    assert data_ops("triton", layer_shape("deepseek-v3", 8)) == ["triton_block_layout"] * 2


@pytest.mark.parametrize("model, tp", [("qwen3-235b-a22b", 4), ("deepseek-v3", 8)])
def test_in_place_launches_a_copy_and_a_kernel_per_group_of_experts(model, tp):
    shape = layer_shape(model, tp)
    groups = sum(
        math.ceil(shape.experts / max(1, triton_strategy._SCRATCH_BYTES // expert))
        for expert in (shape.w13_expert_bytes, shape.w2_expert_bytes)
    )
    assert data_ops("triton_inplace", shape) == ["copy_", "triton_block_layout"] * groups


@pytest.mark.parametrize("model, tp", [("qwen3-235b-a22b", 4), ("deepseek-v3", 4)])
def test_cycles_save_the_starts_then_walk_once_per_weight(model, tp):
    log = data_ops("cycle_inplace", layer_shape(model, tp))
    assert log == ["index_select", "cycle_walk"] * 2


def _without_caches() -> None:
    cycles._segments.cache_clear()
    cycles.segment_table.cache_clear()


@pytest.mark.parametrize("length", [1, 3, 16])
@pytest.mark.parametrize("gated", [True, False])
def test_cycles_cut_into_short_segments_give_the_same_bytes(monkeypatch, length, gated):
    # every cycle cut into many segments (1 cell: every cell saved first), with short tails
    shape = LayerShape("short-segments", 1, 2, 256, 192, 1, gated=gated)
    w13, w2 = layer_weights(shape, "cpu")
    want = convert(Layer(w13.clone(), w2.clone()), strategy="strided_copy", gated=gated).values()
    monkeypatch.setattr(cycles, "SEGMENT_CELLS", length)
    _without_caches()
    try:
        got = convert(Layer(w13, w2), strategy="cycle_inplace", gated=gated).values()
        assert cycles.segment_table(256, 192, False).shape[0] == length + 1
    finally:
        _without_caches()
    for g, w in zip(got, want, strict=True):
        assert torch.equal(g.view(torch.uint8), w.view(torch.uint8))


def test_not_registered_without_a_gpu_or_the_interpreter_and_says_why():
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: the strategies register")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    code = (
        "import moe_convert; from moe_convert.formats.bf16 import triton_strategy as t; "
        "print(sorted(n for n, r in moe_convert.strategies('bf16').items()"
        " if r.needs == t.NEEDS)); "
        "print(t.UNAVAILABLE_REASON)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert out[0] == "[]"
    assert "TRITON_INTERPRET=1" in out[1]
