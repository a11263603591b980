"""The model-shape catalog: names, per-rank shapes, bytes, invalid combinations with their reason,
and shapes read from a local ``config.json``."""

from __future__ import annotations

import json

import pytest
import torch

from moe_convert import (
    CATALOG,
    FORMATS,
    LayerShape,
    check_weights,
    layer_shape,
    layer_tensors,
    shape_from_hf_config,
)
from moe_convert.formats.catalog import (
    TP_SIZES,
    catalog_shapes,
    shape_from_label,
    spec_from_hf_config,
)

MiB, GiB = 2**20, 2**30

# Public config.json values (trimmed to the keys the reader uses, plus neighbours it must ignore).
QWEN3_235B_CONFIG = {
    "_name_or_path": "Qwen/Qwen3-235B-A22B",
    "architectures": ["Qwen3MoeForCausalLM"],
    "hidden_act": "silu",
    "hidden_size": 4096,
    "intermediate_size": 12288,  # the dense MLP size: must not be taken for the experts'
    "moe_intermediate_size": 1536,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "num_hidden_layers": 94,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
}
DEEPSEEK_V3_CONFIG = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "hidden_act": "silu",
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "num_hidden_layers": 61,
    "first_k_dense_replace": 3,
    "moe_layer_freq": 1,
}


def test_catalog_names():
    for name in ("qwen3-235b-a22b", "qwen3-30b-a3b", "deepseek-v3", "deepseek-v2-lite"):
        assert name in CATALOG
    for name, spec in CATALOG.items():
        assert name == spec.name == name.lower()


def test_qwen3_235b_tp4():
    shape = layer_shape("qwen3-235b-a22b", 4)
    assert shape.w13_shape == (128, 768, 4096)
    assert shape.w2_shape == (128, 4096, 384)
    assert shape.w13_bytes == 768 * MiB and shape.w2_bytes == 384 * MiB
    assert shape.w13_expert_bytes == 6 * MiB and shape.w2_expert_bytes == 3 * MiB
    assert shape.layer_bytes == 1152 * MiB
    assert shape.moe_layers == 94
    assert shape.model_bytes == int(105.75 * GiB)
    assert shape.valid and shape.invalid_reason is None
    assert shape.label == "qwen3-235b-a22b/tp4"


@pytest.mark.parametrize(
    "model, tp, w13, w2, moe_layers",
    [
        ("qwen3-235b-a22b", 1, (128, 3072, 4096), (128, 4096, 1536), 94),
        ("qwen3-30b-a3b", 2, (128, 768, 2048), (128, 2048, 384), 48),
        ("deepseek-v3", 2, (256, 2048, 7168), (256, 7168, 1024), 58),
        ("deepseek-v3", 4, (256, 1024, 7168), (256, 7168, 512), 58),
        ("deepseek-v2-lite", 1, (64, 2816, 2048), (64, 2048, 1408), 26),
    ],
)
def test_per_rank_shapes(model, tp, w13, w2, moe_layers):
    shape = layer_shape(model, tp)
    assert (shape.w13_shape, shape.w2_shape, shape.moe_layers) == (w13, w2, moe_layers)
    assert shape.w13_bytes == 2 * torch.Size(w13).numel()
    assert shape.layer_bytes == 2 * (torch.Size(w13).numel() + torch.Size(w2).numel())


def test_every_combination_listed_invalid_ones_with_reason():
    shapes = catalog_shapes()
    assert [(s.model, s.tp) for s in shapes] == [
        (m, tp) for m, spec in CATALOG.items() for tp in spec.tp_sizes
    ]
    bf16 = catalog_shapes("bf16")
    assert [(s.model, s.tp) for s in bf16] == [
        (m, tp) for m, spec in CATALOG.items() if spec.format == "bf16" for tp in TP_SIZES
    ]
    for shape in bf16:
        if shape.intermediate % 128:
            assert not shape.valid
            assert str(shape.intermediate) in shape.invalid_reason and "128" in shape.invalid_reason
        else:
            assert shape.valid, shape.invalid_reason


@pytest.mark.parametrize(
    "model, tp, inter", [("qwen3-235b-a22b", 8, 192), ("deepseek-v2-lite", 2, 704)]
)
def test_invalid_combination_reason(model, tp, inter):
    shape = layer_shape(model, tp)
    assert not shape.valid
    assert f"I/TP = {inter}" in shape.invalid_reason and "multiple of 128" in shape.invalid_reason


