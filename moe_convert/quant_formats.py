"""The quantized formats of the TRTLLM-gen MoE and their layer shapes: NVFP4, MXFP4, FP8
per-tensor, DeepSeek block-FP8, MXFP8.

Legend: E experts, H hidden, I intermediate per rank, M13 rows of w13 (2I gated, I not), epb
elements per stored byte (2: two e2m1 per byte; 1: fp8), V elements per scale factor along a
row, R rows per scale factor (1, but 128 for block-FP8's 128x128 blocks).

Per rank and MoE layer, as the checkpoint loader hands them to the conversion:

- weights ``[E, M13, H/epb]`` and ``[E, H, I/epb]`` (packed bytes per row ``H/epb``, ``I/epb``);
- block scale factors (NVFP4, MXFP4, MXFP8), one per V elements: ``[E, M13, H/V]`` and
  ``[E, H, I/V]``;
  block-FP8's float32 one per 128x128 block: ``[E, M13/128, H/128]`` and ``[E, H/128, I/128]``;
- biases (MXFP4, gpt-oss): bf16 ``[E, M13]`` and ``[E, H]``, made float32 by the conversion.

FP8 (``fp8``) is per-tensor FP8: its scales are one float per expert, never relaid, so a layer of
it is its weights alone. Block-FP8 (``fp8block``, DeepSeek's checkpoints) has one float32 scale
per 128x128 block, which the conversion reorders (a gated w13's halves swapped) and clamps.
MXFP8 (``mxfp8``: OCP microscaling, MiniMax-M3's checkpoint) is fp8 weights with one e8m0 scale
(uint8) per 32 elements of a row, relaid and swizzled as NVFP4's are.
The dimensions are the padded ones the conversion sees: vLLM rounds H and I per rank up to each
format's alignment first (``QuantFormat.hidden_align`` and ``intermediate_align``, from vLLM
0.33.0; see docs/formats.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

__all__ = [
    "FORMATS",
    "QUANT_CATALOG",
    "QuantFormat",
    "QuantLayerShape",
    "QuantModelSpec",
    "SHAPE_FORMATS",
    "format_title",
    "quant_catalog_shapes",
    "quant_layer_shape",
    "quant_shape_from_label",
    "shape_format",
]


@dataclass(frozen=True)
class QuantFormat:
    """What one quantized format stores per layer and how vLLM aligns it for TRTLLM-gen."""

    name: str
    weight_dtype: torch.dtype  # the stored weights' dtype (packed fp4: uint8)
    elements_per_byte: int  # epb: 2 for packed e2m1, 1 for fp8
    scale_dtype: torch.dtype | None  # the block scales' dtype; None: per-tensor scales only
    scale_block: int  # V, elements per scale factor (0: no block scales)
    has_bias: bool  # bf16 biases per row of w13 and w2 (gpt-oss)
    gated_only: bool  # the upstream path exists only for a gated activation
    hidden_align: int  # H is padded up to a multiple of this
    intermediate_align: int  # I per rank is padded up to a multiple of this (gated)
    # R, rows per scale factor: 1 for the 1-D blocks of a row (NVFP4, MXFP4), whose scales the
    # conversion relays and swizzles; 128 for block-FP8's 2-D 128x128 blocks, whose scales it
    # only reorders (vLLM's DeepSeek path: the kernel takes them linear).
    scale_block_rows: int = 1
    # The relaid 1-D block scales' dtype as vLLM returns them: NVFP4's and MXFP4's are viewed
    # float8_e4m3fn; MXFP8's stay the uint8 that block_scale_interleave returns for uint8.
    relaid_scale_dtype: torch.dtype = torch.float8_e4m3fn
    title: str = field(kw_only=True)  # how reports name it (a table's heading)

    def scale_shape(self, experts: int, rows: int, elements: int) -> tuple[int, int, int] | None:
        """The block scales of a weight ``[experts, rows, elements]`` (elements, not packed
        bytes): ``[experts, rows / R, elements / V]``; ``None`` without block scales."""
        if not self.scale_block:
            return None
        return (experts, rows // self.scale_block_rows, elements // self.scale_block)

    def scale_bytes(self, shape: tuple[int, int, int] | None) -> int:
        """Bytes of a scale tensor of ``shape`` (0 for ``None``)."""
        if shape is None:
            return 0
        return shape[0] * shape[1] * shape[2] * self.scale_dtype.itemsize


FORMATS: dict[str, QuantFormat] = {
    fmt.name: fmt
    for fmt in (
        # flashinfer_fp4_moe.py: trtllm_hidden_alignment=256; a gated intermediate to 64
        # (align_fp4_moe_weights_for_fi's min_alignment, so that 2I % 128 == 0).
        QuantFormat(
            "nvfp4", torch.uint8, 2, torch.float8_e4m3fn, 16, False, False, 256, 64, title="NVFP4"
        ),
        # oracle/mxfp4.py::mxfp4_round_up_hidden_size_and_intermediate_size, TRTLLM backends.
        QuantFormat("mxfp4", torch.uint8, 2, torch.uint8, 32, True, True, 256, 128, title="MXFP4"),
        # flashinfer_utils.py::prepare_fp8_moe_layer_for_fi: a gated min_alignment of 16.
        QuantFormat(
            "fp8", torch.float8_e4m3fn, 1, None, 0, False, False, 1, 16, title="FP8 per-tensor"
        ),
        # DeepSeek block-FP8 (weight_block_size [128, 128]): float32 scales per 128x128 block.
        # prepare_fp8_moe_layer_for_fi pads nothing for block quantization; oracle/fp8.py's
        # pad_tp_shard_to_weight_blocks rounds I per rank up to whole blocks for TRTLLM-gen,
        # and H must already be a multiple of 128 (it raises otherwise).
        QuantFormat(
            "fp8block",
            torch.float8_e4m3fn,
            1,
            torch.float32,
            128,
            False,
            False,
            1,
            128,
            128,
            title="DeepSeek block-FP8",
        ),
        # flashinfer_utils.py::prepare_fp8_moe_layer_for_fi, MXFP8 on TRTLLM-gen:
        # align_mxfp8_moe_weights_for_fi_trtllm pads I to 128 (gated or not) and H to 256.
        QuantFormat(
            "mxfp8",
            torch.float8_e4m3fn,
            1,
            torch.uint8,
            32,
            False,
            False,
            256,
            128,
            1,
            torch.uint8,
            title="MXFP8",
        ),
    )
}


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


@dataclass(frozen=True)
class QuantLayerShape:
    """One quantized MoE layer on one rank. Sizes derived, in bytes.

    The properties named as ``LayerShape``'s (``w13_bytes``, ``w13_expert_bytes``,
    ``w13_index_bytes``, ...) mean the same for the packed weights, so the letters of
    ``moe_convert.formulas`` (T13, S13, X13, ...) evaluate on either; F13, F2 (scale factors) and
    B13, B2 (float32 biases) are this shape's own.
    """

    model: str
    tp: int
    format: str  # a key of FORMATS
    experts: int  # E
    hidden: int  # H, padded
    intermediate: int  # I per rank, padded
    moe_layers: int
    gated: bool = True

    @property
    def fmt(self) -> QuantFormat:
        return FORMATS[self.format]

    @property
    def label(self) -> str:
        """``model/tpN``; the model name carries the format (``kimi-k2-nvfp4/tp8``)."""
        return f"{self.model}/tp{self.tp}"

    @property
    def rows13(self) -> int:
        """M13: rows of one w13 expert."""
        return 2 * self.intermediate if self.gated else self.intermediate

    @property
    def w13_shape(self) -> tuple[int, int, int]:
        return (self.experts, self.rows13, self.hidden // self.fmt.elements_per_byte)

    @property
    def w2_shape(self) -> tuple[int, int, int]:
        return (self.experts, self.hidden, self.intermediate // self.fmt.elements_per_byte)

    @property
    def w13_scale_shape(self) -> tuple[int, int, int] | None:
        return self.fmt.scale_shape(self.experts, self.rows13, self.hidden)

    @property
    def w2_scale_shape(self) -> tuple[int, int, int] | None:
        return self.fmt.scale_shape(self.experts, self.hidden, self.intermediate)

    @property
    def w13_bias_shape(self) -> tuple[int, int] | None:
        return (self.experts, self.rows13) if self.fmt.has_bias else None

    @property
    def w2_bias_shape(self) -> tuple[int, int] | None:
        return (self.experts, self.hidden) if self.fmt.has_bias else None

    @property
    def w13_expert_bytes(self) -> int:
        """S13: one expert of the w13 weights (one byte per stored element)."""
        return self.w13_shape[1] * self.w13_shape[2]

    @property
    def w2_expert_bytes(self) -> int:
        """S2: one expert of the w2 weights."""
        return self.w2_shape[1] * self.w2_shape[2]

    @property
    def w13_bytes(self) -> int:
        """T13: the whole w13 weight tensor."""
        return self.experts * self.w13_expert_bytes

    @property
    def w2_bytes(self) -> int:
        """T2: the whole w2 weight tensor."""
        return self.experts * self.w2_expert_bytes

    @property
    def w13_index_bytes(self) -> int:
        """X13: one int64 row index of w13."""
        return 8 * self.rows13

    @property
    def w2_index_bytes(self) -> int:
        """X2: one int64 row index of w2."""
        return 8 * self.hidden

    @property
    def w13_scale_bytes(self) -> int:
        """F13: the whole w13 scale-factor tensor (0 without block scales)."""
        return self.fmt.scale_bytes(self.w13_scale_shape)

    @property
    def w2_scale_bytes(self) -> int:
        """F2: the whole w2 scale-factor tensor."""
        return self.fmt.scale_bytes(self.w2_scale_shape)

    @property
    def w13_bias_bytes(self) -> int:
        """B13: the whole w13 bias as the kernel takes it (float32; 0 without biases)."""
        shape = self.w13_bias_shape
        return 4 * shape[0] * shape[1] if shape else 0

    @property
    def w2_bias_bytes(self) -> int:
        """B2: the whole w2 bias as the kernel takes it (float32)."""
        shape = self.w2_bias_shape
        return 4 * shape[0] * shape[1] if shape else 0

    @property
    def layer_bytes(self) -> int:
        """Everything one layer's conversion reads: weights, scales and (bf16) biases."""
        return (
            self.w13_bytes
            + self.w2_bytes
            + self.w13_scale_bytes
            + self.w2_scale_bytes
            + (self.w13_bias_bytes + self.w2_bias_bytes) // 2
        )

    def with_experts(self, experts: int) -> QuantLayerShape:
        """The same per-expert geometry with fewer (or more) experts."""
        return QuantLayerShape(
            self.model,
            self.tp,
            self.format,
            experts,
            self.hidden,
            self.intermediate,
            self.moe_layers,
            self.gated,
        )


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

    def shape(self, tp: int) -> QuantLayerShape:
        """The gated per-rank shape at ``tp``: I split over the ranks, then H and I padded.

        ``ValueError`` naming the valid TPs unless ``tp`` is a positive divisor of I.
        """
        if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1 or self.intermediate % tp:
            raise ValueError(
                f"{self.name}: tp must be a positive divisor of the intermediate size "
                f"{self.intermediate}, got {tp!r}; catalog TPs: "
                f"{', '.join(map(str, self.tp_sizes))}"
            )
        fmt = FORMATS[self.format]
        return QuantLayerShape(
            self.name,
            tp,
            self.format,
            self.experts,
            _round_up(self.hidden, fmt.hidden_align),
            _round_up(self.intermediate // tp, fmt.intermediate_align),
            self.moe_layers,
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
    )
}


