"""The model-shape catalog: per-rank MoE weight shapes of real models at each tensor-parallel size.

Legend: E routed experts, H hidden size, I moe_intermediate_size per rank (= I_model / TP).
Per rank and MoE layer: w13 bf16 ``[E, 2I, H]`` (``[E, I, H]`` not gated), w2 bf16 ``[E, H, I]``.
Shared experts are not part of the fused-MoE weights and are left out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "BF16_BYTES",
    "CATALOG",
    "TP_SIZES",
    "KERNEL_INTERMEDIATE_ALIGN",
    "LayerShape",
    "ModelSpec",
    "catalog_shapes",
    "layer_shape",
    "shape_from_hf_config",
]

BF16_BYTES = 2
TP_SIZES = (1, 2, 4, 8)
# FlashInfer Bf16MoeLauncher::check_moe: intermediate_size % 128 == 0 per rank.
KERNEL_INTERMEDIATE_ALIGN = 128


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


@dataclass(frozen=True)
class LayerShape:
    """One MoE layer's weights on one tensor-parallel rank. Sizes derived, in bytes."""

    model: str
    tp: int
    experts: int  # E
    hidden: int  # H
    intermediate: int  # I per rank
    moe_layers: int
    gated: bool = True

    @property
    def label(self) -> str:
        """``model/tpN``, the name used in benchmark parameters."""
        return f"{self.model}/tp{self.tp}"

    @property
    def w13_shape(self) -> tuple[int, int, int]:
        rows = 2 * self.intermediate if self.gated else self.intermediate
        return (self.experts, rows, self.hidden)

    @property
    def w2_shape(self) -> tuple[int, int, int]:
        return (self.experts, self.hidden, self.intermediate)

    @property
    def w13_expert_bytes(self) -> int:
        """S13: one expert of w13."""
        return self.w13_shape[1] * self.hidden * BF16_BYTES

    @property
    def w2_expert_bytes(self) -> int:
        """S2: one expert of w2."""
        return self.hidden * self.intermediate * BF16_BYTES

    @property
    def w13_bytes(self) -> int:
        """T13: the whole w13 tensor."""
        return self.experts * self.w13_expert_bytes

    @property
    def w2_bytes(self) -> int:
        """T2: the whole w2 tensor."""
        return self.experts * self.w2_expert_bytes

    @property
    def layer_bytes(self) -> int:
        return self.w13_bytes + self.w2_bytes

    @property
    def model_bytes(self) -> int:
        """MoE expert bytes of the whole model on this rank."""
        return self.layer_bytes * self.moe_layers

    @property
    def invalid_reason(self) -> str | None:
        """Why FlashInfer's BF16 TRTLLM kernel cannot take this shape, or ``None``."""
        if self.intermediate % KERNEL_INTERMEDIATE_ALIGN:
            return (
                f"I/TP = {self.intermediate} is not a multiple of {KERNEL_INTERMEDIATE_ALIGN} "
                "(Bf16MoeLauncher::check_moe; vLLM pads it up)"
            )
        if self.hidden % KERNEL_INTERMEDIATE_ALIGN:
            return f"hidden {self.hidden} is not a multiple of {KERNEL_INTERMEDIATE_ALIGN}"
        return None

    @property
    def valid(self) -> bool:
        return self.invalid_reason is None

    def with_experts(self, experts: int) -> LayerShape:
        """The same per-expert geometry with fewer (or more) experts."""
        return LayerShape(self.model, self.tp, experts, self.hidden, self.intermediate,
                          self.moe_layers, self.gated)


def _split(spec_name: str, intermediate: int, tp: int) -> int:
    if intermediate % tp:
        raise ValueError(
            f"{spec_name}: moe_intermediate_size {intermediate} does not split over TP {tp}"
        )
    return intermediate // tp


def layer_shape(model: str, tp: int) -> LayerShape:
    """The per-rank layer shape of catalog ``model`` (exact lower-case name) at ``tp``.

    Invalid combinations are returned too: check ``valid`` / ``invalid_reason``.
    """
    try:
        spec = CATALOG[model]
    except KeyError:
        raise ValueError(
            f"unknown model {model!r}; catalog models: {', '.join(CATALOG)} "
            "(or give a config.json path)"
        ) from None
    if tp < 1:
        raise ValueError(f"tp must be >= 1, got {tp}")
    return LayerShape(spec.name, tp, spec.experts, spec.hidden,
                      _split(spec.name, spec.intermediate, tp), spec.moe_layers, spec.gated)


def catalog_shapes(tp_sizes: tuple[int, ...] = TP_SIZES) -> list[LayerShape]:
    """Every catalog model at every TP size, valid or not (check ``invalid_reason``)."""
    return [layer_shape(name, tp) for name in CATALOG for tp in tp_sizes]


def shape_from_hf_config(path: str | Path, tp: int) -> LayerShape:
    """A layer shape from a local Hugging Face ``config.json`` (file or folder) and a TP size.

    Reads Qwen3-MoE, DeepSeek-V2/V3 and Mixtral style keys; no hub access.
    """
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    config = json.loads(path.read_text())
    experts = config.get("n_routed_experts") or config.get("num_experts") or config.get("num_local_experts")
    hidden = config.get("hidden_size")
    intermediate = config.get("moe_intermediate_size") or config.get("intermediate_size")
    layers = config.get("num_hidden_layers")
    if not all((experts, hidden, intermediate, layers)):
        raise ValueError(
            f"{path}: not an MoE config I can read (need hidden_size, num_hidden_layers, "
            "moe_intermediate_size or intermediate_size, and n_routed_experts, num_experts or "
            "num_local_experts)"
        )
    if "first_k_dense_replace" in config:  # DeepSeek: dense first layers, then every freq-th
        freq = config.get("moe_layer_freq", 1)
        moe_layers = sum(1 for i in range(config["first_k_dense_replace"], layers) if i % freq == 0)
    else:  # Qwen3-MoE: every decoder_sparse_step-th layer not listed in mlp_only_layers
        step = config.get("decoder_sparse_step", 1)
        dense = set(config.get("mlp_only_layers", []))
        moe_layers = sum(1 for i in range(layers) if i not in dense and (i + 1) % step == 0)
    gated = config.get("hidden_act", "silu") in ("silu", "swiglu")
    name = config.get("_name_or_path") or path.parent.name
    return LayerShape(str(name).lower(), tp, experts, hidden, _split(str(name), intermediate, tp),
                      moe_layers, gated)
