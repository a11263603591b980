"""The quantized formats of the TRTLLM-gen MoE and their layer shapes: NVFP4, MXFP4, FP8
per-tensor, DeepSeek block-FP8, MXFP8, MXINT4.

Legend: E experts, H hidden, I intermediate per rank, M13 rows of w13 (2I gated, I not), epb
elements per stored byte (2: two e2m1 per byte; 1: fp8), V elements per scale factor along a
row, R rows per scale factor (1, but 128 for block-FP8's 128x128 blocks).

Per rank and MoE layer, as the checkpoint loader hands them to the conversion:

- weights ``[E, M13, H/epb]`` and ``[E, H, I/epb]`` (packed bytes per row ``H/epb``, ``I/epb``;
  MXINT4's int32 words: ``[E, M13, H/8]``, ``[E, H, I/8]``);
- block scale factors (NVFP4, MXFP4, MXFP8), one per V elements: ``[E, M13, H/V]`` and
  ``[E, H, I/V]``;
  block-FP8's float32 one per 128x128 block: ``[E, M13/128, H/128]`` and ``[E, H/128, I/128]``;
- biases (MXFP4, gpt-oss): bf16 ``[E, M13]`` and ``[E, H]``, made float32 by the conversion.

FP8 (``fp8``) is per-tensor FP8: its scales are one float per expert, never relaid, so a layer of
it is its weights alone. Block-FP8 (``fp8block``, DeepSeek's checkpoints) has one float32 scale
per 128x128 block, which the conversion reorders (a gated w13's halves swapped) and clamps.
MXFP8 (``mxfp8``: OCP microscaling, MiniMax-M3's checkpoint) is fp8 weights with one e8m0 scale
(uint8) per 32 elements of a row, relaid and swizzled as NVFP4's are. MXINT4 (``mxint4``,
W4A16: Kimi-K2-Thinking's experts) stores int32 words of eight 4-bit weights and one bf16 scale
per 32 elements; its conversion is ``moe_convert.formats.quant.mxint4``'s.
The dimensions are the padded ones the conversion sees: vLLM rounds H and I per rank up to each
format's alignment first (``QuantFormat.hidden_align`` and ``intermediate_alignment``, from vLLM
0.33.0; see docs/formats.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

__all__ = [
    "FORMATS",
    "QuantFormat",
    "QuantLayerShape",
    "SHAPE_FORMATS",
    "format_title",
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
    # Packed bytes per weight row must be a multiple of this: 128 where the weights come out
    # in BlockMajorK by whole 128-byte blocks of a row (MXINT4; block-FP8's scale blocks
    # already imply it).
    weight_row_align: int = field(default=1, kw_only=True)
    # I per rank's alignment for a non-gated (ReLU²) layer, where it differs from the gated
    # one: vLLM 0.33.0 pads a non-gated NVFP4 or FP8 per-tensor intermediate to 128 (w13's rows
    # are I, not 2I, and FlashInfer's shuffle of the scales, or its kernels, want 128 rows).
    nongated_intermediate_align: int | None = field(default=None, kw_only=True)

    def intermediate_alignment(self, gated: bool) -> int:
        """What vLLM pads I per rank up to a multiple of, for a gated layer or not."""
        if gated or self.nongated_intermediate_align is None:
            return self.intermediate_align
        return self.nongated_intermediate_align

    @property
    def elements_per_item(self) -> int:
        """Elements per stored weight element: ``epb`` times its bytes (MXINT4's int32: 8)."""
        return self.elements_per_byte * self.weight_dtype.itemsize

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
        # flashinfer_fp4_moe.py: trtllm_hidden_alignment=256; the intermediate to 64 gated, 128
        # not (align_fp4_moe_weights_for_fi's min_alignment "64 if is_gated else 128", so that
        # w13's rows are a multiple of 128).
        QuantFormat(
            "nvfp4",
            torch.uint8,
            2,
            torch.float8_e4m3fn,
            16,
            False,
            False,
            256,
            64,
            title="NVFP4",
            nongated_intermediate_align=128,
        ),
        # oracle/mxfp4.py::mxfp4_round_up_hidden_size_and_intermediate_size, TRTLLM backends.
        QuantFormat("mxfp4", torch.uint8, 2, torch.uint8, 32, True, True, 256, 128, title="MXFP4"),
        # flashinfer_utils.py::prepare_fp8_moe_layer_for_fi: align_moe_weights_for_fi's
        # min_alignment "16 if is_gated else 128".
        QuantFormat(
            "fp8",
            torch.float8_e4m3fn,
            1,
            None,
            0,
            False,
            False,
            1,
            16,
            title="FP8 per-tensor",
            nongated_intermediate_align=128,
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
        # MXINT4 (W4A16, Kimi-K2-Thinking): compressed-tensors' int32 words of eight uint4b8
        # nibbles, bf16 scales per 32 elements (formats/quant/mxint4.py). vLLM 0.33.0 pads
        # nothing on its path; FlashInfer's convert_to_block_layout(block_k=128) needs H/2 and
        # I/2 bytes in whole 128-byte blocks (prepare_trtllm_mxint4_weights: H and I % 256),
        # gated only.
        QuantFormat(
            "mxint4",
            torch.int32,
            2,
            torch.bfloat16,
            32,
            False,
            True,
            256,
            256,
            1,
            torch.bfloat16,
            title="MXINT4",
            weight_row_align=128,
        ),
    )
}


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

    # vLLM pads H and I to the format's alignment before the conversion, so the kernel takes
    # every quantized shape (``LayerShape.valid``'s question, which BF16 answers per shape).
    valid = True
    invalid_reason = None

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
        return (self.experts, self.rows13, self.hidden // self.fmt.elements_per_item)

    @property
    def w2_shape(self) -> tuple[int, int, int]:
        return (self.experts, self.hidden, self.intermediate // self.fmt.elements_per_item)

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
        """S13: one expert of the w13 weights."""
        return self.w13_shape[1] * self.w13_shape[2] * self.fmt.weight_dtype.itemsize

    @property
    def w2_expert_bytes(self) -> int:
        """S2: one expert of the w2 weights."""
        return self.w2_shape[1] * self.w2_shape[2] * self.fmt.weight_dtype.itemsize

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

    @property
    def model_bytes(self) -> int:
        """Every MoE layer's bytes on this rank (``layer_bytes`` x ``moe_layers``)."""
        return self.layer_bytes * self.moe_layers

    @property
    def conversion_error(self) -> str | None:
        """``check_quant_layer``'s message for a layer of this shape, or ``None`` if it converts
        (checked on ``meta`` tensors: free at any size)."""
        # quant_layer builds on this module: imported here, when a shape is checked
        from .layer import check_quant_layer, quant_layer_tensors

        try:
            check_quant_layer(quant_layer_tensors(self, "meta"), self.fmt, gated=self.gated)
        except ValueError as error:
            return str(error)
        return None

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


#: Every format a shape of the suite has, in the order reports show them: BF16 (``shapes``'
#: catalog), then ``FORMATS``.
SHAPE_FORMATS = ("bf16", *FORMATS)


def format_title(fmt: str) -> str:
    """How reports name ``fmt`` of ``SHAPE_FORMATS``: ``BF16``, or its ``QuantFormat.title``."""
    return "BF16" if fmt == "bf16" else FORMATS[fmt].title
