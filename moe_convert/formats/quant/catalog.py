"""The quantized catalog: public checkpoints' MoE geometry per format, and their per-rank
layer shapes (``formats.shape.LayerShape``) as vLLM pads them.

Each entry names the ``config.json`` fields it was read from (``QuantModelSpec.source``) and the
TPs the suite measures it at. Labels are ``model/tpN`` (``kimi-k2-nvfp4/tp8``), the model name
carrying the format.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..records import format_record
from ..shape import LayerShape

__all__ = [
    "QUANT_CATALOG",
    "QuantModelSpec",
    "quant_catalog_shapes",
    "quant_layer_shape",
    "quant_shape_from_label",
    "shape_format",
]


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


@dataclass(frozen=True)
class QuantModelSpec:
    """One quantized checkpoint's MoE geometry, from its public ``config.json``.

    ``source`` names the fields read. ``hidden`` and ``intermediate`` are the model's own; the
    per-rank shape pads them as vLLM does for the format (``shape``).
    """

    name: str  # lower case, with the format: "kimi-k2-nvfp4"
    hf_id: str
    format: str
    moe_layers: int
    experts: int
    hidden: int
    intermediate: int  # the experts' intermediate size, before tensor parallelism
    tp_sizes: tuple[int, ...]  # the TPs the catalog lists (the deployments)
    source: str

    @property
    def tp_sizes_text(self) -> str:
        """``catalog TPs: ...``, for error messages (as ``ModelSpec.tp_sizes_text``)."""
        return f"catalog TPs: {', '.join(map(str, self.tp_sizes))}"

    def shape(self, tp: int) -> LayerShape:
        """The gated per-rank shape at ``tp``: I split over the ranks, then H and I padded.

        ``ValueError`` naming the valid TPs unless ``tp`` is a positive divisor of I.
        """
        if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1 or self.intermediate % tp:
            raise ValueError(
                f"{self.name}: tp must be a positive divisor of the intermediate size "
                f"{self.intermediate}, got {tp!r}; {self.tp_sizes_text}"
            )
        fmt = format_record(self.format)
        return LayerShape(
            self.name,
            tp,
            self.experts,
            _round_up(self.hidden, fmt.hidden_align),
            _round_up(self.intermediate // tp, fmt.intermediate_alignment(True)),
            self.moe_layers,
            format=self.format,
        )


QUANT_CATALOG: dict[str, QuantModelSpec] = {
    spec.name: spec
    for spec in (
        QuantModelSpec(
            "kimi-k2-nvfp4",
            "nvidia/Kimi-K2-Thinking-NVFP4",
            "nvfp4",
            60,
            384,
            7168,
            2048,
            (8,),
            "n_routed_experts 384, hidden_size 7168, moe_intermediate_size 2048, "
            "num_hidden_layers 61, first_k_dense_replace 1",
        ),
        QuantModelSpec(
            "deepseek-r1-nvfp4",
            "nvidia/DeepSeek-R1-0528-FP4",
            "nvfp4",
            58,
            256,
            7168,
            2048,
            (4,),
            "n_routed_experts 256, hidden_size 7168, moe_intermediate_size 2048, "
            "num_hidden_layers 61, first_k_dense_replace 3",
        ),
        QuantModelSpec(
            "qwen3-235b-a22b-nvfp4",
            "nvidia/Qwen3-235B-A22B-FP4",
            "nvfp4",
            94,
            128,
            4096,
            1536,
            (4,),
            "num_experts 128, hidden_size 4096, moe_intermediate_size 1536, "
            "num_hidden_layers 94, decoder_sparse_step 1",
        ),
        QuantModelSpec(
            "gpt-oss-120b-mxfp4",
            "openai/gpt-oss-120b",
            "mxfp4",
            36,
            128,
            2880,
            2880,
            (1, 2),
            "num_local_experts 128, hidden_size 2880, intermediate_size 2880, "
            "num_hidden_layers 36 (every layer MoE)",
        ),
        QuantModelSpec(
            "gpt-oss-20b-mxfp4",
            "openai/gpt-oss-20b",
            "mxfp4",
            24,
            32,
            2880,
            2880,
            (1,),
            "num_local_experts 32, hidden_size 2880, intermediate_size 2880, "
            "num_hidden_layers 24 (every layer MoE)",
        ),
        QuantModelSpec(
            "llama-4-maverick-fp8",
            "meta-llama/Llama-4-Maverick-17B-128E-Instruct-FP8",
            "fp8",
            24,
            128,
            5120,
            8192,
            (8,),
            "text_config: num_local_experts 128, hidden_size 5120, intermediate_size 8192, "
            "num_hidden_layers 48, interleave_moe_layer_step 2",
        ),
        QuantModelSpec(
            "deepseek-r1-fp8block",
            "deepseek-ai/DeepSeek-R1-0528",
            "fp8block",
            58,
            256,
            7168,
            2048,
            (8,),
            "n_routed_experts 256, hidden_size 7168, moe_intermediate_size 2048, "
            "num_hidden_layers 61, first_k_dense_replace 3; quantization_config "
            "weight_block_size [128, 128]",
        ),
        QuantModelSpec(
            "minimax-m3-mxfp8",
            "MiniMaxAI/MiniMax-M3-MXFP8",
            "mxfp8",
            57,
            128,
            6144,
            3072,
            (4,),
            "text_config: num_local_experts 128, hidden_size 6144, intermediate_size 3072, "
            "num_hidden_layers 60, the first 3 dense; quantization_config quant_method mxfp8, "
            "weight_block_size [1, 32]",
        ),
        QuantModelSpec(
            "kimi-k2-thinking-mxint4",
            "moonshotai/Kimi-K2-Thinking",
            "mxint4",
            60,
            384,
            7168,
            2048,
            (4, 8),
            "n_routed_experts 384, hidden_size 7168, moe_intermediate_size 2048, "
            "num_hidden_layers 61, first_k_dense_replace 1 (as kimi-k2-nvfp4, NVIDIA's NVFP4 of "
            "this checkpoint); quantization_config compressed-tensors pack-quantized, int4 "
            "symmetric, group_size 32 (secondary sources, docs/formats.md)",
        ),
    )
}


def quant_layer_shape(model: str, tp: int) -> LayerShape:
    """The per-rank layer shape of quantized catalog ``model`` (exact name) at ``tp``."""
    try:
        spec = QUANT_CATALOG[model]
    except KeyError:
        raise ValueError(
            f"unknown quantized model {model!r}; catalog: {', '.join(QUANT_CATALOG)}"
        ) from None
    return spec.shape(tp)


def quant_shape_from_label(label: str) -> LayerShape:
    """The per-rank layer shape of ``label``, ``model/tpN`` (``LayerShape.label``'s
    inverse); ``ValueError`` naming the label unless it is a quantized catalog model at a valid
    TP (``quant_layer_shape``)."""
    model, slash_tp, tp = label.rpartition("/tp")
    if not slash_tp or not tp.isdigit():
        raise ValueError(f"shape label {label!r} is not model/tpN (e.g. kimi-k2-nvfp4/tp8)")
    return quant_layer_shape(model, int(tp))


def shape_format(label: str) -> str:
    """The format of the suite's shape ``label`` (``model/tpN``): its quantized catalog entry's,
    or ``bf16`` for a model of the BF16 catalog (any other name)."""
    spec = QUANT_CATALOG.get(label.rpartition("/tp")[0])
    return "bf16" if spec is None else spec.format


def quant_catalog_shapes() -> list[LayerShape]:
    """Every quantized catalog model at each of its listed TPs."""
    return [spec.shape(tp) for spec in QUANT_CATALOG.values() for tp in spec.tp_sizes]
