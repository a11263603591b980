"""What one format stores per layer: ``Format``, the one record type of every format.

Each format defines its record in its own module (BF16's in ``bf16/format.py``, a quantized
format's at the top of ``<format>.py``); ``records`` collects them into ``FORMATS``, and
``shape.LayerShape`` derives every size of a layer from its format's record.

Legend: E experts, H hidden, I intermediate per rank, M13 rows of w13 (2I gated, I not), epi
elements per stored weight element (1: bf16 or fp8; 2: two e2m1 per uint8; 8: MXINT4's int32
words of eight nibbles), V elements per scale factor along a row, R rows per scale factor (1,
but 128 for block-FP8's 128x128 blocks).

Per rank and MoE layer, as the checkpoint loader hands them to the conversion:

- weights ``[E, M13, H/epi]`` and ``[E, H, I/epi]`` of ``weight_dtype`` (BF16: ``[E, M13, H]``
  and ``[E, H, I]``, and nothing else);
- block scale factors (NVFP4, MXFP4, MXFP8, MXINT4), one per V elements: ``[E, M13, H/V]`` and
  ``[E, H, I/V]``; block-FP8's float32 one per 128x128 block: ``[E, M13/128, H/128]`` and
  ``[E, H/128, I/128]``; none for BF16 and FP8 per-tensor (one float per expert, never relaid);
- biases (MXFP4, gpt-oss): bf16 ``[E, M13]`` and ``[E, H]``, made float32 by the conversion.

A quantized format's dimensions are the padded ones the conversion sees: vLLM rounds H and I
per rank up to the format's alignment first (``hidden_align``, ``intermediate_alignment``, from
vLLM 0.33.0; see docs/formats.md), and the quantized catalog does the same. BF16's catalog
gives the model's own sizes, which the kernel may refuse (``kernel_align``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

__all__ = ["FORMATS", "Format", "LayerCheck", "LayerInputs", "format_record"]

#: A format's input check, ``(layer: Layer, record, gated) -> None``: raises ``TypeError``/
#: ``ValueError`` (one line: the tensor, its shape, the fix) where the layer cannot be
#: converted; reads no byte. (``layer.Layer`` and ``shape.LayerShape`` are built on this record,
#: so they are named here, not imported.)
LayerCheck = Callable[..., None]
#: ``(shape: LayerShape, device, seed) -> Layer``: a fresh layer of the shape, seeded random
#: bytes (on meta ``torch.empty``).
LayerInputs = Callable[..., object]


@dataclass(frozen=True, kw_only=True)
class Format:
    """What one format stores per layer, how vLLM aligns it for TRTLLM-gen, and its checks."""

    name: str  # the key of records.FORMATS and of a strategy's name: "bf16", "nvfp4", ...
    title: str  # how reports name it (a table's heading)
    check: LayerCheck  # its input check (``checks.check_weights``'s, ``layer.check_layer``)
    # The strategy every other of the format must match byte for byte: the engines' own path
    # transcribed ("legacy", "nvfp4-legacy", ...).
    upstream: str
    # Its fresh layers (``table.layer_tensors``); None: ``table.random_layer``'s random bytes.
    inputs: LayerInputs | None = None
    # The check of a layer of it that a strategy of another format takes and quantizes itself
    # (FlashInfer's helpers, which check their own alignment); None: ``check``.
    quantized_by_check: LayerCheck | None = None
    weight_dtype: torch.dtype  # the stored weights' dtype (packed fp4: uint8)
    elements_per_item: int = 1  # epi: elements per stored weight element
    scale_dtype: torch.dtype | None = None  # the block scales' dtype; None: no block scales
    scale_block: int = 0  # V, elements per scale factor (0: no block scales)
    # R, rows per scale factor: 1 for the 1-D blocks of a row (NVFP4, MXFP4), whose scales the
    # conversion relays and swizzles; 128 for block-FP8's 2-D 128x128 blocks, whose scales it
    # only reorders (vLLM's DeepSeek path: the kernel takes them linear).
    scale_block_rows: int = 1
    # The relaid 1-D block scales' dtype as vLLM returns them: NVFP4's and MXFP4's are viewed
    # float8_e4m3fn; MXFP8's stay the uint8 that block_scale_interleave returns for uint8.
    relaid_scale_dtype: torch.dtype = torch.float8_e4m3fn
    has_bias: bool = False  # bf16 biases per row of w13 and w2 (gpt-oss)
    gated_only: bool = False  # the upstream path exists only for a gated activation
    hidden_align: int = 1  # H is padded up to a multiple of this
    intermediate_align: int = 1  # I per rank is padded up to a multiple of this (gated)
    # I per rank's alignment for a non-gated (ReLU²) layer, where it differs from the gated
    # one: vLLM 0.33.0 pads a non-gated NVFP4 or FP8 per-tensor intermediate to 128 (w13's rows
    # are I, not 2I, and FlashInfer's shuffle of the scales, or its kernels, want 128 rows).
    nongated_intermediate_align: int | None = None
    # Packed bytes per weight row must be a multiple of this: 128 where the weights come out
    # in BlockMajorK by whole 128-byte blocks of a row (MXINT4; block-FP8's scale blocks
    # already imply it).
    weight_row_align: int = 1
    # Why, where the engine refuses a row off those blocks rather than pad it (MXINT4: vLLM
    # pads nothing, FlashInfer asserts): the check's message gives it instead of a padding.
    weight_row_rule: str = ""
    # A gated w13's rows as the checkpoint holds them: ``[w1; w3]`` halves (every format but
    # one), or gpt-oss's interleaved pairs ``[w1_0, w3_0, w1_1, ...]`` (MXFP4's checkpoint).
    interleaved_w13: bool = False
    # What the kernel needs of H and I per rank where the catalog gives them unpadded (BF16's
    # 128), and the rule's source (``kernel_rule``): a shape off it is still measured, and
    # flagged (``LayerShape.invalid_reason``). 1: the catalog pads every shape first.
    kernel_align: int = 1
    kernel_rule: str = ""
    # What the conversion does per tensor beyond the row order (``placement.moves`` derives
    # every tensor's move from these and the fields above; the streaming strategy and the
    # in-place inverse both follow it):
    # the weights come out in BlockMajorK, ``[E, K/128, M, 128]`` bytes (BF16, block-FP8, MXINT4);
    block_major_k: bool = False
    # the converted weights' dtype where it is not ``weight_dtype`` (MXINT4's int32 -> uint8);
    converted_weight_dtype: torch.dtype | None = None
    # a byte every weight byte is XOR-ed with (MXINT4's uint4b8 -> int4, ``0x88``; 0: none);
    sign_flip: int = 0
    # rows shuffled together: 32 (``epilogue_tile_m`` 128), 16 (block-FP8's tile of 64);
    shuffle_block: int = 32
    # the swizzled scales kept flat per expert, ``[E, M K]`` (MXINT4), not ``[E, M, K]``;
    flat_scales: bool = False
    # the least value the scales are clamped up to (block-FP8's 1e-10; None: not clamped). A
    # clamp is not invertible: the inverse leaves such scales as the conversion made them.
    scale_min: float | None = None

    def intermediate_alignment(self, gated: bool) -> int:
        """What vLLM pads I per rank up to a multiple of, for a gated layer or not."""
        if gated or self.nongated_intermediate_align is None:
            return self.intermediate_align
        return self.nongated_intermediate_align

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


#: name -> record of every format, in the order reports show them: filled by ``records``, which
#: imports the format modules that define them (``moe_convert.FORMATS``).
FORMATS: dict[str, Format] = {}


def format_record(name: str) -> Format:
    """``FORMATS[name]``; ``ValueError`` naming the formats for a name without a record."""
    try:
        return FORMATS[name]
    except KeyError:
        raise ValueError(f"unknown format {name!r}; formats: {', '.join(FORMATS)}") from None
