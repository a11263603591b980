"""``python -m moe_convert`` takes every format: its catalog names, its strategies, its layers."""

from __future__ import annotations

import json

import pytest

from moe_convert import CATALOG, REGISTRY, LayerShape, layer_shape, strategies
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
    # -legacy, -preallocated, -inplace, -fast, -streaming
    assert out.count(" w13 ok  w2 ok  w13_scale ok  w2_scale ok") == 5


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


GPT_OSS_20B = {  # openai/gpt-oss-20b's config.json, the keys read
    "_name_or_path": "openai/gpt-oss-20b",
    "num_local_experts": 32,
    "hidden_size": 2880,
    "intermediate_size": 2880,
    "num_hidden_layers": 24,
    "hidden_act": "silu",
}


def _records(argv: list[str], capsys) -> list[dict]:
    assert cli.main([*argv, "--json", "--quiet"]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_a_config_json_of_a_format_is_padded_as_its_catalog_entry(tmp_path, capsys):
    """``--format mxfp4`` with gpt-oss-20b's config.json: the catalog entry's padded shape, each
    strategy's figures those of its record on it."""
    (tmp_path / "config.json").write_text(json.dumps(GPT_OSS_20B))
    records = _records(["measure", "--model", str(tmp_path), "--format", "mxfp4"], capsys)
    catalog = layer_shape("gpt-oss-20b-mxfp4", 1)
    assert [r["strategy"] for r in records] == sorted(strategies("mxfp4"))
    for record in records:
        assert record["format"] == "mxfp4" and record["layer_bytes"] == catalog.layer_bytes
        assert record["peak_transient_bytes"] == REGISTRY[record["strategy"]].peak.evaluate(catalog)
    # without --format, the same file is BF16, unpadded
    (bf16,) = _records(["measure", "--model", str(tmp_path), "--strategy", "legacy"], capsys)
    assert bf16["format"] == "bf16" and bf16["layer_bytes"] == 32 * 3 * 2880 * 2880 * 2


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_an_explicit_shape_takes_every_format(fmt, capsys):
    """An explicit shape of ``--format``: per rank as given, its record's tensors and strategies."""
    argv = ["measure", "--experts", "2", "--hidden", "512", "--intermediate", "256"]
    records = _records([*argv, "--format", fmt], capsys)
    shape = LayerShape("explicit", 1, 2, 512, 256, 1, format=fmt)
    assert {r["strategy"] for r in records} == set(strategies(fmt))
    assert {(r["format"], r["layer_bytes"]) for r in records} == {(fmt, shape.layer_bytes)}


def test_verify_an_explicit_quantized_shape(capsys):
    argv = ["verify", "--experts", "2", "--hidden", "256", "--intermediate", "128"]
    assert cli.main([*argv, "--format", "nvfp4", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "w13 [2, 256, 128], w2 [2, 256, 64]" in out and "against nvfp4-legacy" in out
    assert out.endswith("all byte-identical\n")


def test_format_may_repeat_a_catalog_name_s_own(capsys):
    argv = ["measure", "--model", "kimi-k2-nvfp4", "--tp", "8", "--strategy", "nvfp4-fast"]
    assert _records([*argv, "--format", "nvfp4"], capsys) == _records(argv, capsys)


@pytest.mark.parametrize(
    ("argv", "texts"),
    [
        (
            ["measure", "--model", "qwen3-30b-a3b", "--format", "nvfp4"],
            ["argument --format: nvfp4", "qwen3-30b-a3b is a bf16 catalog entry", "--format bf16"],
        ),
        (
            ["verify", "--model", "kimi-k2-nvfp4", "--format", "bf16"],
            ["kimi-k2-nvfp4 is a nvfp4 catalog entry"],
        ),
        (
            [
                "measure",
                "--experts",
                "2",
                "--hidden",
                "256",
                "--intermediate",
                "128",
                "--format",
                "fp4",
            ],
            ["argument --format: unknown format 'fp4'; formats: bf16, nvfp4"],
        ),
        (
            [
                "verify",
                "--experts",
                "2",
                "--hidden",
                "100",
                "--intermediate",
                "128",
                "--format",
                "nvfp4",
            ],
            ["explicit/tp1: w13 [2, 256, 50]", "not a multiple of 16"],
        ),
        (
            [
                "measure",
                "--experts",
                "2",
                "--hidden",
                "512",
                "--intermediate",
                "256",
                "--format",
                "fp8",
                "--strategy",
                "nvfp4-fast",
            ],
            ["'nvfp4-fast' cannot convert explicit/tp1 (format FP8", "fp8-fast"],
        ),
    ],
)
def test_a_format_usage_error_is_one_line(argv, texts, capsys):
    test_a_quantized_usage_error_is_one_line(argv, texts, capsys)
