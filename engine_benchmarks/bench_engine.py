"""An engine's preparations at one of its commits, every format's, beside the frozen transcriptions.

asv's ``repo`` is the engine's git history (``moe-bench engine-config``): each commit is built
into the environment, and this suite (installed from the checkout) measures the engine's adapters
and the transcriptions of the forms vLLM's functions had, as reference lines (the same code at
every commit, on the same graphs). One grid per format (``GRIDS``), made from the adapters'
records by one rule (``_quant_grid``): BF16's is this module's (``ENGINE_STRATEGIES``: ``vllm``
calls vLLM's converter as installed, ``flashinfer`` FlashInfer's helpers; ``REFERENCE_STRATEGIES``:
vLLM's three forms), each quantized format's with a vLLM adapter (``PREPARATIONS``:
``<format>-vllm``) is a module ``bench_<format>.py`` of this folder (``format_benchmarks``), its
axis the adapter's kind, ``vllm``, then its forms' transcriptions' (``legacy``). A strategy not
registered at a commit (its engine, or its function, absent there) is n/a, so the grid is the same
for every engine and commit.

Legend: E experts, I intermediate size per rank, H hidden. Every figure of every grid comes from
one measurement per shape x strategy, made once per asv run in ``setup_cache`` (one import of the
engine, 10-13 s for vLLM, per commit, not per figure or format), of the figures the run selects
(``moe_suite.selection``: a PR run's or a bisection's ``--bench``; all in a nightly): peak
transient bytes, traffic bytes and launches of the full-size layer on ``meta`` (exact), and on
the local device one layer's seconds and its ratio to a same-size copy under the profile
(``MOE_BENCH_PROFILE``; the cpu profile times 8 experts, smoke one), and whether the preparation
is reload-safe (``Refit``: vLLM 0.34's direct and layerwise reload run on the installed function
through the adapter). The classes and methods are named as the main suite's
(``benchmarks/bench_convert.py``, ``bench_<format>.py``, ``bench_refit.py``), so the metrics
table judges them by the same rules (``moe_suite.metrics``: ``bench_engine`` is BF16's, listed;
a quantized module's figures are its format's, ``format_figure``).

A commit whose function no longer honours the form its code reads as (an in-place converter that
returns new tensors: ``engines.form_breaches``) is measured as it ran: its peak, traffic and
launches are recorded, and its time figures fail with the breach's line, the cell's failure.
"""

from __future__ import annotations

import dataclasses
import sys

import moe_convert
from moe_convert.formats.bf16.engines import VLLM
from moe_convert.formats.catalog import shape_from_label
from moe_convert.formats.engines import Engine, form_breaches
from moe_convert.formats.preparations import PREPARATIONS
from moe_convert.formats.shape import LayerShape
from moe_convert.load.refit import reload_safety
from moe_convert.measuring import timing
from moe_convert.measuring.memory import strategy_memory
from moe_convert.measuring.traffic import strategy_traffic
from moe_suite.profiles import TIMED_EXPERTS, detect_device, profile_from_env
from moe_suite.selection import selects

#: ``model/tpN``: the gated layer the engines' own BF16 figures are read on (docs/engines.md).
#: One shape a format: a history has a commit a few hours, and every commit pays every grid.
SHAPES = ("qwen3-235b-a22b/tp4",)
#: The engines' own BF16 code as installed (``moe_convert.formats.bf16.engines.ENGINES``'
#: adapters and FlashInfer's helpers), n/a where not installed; tests/test_engine_asv.py checks
#: it against ``ENGINES``.
ENGINE_STRATEGIES = ("vllm", "sglang-installed", "flashinfer")
#: The transcriptions of vLLM's BF16 forms (``legacy``, ``preallocated``, ``inplace``, frozen in
#: ``moe_convert.formats.bf16.strategies``): the reference lines.
REFERENCE_STRATEGIES = tuple(dict.fromkeys(form.transcription for form in VLLM.forms))
STRATEGIES = ENGINE_STRATEGIES + REFERENCE_STRATEGIES
#: The shape of each quantized format with a vLLM adapter (``PREPARATIONS``): the one the main
#: suite's cpu profile times (``benchmarks.formats.CPU_PROFILE_SHAPES``), else the format's
#: smallest; tests/test_engine_asv.py checks that every adapter's format has one.
QUANT_SHAPES = {
    "fp8": "llama-4-maverick-fp8/tp8",
    "fp8block": "deepseek-r1-fp8block/tp8",
    "mxfp8": "minimax-m3-mxfp8/tp4",
    "nvfp4": "qwen3-235b-a22b-nvfp4/tp4",
    "mxfp4": "gpt-oss-120b-mxfp4/tp2",
    "mxint4": "kimi-k2-thinking-mxint4/tp8",
}
#: Timed calls per cell (``benchmarks.formats.REPEATS``' reasoning: 9, each paired with a copy).
REPEATS = 9
#: CPU threads of every timed call (``benchmarks.common.CPU_THREADS``).
CPU_THREADS = 1


