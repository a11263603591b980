"""The strategy registry of every format: one record per strategy holding every fact about it,
one registry, and BF16's ``convert``.

A record (``Strategy``) holds a strategy's format, function, whether its result lives in the
input's own storage (``inplace``), where it comes from (``origin``), what it needs to run here
(``needs``) and its figures as formulas of the layer shape (``moe_convert.formulas``): peak
transient bytes, traffic, launches and what the CPU allocator sees above the peak. Each strategy
module registers a function with ``@register(...)`` right above it (a quantized format's through
``formats.quant.registry.register_quant``, which reads the format from the name). ``REGISTRY``
holds every format's; ``STRATEGIES`` (BF16's) and ``QUANT_STRATEGIES`` (the quantized formats')
are live views of it, for the callers that take one side; ``MISSING`` holds the records that
cannot run here, ``UNAVAILABLE`` and ``QUANT_UNAVAILABLE`` its views. A record whose strategy
takes another format's layer (``takes``: FlashInfer's helpers, a BF16 layer in) converts
through ``formats.table.convert_layer``. A layer of any format converts through
``formats.table.convert_layer``; ``convert`` is BF16's by its two tensors, ``convert_quant`` a
quantized ``QuantLayer``'s. The tests (``tests/test_memory.py``, ``tests/test_traffic.py``,
``tests/test_quant_memory.py``), the strategies table of docs/library.md
(``python -m moe_convert strategies --markdown``) and the byte limits of budgets.json
(``python -m benchmarks.budgets``) take their figures from the records.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, MutableMapping
from dataclasses import dataclass
from typing import Any

import torch

from ..checks import check_disjoint, check_weights
from ..formulas import LEGEND, Formula
from ..nvtx import nvtx_range

__all__ = [
    "MISSING",
    "QUANT_STRATEGIES",
    "QUANT_UNAVAILABLE",
    "REGISTRY",
    "STRATEGIES",
    "UNAVAILABLE",
    "Strategy",
    "StrategyFunction",
    "convert",
    "range_name",
    "register",
    "strategies_markdown",
    "update_markdown",
]

#: BF16's: ``(w13, w2, gated) -> (w13_out, w2_out)``, inputs already checked by ``check_weights``.
#: A quantized format's: ``(layer: QuantLayer, gated) -> QuantLayer``, checked by
#: ``check_quant_layer``.
StrategyFunction = Callable[..., Any]

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
    inplace: bool  # the result lives in the input's own storage (data_ptr unchanged)
    origin: str  # where it comes from: an engine's PR or release, a library's helper, "ours"
    needs: str = ""  # what must be installed or present for it to run ("": nothing more)
    peak: Formula | None = None  # peak transient bytes, dispatch level, row indices cached
    traffic: Formula | None = None  # bytes read + written (moe_convert.measuring.traffic's rule)
    launches: Formula | None = None  # data-moving ops of one call
    # What the CPU allocator sees above ``peak`` (memory.profiler_memory): kernels' own
    # temporaries, which the dispatch-level count cannot see.
    cpu_allocator_extra: Formula = ZERO
    format: str = "bf16"  # a key of formats.table.LAYER_FORMATS
    # The format of the layer it takes, where not its own (""): "bf16" for FlashInfer's helpers
    # (``<format>-flashinfer``), which quantize a BF16 layer themselves. Such a function takes
    # BF16's arguments ``(w13, w2, gated)`` and returns its format's ``QuantLayer``.
    takes: str = ""
    # Where it takes another format's layer: what its own quantizer makes of such a layer, as
    # the checkpoint stores it (a layer of ``format``); every other strategy of the format turns
    # that into its output (``formats.table.reference_conversion``).
    stored: StrategyFunction | None = None
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


#: name -> record of every format's strategy that runs here; looked up at call time.
REGISTRY: dict[str, Strategy] = {}
#: name -> record of every format's strategy this library has but that cannot run here
#: (``needs`` says what is missing): documented, not registered. ``UNAVAILABLE`` and
#: ``QUANT_UNAVAILABLE`` are its views.
MISSING: dict[str, Strategy] = {}


class _FormatView(MutableMapping[str, Strategy]):
    """The records of ``REGISTRY`` (``MISSING``, ``missing=True``) of BF16 (``bf16=True``) or of
    the quantized formats: a live view, in registration order, of the module's dict at call
    time; a write or ``pop`` goes to that dict."""

    def __init__(self, *, bf16: bool, missing: bool = False) -> None:
        self._bf16 = bf16
        self._missing = missing

    @property
    def _records(self) -> dict[str, Strategy]:
        return MISSING if self._missing else REGISTRY

    def _mine(self, record: Strategy) -> bool:
        return (record.format == "bf16") == self._bf16

    def __getitem__(self, name: str) -> Strategy:
        record = self._records[name]
        if not self._mine(record):
            raise KeyError(name)
        return record

    def __setitem__(self, name: str, record: Strategy) -> None:
        if not self._mine(record):
            raise ValueError(f"strategy {name!r} is of format {record.format!r}: not this view's")
        self._records[name] = record

    def __delitem__(self, name: str) -> None:
        self[name]  # KeyError where it is not this view's
        del self._records[name]

    def __iter__(self) -> Iterator[str]:
        return iter([name for name, record in self._records.items() if self._mine(record)])

    def __len__(self) -> int:
        return sum(self._mine(record) for record in self._records.values())

    def __repr__(self) -> str:
        return f"{type(self).__name__}({dict(self)!r})"


#: name -> record of every BF16 strategy that runs here (a view of ``REGISTRY``).
STRATEGIES: MutableMapping[str, Strategy] = _FormatView(bf16=True)
#: name -> record of every quantized strategy that runs here (a view of ``REGISTRY``).
QUANT_STRATEGIES: MutableMapping[str, Strategy] = _FormatView(bf16=False)
#: name -> record of every BF16 strategy documented but not registered here (``MISSING``'s).
UNAVAILABLE: MutableMapping[str, Strategy] = _FormatView(bf16=True, missing=True)
#: name -> record of every quantized strategy documented but not registered here.
QUANT_UNAVAILABLE: MutableMapping[str, Strategy] = _FormatView(bf16=False, missing=True)


def register(
    name: str,
    *,
    inplace: bool,
    origin: str,
    format: str = "bf16",
    needs: str = "",
    available: bool = True,
    peak: Formula | None = None,
    traffic: Formula | None = None,
    launches: Formula | None = None,
    cpu_allocator_extra: Formula = ZERO,
    takes: str = "",
    stored: StrategyFunction | None = None,
    not_on_meta: str = "",
) -> Callable[[StrategyFunction], StrategyFunction]:
    """Decorator: register the function as strategy ``name`` of ``format`` with its facts (see
    ``Strategy``).

    ``available=False`` (what ``needs`` names is missing here) keeps the record in ``MISSING``
    (``UNAVAILABLE``, ``QUANT_UNAVAILABLE``) instead of ``REGISTRY``. Registering a name again
    replaces its record. Returns the function unchanged.
    """

    def decorate(function: StrategyFunction) -> StrategyFunction:
        record = Strategy(
            name,
            function,
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
        (REGISTRY if available else MISSING)[name] = record
        (MISSING if available else REGISTRY).pop(name, None)
        return function

    return decorate


def convert(
    w13: torch.Tensor, w2: torch.Tensor, *, strategy: str, gated: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """Convert one layer's expert weights with the strategy registered as ``strategy``.

    ``w13`` bf16 ``[E, 2I, H]`` (``[E, I, H]`` when not gated) in checkpoint ``[w1; w3]`` order
    and ``w2`` bf16 ``[E, H, I]``, contiguous, on one device. Returns bf16
    ``([E, 2H/128, 2I, 64], [E, 2I/128, H, 64])``, byte-identical for every strategy. Whether
    the result is a new tensor or a view of the input's storage is the strategy's contract
    (``STRATEGIES[strategy].inplace``). Bad input raises ``TypeError``/``ValueError`` before any
    byte is written, and so do a ``w13`` and ``w2`` that share bytes, for an in-place strategy.

    On CUDA the call is the NVTX range ``moe_convert/<strategy>/<shape>`` (``range_name``).
    """
    try:
        record = STRATEGIES[strategy]
    except KeyError:
        raise ValueError(
            f"unknown strategy {strategy!r}; valid strategies: {', '.join(sorted(STRATEGIES))}"
        ) from None
    check_weights(w13, w2, gated=gated)
    if record.inplace:  # out-of-place strategies only read their input: overlap is harmless
        check_disjoint(w13, w2)
    with nvtx_range(range_name(strategy, w2), w2.device):
        return record.function(w13, w2, gated)


def range_name(strategy: str, w2: torch.Tensor) -> str:
    """``moe_convert/<strategy>/E<E>xH<H>xI<I>``: the NVTX range of one conversion, named by its
    sizes (``convert`` sees tensors, not the catalog's ``model/tpN`` label), from ``w2`` bf16
    ``[E, H, I]``: ``moe_convert/legacy/E128xH4096xI384`` for a Qwen3-235B-A22B TP4 layer."""
    experts, hidden, intermediate = w2.shape
    return f"moe_convert/{strategy}/E{experts}xH{hidden}xI{intermediate}"


def _code(formula: Formula | None) -> str:
    return "not stated" if formula is None else formula.describe("`")


#: The lines around the generated table in a markdown file (docs/library.md).
MARKDOWN_BEGIN = (
    "<!-- strategies table: generated from the registry by "
    "`python -m moe_convert strategies --update docs/library.md`; do not edit -->"
)
MARKDOWN_END = "<!-- end of the strategies table -->"


def strategies_markdown() -> str:
    """The legend and the table of every strategy of every format, registered here or not, by
    name: the text docs/library.md holds between ``MARKDOWN_BEGIN`` and ``MARKDOWN_END``."""
    records = sorted([*REGISTRY.values(), *MISSING.values()], key=lambda r: r.name)
    legend = "; ".join(f"{letter} {symbol.meaning}" for letter, symbol in LEGEND.items())
    lines = [
        f"Legend: {legend}. A space multiplies; `cdiv(a, b)` is `ceil(a / b)`.",
        "",
        "| strategy | from | needs | result | peak transient | traffic | launches |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in records:
        lines.append(
            f"| `{r.name}` | {r.origin} | {r.needs or '-'} | {r.result} | {_code(r.peak)} "
            f"| {_code(r.traffic)} | {_code(r.launches)} |"
        )
    return "\n".join(lines) + "\n"


def update_markdown(text: str) -> str:
    """``text`` (a markdown file) with what lies between ``MARKDOWN_BEGIN`` and ``MARKDOWN_END``
    replaced by ``strategies_markdown()``. Raises ``ValueError`` when the markers are missing."""
    begin, end = text.find(MARKDOWN_BEGIN), text.find(MARKDOWN_END)
    if begin < 0 or end < begin:
        raise ValueError(
            f"no strategies table: the file needs the line {MARKDOWN_BEGIN!r}, "
            f"then the line {MARKDOWN_END!r}"
        )
    return text[:begin] + MARKDOWN_BEGIN + "\n" + strategies_markdown() + text[end:]
