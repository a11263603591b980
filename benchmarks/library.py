"""The measured commit's library, by today's names: its modules, its layout, its strategies.

asv takes ``benchmarks/`` from the working tree and the library from each measured commit
(docs/benchmarks.md), and the library has had three layouts:

- flat modules (``moe_convert/timing.py``), BF16's ``convert(w13, w2)`` and ``STRATEGIES``, the
  quantized formats' ``convert_quant``, ``QUANT_STRATEGIES`` and ``quant_layer_shape`` (since
  issue 18);
- the format axis (issue 28): subpackages (``moe_convert/measuring/timing.py``), the package
  exporting ``layer_call`` and ``convert_layer`` of a layer as a dict of tensors;
- one layer (issue 36): ``Layer``, one ``convert(layer)``, one ``REGISTRY`` and ``UNAVAILABLE``,
  one ``CATALOG`` and ``layer_shape`` for every format.

``module`` imports a module by today's path, or on a flat commit by its flat name. Which
layout a commit has is asked of its package (``has_format_axis``, ``has_one_layer``), not by
trying a path: an editable install of a newer tree on the path could answer that.
``strategy_records`` and ``unavailable_records`` give a commit's strategies of every format,
``layer_shape`` its shape of a label, as the suite and the paired A/B read them.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = [
    "has_format_axis",
    "has_one_layer",
    "layer_shape",
    "module",
    "strategy_records",
    "unavailable_records",
]


def module(path: str) -> ModuleType:
    """``moe_convert.<path>`` (``measuring.timing``), or on a commit from before the
    subpackages ``moe_convert.<flat name>`` (``timing``)."""
    if not has_format_axis():
        path = path.rpartition(".")[2]
    return importlib.import_module(f"moe_convert.{path}")


def has_format_axis() -> bool:
    """Whether the measured commit has the format axis and the subpackages (issue 28)."""
    import moe_convert

    return hasattr(moe_convert, "layer_call")


def has_one_layer() -> bool:
    """Whether the measured commit has one layer type, verb, registry and catalog (issue 36)."""
    import moe_convert

    return hasattr(moe_convert, "Layer")


def strategy_records(package: ModuleType) -> dict:
    """``package``'s (a commit's ``moe_convert``) registered strategies of every format:
    ``REGISTRY`` since issue 36; before, BF16's ``STRATEGIES`` and, on a commit since issue 18,
    the quantized formats' ``QUANT_STRATEGIES``."""
    if hasattr(package, "Layer"):
        return package.REGISTRY
    return {**package.STRATEGIES, **getattr(package, "QUANT_STRATEGIES", {})}


def unavailable_records(package: ModuleType) -> dict:
    """``package``'s strategies of every format that cannot run here (each record's ``needs``
    says why): ``UNAVAILABLE`` since issue 36; before, its registry module's BF16 ones and the
    package's ``QUANT_UNAVAILABLE``, where the commit has them."""
    if hasattr(package, "Layer"):
        return package.UNAVAILABLE
    registry = module("formats.registry")
    return {
        **getattr(registry, "UNAVAILABLE", {}),
        **getattr(package, "QUANT_UNAVAILABLE", {}),
    }


def layer_shape(label: str, fmt: str):
    """The measured commit's full-size shape of ``label`` (``model/tpN``) of format ``fmt``: its
    ``layer_shape`` since issue 36; before, BF16's ``shape_from_label`` (whatever module holds
    it) or the package's ``quant_layer_shape``."""
    import moe_convert

    model, _, tp = label.rpartition("/tp")
    if has_one_layer():
        return moe_convert.layer_shape(model, int(tp))
    if fmt == "bf16":
        return module("formats.bf16.shapes").shape_from_label(label)
    return moe_convert.quant_layer_shape(model, int(tp))
