"""Expert parallelism, an axis of the catalog's shapes as TP is: a rank's share of the experts
(vLLM's rule), its label, and every measurement on it unchanged, the whole rank's refit by EP
(``python -m moe_convert refit``) included. Exact figures on meta at full size."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from moe_convert import LayerShape, layer_shape
from moe_convert.cli import commands
from moe_convert.cli.commands import main
from moe_convert.formats.catalog import CATALOG, EP_SIZES, shape_from_label
from moe_convert.load.refit import REFITS, refit_memory, refit_traffic


def test_a_rank_under_ep_holds_e_over_ep_whole_experts():
    shape = layer_shape("qwen3-30b-a3b", 1, 8)
    assert shape == LayerShape("qwen3-30b-a3b", 1, 16, 2048, 768, 48, True, "bf16", 8)
    assert shape.label == "qwen3-30b-a3b/ep8"
    assert shape.w13_shape == (16, 1536, 2048) and shape.w2_shape == (16, 2048, 768)
    assert shape.model_bytes * 8 == layer_shape("qwen3-30b-a3b", 1).model_bytes == 54 * 2**30


def test_a_quantized_rank_under_ep_keeps_i_whole_padded_as_at_tp1():
    tp1, ep8 = layer_shape("kimi-k2-nvfp4", 1), layer_shape("kimi-k2-nvfp4", 1, 8)
    assert ep8 == dataclasses.replace(tp1, experts=384 // 8, ep=8)
    assert ep8.conversion_error is None and ep8.label == "kimi-k2-nvfp4/ep8"


def test_e_not_divisible_by_ep_is_rank_0_s_share_as_vllm_places_experts():
    # vLLM's determine_expert_map: E // EP each, one more for the first E % EP ranks
    assert layer_shape("qwen3-30b-a3b", 1, 3).experts == 43  # 128 = 43 + 43 + 42
    assert layer_shape("deepseek-v2", 1, 64).experts == 3  # 160 = 32 x 3 + 32 x 2


def test_ep_sizes_are_those_of_2_to_64_that_divide_e():
    assert EP_SIZES == (2, 4, 8, 16, 32, 64)
    assert CATALOG["mixtral-8x7b"].ep_sizes == (2, 4, 8)
    assert CATALOG["deepseek-v2"].ep_sizes == (2, 4, 8, 16, 32)  # E 160
    assert CATALOG["gpt-oss-20b-mxfp4"].ep_sizes == (2, 4, 8, 16, 32)  # E 32
    assert CATALOG["kimi-k2-thinking-mxint4"].ep_sizes == EP_SIZES  # E 384


def test_every_catalog_ep_shape_converts_and_its_label_is_its_own():
    for spec in CATALOG.values():
        for ep in spec.ep_sizes:
            shape = spec.shape(1, ep)
            assert shape.conversion_error is None, shape.label
            assert shape_from_label(shape.label) == shape


#: (tp, ep, the message's start): each names the model, its E and the EP.
BAD_EP = [
    (1, 0, "mixtral-8x7b: ep 0 is not from 1 to its 8 experts (E); EPs that divide E = 8: 2, 4, 8"),
    (1, 16, "mixtral-8x7b: ep 16 is not from 1 to its 8 experts"),
    (1, True, "mixtral-8x7b: ep True is not"),
    (2, 4, "mixtral-8x7b: tp 2 with ep 4: under expert parallelism vLLM keeps each expert whole"),
]


@pytest.mark.parametrize("tp, ep, message", BAD_EP)
def test_a_bad_ep_is_one_line_naming_the_model_e_and_ep(tp, ep, message):
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        layer_shape("mixtral-8x7b", tp, ep)


@pytest.mark.parametrize(
    "label, message",
    [
        ("qwen3-30b-a3b/ep", "is not model/tpN or model/epN"),
        ("qwen3-30b-a3b/tp2ep4", "is not model/tpN or model/epN"),
        ("qwen3-30b-a3b/ep256", "ep 256 is not from 1 to its 128 experts"),
    ],
)
def test_shape_from_bad_ep_label(label, message):
    with pytest.raises(ValueError, match=message):
        shape_from_label(label)


@pytest.mark.parametrize("way", list(REFITS))
def test_a_rank_s_refit_is_the_refit_of_its_local_experts(way):
    """Nothing of the refit knows EP: the rank's layer is a layer of E / EP experts, and its
    figures those of the TP1 layer cut to that many (mixtral: traffic exactly 1/8 at EP 8)."""
    rank, whole = layer_shape("mixtral-8x7b", 1, 8), layer_shape("mixtral-8x7b", 1)
    cut = whole.with_experts(1)
    assert refit_traffic(rank, "inplace", way) == refit_traffic(cut, "inplace", way)
    assert (
        refit_memory(rank, "inplace", way).peak_bytes
        == refit_memory(cut, "inplace", way).peak_bytes
    )
    assert 8 * refit_traffic(rank, "inplace", way).traffic_bytes == (
        refit_traffic(whole, "inplace", way).traffic_bytes
    )


def _table(out: str, way: str) -> list[str]:
    """The rows of ``refit``'s table of ``way``, cells one space apart."""
    block = out.split(f"\n{way}\n")[1].split("\n\n")[0]
    return [" ".join(line.split()) for line in block.splitlines()[1:]]


