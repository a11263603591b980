"""The quantized formats (NVFP4, MXFP4, FP8): exact peak memory, work, the replayed loads, time.

Parametrised over quantized catalog shape x kind (``QUANT_SHAPES`` x ``QUANT_KINDS``), the
parameters named ``shape`` and ``strategy`` as everywhere in the suite (moe_bench keys results
by them); a cell's strategy is ``<format>-<kind>``, the format the shape's (``fast`` on
``kimi-k2-nvfp4/tp8`` is ``nvfp4-fast``), so the grid reads as one row per model and one column
per kind, with no n/a cells but the shapes the cpu profile does not time. Every figure but
time is full size on ``meta``: exact, deterministic, the same on every machine and in every
profile. Time (``QuantLayerTime``) follows the BF16 rules (``bench_convert.LayerTime``: the
profile's expert count, a same-size copy interleaved; the paired A/B of ``benchmarks.paired``
decides it in the PR gate); the cpu profile times ``CPU_PROFILE_QUANT_SHAPES`` only.

asv takes this file from the checkout and the library from the measured commit: a commit
before the quantized formats has no ``moe_convert.QUANT_STRATEGIES``, and every cell is n/a there
(so this module imports from the library only what such a commit has, the rest when measuring).
"""

from __future__ import annotations

import functools

from moe_convert.wholemodel import VLLM_LOAD_MAX_SPLIT_MB

from . import bench_convert, common

#: Quantized catalog shapes, ``model/tpN`` (``moe_convert.quant_formats.QUANT_CATALOG``),
#: written out: parameters must not depend on the installed library.
QUANT_SHAPES = (
    "kimi-k2-nvfp4/tp8",
    "deepseek-r1-nvfp4/tp4",
    "qwen3-235b-a22b-nvfp4/tp4",
    "gpt-oss-120b-mxfp4/tp1",
    "gpt-oss-120b-mxfp4/tp2",
    "gpt-oss-20b-mxfp4/tp1",
    "llama-4-maverick-fp8/tp8",
)
#: The strategies of each format: the upstream path, then this library's.
QUANT_KINDS = ("legacy", "preallocated", "inplace", "fast")
#: The shapes the cpu profile times: per format the one of the smallest expert (every shape of a
#: format runs the same code; on CPU, time serves the paired A/B of a change). The whole grid
#: took 77 s at 8 experts on the shared 2-core machine (load 3.7-4.0), these three 30 s of it;
#: the full profile times every shape.
CPU_PROFILE_QUANT_SHAPES = (
    "qwen3-235b-a22b-nvfp4/tp4",
    "gpt-oss-120b-mxfp4/tp2",
    "llama-4-maverick-fp8/tp8",
)


def full_quant_shape(label: str):
    """The full-size ``QuantLayerShape`` of ``label`` (``model/tpN``)."""
    from moe_convert.quant_formats import quant_shape_from_label

    return quant_shape_from_label(label)


def timed_quant_shape(label: str):
    """The shape ``QuantLayerTime`` converts under the profile in use (``common.timed_shape``'s
    rule: the cpu profile keeps each expert's geometry but ``common.CPU_PROFILE_EXPERTS``
    experts); ``None`` for a shape the cpu profile does not time."""
    shape = full_quant_shape(label)
    if common.profile() != "cpu":
        return shape
    return (
        shape.with_experts(common.CPU_PROFILE_EXPERTS)
        if label in CPU_PROFILE_QUANT_SHAPES
        else None
    )


def _shape_and_strategy(label: str, kind: str):
    """The full-size shape of ``label`` and its format's strategy of ``kind``."""
    shape = full_quant_shape(label)
    return shape, f"{shape.format}-{kind}"


def _measure_grid(measure, shapes: tuple[str, ...] = QUANT_SHAPES) -> dict[tuple[str, str], object]:
    """``measure(shape, kind)`` of every quantized cell of ``shapes``, as ``common.measure_grid``
    measures its own (a worker process; a cell that fails holds the reason's text); empty where
    this commit's library has no quantized formats."""
    if not _has_quant_formats():
        return {}
    return common.measure_cells(
        measure, [(label, kind) for label in shapes for kind in QUANT_KINDS]
    )