@dataclasses.dataclass(frozen=True)
class Grid:
    """One format's cells: its shapes (``model/tpN``) x its strategy axis (``strategies``: BF16's
    registry names, as recorded since before the formats; a quantized format's kinds, as the
    main suite's quantized grids)."""

    format: str
    shapes: tuple[str, ...]
    strategies: tuple[str, ...]

    def strategy(self, value: str) -> str:
        """The registry name of the axis value ``value``: BF16's own, else ``<format>-<kind>``."""
        return value if self.format == "bf16" else f"{self.format}-{value}"


def _quant_grid(engine: Engine) -> Grid:
    """A quantized adapter's grid: its format's ``QUANT_SHAPES`` shape x the adapter's kind
    (``vllm``), then the kinds of its forms' transcriptions (``legacy``), once each."""
    names = (engine.strategy, *dict.fromkeys(form.transcription for form in engine.forms))
    prefix = f"{engine.format}-"
    return Grid(
        engine.format,
        (QUANT_SHAPES[engine.format],),
        tuple(name.removeprefix(prefix) for name in names),
    )


#: format -> its grid: BF16's, then one per quantized adapter (``PREPARATIONS``).
GRIDS = {
    "bf16": Grid("bf16", SHAPES, STRATEGIES),
    **{engine.format: _quant_grid(engine) for engine in PREPARATIONS},
}


@dataclasses.dataclass(frozen=True)
class Figures:
    """Every figure of one cell this run reads (``None``: a figure no benchmark of the run's
    selection reads, not measured: ``moe_suite.selection``): exact on ``meta`` at full size,
    timed on the device; the strategy's reload class (``load.refit.reload_safety``:
    ``reload-safe``, or ``not reload-safe: `` and the reason); ``breach`` the line of the
    engine's breach of its code's form, if its calls made one."""

    peak_bytes: int | None = None
    traffic_bytes: int | None = None
    launches: int | None = None
    timing: timing.LayerTiming | None = None
    reload_safety: str | None = None
    breach: str | None = None


def _timed_shape(full: LayerShape, device: str) -> LayerShape:
    """``full`` with the profile's timed experts (``moe_suite.profiles.TIMED_EXPERTS``)."""
    experts = TIMED_EXPERTS[profile_from_env(device)]
    return full if experts is None else full.with_experts(experts)


def measure(shape: str, strategy: str, classes: frozenset[str] | None = None) -> Figures:
    """The figures ``classes`` (``CLASSES``' names; ``None``: all) read of one cell (``shape`` a
    ``model/tpN`` label, ``strategy`` a registry name), the engine's breaches of its code's form
    recorded, not raised (``form_breaches``)."""
    classes = frozenset(CLASSES) if classes is None else classes
    full = shape_from_label(shape)
    device = detect_device()
    figures = {}
    with form_breaches() as breaches:
        if "PeakMemory" in classes:
            figures["peak_bytes"] = strategy_memory(full, strategy, device="meta").peak_bytes
        if "Traffic" in classes:
            traffic = strategy_traffic(full, strategy)
            figures.update(traffic_bytes=traffic.traffic_bytes, launches=traffic.launches)
        if "LayerTime" in classes:
            figures["timing"] = timing.time_layer(
                _timed_shape(full, device),
                strategy,
                device=device,
                repeats=REPEATS,
                threads=CPU_THREADS,
                model_experts=full.experts,
            )
        if "Refit" in classes:
            figures["reload_safety"] = reload_safety(strategy)
    return Figures(**figures, breach="; ".join(breaches) or None)


def _selected(grid: Grid, shape: str, value: str) -> frozenset[str]:
    """The classes of ``grid`` (``CLASSES``' names) with a benchmark the run selects at the cell
    ``(shape, value)`` (``moe_suite.selection``: every class where the run selects all)."""
    module = "bench_engine" if grid.format == "bf16" else f"bench_{grid.format}"
    return frozenset(
        name
        for name, methods in CLASSES.items()
        if any(selects(f"{module}.{name}.{method}", (shape, value)) for method in methods)
    )


def measure_grid() -> dict[tuple[str, str], Figures | str]:
    """``measure`` of every cell of every grid whose strategy is registered here and which the
    run selects (``_selected``), keyed ``(shape, axis value)`` (the shapes of two grids differ);
    a cell that raises gets ``"failed: <error>"`` instead (it fails its own figures, not the
    grid's)."""
    results: dict[tuple[str, str], Figures | str] = {}
    for grid in GRIDS.values():
        for shape in grid.shapes:
            for value in grid.strategies:
                strategy = grid.strategy(value)
                classes = _selected(grid, shape, value)
                if strategy not in moe_convert.REGISTRY or not classes:
                    continue
                try:
                    results[shape, value] = measure(shape, strategy, classes)
                except Exception as error:  # the cell's finding: shown as its failure by asv
                    results[shape, value] = f"failed: {type(error).__name__}: {error}"
    return results


