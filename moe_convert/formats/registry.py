"""The strategy registry of every format: one record per strategy holding every fact about it,
and one ``register``.

A record (``Strategy``) holds a strategy's format, function, whether its result lives in the
input's own storage (``inplace``), where it comes from (``origin``), what it needs to run here
(``needs``) and its figures as formulas of the layer shape (``moe_convert.formulas``): peak
transient bytes, traffic, launches and what the CPU allocator sees above the peak. Each strategy
module registers a function with ``@register(...)`` right above it. ``REGISTRY`` holds every
format's strategies that run here, ``UNAVAILABLE`` those this library has but that cannot run
here (``needs`` says what is missing); ``strategies(fmt)`` is one format's. Every strategy is a
function ``(layer: Layer, gated) -> Layer``; one that takes a BF16 layer is written on its two
weights, ``(w13, w2, gated)``, and wrapped once here (``register``). A layer of any format
converts through ``formats.table.convert``. The tests (``tests/test_memory.py``,
``tests/test_traffic.py``, ``tests/test_quant_memory.py``), the strategies table of
docs/library.md (``python -m moe_convert strategies --markdown``) and the byte limits of
budgets.json (``python -m benchmarks.budgets``) take their figures from the records.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch

from ..formulas import LEGEND, Formula
from .layer import Layer

__all__ = [
    "REGISTRY",
    "UNAVAILABLE",
    "Strategy",
    "StrategyFunction",
    "register",
    "result_in_input",
    "strategies",
    "strategies_markdown",
    "update_markdown",
]

#: ``(layer, gated) -> layer``, the input already checked by its format's ``Format.check``.
StrategyFunction = Callable[[Layer, bool], Layer]
#: What a strategy that takes a BF16 layer is written on: ``(w13, w2, gated)`` to BF16's
#: ``(w13_out, w2_out)``, or to its format's ``Layer`` (FlashInfer's helpers).
WeightsFunction = Callable[[torch.Tensor, torch.Tensor, bool], "tuple[torch.Tensor, ...] | Layer"]

#: The figure of a strategy with nothing to add (``cpu_allocator_extra``).
ZERO = Formula("0")


@dataclass(frozen=True)
class Strategy:
    """One registered strategy of one format: its function and the facts about it, in one place.

    The formulas are exact, checked to the byte at full size by the tests; ``None`` where a
    strategy does not state one (the tests then fail for a registered strategy).
    """

    name: str  # BF16's: its kind ("legacy"); a quantized format's: "<format>-<kind>"
    function: StrategyFunction
    inplace: bool  # the result is written into the input's own storage (``result_in_input``)
    origin: str  # where it comes from: an engine's PR or release, a library's helper, "ours"
    needs: str = ""  # what must be installed or present for it to run ("": nothing more)
    peak: Formula | None = None  # peak transient bytes, dispatch level, row indices cached
    traffic: Formula | None = None  # bytes read + written (moe_convert.measuring.traffic's rule)
    launches: Formula | None = None  # data-moving ops of one call
    # What the CPU allocator sees above ``peak`` (memory.profiler_memory): kernels' own
    # temporaries, which the dispatch-level count cannot see.
    cpu_allocator_extra: Formula = ZERO
    format: str = "bf16"  # a key of records.FORMATS
    # The format of the layer it takes, where not its own (""): "bf16" for FlashInfer's helpers
    # (``<format>-flashinfer``), which quantize a BF16 layer themselves.
    takes: str = ""
    # Where it takes another format's layer: what its own quantizer makes of such a layer, as
    # the checkpoint stores it (a layer of ``format``); every other strategy of the format turns
    # that into its output (``formats.table.reference_conversion``).
    stored: WeightsFunction | None = None
    # Why it cannot run on ``meta`` tensors ("" where it can): its figures then come from its
    # formulas, checked on CPU, not from a full-size ``meta`` measurement.
    not_on_meta: str = ""

    def __post_init__(self) -> None:
        if not self.takes:
            object.__setattr__(self, "takes", self.format)

    @property
    def kind(self) -> str:
        """The strategy within its format: ``legacy`` for ``legacy`` and ``nvfp4-legacy``."""
        return self.name.removeprefix(f"{self.format}-")

    @property
    def result(self) -> str:
        """What a conversion returns: ``views of the input`` or ``new tensors``."""
        return "views of the input" if self.inplace else "new tensors"


def result_in_input(given: Mapping[str, torch.Tensor], got: Mapping[str, torch.Tensor]) -> bool:
    """Whether a conversion of ``given`` wrote its result into ``given``'s own storage
    (``Strategy.inplace``): ``got``'s w13 or w2 at its input's ``data_ptr``. Both, for every
    strategy but one form of an engine's: vLLM 0.34.0's FP8 per-tensor rotation copies its
    result back into the weights it is given, which for a gated w13 is the w1/w3 swap's new
    tensor (w2 and a non-gated w13: the input's)."""
    return any(got[name].data_ptr() == given[name].data_ptr() for name in ("w13", "w2"))


#: name -> record of every format's strategy that runs here; looked up at call time.
REGISTRY: dict[str, Strategy] = {}
#: name -> record of every format's strategy this library has but that cannot run here:
#: documented, not registered; its ``needs`` says what is missing.
UNAVAILABLE: dict[str, Strategy] = {}


def strategies(fmt: str, *, available: bool = True) -> dict[str, Strategy]:
    """Name -> record of format ``fmt``'s strategies that run here (``available=False``: those
    that cannot, ``UNAVAILABLE``'s), in registration order, read at call time."""
    records = REGISTRY if available else UNAVAILABLE
    return {name: record for name, record in records.items() if record.format == fmt}


def _on_weights(function: WeightsFunction) -> StrategyFunction:
    """``function``, written on a BF16 layer's two weights, as ``(layer, gated) -> Layer``: its
    result as returned where it is a ``Layer``, else BF16's ``Layer(w13_out, w2_out)``. The
    same call, no copy."""

    @functools.wraps(function)
    def on_layer(layer: Layer, gated: bool) -> Layer:
        out = function(layer.w13, layer.w2, gated)
        return out if isinstance(out, Layer) else Layer(*out)

    return on_layer


def register(
    name: str,
    *,
    format: str,
    inplace: bool,
    origin: str,
    needs: str = "",
    available: bool = True,
    peak: Formula | None = None,
    traffic: Formula | None = None,
    launches: Formula | None = None,
    cpu_allocator_extra: Formula = ZERO,
    takes: str = "",
    stored: WeightsFunction | None = None,
    not_on_meta: str = "",
) -> Callable[[Callable], Callable]:
    """Decorator: register the function as strategy ``name`` of ``format`` with its facts (see
    ``Strategy``): BF16's names are their kind (``legacy``), every other format's
    ``<format>-<kind>`` (``nvfp4-fast``).

    The function is ``(layer, gated) -> Layer``, or, where it takes a BF16 layer (``format``
    ``"bf16"``, or ``takes="bf16"``), ``(w13, w2, gated)`` to ``(w13_out, w2_out)`` or its
    format's ``Layer``: wrapped once here, the record's ``function`` then takes a layer too.
    ``available=False`` (what ``needs`` names is missing here) keeps the record in
    ``UNAVAILABLE`` instead of ``REGISTRY``. Registering a name again replaces its record.
    Returns the function unchanged.
    """
    if format != "bf16" and not name.startswith(f"{format}-"):
        raise ValueError(f"strategy {name!r} of {format} must be named {format}-<kind>")

    def decorate(function: Callable) -> Callable:
        on_bf16 = (takes or format) == "bf16"
        record = Strategy(
            name,
            _on_weights(function) if on_bf16 else function,
            inplace,
            origin,
            needs,
            peak,
            traffic,
            launches,
            cpu_allocator_extra,
            format,
            takes,
            stored,
            not_on_meta,
        )
        (REGISTRY if available else UNAVAILABLE)[name] = record
        (UNAVAILABLE if available else REGISTRY).pop(name, None)
        return function

    return decorate


def _code(formula: Formula | None) -> str:
    return "not stated" if formula is None else formula.describe("`")


#: The lines around the generated table in a markdown file (docs/library.md).
MARKDOWN_BEGIN = (
    "<!-- strategies table: generated from the registry by "
    "`python -m moe_convert strategies --update docs/library.md`; do not edit -->"
)
MARKDOWN_END = "<!-- end of the strategies table -->"


def strategies_markdown(
    reload_class: Callable[[str], str], reversible: Callable[[str], str]
) -> str:
    """The legend and the table of every strategy of every format, registered here or not, by
    name: the text docs/library.md holds between ``MARKDOWN_BEGIN`` and ``MARKDOWN_END``.

    ``reload_class(name)`` fills the "reload" column (``load.refit.documented_reload_safety``:
    checked by the refit, above this module), ``reversible(name)`` the "inverse" column
    (``load.refit.documented_reversibility``)."""
    records = sorted([*REGISTRY.values(), *UNAVAILABLE.values()], key=lambda r: r.name)
    legend = "; ".join(f"{letter} {symbol.meaning}" for letter, symbol in LEGEND.items())
    lines = [
        f"Legend: {legend}. A space multiplies; `cdiv(a, b)` is `ceil(a / b)`.",
        "",
        "| strategy | from | needs | result | reload | inverse | peak transient | traffic "
        "| launches |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in records:
        lines.append(
            f"| `{r.name}` | {r.origin} | {r.needs or '-'} | {r.result} | {reload_class(r.name)} "
            f"| {reversible(r.name)} | {_code(r.peak)} | {_code(r.traffic)} | {_code(r.launches)} |"
        )
    return "\n".join(lines) + "\n"


def update_markdown(
    text: str, reload_class: Callable[[str], str], reversible: Callable[[str], str]
) -> str:
    """``text`` (a markdown file) with what lies between ``MARKDOWN_BEGIN`` and ``MARKDOWN_END``
    replaced by ``strategies_markdown(reload_class, reversible)``. Raises ``ValueError`` when
    the markers are missing."""
    begin, end = text.find(MARKDOWN_BEGIN), text.find(MARKDOWN_END)
    if begin < 0 or end < begin:
        raise ValueError(
            f"no strategies table: the file needs the line {MARKDOWN_BEGIN!r}, "
            f"then the line {MARKDOWN_END!r}"
        )
    return (
        text[:begin]
        + MARKDOWN_BEGIN
        + "\n"
        + strategies_markdown(reload_class, reversible)
        + text[end:]
    )
