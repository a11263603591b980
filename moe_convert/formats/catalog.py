"""The model-shape catalog of every format: public checkpoints' MoE geometry and their per-rank
layer shapes (``formats.shape.LayerShape``), padded as vLLM pads the format.

Legend: E routed experts, H hidden size, I moe_intermediate_size per rank (= I_model / TP,
rounded up to the format's alignment: ``Format.intermediate_alignment``; BF16's is 1, so its
shapes are the model's own, checked against the kernel's rule instead). Labels are ``model/tpN``,
and ``model/epN`` for a rank's share under expert parallelism (``ModelSpec.shape``: vLLM's rule);
a quantized model's name carries its format (``kimi-k2-nvfp4/tp8``). Shared experts are not
part of the fused-MoE weights and are left out. ``spec_from_hf_config`` reads a local
``config.json`` into a spec of any format.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from .records import format_record
from .shape import LayerShape

__all__ = [
    "CATALOG",
    "EP_SIZES",
    "TP_SIZES",
    "MAX_SIZE",
    "ModelSpec",
    "catalog_shapes",
    "layer_shape",
    "shape_from_hf_config",
    "shape_from_label",
    "spec_from_hf_config",
]

#: The TPs the catalog lists for a model unless its entry says otherwise (BF16's).
TP_SIZES = (1, 2, 4, 8)
#: The expert-parallel sizes a rank's refit is shown at (issue 38: EP 2 to 64), those of them
#: that divide a model's E (``ModelSpec.ep_sizes``).
EP_SIZES = (2, 4, 8, 16, 32, 64)
# The largest E, H, I or layer count accepted from a user: far above any model (DeepSeek-V3: H =
# 7168, E = 256), and it keeps E x 2I x H within int64 for the meta tensors of the checks.
MAX_SIZE = 2**20


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


@dataclass(frozen=True)
class ModelSpec:
    """One model's MoE geometry in one format, from its public ``config.json``.

    ``hidden`` and ``intermediate`` are the model's own; the per-rank shape pads them as vLLM
    does for the format (``shape``). ``source`` names the fields read, where the entry states
    them.
    """

    name: str  # lower case, as typed on the command line; a quantized one's carries its format
    hf_id: str
    moe_layers: int
    experts: int
    hidden: int
    intermediate: int  # the experts' intermediate size, before tensor parallelism
    gated: bool = True  # SiLU-gated (SwiGLU) experts
    format: str = "bf16"  # a key of records.FORMATS
    tp_sizes: tuple[int, ...] = TP_SIZES  # the TPs the catalog lists (the suite measures)
    source: str = ""  # the config.json fields read

    def shape(self, tp: int, ep: int = 1) -> LayerShape:
        """The per-rank layer shape at tensor-parallel size ``tp``: I split over the ranks, then
        H and I padded to the format's alignment; at expert-parallel size ``ep`` > 1, one rank's
        share of the experts instead, each whole.

        Expert parallelism as vLLM's ``FusedMoE`` shards it (``FusedMoEParallelConfig.make``,
        ``determine_expert_map``): with ``enable_expert_parallel`` the MoE layer's EP is TP x DP
        and its TP 1, so a rank holds whole experts (I not split); rank r holds E // EP experts,
        one more for the first E % EP ranks, a contiguous block by default (``linear``; the
        ``round_robin`` placement holds as many). The shape is rank 0's, the largest share:
        ``ceil(E / EP)`` experts.

        Raises ``ValueError`` naming the valid TPs unless ``tp >= 1`` divides the intermediate
        size, and naming the model, E and EP for an ``ep`` not from 1 to E or given with a
        ``tp`` > 1. A shape that divides but cannot be converted is returned: see
        ``LayerShape.conversion_error``.
        """
        if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
            raise ValueError(
                f"{self.name}: tp must be a positive integer, got {tp!r}; {self.tp_sizes_text}"
            )
        if self.intermediate % tp:
            raise ValueError(
                f"{self.name}: tp {tp} does not divide moe_intermediate_size "
                f"{self.intermediate}; {self.tp_sizes_text}"
            )
        if isinstance(ep, bool) or not isinstance(ep, int) or not 1 <= ep <= self.experts:
            raise ValueError(
                f"{self.name}: ep {ep!r} is not from 1 to its {self.experts} experts (E); "
                f"{self.ep_sizes_text}"
            )
        if ep > 1 and tp > 1:
            raise ValueError(
                f"{self.name}: tp {tp} with ep {ep}: under expert parallelism vLLM keeps each "
                f"expert whole on its rank (the MoE layer's TP is 1, its EP = TP x DP): give ep "
                f"{ep} alone"
            )
        fmt = format_record(self.format)
        return LayerShape(
            self.name,
            tp,
            -(-self.experts // ep),
            _round_up(self.hidden, fmt.hidden_align),
            _round_up(self.intermediate // tp, fmt.intermediate_alignment(self.gated)),
            self.moe_layers,
            self.gated,
            self.format,
            ep,
        )

    @property
    def ep_sizes(self) -> tuple[int, ...]:
        """The EPs of ``EP_SIZES`` that divide E: every rank holds E / EP experts."""
        return tuple(ep for ep in EP_SIZES if self.experts % ep == 0)

    @property
    def ep_sizes_text(self) -> str:
        """For error messages: the EPs that split E evenly, and vLLM's rule for the others."""
        return (
            f"EPs that divide E = {self.experts}: {', '.join(map(str, self.ep_sizes)) or 'none'} "
            f"of {', '.join(map(str, EP_SIZES))} (any other from 1 to E: rank 0 holds the "
            "most, ceil(E / EP), as vLLM places them)"
        )

    @property
    def valid_tp_sizes(self) -> tuple[int, ...]:
        """Every TP whose per-rank shape can be converted (``conversion_error`` is None)."""
        divisors = (tp for tp in range(1, self.intermediate + 1) if self.intermediate % tp == 0)
        return tuple(tp for tp in divisors if self.shape(tp).conversion_error is None)

    @property
    def tp_sizes_text(self) -> str:
        """For error messages: a format the catalog pads (every quantized one), the catalog's
        TPs; one it gives unpadded (BF16), the TPs that convert and those the kernel runs."""
        if format_record(self.format).kernel_align == 1:
            return f"catalog TPs: {', '.join(map(str, self.tp_sizes))}"
        valid = self.valid_tp_sizes
        if not valid:
            return f"no TP converts it: {self.shape(1).conversion_error}"
        kernel = [tp for tp in valid if self.shape(tp).valid]
        return (
            f"valid TPs: {', '.join(map(str, valid))} (the SM100 kernel runs "
            f"{', '.join(map(str, kernel)) or 'none'} without padding)"
        )


