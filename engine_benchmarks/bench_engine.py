"""An engine's converter at one of its commits, beside the frozen transcriptions.

asv's ``repo`` is the engine's git history (``moe-bench engine-config``): each commit is built
into the environment, and this suite (installed from the checkout) measures the engine's adapters
(``ENGINE_STRATEGIES``: ``vllm`` calls vLLM's converter as installed, ``flashinfer`` FlashInfer's
helpers) and the transcriptions of vLLM's three forms (``REFERENCE_STRATEGIES``: the same lines at
every commit, on the same graphs). A strategy whose engine is not installed is n/a, so the grid is
the same for every engine and commit.

Legend: E experts, I intermediate size per rank, H hidden. Every figure of the grid comes from one
measurement per shape x strategy, made once per asv run in ``setup_cache`` (one import of the
engine, 10-13 s for vLLM, per commit, not per figure): peak transient bytes, traffic bytes and
launches of the full-size layer on ``meta`` (exact), and on the local device one layer's seconds
and its ratio to a same-size copy under the profile (``MOE_BENCH_PROFILE``; the cpu profile times
8 experts). The classes and methods are named as ``benchmarks/bench_convert.py``'s, so the metrics
table judges them by the same rules (``moe_suite.metrics``).
"""

from __future__ import annotations

import dataclasses

import moe_convert
from moe_convert.formats.catalog import shape_from_label
from moe_convert.formats.shape import LayerShape
from moe_convert.measuring import timing
from moe_convert.measuring.memory import strategy_memory
from moe_convert.measuring.traffic import strategy_traffic
from moe_suite.profiles import detect_device, profile_from_env

#: ``model/tpN``: the gated layer the engines' own figures are read on (docs/engines.md). One
#: shape: a history has a commit a few hours, and every commit pays the whole grid.
SHAPES = ("qwen3-235b-a22b/tp4",)
#: The engines' own code as installed (``moe_convert.formats.bf16.engines.ENGINES``' adapters
#: and FlashInfer's helpers), n/a where not installed; tests/test_engine_asv.py checks it against
#: ``ENGINES``.
ENGINE_STRATEGIES = ("vllm", "sglang-installed", "flashinfer")
#: vLLM's three forms, frozen in ``moe_convert.formats.bf16.strategies``: the reference lines.
REFERENCE_STRATEGIES = ("legacy", "preallocated", "inplace")
STRATEGIES = ENGINE_STRATEGIES + REFERENCE_STRATEGIES
#: Timed calls per cell (``benchmarks.formats.REPEATS``' reasoning: 9, each paired with a copy).
REPEATS = 9
#: Experts a timed layer converts in the cpu profile (``benchmarks.common.CPU_PROFILE_EXPERTS``).
CPU_PROFILE_EXPERTS = 8
#: CPU threads of every timed call (``benchmarks.common.CPU_THREADS``).
CPU_THREADS = 1


@dataclasses.dataclass(frozen=True)
class Figures:
    """Every figure of one cell: exact on ``meta`` at full size, timed on the device."""

    peak_bytes: int
    traffic_bytes: int
    launches: int
    timing: timing.LayerTiming


def _timed_shape(full: LayerShape, device: str) -> LayerShape:
    cpu_profile = profile_from_env(device) == "cpu"
    return full.with_experts(CPU_PROFILE_EXPERTS) if cpu_profile else full


def measure(shape: str, strategy: str) -> Figures:
    """Every figure of one cell (``shape`` a ``model/tpN`` label, ``strategy`` a registry name)."""
    full = shape_from_label(shape)
    device = detect_device()
    traffic = strategy_traffic(full, strategy)
    return Figures(
        peak_bytes=strategy_memory(full, strategy, device="meta").peak_bytes,
        traffic_bytes=traffic.traffic_bytes,
        launches=traffic.launches,
        timing=timing.time_layer(
            _timed_shape(full, device),
            strategy,
            device=device,
            repeats=REPEATS,
            threads=CPU_THREADS,
            model_experts=full.experts,
        ),
    )


def measure_grid() -> dict[tuple[str, str], Figures | str]:
    """``measure`` of every cell whose strategy is registered here; a cell that raises gets
    ``"failed: <error>"`` instead (it fails its own figures, not the grid's)."""
    results: dict[tuple[str, str], Figures | str] = {}
    for shape in SHAPES:
        for strategy in STRATEGIES:
            if strategy not in moe_convert.REGISTRY:
                continue
            try:
                results[shape, strategy] = measure(shape, strategy)
            except Exception as error:  # the cell's finding: shown as its failure by asv
                results[shape, strategy] = f"failed: {type(error).__name__}: {error}"
    return results


class _Grid:
    """Base of the classes below: ``SHAPES`` x ``STRATEGIES``, the grid measured once per run
    (one ``setup_cache`` for every class: asv keys its cache by the function, so the engine is
    imported and measured once)."""

    params = [list(SHAPES), list(STRATEGIES)]
    param_names = ["shape", "strategy"]
    timeout = 300.0

    def setup_cache(self) -> dict[tuple[str, str], Figures | str]:
        return measure_grid()

    setup_cache.timeout = 1800.0

    def setup(self, grid: dict, shape: str, strategy: str) -> None:
        if strategy not in moe_convert.REGISTRY:
            raise NotImplementedError(
                f"strategy {strategy!r} is not registered here (its engine is not installed)"
            )
        measured = grid[shape, strategy]
        if isinstance(measured, str):
            raise RuntimeError(f"{shape} {strategy}: {measured}")
        self.figures = measured


class PeakMemory(_Grid):
    """Exact peak transient bytes of one full-size layer on ``meta``."""

    version = "1"
    unit = "bytes"

    def track_peak_transient_bytes(self, grid: dict, shape: str, strategy: str) -> int:
        return self.figures.peak_bytes


class Traffic(_Grid):
    """Exact bytes read + written and data-moving ops of one full-size layer on ``meta``."""

    version = "1"

    def track_traffic_bytes(self, grid: dict, shape: str, strategy: str) -> int:
        return self.figures.traffic_bytes

    track_traffic_bytes.unit = "bytes"

    def track_launches(self, grid: dict, shape: str, strategy: str) -> int:
        return self.figures.launches

    track_launches.unit = "launches"


class LayerTime(_Grid):
    """One layer's median seconds under the profile, and its median ratio to a same-size copy."""

    version = "1"

    def track_layer_seconds(self, grid: dict, shape: str, strategy: str) -> float:
        return self.figures.timing.seconds

    track_layer_seconds.unit = "seconds"

    def track_copy_ratio(self, grid: dict, shape: str, strategy: str) -> float:
        return self.figures.timing.copy_ratio

    track_copy_ratio.unit = "ratio"
