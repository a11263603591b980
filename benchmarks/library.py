"""The measured commit's library modules, by their paths in today's layout.

asv takes ``benchmarks/`` from the working tree and the library from each measured commit
(docs/benchmarks.md). Issue 28 moved the library's flat modules into subpackages
(``moe_convert/timing.py`` is ``moe_convert/measuring/timing.py``), so a commit from before it
has the same module under its flat name: ``module`` imports today's path, else that name. Which
layout a commit has is asked of its package (it exports ``LAYER_FORMATS`` since the move:
``has_format_axis``), not by trying a path: an editable install of a newer tree on the path could
answer that. ``strategy_records`` gives a commit's strategies of every format, as the suite and
the paired A/B read them.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["has_format_axis", "module", "strategy_records"]

#: Today's path -> the flat name before issue 28, where it is not the path's last part.
_FLAT_NAMES = {"formats.quant.layer": "quant_layer"}


def module(path: str) -> ModuleType:
    """``moe_convert.<path>`` (``measuring.timing``), or on a commit from before the
    subpackages ``moe_convert.<flat name>`` (``timing``)."""
    if not has_format_axis():
        path = _FLAT_NAMES.get(path, path.rpartition(".")[2])
    return importlib.import_module(f"moe_convert.{path}")


def has_format_axis() -> bool:
    """Whether the measured commit has the format axis and the subpackages (issue 28)."""
    import moe_convert

    return hasattr(moe_convert, "LAYER_FORMATS")


def strategy_records(package: ModuleType) -> dict:
    """``package``'s (a commit's ``moe_convert``) registered strategies of every format:
    BF16's, and the quantized formats' on a commit since issue 18."""
    return {**package.STRATEGIES, **getattr(package, "QUANT_STRATEGIES", {})}