def _has_quant_formats() -> bool:
    """Whether this commit's library has the quantized formats: its package exports
    ``QUANT_STRATEGIES`` (asked of the package, not by importing a submodule, which an editable
    install of a newer tree could answer)."""
    import moe_convert

    return hasattr(moe_convert, "QUANT_STRATEGIES")


_NO_QUANT = "this commit's library has no quantized formats (moe_convert.QUANT_STRATEGIES)"


def _skip_untimed(label: str) -> None:
    common.skip(f"the {common.profile()} profile does not time {label} (CPU_PROFILE_QUANT_SHAPES)")


def _cell(results: dict, label: str, kind: str):
    if not results:  # _measure_grid's answer on such a commit
        common.skip(_NO_QUANT)
    if (label, kind) not in results:
        _skip_untimed(label)
    measured = results[label, kind]
    if isinstance(measured, str):
        raise RuntimeError(f"{label} {kind} failed: {measured}")
    return measured


def _peak(label: str, kind: str) -> int:
    from moe_convert.memory import measure_memory
    from moe_convert.quant_registry import quant_strategy_call

    shape, strategy = _shape_and_strategy(label, kind)
    return measure_memory(quant_strategy_call(shape, strategy, "meta")).peak_bytes


def _traffic(label: str, kind: str):
    from moe_convert.quant_registry import quant_strategy_call
    from moe_convert.traffic import measure_traffic

    shape, strategy = _shape_and_strategy(label, kind)
    measured = measure_traffic(quant_strategy_call(shape, strategy, "meta"))
    return measured.traffic_bytes, measured.launches


def _replay(label: str, kind: str):
    from moe_convert.quant_replay import replay_quant_load

    shape, strategy = _shape_and_strategy(label, kind)
    return replay_quant_load(
        shape, strategy, max_split_size_mb=VLLM_LOAD_MAX_SPLIT_MB, pool="sleep", device_bytes=None
    )


def _time(label: str, kind: str):
    from moe_convert.timing import time_layer

    shape, strategy = _shape_and_strategy(label, kind)
    return time_layer(
        timed_quant_shape(label),
        strategy,
        device=common.device(),
        repeats=bench_convert.REPEATS,
        threads=common.CPU_THREADS,
        model_experts=shape.experts,
    )


def _rank_load(device: str, label: str, kind: str):
    from moe_convert.quant_replay import quant_rank_load
    from moe_convert.wholemodel import LOAD_DEVICES

    return quant_rank_load(*_shape_and_strategy(label, kind), LOAD_DEVICES[device])


class QuantGrid:
    """Base of the quantized benchmarks: ``QUANT_SHAPES`` x ``QUANT_KINDS``, measured once per
    asv run in ``setup_cache``. No benchmark itself."""

    params = [list(QUANT_SHAPES), list(QUANT_KINDS)]
    param_names = ["shape", "strategy"]
    timeout = 300.0

    def setup(self, results: dict, shape: str, kind: str) -> None:
        self.measured = _cell(results, shape, kind)


class QuantPeakMemory(QuantGrid):
    """Exact peak transient bytes of one full-size quantized layer (dispatch level, ``meta``):
    each strategy's ``QUANT_STRATEGIES[name].peak``. The PR gate compares it exactly."""

    version = "1"
    unit = "bytes"

    def setup_cache(self) -> dict:
        return _measure_grid(_peak)

    # 28 cells: about 30 s on the shared 2-core machine (the folded scale indices built once).
    setup_cache.timeout = 300.0

    def track_peak_transient_bytes(self, results: dict, shape: str, kind: str) -> int:
        return self.measured


class QuantTraffic(QuantGrid):
    """Exact bytes read + written and data-moving ops of one full-size quantized layer, on
    ``meta`` (``moe_convert.traffic``'s rule; each record's ``traffic`` and ``launches``)."""

    version = "1"

    def setup_cache(self) -> dict:
        return _measure_grid(_traffic)

    setup_cache.timeout = 300.0

    def track_traffic_bytes(self, results: dict, shape: str, kind: str) -> int:
        return self.measured[0]

    track_traffic_bytes.unit = "bytes"

    def track_launches(self, results: dict, shape: str, kind: str) -> int:
        return self.measured[1]

    track_launches.unit = "launches"