@pytest.mark.parametrize("shape", [s for s in catalog_shapes() if s.valid], ids=lambda s: s.label)
def test_valid_catalog_shapes_pass_the_input_checks(shape):
    """Every format's: a meta layer of the shape passes its format's check (BF16's is
    ``check_weights``)."""
    shape.fmt.check(layer_tensors(shape, "meta"), shape.fmt, shape.gated)
    if shape.format == "bf16":

        def meta(dims):
            return torch.empty(dims, dtype=torch.bfloat16, device="meta")

        check_weights(meta(shape.w13_shape), meta(shape.w2_shape), gated=shape.gated)


def test_unknown_model_and_bad_tp():
    with pytest.raises(ValueError, match="unknown model 'qwen3-235b'.*qwen3-235b-a22b"):
        layer_shape("qwen3-235b", 4)
    with pytest.raises(
        ValueError, match="tp must be a positive integer, got 0; valid TPs: 1, 2, 3, 4, 6, 12"
    ):
        layer_shape("qwen3-30b-a3b", 0)
    with pytest.raises(ValueError, match="tp 5 does not divide moe_intermediate_size 768"):
        layer_shape("qwen3-30b-a3b", 5)


@pytest.mark.parametrize(
    "model, tp_sizes, kernel",
    [
        ("qwen3-235b-a22b", (1, 2, 3, 4, 6, 8, 12, 24), "1, 2, 3, 4, 6, 12"),  # I = 1536 = 24 x 64
        ("deepseek-v2-lite", (1, 2, 11, 22), "1, 11"),  # I = 1408 = 22 x 64
    ],
)
def test_valid_tp_sizes_are_those_that_convert(model, tp_sizes, kernel):
    spec = CATALOG[model]
    assert spec.valid_tp_sizes == tp_sizes
    assert f"the SM100 kernel runs {kernel} without padding" in spec.tp_sizes_text
    for tp in tp_sizes:
        assert spec.shape(tp).conversion_error is None
    assert "multiple of 64" in spec.shape(2 * tp_sizes[-1]).conversion_error


@pytest.mark.parametrize("tp, inter", [(16, 128), (32, 64)])
def test_mxint4_shape_vllm_refuses_is_not_padded_and_says_why(tp, inter):
    """vLLM pads nothing on its MXINT4 path and FlashInfer asserts whole 128-byte blocks a row:
    Kimi-K2-Thinking at TP16 and TP32 is refused there, with that reason, not padded to 256."""
    spec = CATALOG["kimi-k2-thinking-mxint4"]
    shape = spec.shape(tp)
    assert (shape.hidden, shape.intermediate) == (7168, inter)
    error = shape.conversion_error
    assert f"I per rank = {inter} is {inter // 2} bytes per row" in error
    assert '"K must be divisible by blockK"' in error and "multiples of 256" in error
    assert "pad" not in error.split("Fix:")[1]  # vLLM pads nothing: no padding to suggest
    assert spec.valid_tp_sizes == (1, 2, 4, 8) and set(spec.tp_sizes) <= {1, 2, 4, 8}


def test_shape_from_label_is_the_inverse_of_label():
    for shape in catalog_shapes():
        assert shape_from_label(shape.label) == shape


@pytest.mark.parametrize(
    "label, message",
    [
        ("qwen3-30b-a3b", "'qwen3-30b-a3b' is not model/tpN"),
        ("qwen3-30b-a3b/tp", "'qwen3-30b-a3b/tp' is not model/tpN"),
        ("qwen3-30b-a3b/tpx", "'qwen3-30b-a3b/tpx' is not model/tpN"),
        ("/tp4", "'/tp4' is not model/tpN"),
        ("qwen3-235b/tp4", "unknown model 'qwen3-235b'"),
        ("qwen3-30b-a3b/tp5", "tp 5 does not divide"),
    ],
)
def test_shape_from_bad_label(label, message):
    with pytest.raises(ValueError, match=message):
        shape_from_label(label)


def test_with_experts_keeps_geometry():
    shape = layer_shape("deepseek-v3", 4).with_experts(2)
    assert shape.w13_shape == (2, 1024, 7168) and shape.w2_shape == (2, 7168, 512)
    assert shape.moe_layers == 58 and shape.label == "deepseek-v3/tp4"


