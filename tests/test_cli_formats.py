"""``python -m moe_convert`` takes every format: its catalog names, its strategies, its layers."""

from __future__ import annotations

import json

import pytest

from moe_convert import CATALOG, REGISTRY, layer_shape, strategies
from moe_convert.cli import commands as cli
from moe_convert.formats.records import FORMATS


def test_shapes_lists_every_format_s_catalog(capsys):
    assert cli.main(["shapes"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["model", "tp", "format"]
    formats = {line.split()[2] for line in lines[1:]}
    assert formats == set(FORMATS)
    nvfp4 = next(line for line in lines if line.startswith("qwen3-235b-a22b-nvfp4 "))
    assert "[128, 768, 2048]" in nvfp4 and "[128, 4096, 192]" in nvfp4 and nvfp4.endswith("yes")


def test_measure_takes_a_quantized_catalog_name_and_gives_its_records_figures(capsys):
    argv = ["measure", "--model", "qwen3-235b-a22b-nvfp4", "--tp", "4", "--json", "--quiet"]
    assert cli.main(argv) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    shape = layer_shape("qwen3-235b-a22b-nvfp4", 4)
    want = sorted(strategies("nvfp4"))
    assert [r["strategy"] for r in records] == want
    for record in records:
        strategy = REGISTRY[record["strategy"]]
        assert record["format"] == "nvfp4" and record["layer_bytes"] == shape.layer_bytes
        assert record["peak_transient_bytes"] == strategy.peak.evaluate(shape)
        assert record["traffic_bytes"] == strategy.traffic.evaluate(shape)
        assert record["launches"] == strategy.launches.evaluate(shape)


@pytest.mark.parametrize("model", ["gpt-oss-20b-mxfp4", "deepseek-r1-fp8block"])
def test_verify_holds_every_strategy_of_a_format_to_its_upstream_path(model, capsys):
    assert cli.main(["verify", "--model", model, "--experts", "1", "--quiet"]) == 0
    out = capsys.readouterr().out
    fmt = CATALOG[model].format
    assert f"against {fmt}-legacy" in out and out.endswith("all byte-identical\n")
    assert out.count(" w13 ok  w2 ok  w13_scale ok  w2_scale ok") == 4


def test_replay_takes_a_quantized_layer(capsys):
    argv = ["replay", "--model", "deepseek-r1-nvfp4", "--tp", "4", "--device-gib", "139.5"]
    argv += ["--strategy", "nvfp4-fast", "--json", "--quiet"]
    assert cli.main(argv) == 0
    (record,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert record["shape"] == "deepseek-r1-nvfp4/tp4" and record["oom_layer"] is None


@pytest.mark.parametrize(
    ("argv", "texts"),
    [
        (
            ["measure", "--model", "qwen3-235b-a22b-nvfp4", "--tp", "4", "--strategy", "legacy"],
            ["'legacy' cannot convert qwen3-235b-a22b-nvfp4/tp4 (format NVFP4)", "nvfp4-fast"],
        ),
        (
            ["verify", "--model", "qwen3-30b-a3b", "--strategy", "nvfp4-fast"],
            ["'nvfp4-fast' cannot convert qwen3-30b-a3b/tp1 (format BF16)", "strided_copy"],
        ),
        (
            ["measure", "--model", "kimi-k2-nvfp4", "--tp", "7"],
            ["tp 7 does not divide", "catalog TPs: 8"],
        ),
        (
            ["measure", "--model", "kimi-k2-nvfp4", "--experts", "385"],
            ["385", "1 to 384"],
        ),
        (["measure", "--model", "kimi-k2-nvfp5"], ["closest catalog names: kimi-k2-nvfp4"]),
    ],
)
def test_a_quantized_usage_error_is_one_line(argv, texts, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"python -m moe_convert {argv[0]}: error: ")
    assert all(text in err for text in texts), err