class QuantSleepModeReplay(QuantGrid):
    """The quantized model's sleep-mode load replayed at ``max_split_size_mb`` 20 on an
    unbounded device (``moe_convert.quant_replay``): the peak reserved bytes, and the reserved
    growth per converted layer (segments stranded by 1-10 MiB temporaries)."""

    version = "1"
    unit = "bytes"

    def setup_cache(self) -> dict:
        return _measure_grid(_replay)

    # 28 cells: about 45 s on the shared 2-core machine.
    setup_cache.timeout = 600.0

    def track_peak_reserved_bytes(self, results: dict, shape: str, kind: str) -> int:
        return self.measured.peak_reserved_bytes

    def track_reserved_growth_per_layer_bytes(self, results: dict, shape: str, kind: str) -> int:
        return self.measured.reserved_growth_per_layer_bytes


class _QuantRankLoad(QuantGrid, common.RankLoadFigures):
    """The quantized rank's load as vLLM makes it (the default pool at ``max_split_size_mb`` 20,
    ``moe_convert.quant_replay.quant_rank_load``) on one device: ``common.RankLoadFigures``'
    figures, exact and gated, ``track_layers_lost_to_oom`` naming the OOM (its layer is the
    rank's layers less those lost). One class per device (``wholemodel.LOAD_DEVICES``), a third
    parameter would be a column moe_bench does not key results by; each writes its own
    ``setup_cache`` (asv shares an inherited one)."""

    version = "1"

    def setup(self, loads: dict, shape: str, kind: str) -> None:
        self.result = _cell(loads, shape, kind)


class QuantRankLoadGB200(_QuantRankLoad):
    """``_QuantRankLoad`` on a GB200: ``wholemodel.DEVICE_GB200_BYTES`` (184 GiB)."""

    def setup_cache(self) -> dict:
        return _measure_grid(functools.partial(_rank_load, "GB200"))

    # 28 cells: 21 s wall on the shared 2-core machine at load 3.2 (the upstream paths' traces
    # most of it; `QuantRankLoadGB200().setup_cache()`, timed).
    setup_cache.timeout = 300.0


class QuantRankLoadH200(_QuantRankLoad):
    """``_QuantRankLoad`` on an H200: ``wholemodel.DEVICE_141GB_BYTES`` (139.5 GiB of its
    141 GB)."""

    def setup_cache(self) -> dict:
        return _measure_grid(functools.partial(_rank_load, "H200"))

    # 28 cells: 24 s wall on the shared 2-core machine at load 3.7, timed as the GB200 one.
    setup_cache.timeout = 300.0


class QuantLayerTime(QuantGrid, common.LayerTimeFigures):
    """One quantized layer's time, its ratio to a same-size copy of all its tensors and the whole
    model's seconds: ``common.LayerTimeFigures``, by ``bench_convert.LayerTime``'s rules
    (``moe_convert.timing.time_layer`` of a ``QuantLayerShape``, ``bench_convert.REPEATS``
    calls), the grid measured once in ``setup_cache``; the cpu profile times
    ``CPU_PROFILE_QUANT_SHAPES`` (the other shapes n/a, saying so). Judged by the paired A/B
    in the PR gate."""

    version = "1"

    def setup_cache(self) -> dict:
        shapes = tuple(label for label in QUANT_SHAPES if timed_quant_shape(label) is not None)
        return _measure_grid(_time, shapes)

    # The cpu profile's 12 cells: 30 s on the shared 2-core machine (load 3.5).
    setup_cache.timeout = 900.0


class QuantProfile:
    """Experts per quantized layer ``QuantLayerTime`` converts under the profile in use (n/a for a
    shape the cpu profile does not time): ``bench_convert.Profile`` for the quantized grid."""

    version = "1"
    unit = "experts"
    params = [list(QUANT_SHAPES)]
    param_names = ["shape"]

    def setup(self, shape: str) -> None:
        if not _has_quant_formats():
            common.skip(_NO_QUANT)
        self.timed = timed_quant_shape(shape)
        if self.timed is None:
            _skip_untimed(shape)

    def track_timed_experts(self, shape: str) -> int:
        return self.timed.experts