CATALOG: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec("qwen3-235b-a22b", "Qwen/Qwen3-235B-A22B", 94, 128, 4096, 1536),
        ModelSpec("qwen3-30b-a3b", "Qwen/Qwen3-30B-A3B", 48, 128, 2048, 768),
        # DeepSeek-R1 has the same shapes; the first 3 layers are dense.
        ModelSpec("deepseek-v3", "deepseek-ai/DeepSeek-V3", 58, 256, 7168, 2048),
        ModelSpec("deepseek-v2", "deepseek-ai/DeepSeek-V2", 59, 160, 5120, 1536),
        ModelSpec("deepseek-v2-lite", "deepseek-ai/DeepSeek-V2-Lite", 26, 64, 2048, 1408),
        ModelSpec("mixtral-8x7b", "mistralai/Mixtral-8x7B-v0.1", 32, 8, 4096, 14336),
        ModelSpec(
            "kimi-k2-nvfp4",
            "nvidia/Kimi-K2-Thinking-NVFP4",
            60,
            384,
            7168,
            2048,
            format="nvfp4",
            tp_sizes=(8,),
            source="n_routed_experts 384, hidden_size 7168, moe_intermediate_size 2048, "
            "num_hidden_layers 61, first_k_dense_replace 1",
        ),
        ModelSpec(
            "deepseek-r1-nvfp4",
            "nvidia/DeepSeek-R1-0528-FP4",
            58,
            256,
            7168,
            2048,
            format="nvfp4",
            tp_sizes=(4,),
            source="n_routed_experts 256, hidden_size 7168, moe_intermediate_size 2048, "
            "num_hidden_layers 61, first_k_dense_replace 3",
        ),
        ModelSpec(
            "qwen3-235b-a22b-nvfp4",
            "nvidia/Qwen3-235B-A22B-FP4",
            94,
            128,
            4096,
            1536,
            format="nvfp4",
            tp_sizes=(4,),
            source="num_experts 128, hidden_size 4096, moe_intermediate_size 1536, "
            "num_hidden_layers 94, decoder_sparse_step 1",
        ),
        ModelSpec(
            "gpt-oss-120b-mxfp4",
            "openai/gpt-oss-120b",
            36,
            128,
            2880,
            2880,
            format="mxfp4",
            tp_sizes=(1, 2),
            source="num_local_experts 128, hidden_size 2880, intermediate_size 2880, "
            "num_hidden_layers 36 (every layer MoE)",
        ),
        ModelSpec(
            "gpt-oss-20b-mxfp4",
            "openai/gpt-oss-20b",
            24,
            32,
            2880,
            2880,
            format="mxfp4",
            tp_sizes=(1,),
            source="num_local_experts 32, hidden_size 2880, intermediate_size 2880, "
            "num_hidden_layers 24 (every layer MoE)",
        ),
        ModelSpec(
            "llama-4-maverick-fp8",
            "meta-llama/Llama-4-Maverick-17B-128E-Instruct-FP8",
            24,
            128,
            5120,
            8192,
            format="fp8",
            tp_sizes=(8,),
            source="text_config: num_local_experts 128, hidden_size 5120, intermediate_size 8192, "
            "num_hidden_layers 48, interleave_moe_layer_step 2",
        ),
        ModelSpec(
            "deepseek-r1-fp8block",
            "deepseek-ai/DeepSeek-R1-0528",
            58,
            256,
            7168,
            2048,
            format="fp8block",
            tp_sizes=(8,),
            source="n_routed_experts 256, hidden_size 7168, moe_intermediate_size 2048, "
            "num_hidden_layers 61, first_k_dense_replace 3; quantization_config "
            "weight_block_size [128, 128]",
        ),
        ModelSpec(
            "minimax-m3-mxfp8",
            "MiniMaxAI/MiniMax-M3-MXFP8",
            57,
            128,
            6144,
            3072,
            format="mxfp8",
            tp_sizes=(4,),
            source="text_config: num_local_experts 128, hidden_size 6144, intermediate_size 3072, "
            "num_hidden_layers 60, the first 3 dense; quantization_config quant_method mxfp8, "
            "weight_block_size [1, 32]",
        ),
        ModelSpec(
            "kimi-k2-thinking-mxint4",
            "moonshotai/Kimi-K2-Thinking",
            60,
            384,
            7168,
            2048,
            format="mxint4",
            tp_sizes=(4, 8),
            source="n_routed_experts 384, hidden_size 7168, moe_intermediate_size 2048, "
            "num_hidden_layers 61, first_k_dense_replace 1 (as kimi-k2-nvfp4, NVIDIA's NVFP4 of "
            "this checkpoint); quantization_config compressed-tensors pack-quantized, int4 "
            "symmetric, group_size 32 (secondary sources, docs/formats.md)",
        ),
    )
}


