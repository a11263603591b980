"""What a layer shape of every format derives the same way: ``LayerGeometry``, the base of
``bf16.shapes.LayerShape`` and ``quant.formats.QuantLayerShape``.

A shape is a frozen dataclass with ``model``, ``tp``, ``format``, ``experts`` (E), ``hidden``
(H), ``intermediate`` (I per rank), ``moe_layers`` and ``gated``, and its format's own
``w13_shape``, ``w2_shape`` (``[E, M13, K]``, ``[E, H, K]``: K elements of the weight dtype per
row), ``weight_itemsize`` and the scale and bias bytes (F13, F2, B13, B2: 0 for BF16). From
those, here, the letters of ``moe_convert.formulas`` every format shares (S13, S2, T13, T2,
X13, X2), the layer's and the model's bytes, the label and ``with_experts``.
"""

from __future__ import annotations

import dataclasses
from typing import Self

__all__ = ["LayerGeometry"]


class LayerGeometry:
    """The derived sizes of a layer shape of any format, in bytes (see the module docstring)."""

    model: str
    tp: int
    format: str
    experts: int
    hidden: int
    intermediate: int
    moe_layers: int
    gated: bool
    w13_scale_bytes: int
    w2_scale_bytes: int
    w13_bias_bytes: int
    w2_bias_bytes: int

    @property
    def w13_shape(self) -> tuple[int, int, int]:
        raise NotImplementedError

    @property
    def w2_shape(self) -> tuple[int, int, int]:
        raise NotImplementedError

    @property
    def weight_itemsize(self) -> int:
        raise NotImplementedError

    @property
    def label(self) -> str:
        """``model/tpN``, the name used in benchmark parameters; a quantized model's name carries
        its format (``kimi-k2-nvfp4/tp8``). Inverse: ``formats.table.any_shape_from_label``."""
        return f"{self.model}/tp{self.tp}"

    @property
    def rows13(self) -> int:
        """M13: rows of one w13 expert, ``2 I`` gated (``[w1; w3]``), ``I`` not."""
        return 2 * self.intermediate if self.gated else self.intermediate

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

    def with_experts(self, experts: int) -> Self:
        """The same per-expert geometry with fewer (or more) experts: a new shape."""
        return dataclasses.replace(self, experts=experts)
