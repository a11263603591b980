"""Figures of a layer shape written as formulas: peak transient bytes, traffic, launches.

Legend (``LEGEND``, each a size of a ``formats.shape.LayerShape``): E experts; T13, T2 bytes of
the whole w13, w2 tensor; S13, S2 bytes of one expert of each; X13 = 8 M13, X2 = 8 H bytes of
one int64 row index of w13, w2 (M13 rows of one w13 expert); MiB = 2^20. The quantized formats
(``formats.format``) add F13, F2, the bytes of the whole w13, w2 scale-factor tensor, and B13,
B2, of the whole float32 w13, w2 bias (all 0 for BF16). N13, N2 count the segments of one
expert's 128-byte cell cycles (``formats.bf16.cycles``), which the cycle-walking strategy saves
the first cell of.

A formula is text in these letters, as a reader writes it: ``3 T13 + 2 T2``,
``max(S13, S2, 10 MiB)``, ``2 (T13 + T2) + E (X13 + X2)``. A space between two terms multiplies;
``+ - * //``, parentheses, integers, ``max(a, b, ...)`` and ``cdiv(a, b)`` (``ceil(a / b)``)
are the whole language. ``Formula.evaluate`` walks the parsed expression itself (no ``eval``),
so a formula can only compute with the legend's sizes.
"""

from __future__ import annotations

import ast
import functools
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass

from .formats.bf16.cycles import segment_count
from .formats.shape import LayerShape

__all__ = ["LEGEND", "Formula", "Symbol", "sizes"]


@dataclass(frozen=True)
class Symbol:
    """One letter of the legend: what it means and its value for a shape."""

    meaning: str
    value: Callable[[LayerShape], int]


LEGEND: dict[str, Symbol] = {
    "E": Symbol("experts", lambda s: s.experts),
    "T13": Symbol("bytes of the whole w13 tensor", lambda s: s.w13_bytes),
    "T2": Symbol("bytes of the whole w2 tensor", lambda s: s.w2_bytes),
    "S13": Symbol("bytes of one expert of w13", lambda s: s.w13_expert_bytes),
    "S2": Symbol("bytes of one expert of w2", lambda s: s.w2_expert_bytes),
    "X13": Symbol("bytes of one int64 row index of w13 (8 M13)", lambda s: s.w13_index_bytes),
    "X2": Symbol("bytes of one int64 row index of w2 (8 H)", lambda s: s.w2_index_bytes),
    "F13": Symbol("bytes of the whole w13 scale-factor tensor", lambda s: s.w13_scale_bytes),
    "F2": Symbol("bytes of the whole w2 scale-factor tensor", lambda s: s.w2_scale_bytes),
    "B13": Symbol("bytes of the whole float32 w13 bias", lambda s: s.w13_bias_bytes),
    "B2": Symbol("bytes of the whole float32 w2 bias", lambda s: s.w2_bias_bytes),
    "N13": Symbol(
        "segments of one w13 expert's cell cycles (moe_convert.formats.bf16.cycles)",
        lambda s: segment_count(s.w13_shape[1], s.hidden, s.gated),
    ),
    "N2": Symbol(
        "segments of one w2 expert's cell cycles",
        lambda s: segment_count(s.hidden, s.intermediate, False),
    ),
    "MiB": Symbol("2^20 bytes", lambda s: 2**20),
}

_OPERATORS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
}
_FUNCTIONS = {"max": max, "cdiv": lambda a, b: -(-a // b)}
# A space between a term's end (a digit, a letter, ")") and a term's start multiplies.
_JUXTAPOSED = re.compile(r"(?<=[\w)])\s+(?=[\w(])")


def sizes(shape: LayerShape) -> dict[str, int]:
    """The value of every letter of ``LEGEND`` for ``shape``."""
    return {letter: symbol.value(shape) for letter, symbol in LEGEND.items()}


@functools.cache
def _compile(text: str) -> Callable[[LayerShape], int]:
    """``text`` as a function of a shape; ``ValueError`` naming what is not allowed. Only the
    letters ``text`` uses are computed (N13 and N2 walk a permutation's cycles)."""
    try:
        tree = ast.parse(_JUXTAPOSED.sub(" * ", text.strip()), mode="eval").body
    except SyntaxError as error:
        raise ValueError(f"formula {text!r} does not parse: {error.msg}") from None

    def build(node: ast.AST) -> Callable[[LayerShape], int]:
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            op, left, right = _OPERATORS[type(node.op)], build(node.left), build(node.right)
            return lambda shape: op(left(shape), right(shape))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            operand = build(node.operand)
            return lambda shape: -operand(shape)
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return lambda shape, number=node.value: number
        if isinstance(node, ast.Name) and node.id in LEGEND:
            return lambda shape, symbol=LEGEND[node.id]: symbol.value(shape)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in _FUNCTIONS
            and node.args
            and not node.keywords
        ):
            function, args = _FUNCTIONS[node.func.id], [build(arg) for arg in node.args]
            return lambda shape: function(*(arg(shape) for arg in args))
        raise ValueError(
            f"formula {text!r}: {ast.unparse(node)!r} is not allowed; use integers, the letters "
            f"{', '.join(LEGEND)}, + - * // (a space multiplies), parentheses, "
            f"{'(), '.join(_FUNCTIONS)}()"
        )

    return build(tree)


@dataclass(frozen=True)
class Formula:
    """A figure of a layer shape in the legend's letters: ``gated``'s text, and ``not_gated``'s
    where a non-gated layer (w13 ``[E, I, H]``) differs (``None``: the same text).

    Both texts are checked when the formula is made (``ValueError`` naming the bad part).
    """

    gated: str
    not_gated: str | None = None

    def __post_init__(self) -> None:
        for text in (self.gated, self.not_gated):
            if text is not None:
                _compile(text)

    def text(self, *, gated: bool) -> str:
        """The formula for a gated layer, or a non-gated one."""
        return self.gated if gated or self.not_gated is None else self.not_gated

    def evaluate(self, shape: LayerShape) -> int:
        """The figure for ``shape`` (its ``gated`` picks the text)."""
        return _compile(self.text(gated=shape.gated))(shape)

    def describe(self, quote: str = "") -> str:
        """The formula as a reader writes it, each text between ``quote`` (markdown: a backtick),
        with the not-gated text after ``; not gated`` where it differs."""
        if self.not_gated is None or self.not_gated == self.gated:
            return f"{quote}{self.gated}{quote}"
        return f"{quote}{self.gated}{quote}; not gated {quote}{self.not_gated}{quote}"

    def __str__(self) -> str:
        return self.describe()