def _catalog_spec(model: str) -> ModelSpec:
    try:
        return CATALOG[model]
    except KeyError:
        raise ValueError(
            f"unknown model {model!r}; catalog models: {', '.join(CATALOG)} "
            "(or give a config.json path)"
        ) from None


def layer_shape(model: str, tp: int, ep: int = 1) -> LayerShape:
    """The per-rank layer shape of catalog ``model`` (exact lower-case name) at ``tp``, or at
    expert-parallel size ``ep`` (``ModelSpec.shape``).

    Combinations the kernel cannot run, or that cannot be converted, are returned too: check
    ``valid`` / ``conversion_error``. Raises ``ValueError`` for an unknown model, a ``tp``
    that does not divide the model's intermediate size, or an ``ep`` it refuses.
    """
    return _catalog_spec(model).shape(tp, ep)


def shape_from_label(label: str) -> LayerShape:
    """The per-rank layer shape of ``label``, ``model/tpN`` or ``model/epN``
    (``LayerShape.label``'s inverse).

    Raises ``ValueError`` naming the label unless it is a catalog model, ``/tp`` or ``/ep`` and
    a size ``layer_shape`` takes.
    """
    match = re.fullmatch(r"(.+)/(tp|ep)([0-9]+)", label)
    if match is None:
        raise ValueError(
            f"shape label {label!r} is not model/tpN or model/epN (e.g. qwen3-235b-a22b/tp4)"
        )
    size = int(match[3])
    return layer_shape(match[1], size) if match[2] == "tp" else layer_shape(match[1], 1, size)


def catalog_shapes(fmt: str | None = None) -> list[LayerShape]:
    """Every catalog model of format ``fmt`` (``None``: of every format, in the catalog's order)
    at each of its listed TPs, valid or not (check ``invalid_reason``)."""
    return [
        spec.shape(tp)
        for spec in CATALOG.values()
        if fmt in (None, spec.format)
        for tp in spec.tp_sizes
    ]


