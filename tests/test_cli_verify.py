"""``python -m moe_convert shapes`` and ``verify``: output, exit status, a broken strategy found."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from moe_convert import REGISTRY, Layer, register, strategies

# verify on the smallest shape: one expert, w13 [1, 128, 128], w2 [1, 128, 64]
from moe_convert.cli import commands as cli
from moe_convert.formats.bf16 import reference
from moe_convert.formats.bf16.strategies import strided_copy

TINY = ["verify", "--experts", "1", "--hidden", "128", "--intermediate", "64"]


@pytest.fixture
def broken_strategy():
    """Register strategies that break the contract for one test, and remove them after it."""
    names = []

    def add(name: str, fn, *, inplace: bool) -> None:
        names.append(name)
        register(name, format="bf16", inplace=inplace, origin="test probe")(fn)

    yield add
    for name in names:
        REGISTRY.pop(name, None)


def flip_one_byte(w13, w2, gated):
    """Broken on purpose: ``strided_copy`` with the last byte of w2 inverted. Out of place."""
    out13, out2 = REGISTRY["strided_copy"].function(Layer(w13, w2), gated).values()
    out2.view(torch.uint8).view(-1)[-1] ^= 0xFF
    return out13, out2


def test_shapes_command_prints_catalog():
    done = subprocess.run(
        [sys.executable, "-m", "moe_convert", "shapes"],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    out = done.stdout
    for model in ("qwen3-235b-a22b", "qwen3-30b-a3b", "deepseek-v3", "deepseek-v2-lite"):
        assert model in out
    qwen = [line for line in out.splitlines() if line.startswith("qwen3-235b-a22b ")]
    qwen_tp4, qwen_tp8 = (next(line for line in qwen if line.split()[1] == tp) for tp in ("4", "8"))
    assert "[128, 768, 4096]" in qwen_tp4 and "[128, 4096, 384]" in qwen_tp4
    assert "1152.0" in qwen_tp4 and "105.75" in qwen_tp4 and qwen_tp4.endswith("yes")
    assert "no: I/TP = 192 is not a multiple of 128" in qwen_tp8


def test_verify_catalog_model_passes(capsys):
    assert cli.main(["verify", "--model", "qwen3-30b-a3b", "--tp", "2", "--experts", "2"]) == 0
    out = capsys.readouterr().out
    assert "w13 [2, 768, 2048], w2 [2, 2048, 384]" in out
    expected = "FlashInfer's helpers" if reference.AVAILABLE else "legacy"
    assert f"against {expected}" in out
    for name, record in strategies("bf16").items():
        line = next(line for line in out.splitlines() if line.split()[:1] == [name])
        assert "w13 ok" in line and "w2 ok" in line
        assert ("in place" in line) == record.inplace
    assert "all byte-identical" in out


def test_verify_explicit_non_gated_shape(capsys):
    argv = ["verify", "--experts", "2", "--hidden", "256", "--intermediate", "128", "--no-gated"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "w13 [2, 128, 256], w2 [2, 256, 128], gated=False" in out


def test_verify_without_flashinfer_says_it_uses_legacy(capsys, monkeypatch):
    monkeypatch.setattr(reference, "AVAILABLE", False)
    assert cli.main(TINY + ["--strategy", "strided_copy,inplace"]) == 0
    assert "against legacy (flashinfer-python is not installed)" in capsys.readouterr().out


def test_verify_config_json_model(tmp_path, capsys):
    config = {
        "_name_or_path": "tiny-moe",
        "hidden_size": 256,
        "moe_intermediate_size": 256,
        "num_experts": 4,
        "num_hidden_layers": 2,
        "hidden_act": "silu",
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    argv = ["verify", "--model", str(tmp_path), "--tp", "2", "--strategy", "strided_inplace"]
    assert cli.main(argv) == 0
    assert "verify tiny-moe/tp2: w13 [4, 256, 256], w2 [4, 256, 128]" in capsys.readouterr().out


def test_verify_fails_on_a_mismatching_strategy(broken_strategy, capsys):
    broken_strategy("_flip_one_byte", flip_one_byte, inplace=False)
    argv = ["verify", "--experts", "2", "--hidden", "256", "--intermediate", "128"]
    assert cli.main(argv) != 0
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if "_flip_one_byte" in line)
    assert "w13 ok" in line and "w2 MISMATCH" in line
    assert "1 strategies FAILED" in out


def test_verify_fails_when_inplace_contract_is_broken(broken_strategy, capsys):
    # Right bytes, but registered as in place while returning new tensors.
    # strided_copy as written, on (w13, w2, gated): register wraps it once.
    broken_strategy("_claims_inplace", strided_copy, inplace=True)
    assert cli.main(TINY + ["--strategy", "_claims_inplace"]) != 0
    assert "WRONG" in capsys.readouterr().out


def test_verify_notes_a_shape_the_kernel_cannot_take(capsys):
    assert (
        cli.main(
            [
                "verify",
                "--model",
                "qwen3-235b-a22b",
                "--tp",
                "8",
                "--experts",
                "1",
                "--strategy",
                "strided_copy",
            ]
        )
        == 0
    )
    assert "note: the SM100 kernel cannot take this shape: I/TP = 192" in capsys.readouterr().out
