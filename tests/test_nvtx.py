"""NVTX ranges: pushed around every conversion and every ``scripts/gpu-check`` step on CUDA,
named after what they are; on CPU nothing of NVTX is called (a CPU build of torch has none)."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import requires_cuda

from moe_bench.gpucheck.__main__ import main as gpu_check_main
from moe_convert import Layer, convert, layer_shape, strategies
from moe_convert.formats.bf16.inputs import layer_weights
from moe_convert.formats.table import range_name
from moe_convert.nvtx import nvtx_range

SMALL = layer_shape("qwen3-30b-a3b", 4).with_experts(2)  # w13 [2, 384, 2048], w2 [2, 2048, 192]


@pytest.fixture
def pushed(monkeypatch) -> list[str]:
    """Every NVTX call, in order: ``push NAME`` and ``pop``, recorded instead of made."""
    calls: list[str] = []
    monkeypatch.setattr(torch.cuda.nvtx, "range_push", lambda name: calls.append(f"push {name}"))
    monkeypatch.setattr(torch.cuda.nvtx, "range_pop", lambda: calls.append("pop"))
    return calls


@pytest.mark.parametrize("device", ["cuda", "cuda:1", torch.device("cuda", 0)])
def test_a_cuda_device_gets_the_range_around_the_block(pushed, device):
    with nvtx_range("moe_convert/x", device):
        pushed.append("body")
    assert pushed == ["push moe_convert/x", "body", "pop"]


def test_the_range_is_popped_when_the_block_raises(pushed):
    with pytest.raises(ValueError, match="inside"), nvtx_range("r", "cuda"):
        raise ValueError("inside")
    assert pushed == ["push r", "pop"]


@pytest.mark.parametrize("device", ["cpu", "meta", torch.device("cpu")])
def test_nothing_of_nvtx_is_called_off_cuda(pushed, device):
    with nvtx_range("r", device):
        pass
    assert pushed == []


@pytest.mark.parametrize("strategy", ["legacy", "strided_inplace"])
def test_a_conversion_on_cpu_calls_no_nvtx(pushed, strategy):
    w13, w2 = layer_weights(SMALL, "cpu")
    convert(Layer(w13, w2), strategy=strategy, gated=SMALL.gated)
    assert pushed == []


def test_the_range_is_named_after_strategy_and_sizes():
    qwen = layer_shape("qwen3-235b-a22b", 4)
    w13, w2 = layer_weights(qwen, "meta")
    assert range_name("legacy", Layer(w13, w2)) == "moe_convert/legacy/E128xH4096xI384"


@requires_cuda
@pytest.mark.parametrize("strategy", sorted(strategies("bf16")))
def test_every_conversion_on_cuda_is_one_range(pushed, strategy):
    layer = Layer(*layer_weights(SMALL, "cuda"))
    expected = range_name(strategy, layer)
    convert(layer, strategy=strategy, gated=SMALL.gated)
    assert pushed == [f"push {expected}", "pop"]


@pytest.mark.parametrize(
    ("cuda", "expected"), [(True, ["push gpu_check/timing", "pop"]), (False, [])]
)
def test_a_gpu_check_step_is_one_range_where_cuda_is(pushed, monkeypatch, tmp_path, cuda, expected):
    # the timing step's dry run: it only lists its plan (CUDA is only pretended here)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    result = tmp_path / "timing.json"
    argv = ["--step", "timing", "--result", str(result), str(tmp_path), "--dry-run"]
    assert gpu_check_main(argv) == 0
    assert json.loads(result.read_text())["ok"] and pushed == expected
