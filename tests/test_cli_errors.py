"""Every user error of ``python -m moe_convert``: exit status 2, one line on stderr naming the bad
value, no traceback, and no work started before the error (the heavy steps are booby-trapped)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from moe_convert.cli import commands as cli

BAD = [
    # --model
    (["measure", "--model", "nosuch"], ["'nosuch'", "or a path to a Hugging Face config.json"]),
    (
        ["measure", "--model", "QWEN3-235B-A22B"],
        ["'QWEN3-235B-A22B'", "closest catalog names: qwen3-235b-a22b"],
    ),
    (["verify", "--model", "qwen3-235b"], ["'qwen3-235b'", "qwen3-235b-a22b"]),
    (["measure", "--model", "no/such/config.json"], ["'no/such/config.json'", "no existing file"]),
    (
        ["measure", "--model", "Qwen/Qwen3-30B-A3B"],
        ["'Qwen/Qwen3-30B-A3B'", "closest catalog names: qwen3-30b-a3b"],
    ),
    (["measure", "--model", "qwen3-30b-a3b", "--hidden", "4096"], ["--hidden", "qwen3-30b-a3b"]),
    (["measure", "--model", "qwen3-30b-a3b", "--no-gated"], ["--no-gated"]),
    # --ep
    (
        ["measure", "--model", "qwen3-30b-a3b", "--ep", "0"],
        ["--ep", "ep 0 is not from 1 to its 128"],
    ),
    (
        ["measure", "--model", "mixtral-8x7b", "--ep", "16"],
        ["ep 16", "EPs that divide E = 8: 2, 4, 8"],
    ),
    (["measure", "--model", "qwen3-30b-a3b", "--ep", "all"], ["--ep", "'all'"]),
    (["measure", "--model", "qwen3-30b-a3b", "--tp", "2", "--ep", "4"], ["tp 2 with ep 4"]),
    (
        ["measure", "--model", "qwen3-30b-a3b", "--ep", "8", "--experts", "17"],
        ["give 1 to 16", "128 experts, 16 on rank 0 at ep 8"],
    ),
    (
        ["measure", "--experts", "4", "--hidden", "4096", "--intermediate", "384", "--ep", "4"],
        ["--ep 4", "--experts (E / EP)"],
    ),
    (["refit", "--model", "qwen3-30b-a3b", "--ep", "x"], ["'x' is not an integer or all"]),
    (["refit", "--model", "qwen3-30b-a3b", "--tp", "2", "--ep", "all"], ["--ep: all", "no --tp"]),
    # --tp
    (
        ["measure", "--model", "qwen3-235b-a22b", "--tp", "5"],
        ["tp 5", "valid TPs: 1, 2, 3, 4, 6, 8, 12, 24", "runs 1, 2, 3, 4, 6, 12 without padding"],
    ),
    (["measure", "--model", "qwen3-235b-a22b", "--tp", "0"], ["got 0", "valid TPs: 1, 2, 3"]),
    (["measure", "--model", "qwen3-235b-a22b", "--tp", "-1"], ["got -1", "valid TPs"]),
    (["measure", "--model", "qwen3-235b-a22b", "--tp", "four"], ["'four'"]),
    (["measure", "--model", "deepseek-v2-lite", "--tp", "3"], ["tp 3", "valid TPs: 1, 2, 11, 22"]),
    (
        ["verify", "--model", "qwen3-30b-a3b", "--tp", "8"],
        ["qwen3-30b-a3b/tp8", "bytes per row (192)", "valid TPs: 1, 2, 3, 4, 6, 12"],
    ),
    (
        ["measure", "--model", "kimi-k2-thinking-mxint4", "--tp", "16", "--device", "meta"],
        ["kimi-k2-thinking-mxint4/tp16", "I per rank = 128", "K must be divisible by blockK"],
    ),
    (["replay", "--model", "qwen3-30b-a3b", "--tp", "24", "--device-gib", "80"], ["tp 24"]),
    (
        ["measure", "--experts", "4", "--hidden", "4096", "--intermediate", "384", "--tp", "4"],
        ["--tp 4", "--intermediate"],
    ),
    # --experts
    (["verify", "--model", "qwen3-30b-a3b", "--experts", "0"], ["experts: 0", "1 to 128"]),
    (["measure", "--model", "qwen3-235b-a22b", "--experts", "1000"], ["1000", "1 to 128"]),
    (["measure", "--model", "qwen3-235b-a22b", "--experts", "-3"], ["-3", "1 to 128"]),
    (
        ["measure", "--experts", "0", "--hidden", "128", "--intermediate", "64"],
        ["experts: 0", "1 to 1048576"],
    ),
    (
        ["measure", "--experts", "2", "--hidden", "100000000000000000000", "--intermediate", "64"],
        ["'100000000000000000000'", "1 to 1048576"],
    ),
    (["measure", "--experts", "1048577", "--hidden", "128", "--intermediate", "64"], ["1048577"]),
    (
        [
            "measure",
            "--experts",
            "1048576",
            "--hidden",
            "4096",
            "--intermediate",
            "1536",
            "--device",
            "cpu",
        ],
        ["1048576 experts", "needs at least", "give --experts"],
    ),
    (
        ["verify", "--experts", "1048576", "--hidden", "4096", "--intermediate", "1536"],
        ["1048576 experts", "3 copies"],
    ),
    (["measure", "--experts", "two", "--hidden", "128", "--intermediate", "64"], ["'two'"]),
    # explicit shapes
    (["measure", "--hidden", "4096", "--intermediate", "384"], ["missing: --experts"]),
    (["measure"], ["--model NAME"]),
    (
        ["measure", "--experts", "2", "--hidden", "100", "--intermediate", "384"],
        ["w13 [2, 768, 100]", "multiple of 64"],
    ),
    (["verify", "--experts", "2", "--hidden", "128", "--intermediate", "80"], ["w2 [2, 128, 80]"]),
    (["measure", "--experts", "2", "--hidden", "0", "--intermediate", "64"], ["--hidden", "'0'"]),
    (
        ["measure", "--experts", "2", "--hidden", "128", "--intermediate", "-64"],
        ["--intermediate", "'-64'"],
    ),
    # --device
    (["measure", "--model", "qwen3-30b-a3b", "--device", "tpu"], ["'tpu'", "meta, cpu, cuda"]),
    (["measure", "--model", "qwen3-30b-a3b", "--device", "bogus"], ["'bogus'"]),
    (["measure", "--model", "qwen3-30b-a3b", "--device", "cuda:x"], ["'cuda:x'"]),
    (["verify", "--model", "qwen3-30b-a3b", "--device", "meta"], ["'meta'", "cpu, cuda"]),
    (
        ["verify", "--model", "qwen3-30b-a3b", "--device", f"cuda:{torch.cuda.device_count()}"],
        [f"'cuda:{torch.cuda.device_count()}'", "CUDA device"],
    ),
    # measure's own
    (["measure", "--model", "qwen3-30b-a3b", "--threads", "0"], ["--threads", "'0'"]),
    (["measure", "--model", "qwen3-30b-a3b", "--threads", "2"], ["--threads", "2", "--device cpu"]),
    (["measure", "--model", "qwen3-30b-a3b", "--repeats", "0"], ["--repeats", "'0'"]),
    (
        ["measure", "--model", "qwen3-30b-a3b", "--strategy", ""],
        ["unknown strategy ''", "strided_copy"],
    ),
    (["measure", "--model", "qwen3-30b-a3b", "--strategy", "nope"], ["'nope'", "valid: all"]),
    (
        ["verify", "--model", "qwen3-30b-a3b", "--strategy", "inplace,,batched"],
        ["unknown strategy ''"],
    ),
    (["verify", "--model", "qwen3-30b-a3b", "--seed", "-1"], ["--seed", "'-1'"]),
    # replay's own
    (["replay", "--model", "qwen3-30b-a3b", "--device-gib", "nan"], ["--device-gib", "'nan'"]),
    (["replay", "--model", "qwen3-30b-a3b", "--device-gib", "inf"], ["'inf'"]),
    (["replay", "--model", "qwen3-30b-a3b", "--device-gib", "0"], ["'0'", "> 0"]),
    (["replay", "--model", "qwen3-30b-a3b", "--device-gib", "-80"], ["'-80'"]),
    (
        ["replay", "--model", "qwen3-30b-a3b", "--device-gib", "80", "--other-weights-gib", "nan"],
        ["--other-weights-gib", "'nan'"],
    ),
    (
        ["replay", "--model", "qwen3-30b-a3b", "--device-gib", "80", "--other-weights-gib", "-1"],
        ["'-1'"],
    ),
    (
        ["replay", "--model", "qwen3-30b-a3b", "--device-gib", "1"],
        ["1073741824", "cannot hold the weights"],
    ),
    (
        ["replay", "--model", "qwen3-30b-a3b", "--device-gib", "80", "--max-split-mb", "5"],
        ["'5'", ">= 20"],
    ),
    (
        ["replay", "--model", "qwen3-30b-a3b", "--device-gib", "80", "--max-split-mb", "20,big"],
        ["'big'"],
    ),
    (["replay", "--model", "qwen3-30b-a3b", "--device-gib", "80", "--pool", "nope"], ["'nope'"]),
    (["replay", "--model", "qwen3-30b-a3b"], ["--device-gib"]),
    # the command itself
    ([], ["command"]),
    (["bogus"], ["'bogus'"]),
    (["shapes", "--tp", "4"], ["python -m moe_convert shapes: error:", "--tp 4"]),
    # no abbreviations: a flag has one spelling
    (["measure", "--exp", "2"], ["python -m moe_convert measure: error:", "arguments: --exp 2"]),
    (["strategies", "--mark"], ["--mark"]),
]

QWEN_LIKE = {
    "hidden_size": 256,
    "moe_intermediate_size": 256,
    "num_experts": 4,
    "num_hidden_layers": 2,
}
DEEPSEEK_LIKE = dict(QWEN_LIKE, n_routed_experts=4, num_experts=None, first_k_dense_replace=1)

# (config.json text, texts the error line must hold besides the file's path)
BAD_CONFIGS = [
    ('{"hidden_size": 25', ["not valid JSON"]),
    ("[1, 2]", ["got a JSON list"]),
    ("", ["not valid JSON"]),
    (
        json.dumps(dict(QWEN_LIKE, hidden_size="256")),
        ['`hidden_size` must be a positive integer, got "256"'],
    ),
    (json.dumps(dict(QWEN_LIKE, hidden_size=256.0)), ["`hidden_size`", "got 256.0"]),
    (
        json.dumps(dict(QWEN_LIKE, moe_intermediate_size=-5)),
        ["`moe_intermediate_size` must be a positive integer, got -5"],
    ),
    (json.dumps(dict(QWEN_LIKE, num_experts=True)), ["`num_experts`", "got true"]),
    (json.dumps(dict(QWEN_LIKE, num_hidden_layers=0)), ["`num_hidden_layers`", "got 0"]),
    (
        json.dumps(dict(QWEN_LIKE, moe_intermediate_size=10**20)),
        ["`moe_intermediate_size` is 100000000000000000000", "up to 1048576"],
    ),
    (
        json.dumps({k: v for k, v in QWEN_LIKE.items() if k != "num_hidden_layers"}),
        ["`num_hidden_layers` is missing"],
    ),
    (
        json.dumps({"hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32}),
        ["not an MoE model"],
    ),
    (json.dumps(dict(DEEPSEEK_LIKE, moe_layer_freq=0)), ["`moe_layer_freq`", "got 0"]),
    (
        json.dumps(dict(DEEPSEEK_LIKE, first_k_dense_replace=-1)),
        ["`first_k_dense_replace`", "got -1"],
    ),
    (json.dumps(dict(DEEPSEEK_LIKE, first_k_dense_replace=2)), ["no MoE layer"]),
    (json.dumps(dict(QWEN_LIKE, decoder_sparse_step=0)), ["`decoder_sparse_step`", "got 0"]),
    (json.dumps(dict(QWEN_LIKE, mlp_only_layers="all")), ["`mlp_only_layers`", '"all"']),
    (
        json.dumps(dict(QWEN_LIKE, hidden_size=100)),
        ["no TP converts it", "(4, 512, 100)", "multiple of 64"],
    ),
]


@pytest.fixture
def no_work(monkeypatch):
    """Fail any test that starts converting, timing or measuring before its error."""

    def started(*args, **kwargs):
        raise AssertionError("work started before the arguments were checked")

    for name in ("strategy_memory", "time_layer", "convert", "layer_tensors", "refit_call"):
        monkeypatch.setattr(cli, name, started)


def _error_line(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as stop:
        cli.main(argv)
    out, err = capsys.readouterr()
    assert stop.value.code == 2
    assert "Traceback" not in out + err
    assert out == ""  # refused before anything was printed, let alone done
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("python -m moe_convert") and ": error: " in lines[0]
    return lines[0]


@pytest.mark.parametrize("argv, needles", BAD, ids=[" ".join(argv) or "(none)" for argv, _ in BAD])
def test_bad_invocation(argv, needles, capsys, no_work):
    line = _error_line(argv, capsys)
    for needle in needles:
        assert needle in line


@pytest.mark.parametrize(
    "text, needles", BAD_CONFIGS, ids=[f"config{i}" for i in range(len(BAD_CONFIGS))]
)
def test_bad_config_json(text, needles, tmp_path, capsys, no_work):
    path = tmp_path / "config.json"
    path.write_text(text)
    line = _error_line(["measure", "--model", str(path)], capsys)
    for needle in [str(path)] + needles:
        assert needle in line


def test_config_folder_without_config_json(tmp_path, capsys, no_work):
    line = _error_line(["verify", "--model", str(tmp_path)], capsys)
    assert str(tmp_path / "config.json") in line and "cannot read" in line


def test_config_tp_that_does_not_divide(tmp_path, capsys, no_work):
    (tmp_path / "config.json").write_text(json.dumps(dict(QWEN_LIKE, _name_or_path="Tiny-MoE")))
    line = _error_line(["measure", "--model", str(tmp_path), "--tp", "3"], capsys)
    assert "tiny-moe: tp 3 does not divide moe_intermediate_size 256; valid TPs: 1, 2, 4" in line


def test_at_least_40_bad_invocations():
    assert len(BAD) + len(BAD_CONFIGS) >= 40


def test_real_entry_point_prints_one_line():
    done = subprocess.run(
        [sys.executable, "-m", "moe_convert", "measure", "--model", "nosuch"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        "python -m moe_convert measure: error: argument --model: 'nosuch' is no catalog name and "
        "no existing file or folder; catalog names: qwen3-235b-a22b, qwen3-30b-a3b, deepseek-v3, "
        "deepseek-v2, deepseek-v2-lite, mixtral-8x7b, kimi-k2-nvfp4, deepseek-r1-nvfp4, "
        "qwen3-235b-a22b-nvfp4, gpt-oss-120b-mxfp4, gpt-oss-20b-mxfp4, llama-4-maverick-fp8, "
        "deepseek-r1-fp8block, minimax-m3-mxfp8, kimi-k2-thinking-mxint4, or a path to a Hugging "
        "Face config.json"
    ]


def test_a_bug_still_shows_its_traceback(monkeypatch):
    def bug(args):
        raise KeyError("a bug")

    monkeypatch.setattr(cli, "cmd_shapes", bug)
    with pytest.raises(KeyError, match="a bug"):
        cli.main(["shapes"])


def test_a_reader_that_leaves_early_gets_no_traceback():
    # `python -m moe_convert strategies | head -1`, made certain: the reader is gone before the
    # listing starts, so every write meets a closed pipe.
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "moe_convert", "strategies"],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=300,
        )
    finally:
        os.close(write_end)
    assert done.returncode == 1
    assert done.stderr == ""


def test_the_console_scripts_resolve():
    """``moe-convert`` and ``moe-bench`` as installed from pyproject.toml: each names a callable
    (``moe_convert.cli`` became a package: its ``main`` is in ``commands``)."""
    import importlib.metadata

    scripts = {
        ep.name: ep
        for ep in importlib.metadata.distribution("moe-convert-bench").entry_points
        if ep.group == "console_scripts"
    }
    assert set(scripts) == {"moe-convert", "moe-bench"}
    for ep in scripts.values():
        assert callable(ep.load()), ep.value


def test_the_report_refuses_a_mistyped_table_in_one_line(capsys):
    """``python -m moe_convert.cli.report TABLE``: a name it does not know is a usage error, not
    the default table printed in its place."""
    from moe_convert.cli import report

    with pytest.raises(SystemExit) as stop:
        report.main(["strategis"])
    out, err = capsys.readouterr()
    assert stop.value.code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "invalid choice: 'strategis'" in err
    assert report.main(["strategies"]) == 0
    assert capsys.readouterr().out.startswith("| strategy | from | result |")
