"""The BF16 model-shape catalog: per-rank MoE weight shapes of real models at each tensor-parallel
size, as ``formats.shape.LayerShape``s of format ``bf16``.

Legend: E routed experts, H hidden size, I moe_intermediate_size per rank (= I_model / TP).
Per rank and MoE layer: w13 bf16 ``[E, 2I, H]`` (``[E, I, H]`` not gated), w2 bf16 ``[E, H, I]``.
Shared experts are not part of the fused-MoE weights and are left out.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from ..shape import LayerShape

__all__ = [
    "CATALOG",
    "TP_SIZES",
    "MAX_SIZE",
    "ModelSpec",
    "catalog_shapes",
    "layer_shape",
    "shape_from_hf_config",
    "shape_from_label",
    "spec_from_hf_config",
]

TP_SIZES = (1, 2, 4, 8)
# The largest E, H, I or layer count accepted from a user: far above any model (DeepSeek-V3: H =
# 7168, E = 256), and it keeps E x 2I x H within int64 for the meta tensors of the checks.
MAX_SIZE = 2**20


@dataclass(frozen=True)
class ModelSpec:
    """One model's MoE geometry, from its public ``config.json``."""

    name: str  # lower case, as typed on the command line
    hf_id: str
    layers: int
    moe_layers: int
    experts: int
    hidden: int
    intermediate: int  # moe_intermediate_size, before tensor parallelism
    gated: bool = True  # SiLU-gated (SwiGLU) experts

    def shape(self, tp: int) -> LayerShape:
        """The per-rank layer shape at tensor-parallel size ``tp`` (I split over the ranks).

        Raises ``ValueError`` naming the valid TPs unless ``tp >= 1`` divides the intermediate
        size. A shape that divides but cannot be converted is returned: see
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
        return LayerShape(
            self.name,
            tp,
            self.experts,
            self.hidden,
            self.intermediate // tp,
            self.moe_layers,
            self.gated,
        )

    @property
    def tp_sizes(self) -> tuple[int, ...]:
        """Every TP whose per-rank shape can be converted (``conversion_error`` is None)."""
        divisors = (tp for tp in range(1, self.intermediate + 1) if self.intermediate % tp == 0)
        return tuple(tp for tp in divisors if self.shape(tp).conversion_error is None)

    @property
    def tp_sizes_text(self) -> str:
        """``valid TPs: ...``, and those the kernel runs unpadded, for error messages."""
        valid = self.tp_sizes
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
        ModelSpec("qwen3-235b-a22b", "Qwen/Qwen3-235B-A22B", 94, 94, 128, 4096, 1536),
        ModelSpec("qwen3-30b-a3b", "Qwen/Qwen3-30B-A3B", 48, 48, 128, 2048, 768),
        # DeepSeek-R1 has the same shapes; the first 3 layers are dense.
        ModelSpec("deepseek-v3", "deepseek-ai/DeepSeek-V3", 61, 58, 256, 7168, 2048),
        ModelSpec("deepseek-v2", "deepseek-ai/DeepSeek-V2", 60, 59, 160, 5120, 1536),
        ModelSpec("deepseek-v2-lite", "deepseek-ai/DeepSeek-V2-Lite", 27, 26, 64, 2048, 1408),
        ModelSpec("mixtral-8x7b", "mistralai/Mixtral-8x7B-v0.1", 32, 32, 8, 4096, 14336),
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


def layer_shape(model: str, tp: int) -> LayerShape:
    """The per-rank layer shape of catalog ``model`` (exact lower-case name) at ``tp``.

    Combinations the kernel cannot run, or that cannot be converted, are returned too: check
    ``valid`` / ``conversion_error``. Raises ``ValueError`` for an unknown model or a ``tp``
    that does not divide the model's intermediate size.
    """
    return _catalog_spec(model).shape(tp)


def shape_from_label(label: str) -> LayerShape:
    """The per-rank layer shape of ``label``, ``model/tpN`` (``LayerShape.label``'s inverse).

    Raises ``ValueError`` naming the label unless it is a catalog model, ``/tp`` and a TP that
    divides its intermediate size (``layer_shape``).
    """
    match = re.fullmatch(r"(.+)/tp([0-9]+)", label)
    if match is None:
        raise ValueError(f"shape label {label!r} is not model/tpN (e.g. qwen3-235b-a22b/tp4)")
    return layer_shape(match[1], int(match[2]))


def catalog_shapes(tp_sizes: tuple[int, ...] = TP_SIZES) -> list[LayerShape]:
    """Every catalog model at every TP size, valid or not (check ``invalid_reason``)."""
    return [layer_shape(name, tp) for name in CATALOG for tp in tp_sizes]


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


def spec_from_hf_config(path: str | Path) -> ModelSpec:
    """The MoE geometry of a local Hugging Face ``config.json`` (file or folder); no hub access.

    Reads Qwen3-MoE, DeepSeek-V2/V3 and Mixtral style keys. Raises ``ValueError`` naming the
    file and the key for a file that is missing, not JSON, not an MoE model, or holds a
    missing, non-integer or non-positive size.
    """
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
        layers,
        moe_layers,
        experts,
        hidden,
        intermediate,
        gated=act in ("silu", "swiglu"),
    )


def shape_from_hf_config(path: str | Path, tp: int) -> LayerShape:
    """A layer shape from a local Hugging Face ``config.json`` (file or folder) and a TP size:
    ``spec_from_hf_config(path).shape(tp)``."""
    return spec_from_hf_config(path).shape(tp)