# Keys of the expert count, in the order the model families use them (DeepSeek, Qwen3-MoE, Mixtral).
_EXPERT_KEYS = ("n_routed_experts", "num_experts", "num_local_experts")


class _Config:
    """A parsed ``config.json`` whose typed getters raise ``ValueError`` naming the file and key."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            text = path.read_text()
        except OSError as error:
            raise ValueError(f"{path}: cannot read it ({error.strerror or error})") from None
        try:
            self.data = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}: not valid JSON ({error})") from None
        except UnicodeDecodeError:
            raise ValueError(f"{path}: not valid JSON (not UTF-8 text)") from None
        if not isinstance(self.data, dict):
            raise ValueError(
                f"{path}: expected a JSON object of model settings, "
                f"got a JSON {type(self.data).__name__}"
            )

    def has(self, key: str) -> bool:
        """``key`` is present and not ``null`` (Hugging Face writes unset options as ``null``)."""
        return self.data.get(key) is not None

    def integer(self, key: str, *, minimum: int = 1, default: int | None = None) -> int:
        value = self.data.get(key)
        if value is None:
            if default is None:
                raise ValueError(f"{self.path}: `{key}` is missing")
            return default
        # bool is an int in Python; true/false is never a size
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            kind = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
            raise ValueError(f"{self.path}: `{key}` must be {kind}, got {json.dumps(value)}")
        if value > MAX_SIZE:
            raise ValueError(
                f"{self.path}: `{key}` is {value}, more than any model's; accepted up to {MAX_SIZE}"
            )
        return value


def spec_from_hf_config(path: str | Path, format: str = "bf16") -> ModelSpec:
    """The MoE geometry of a local Hugging Face ``config.json`` (file or folder) in ``format`` (a
    key of ``FORMATS``: its ``shape`` pads H and I as vLLM pads that format); no hub access.

    Reads Qwen3-MoE, DeepSeek-V2/V3 and Mixtral style keys. Raises ``ValueError`` naming the
    file and the key for a file that is missing, not JSON, not an MoE model, or holds a
    missing, non-integer or non-positive size; and naming the formats for an unknown ``format``.
    """
    format_record(format)
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    config = _Config(path)
    expert_key = next((key for key in _EXPERT_KEYS if config.has(key)), None)
    if expert_key is None:
        raise ValueError(f"{path}: not an MoE model: none of {', '.join(_EXPERT_KEYS)} is set")
    experts = config.integer(expert_key)
    hidden = config.integer("hidden_size")
    # Mixtral has no moe_intermediate_size: its only MLP size is the experts'
    intermediate = config.integer(
        "moe_intermediate_size" if config.has("moe_intermediate_size") else "intermediate_size"
    )
    layers = config.integer("num_hidden_layers")
    if config.has("first_k_dense_replace"):  # DeepSeek: dense first layers, then every freq-th
        first = config.integer("first_k_dense_replace", minimum=0)
        freq = config.integer("moe_layer_freq", default=1)
        moe_layers = sum(1 for i in range(first, layers) if i % freq == 0)
    else:  # Qwen3-MoE: every decoder_sparse_step-th layer not listed in mlp_only_layers
        step = config.integer("decoder_sparse_step", default=1)
        dense = config.data.get("mlp_only_layers") or []  # null: none, as in transformers
        if not isinstance(dense, list) or not all(isinstance(i, int) for i in dense):
            raise ValueError(
                f"{path}: `mlp_only_layers` must be a list of layer indices, "
                f"got {json.dumps(dense)}"
            )
        moe_layers = sum(1 for i in range(layers) if i not in dense and (i + 1) % step == 0)
    if moe_layers == 0:
        raise ValueError(
            f"{path}: no MoE layer among its {layers} layers (check "
            "first_k_dense_replace / moe_layer_freq or decoder_sparse_step / mlp_only_layers)"
        )
    act = config.data.get("hidden_act", "silu")
    name = config.data.get("_name_or_path")
    name = name if isinstance(name, str) and name else path.parent.name
    return ModelSpec(
        name.lower(),
        str(path),
        moe_layers,
        experts,
        hidden,
        intermediate,
        gated=act in ("silu", "swiglu"),
        format=format,
    )


def shape_from_hf_config(path: str | Path, tp: int, format: str = "bf16") -> LayerShape:
    """A layer shape from a local Hugging Face ``config.json`` (file or folder), a TP size and a
    format: ``spec_from_hf_config(path, format).shape(tp)``."""
    return spec_from_hf_config(path, format).shape(tp)
