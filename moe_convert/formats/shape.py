"""The one layer-shape type of every format: ``LayerShape``, a format plus E, H, I and gated,
every size derived from the format's record (``records.FORMATS``; legend in ``format``).
Under expert parallelism (``ep`` > 1) a shape is one rank's share: its local experts, each whole.

From the record: the tensors a layer holds (``tensor_specs``: weights, and the block scales and
biases where the format has them), their shapes and bytes, whether the kernel takes the shape
(``invalid_reason``) and whether it converts (``conversion_error``). From those, the letters of
``moe_convert.formulas`` (T13, T2, S13, S2, X13, X2; F13, F2 scale factors and B13, B2 float32
biases, 0 for BF16), the layer's and the model's bytes, the label and ``with_experts``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Self

import torch

from .format import Format, format_record
from .layer import Layer

__all__ = ["LayerShape"]


@dataclass(frozen=True)
class LayerShape:
    """One MoE layer of ``format`` on one rank: tensor-parallel (I per rank, every expert) or,
    with ``ep`` > 1, expert-parallel (``tp`` 1: the rank's local experts, I whole; the catalog
    gives them, ``ModelSpec.shape``). Sizes derived, in bytes: every measurement takes a rank's
    share as it takes any shape, a layer of ``experts`` experts.

    A quantized shape's H and I are the padded ones (the quantized catalog pads them as vLLM
    does); BF16's are the model's own. ``ValueError`` for a format without a record.
    """

    model: str
    tp: int
    experts: int  # E
    hidden: int  # H
    intermediate: int  # I per rank
    moe_layers: int
    gated: bool = True
    format: str = "bf16"  # a key of records.FORMATS
    ep: int = 1  # expert-parallel size; > 1 only with tp 1, as vLLM shards experts

    def __post_init__(self) -> None:
        format_record(self.format)

    @property
    def fmt(self) -> Format:
        """The format's record."""
        return format_record(self.format)

    @property
    def label(self) -> str:
        """``model/tpN``, the name used in benchmark parameters, or ``model/epN`` for a rank's
        share under expert parallelism; a quantized model's name carries its format
        (``kimi-k2-nvfp4/tp8``). Inverse: ``catalog.shape_from_label``."""
        return f"{self.model}/ep{self.ep}" if self.ep > 1 else f"{self.model}/tp{self.tp}"

    @property
    def rows13(self) -> int:
        """M13: rows of one w13 expert, ``2 I`` gated (``[w1; w3]``), ``I`` not."""
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
    def tensor_specs(self) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
        """Name -> (shape, dtype) of every tensor a layer of this shape holds, in the order a
        checkpoint loader allocates them: ``w13``, ``w2``, then the format's ``w13_scale``,
        ``w2_scale``, ``w13_bias``, ``w2_bias`` where it has them (biases bf16 as stored)."""
        fmt = self.fmt
        specs = {
            "w13": (self.w13_shape, fmt.weight_dtype),
            "w2": (self.w2_shape, fmt.weight_dtype),
            "w13_scale": (self.w13_scale_shape, fmt.scale_dtype),
            "w2_scale": (self.w2_scale_shape, fmt.scale_dtype),
            "w13_bias": (self.w13_bias_shape, torch.bfloat16),
            "w2_bias": (self.w2_bias_shape, torch.bfloat16),
        }
        return {name: spec for name, spec in specs.items() if spec[0] is not None}

    @property
    def weight_itemsize(self) -> int:
        """Bytes of one stored weight element."""
        return self.fmt.weight_dtype.itemsize

    @property
    def w13_expert_bytes(self) -> int:
        """S13: one expert of the w13 weights."""
        return self.w13_shape[1] * self.w13_shape[2] * self.weight_itemsize

    @property
    def w2_expert_bytes(self) -> int:
        """S2: one expert of the w2 weights."""
        return self.w2_shape[1] * self.w2_shape[2] * self.weight_itemsize

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
        """X13: one int64 row index of w13 (8 bytes per row of one expert)."""
        return 8 * self.rows13

    @property
    def w2_index_bytes(self) -> int:
        """X2: one int64 row index of w2 (8 bytes per row of one expert, H rows)."""
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
    def invalid_reason(self) -> str | None:
        """Why the kernel cannot take this shape unpadded (``Format.kernel_align``), or ``None``:
        BF16's FlashInfer TRTLLM kernel wants H and I multiples of 128; a quantized shape is
        padded by its catalog, as vLLM pads it, so the kernel takes it."""
        fmt = self.fmt
        if self.intermediate % fmt.kernel_align:
            return (
                f"I/TP = {self.intermediate} is not a multiple of {fmt.kernel_align} "
                f"({fmt.kernel_rule})"
            )
        if self.hidden % fmt.kernel_align:
            return f"hidden {self.hidden} is not a multiple of {fmt.kernel_align}"
        return None

    @property
    def valid(self) -> bool:
        return self.invalid_reason is None

    @property
    def conversion_error(self) -> str | None:
        """The format's input check's message (``Format.check``) for a layer of this shape, or
        ``None`` if it converts. Checked on ``meta`` tensors: free at any size."""
        layer = Layer(
            **{
                name: torch.empty(dims, dtype=dtype, device="meta")
                for name, (dims, dtype) in self.tensor_specs.items()
            }
        )
        try:
            self.fmt.check(layer, self.fmt, self.gated)
        except ValueError as error:
            return str(error)
        return None

    def with_experts(self, experts: int) -> Self:
        """The same per-expert geometry with fewer (or more) experts: a new shape."""
        return dataclasses.replace(self, experts=experts)