def test_bf16_is_a_format_like_the_quantized_ones():
    bf16, nvfp4 = layer_shape("qwen3-235b-a22b", 4), layer_shape("qwen3-235b-a22b-nvfp4", 4)
    assert type(bf16) is type(nvfp4) is LayerShape and list(FORMATS)[:2] == ["bf16", "nvfp4"]
    assert bf16.fmt is FORMATS["bf16"] and nvfp4.fmt is FORMATS["nvfp4"]
    # BF16's layer holds w13 and w2 and nothing else; NVFP4's its block scales too
    assert bf16.tensor_specs == {
        "w13": ((128, 768, 4096), torch.bfloat16),
        "w2": ((128, 4096, 384), torch.bfloat16),
    }
    assert list(nvfp4.tensor_specs) == ["w13", "w2", "w13_scale", "w2_scale"]
    assert bf16.layer_bytes == bf16.w13_bytes + bf16.w2_bytes and bf16.w13_scale_bytes == 0
    # one e4m3 scale byte per 16 e2m1 elements, 8 bytes of them
    assert nvfp4.w13_scale_bytes == nvfp4.w13_bytes // 8 == 2 * nvfp4.w2_scale_bytes
    # the same numbers, either format: the kernel's alignment is BF16's record's alone
    explicit = LayerShape("x", 1, 2, 256, 192, 1, format="nvfp4")
    assert explicit.valid and not LayerShape("x", 1, 2, 256, 192, 1).valid
    with pytest.raises(ValueError, match="unknown format 'fp3'; formats: bf16, nvfp4, mxfp4"):
        LayerShape("x", 1, 2, 256, 128, 1, format="fp3")


def test_shape_from_qwen3_moe_config(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(QWEN3_235B_CONFIG))
    shape = shape_from_hf_config(path, 4)
    assert shape.w13_shape == (128, 768, 4096) and shape.w2_shape == (128, 4096, 384)
    assert shape.moe_layers == 94 and shape.gated
    assert shape.model == "qwen/qwen3-235b-a22b"
    assert shape.model_bytes == layer_shape("qwen3-235b-a22b", 4).model_bytes
    assert shape_from_hf_config(tmp_path, 4) == shape  # a folder holding config.json works too


def test_shape_from_qwen3_moe_config_with_dense_layers(tmp_path):
    config = dict(QWEN3_235B_CONFIG, mlp_only_layers=[0, 1], decoder_sparse_step=2)
    (tmp_path / "config.json").write_text(json.dumps(config))
    # sparse: layers i with (i + 1) % 2 == 0 (47 of 94), less layer 1 (MLP only)
    assert shape_from_hf_config(tmp_path, 1).moe_layers == 46


def test_shape_from_deepseek_v3_config(tmp_path):
    model_dir = tmp_path / "DeepSeek-V3"
    model_dir.mkdir()
    (model_dir / "config.json").write_text(json.dumps(DEEPSEEK_V3_CONFIG))
    shape = shape_from_hf_config(model_dir, 2)
    assert shape.moe_layers == 58  # first_k_dense_replace = 3 of 61 layers are dense
    assert shape.w13_shape == (256, 2048, 7168) and shape.w2_shape == (256, 7168, 1024)
    assert shape.model == "deepseek-v3"  # no _name_or_path: the folder's name
    assert shape == layer_shape("deepseek-v3", 2)


def test_shape_from_non_moe_config(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(
        json.dumps({"hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32})
    )
    with pytest.raises(ValueError, match="not an MoE model: none of n_routed_experts"):
        shape_from_hf_config(path, 1)


def test_config_null_mlp_only_layers_means_none(tmp_path):
    # transformers' Qwen3MoeConfig reads null as [] (every layer sparse)
    (tmp_path / "config.json").write_text(json.dumps(dict(QWEN3_235B_CONFIG, mlp_only_layers=None)))
    assert shape_from_hf_config(tmp_path, 4).moe_layers == 94


def test_config_errors_name_the_file_and_the_key(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(dict(QWEN3_235B_CONFIG, moe_intermediate_size=-5)))
    with pytest.raises(
        ValueError, match=f"{path}: `moe_intermediate_size` must be a positive integer, got -5"
    ):
        spec_from_hf_config(path)
