"""The strategy registry: one record per strategy holding every fact about it, and ``convert``.

A record (``Strategy``) holds a strategy's function, whether its result lives in the input's own
storage (``inplace``), where it comes from (``origin``), what it needs to run here (``needs``)
and its figures as formulas of the layer shape (``moe_convert.formulas``): peak transient bytes,
traffic, launches and what the CPU allocator sees above the peak. Each strategy module registers
a function with ``@register(...)`` right above it. The tests (``tests/test_memory.py``,
``tests/test_traffic.py``), the strategies table of docs/library.md
(``python -m moe_convert strategies --markdown``) and the byte limits of budgets.json
(``python -m benchmarks.budgets``) take their figures from the records.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ...checks import check_disjoint, check_weights
from ...formulas import LEGEND, Formula
from ...nvtx import nvtx_range

__all__ = [
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

#: ``(w13, w2, gated) -> (w13_out, w2_out)``, inputs already checked by ``check_weights``.
StrategyFunction = Callable[[torch.Tensor, torch.Tensor, bool], tuple[torch.Tensor, torch.Tensor]]

#: The figure of a strategy with nothing to add (``cpu_allocator_extra``).
ZERO = Formula("0")


@dataclass(frozen=True)
class Strategy:
    """One registered strategy: its function and the facts about it, in one place.

    The formulas are exact, checked to the byte at full size by the tests; ``None`` where a
    strategy does not state one (the tests then fail for a registered strategy).
    """

    name: str
    function: StrategyFunction
    inplace: bool  # the result is a 4-D view of the input's own storage (data_ptr unchanged)
    origin: str  # where it comes from: an engine's PR or release, a library's helper, "ours"
    needs: str = ""  # what must be installed or present for it to run ("": nothing more)
    peak: Formula | None = None  # peak transient bytes, dispatch level, row indices cached
    traffic: Formula | None = None  # bytes read + written (moe_convert.measuring.traffic's rule)
    launches: Formula | None = None  # data-moving ops of one call
    # What the CPU allocator sees above ``peak`` (memory.profiler_memory): kernels' own
    # temporaries, which the dispatch-level count cannot see.
    cpu_allocator_extra: Formula = ZERO

    @property
    def result(self) -> str:
        """What ``convert`` returns: ``views of the input`` or ``new tensors``."""
        return "views of the input" if self.inplace else "new tensors"


#: name -> record of every strategy that runs here; looked up by ``convert`` at call time.
STRATEGIES: dict[str, Strategy] = {}
#: name -> record of a strategy this library has but that cannot run here (``needs`` says what
#: is missing): documented, not registered.
UNAVAILABLE: dict[str, Strategy] = {}


def register(
    name: str,
    *,
    inplace: bool,
    origin: str,
    needs: str = "",
    available: bool = True,
    peak: Formula | None = None,
    traffic: Formula | None = None,
    launches: Formula | None = None,
    cpu_allocator_extra: Formula = ZERO,
) -> Callable[[StrategyFunction], StrategyFunction]:
    """Decorator: register the function as strategy ``name`` with its facts (see ``Strategy``).

    ``available=False`` (what ``needs`` names is missing here) keeps the record in
    ``UNAVAILABLE`` instead of ``STRATEGIES``. Registering a name again replaces its record.
    Returns the function unchanged.
    """

    def decorate(function: StrategyFunction) -> StrategyFunction:
        record = Strategy(
            name, function, inplace, origin, needs, peak, traffic, launches, cpu_allocator_extra
        )
        (STRATEGIES if available else UNAVAILABLE)[name] = record
        (UNAVAILABLE if available else STRATEGIES).pop(name, None)
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
    """The legend and the table of every strategy, registered here or not, by name: the text
    docs/library.md holds between ``MARKDOWN_BEGIN`` and ``MARKDOWN_END``."""
    records = sorted([*STRATEGIES.values(), *UNAVAILABLE.values()], key=lambda r: r.name)
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