def test_the_refit_command_shows_a_whole_rank_s_refit_by_ep(capsys):
    argv = ["refit", "--model", "mixtral-8x7b", "--ep", "all", "--strategy", "inplace", "--quiet"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    # one layer's peak (one expert's scratch); the rank's traffic and launches, 32 layers'
    assert _table(out, "direct") == [
        "mixtral-8x7b/tp1 8 84.00 GiB inplace 224.00 MiB 504.06 GiB 1088",
        "mixtral-8x7b/ep2 4 42.00 GiB inplace 224.00 MiB 252.03 GiB 576",
        "mixtral-8x7b/ep4 2 21.00 GiB inplace 224.00 MiB 126.02 GiB 320",
        "mixtral-8x7b/ep8 1 10.50 GiB inplace 224.00 MiB 63.01 GiB 192",
    ]
    # streamed: nothing allocated, each new byte read once and written once (2 x 10.50 GiB)
    assert _table(out, "streamed")[-1] == "mixtral-8x7b/ep8 1 10.50 GiB inplace 0 B 21.00 GiB 96"
    assert [row.split()[0] for row in _table(out, "layerwise")] == [
        "mixtral-8x7b/tp1",
        "mixtral-8x7b/ep2",
        "mixtral-8x7b/ep4",
        "mixtral-8x7b/ep8",
    ]


def test_the_rank_load_replays_a_rank_s_share_unchanged(capsys):
    argv = ["replay", "--model", "qwen3-30b-a3b", "--ep", "8", "--device-gib", "80"]
    assert main([*argv, "--strategy", "inplace", "--json", "--quiet"]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert '"shape": "qwen3-30b-a3b/ep8"' in line and '"oom": false' in line


def test_a_refused_way_reads_refused_with_its_reason_once(capsys, monkeypatch):
    def refit_call(shape, strategy, way):
        if way == "direct":
            raise ValueError("cannot view the converted layer")
        return real(shape, strategy, way)

    real = commands.refit_call
    monkeypatch.setattr(commands, "refit_call", refit_call)
    argv = ["refit", "--model", "mixtral-8x7b", "--ep", "all", "--strategy", "inplace", "--quiet"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert (
        _table(out, "direct")[0] == "mixtral-8x7b/tp1 8 84.00 GiB inplace refused refused refused"
    )
    assert out.count("refused: cannot view the converted layer") == 1
    assert out.splitlines()[-1] == "inplace direct: refused: cannot view the converted layer"


def test_a_config_json_s_model_takes_ep_as_a_catalog_one_does(tmp_path, capsys):
    config = {"num_experts": 4, "hidden_size": 256, "moe_intermediate_size": 256}
    (tmp_path / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 2}))
    argv = ["measure", "--model", str(tmp_path), "--ep", "2", "--strategy", "inplace"]
    assert main([*argv, "--json", "--quiet"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert (record["tp"], record["ep"], record["experts"]) == (1, 2, 2)
    # one layer of 2 experts: w13 [2, 512, 256] and w2 [2, 256, 256], bf16
    assert record["layer_bytes"] == 2 * (512 * 256 + 256 * 256) * 2