def quant_layer_shape(model: str, tp: int) -> QuantLayerShape:
    """The per-rank layer shape of quantized catalog ``model`` (exact name) at ``tp``."""
    try:
        spec = QUANT_CATALOG[model]
    except KeyError:
        raise ValueError(
            f"unknown quantized model {model!r}; catalog: {', '.join(QUANT_CATALOG)}"
        ) from None
    return spec.shape(tp)


def quant_shape_from_label(label: str) -> QuantLayerShape:
    """The per-rank layer shape of ``label``, ``model/tpN`` (``QuantLayerShape.label``'s
    inverse); ``ValueError`` naming the label unless it is a quantized catalog model at a valid
    TP (``quant_layer_shape``)."""
    model, slash_tp, tp = label.rpartition("/tp")
    if not slash_tp or not tp.isdigit():
        raise ValueError(f"shape label {label!r} is not model/tpN (e.g. kimi-k2-nvfp4/tp8)")
    return quant_layer_shape(model, int(tp))


#: Every format a shape of the suite has, in the order reports show them: BF16 (``shapes``'
#: catalog), then ``FORMATS``.
SHAPE_FORMATS = ("bf16", *FORMATS)


def format_title(fmt: str) -> str:
    """How reports name ``fmt`` of ``SHAPE_FORMATS``: ``BF16``, or its ``QuantFormat.title``."""
    return "BF16" if fmt == "bf16" else FORMATS[fmt].title


def shape_format(label: str) -> str:
    """The format of the suite's shape ``label`` (``model/tpN``): its quantized catalog entry's,
    or ``bf16`` for a model of the BF16 catalog (any other name)."""
    spec = QUANT_CATALOG.get(label.rpartition("/tp")[0])
    return "bf16" if spec is None else spec.format


def quant_catalog_shapes() -> list[QuantLayerShape]:
    """Every quantized catalog model at each of its listed TPs."""
    return [spec.shape(tp) for spec in QUANT_CATALOG.values() for tp in spec.tp_sizes]
