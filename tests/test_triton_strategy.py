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

from moe_convert import convert, layer_shape, triton_strategy
from moe_convert.inputs import layer_weights

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
        convert(w13, w2, strategy=strategy, gated=shape.gated)
    return [op for op in log.ops if op in ("triton_block_layout", "copy_")]


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


def test_not_registered_without_a_gpu_or_the_interpreter_and_says_why():
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: the strategies register")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    code = (
        "import moe_convert; from moe_convert import triton_strategy as t; "
        "print(sorted(n for n in moe_convert.STRATEGIES if 'triton' in n)); "
        "print(t.UNAVAILABLE_REASON)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert out[0] == "[]"
    assert "TRITON_INTERPRET=1" in out[1]