class _Grid:
    """Base of the classes below: a format's grid (``grid``: BF16's here, a quantized format's in
    its module, ``format_benchmarks``), every grid measured once per run (one ``setup_cache``
    for every class of every module: asv keys its cache by the function, so the engine is
    imported and measured once)."""

    grid = GRIDS["bf16"]
    params = [list(grid.shapes), list(grid.strategies)]
    param_names = ["shape", "strategy"]
    timeout = 300.0

    def setup_cache(self) -> dict[tuple[str, str], Figures | str]:
        return measure_grid()

    setup_cache.timeout = 1800.0

    def setup(self, cells: dict, shape: str, strategy: str) -> None:
        name = self.grid.strategy(strategy)
        if name not in moe_convert.REGISTRY:
            unavailable = moe_convert.UNAVAILABLE.get(name)
            why = f"it needs {unavailable.needs}" if unavailable else "its engine is not installed"
            raise NotImplementedError(f"strategy {name!r} is not registered here: {why}")
        measured = cells[shape, strategy]
        if isinstance(measured, str):
            raise RuntimeError(f"{shape} {name}: {measured}")
        self.figures = measured


class PeakMemory(_Grid):
    """Exact peak transient bytes of one full-size layer on ``meta``."""

    version = "1"
    unit = "bytes"

    def track_peak_transient_bytes(self, cells: dict, shape: str, strategy: str) -> int:
        return self.figures.peak_bytes


class Traffic(_Grid):
    """Exact bytes read + written and data-moving ops of one full-size layer on ``meta``."""

    version = "1"

    def track_traffic_bytes(self, cells: dict, shape: str, strategy: str) -> int:
        return self.figures.traffic_bytes

    track_traffic_bytes.unit = "bytes"

    def track_launches(self, cells: dict, shape: str, strategy: str) -> int:
        return self.figures.launches

    track_launches.unit = "launches"


class LayerTime(_Grid):
    """One layer's median seconds under the profile, and its median ratio to a same-size copy;
    both failed with the breach's line where the engine broke its code's form
    (``Figures.breach``): the cell's failure, reported where asv reports one (the exact figures
    of the same call are recorded; in a PR the paired row fails with the same line)."""

    version = "1"

    def setup(self, cells: dict, shape: str, strategy: str) -> None:
        super().setup(cells, shape, strategy)
        if self.figures.breach:
            raise RuntimeError(
                f"{shape} {self.grid.strategy(strategy)}: failed: {self.figures.breach}"
            )

    def track_layer_seconds(self, cells: dict, shape: str, strategy: str) -> float:
        return self.figures.timing.seconds

    track_layer_seconds.unit = "seconds"

    def track_copy_ratio(self, cells: dict, shape: str, strategy: str) -> float:
        return self.figures.timing.copy_ratio

    track_copy_ratio.unit = "ratio"


class Refit(_Grid):
    """Whether the strategy survives vLLM 0.34's reload (``load.refit.reload_safety``: in the
    ``direct`` and ``layerwise`` ways every output keeps the first load's storage and holds a
    cold conversion's bytes, checked on the library's small shapes): 1 where it does, 0 where
    not, the reason written to the run's log (``--show-stderr``)."""

    version = "1"

    def track_reload_safe(self, cells: dict, shape: str, strategy: str) -> int:
        safe = self.figures.reload_safety == "reload-safe"
        if not safe:
            print(f"{shape} {self.grid.strategy(strategy)}: {self.figures.reload_safety}",
                  file=sys.stderr)  # fmt: skip
        return int(safe)

    track_reload_safe.unit = "class"


_BASES = (PeakMemory, Traffic, LayerTime, Refit)
#: Each grid's classes by name, with their benchmarks: what ``_selected`` matches the run's
#: selection against, and ``measure`` measures for.
CLASSES = {base.__name__: tuple(n for n in vars(base) if n.startswith("track_")) for base in _BASES}


def format_benchmarks(fmt: str, module: str) -> dict[str, type]:
    """Quantized format ``fmt``'s classes for its module ``module`` (its ``__name__``:
    ``bench_<fmt>``, which asv and the metrics table name them by): this module's, over its grid
    (``GRIDS[fmt]``), every method and the one ``setup_cache`` inherited."""
    grid = GRIDS[fmt]
    return {
        base.__name__: type(
            base.__name__,
            (base,),
            {
                "__module__": module,
                "__qualname__": base.__name__,
                "__doc__": f"{fmt.upper()}: {base.__doc__}",
                "grid": grid,
                "params": [list(grid.shapes), list(grid.strategies)],
            },
        )
        for base in _BASES
    }
