"""The quantized formats' figures, written once for every format (NVFP4, MXFP4, FP8 per-tensor,
DeepSeek block-FP8, MXFP8, MXINT4): the grid, its measurements and the benchmark classes each
format's module makes its own.

Each format is a module of the suite, ``bench_<format>.py``, whose classes ``format_benchmarks``
makes from this module's: named as BF16's in ``bench_convert`` and ``bench_allocator``
(``PeakMemory``, ``Traffic``, ``CudaMemory``, ``SleepModeReplay``, ``LayerTime``, ``Profile``,
and ``RankLoadGB200``/``RankLoadH200`` for ``RankLoadReplay``), so the dashboard lists a format's
figures together (``bench_nvfp4.PeakMemory.track_peak_transient_bytes``) and each figure is
judged and shown as its BF16 sibling (``moe_bench.metrics.quant_sibling``). This module itself
holds no benchmark: its classes are private, which asv's discovery skips.

A format's grid is its catalog shapes (``FORMAT_SHAPES``) x ``QUANT_KINDS``, the parameters named
``shape`` and ``strategy`` as everywhere in the suite (moe_bench keys results by them); a cell's
strategy is ``<format>-<kind>`` (``fast`` on ``kimi-k2-nvfp4/tp8`` is ``nvfp4-fast``), so the grid
reads as one row per model and one column per kind. Every figure but time and ``CudaMemory`` is
full size on ``meta``: exact, deterministic, the same on every machine and in every profile.
Time (``LayerTime``) follows the BF16 rules (``bench_convert.LayerTime``: the profile's expert
count, a same-size copy interleaved; the paired A/B of ``benchmarks.paired`` decides it in the
PR gate); the cpu profile times ``CPU_PROFILE_QUANT_SHAPES`` only.

Each figure's ``setup_cache`` is defined here once, so asv (which keys a cache by the function's
file and line) runs it once per run for every format's classes: it measures every format's
cells, and each class reads its own.

asv takes this file from the checkout and the library from the measured commit: a commit
before the quantized formats has no ``moe_convert.QUANT_STRATEGIES``, and every cell is n/a there
(so this module imports from the library only what such a commit has, the rest when measuring).
"""

from __future__ import annotations

import dataclasses
import functools

from . import bench_convert, common, library

wholemodel = library.module("load.wholemodel")

#: Each format's catalog shapes, ``model/tpN`` (``formats.quant.catalog.QUANT_CATALOG``),
#: written out: parameters must not depend on the installed library.
FORMAT_SHAPES = {
    "nvfp4": ("kimi-k2-nvfp4/tp8", "deepseek-r1-nvfp4/tp4", "qwen3-235b-a22b-nvfp4/tp4"),
    "mxfp4": ("gpt-oss-120b-mxfp4/tp1", "gpt-oss-120b-mxfp4/tp2", "gpt-oss-20b-mxfp4/tp1"),
    "fp8": ("llama-4-maverick-fp8/tp8",),
    "fp8block": ("deepseek-r1-fp8block/tp8",),
    "mxfp8": ("minimax-m3-mxfp8/tp4",),
    "mxint4": ("kimi-k2-thinking-mxint4/tp4", "kimi-k2-thinking-mxint4/tp8"),
}
#: Every quantized shape, in the catalog's order.
QUANT_SHAPES = tuple(label for labels in FORMAT_SHAPES.values() for label in labels)
#: The strategies of each format: the upstream path, this library's, then FlashInfer's own
#: helper (``<format>-flashinfer``, a BF16 layer in: registered for FP8 per-tensor where
#: FlashInfer is installed, for NVFP4, MXFP8 and MXINT4 where CUDA is too, never for MXFP4 and
#: block-FP8; FP8's runs on meta, the others' meta figures are n/a, the reason given).
QUANT_KINDS = ("legacy", "preallocated", "inplace", "fast", "flashinfer")
#: The shapes the cpu profile times: per format the one of the smallest expert (every shape of a
#: format runs the same code; on CPU, time serves the paired A/B of a change). The whole grid
#: took 77 s at 8 experts on the shared 2-core machine (load 3.7-4.0), the first three 30 s of
#: it; deepseek-r1-fp8block/tp8's four cells 3.9 s (load 1.2-1.3); the full profile times every
#: shape. minimax-m3-mxfp8/tp4 is not timed here: its four cells took 9.0 s (load 1.8-2.0), most
#: of it the upstream path's 0.3 s calls, and its three kinds of ours run NVFP4's code, whose
#: qwen3-235b-a22b-nvfp4/tp4 cells the profile times. Neither MXINT4 shape is timed here: at 8
#: experts mxint4-legacy's calls took 0.87-1.05 s (its sign step: 120 passes over the weights),
#: a cell 13-14 s (load 4.5-8, /tmp/i29/cpu_time.py in docs/formats.md).
CPU_PROFILE_QUANT_SHAPES = (
    "qwen3-235b-a22b-nvfp4/tp4",
    "gpt-oss-120b-mxfp4/tp2",
    "llama-4-maverick-fp8/tp8",
    "deepseek-r1-fp8block/tp8",
)


def full_quant_shape(label: str):
    """The full-size layer shape of ``label`` (``model/tpN``), through the package's
    ``quant_layer_shape``: every commit with the formats exports it, whatever module holds it."""
    import moe_convert

    model, _, tp = label.rpartition("/tp")
    return moe_convert.quant_layer_shape(model, int(tp))


def is_timed(label: str) -> bool:
    """Whether the profile in use times ``label``: every shape but in the cpu profile, which
    times ``CPU_PROFILE_QUANT_SHAPES``. From the label alone: a commit without the formats
    answers it too (its cells are n/a, not failed)."""
    return common.profile() != "cpu" or label in CPU_PROFILE_QUANT_SHAPES


def timed_quant_shape(label: str):
    """The shape ``LayerTime`` converts under the profile in use (``common.timed_shape``'s
    rule: the cpu profile keeps each expert's geometry but ``common.CPU_PROFILE_EXPERTS``
    experts); ``None`` for a shape it does not time (``is_timed``)."""
    if not is_timed(label):
        return None
    shape = full_quant_shape(label)
    return shape if common.profile() != "cpu" else shape.with_experts(common.CPU_PROFILE_EXPERTS)


def _shape_and_strategy(label: str, kind: str):
    """The full-size shape of ``label`` and its format's strategy of ``kind``."""
    shape = full_quant_shape(label)
    return shape, f"{shape.format}-{kind}"


@dataclasses.dataclass(frozen=True)
class _NotHere:
    """A cell ``_measure_grid`` does not measure here (asv shows n/a), and why."""

    reason: str


def _not_here(label: str, kind: str, *, on_meta: bool) -> _NotHere | None:
    """Why the cell cannot be measured here: its strategy is not registered (what it needs, or
    that the library has none of that name), or, for a figure measured on meta, its strategy
    cannot run there (``Strategy.not_on_meta``); ``None`` where it can."""
    import moe_convert

    strategy = _shape_and_strategy(label, kind)[1]
    record = moe_convert.QUANT_STRATEGIES.get(strategy)
    if record is None:
        missing = getattr(moe_convert, "QUANT_UNAVAILABLE", {}).get(strategy)
        why = f"it needs {missing.needs}" if missing else "this library has no such strategy"
        return _NotHere(f"{strategy} is not registered here: {why} (docs/formats.md)")
    if on_meta and getattr(record, "not_on_meta", ""):
        return _NotHere(
            f"{strategy} cannot run on meta ({record.not_on_meta}): its figures are its "
            "record's formulas (python -m moe_convert strategies)"
        )
    return None


def _measure_grid(
    measure, shapes: tuple[str, ...] | None = None, *, on_meta: bool = True
) -> dict[tuple[str, str], object]:
    """``measure(shape, kind)`` of every quantized cell of ``shapes`` (every format's, by
    default), as ``common.measure_grid`` measures its own (a worker process; a cell that fails
    holds the reason's text; one not measured here a ``_NotHere``, ``on_meta``: ``measure``
    runs on meta); empty where this commit's library has no quantized formats."""
    if not _has_quant_formats():
        return {}
    shapes = QUANT_SHAPES if shapes is None else shapes
    cells = [(label, kind) for label in shapes for kind in QUANT_KINDS]
    not_here = {cell: _not_here(*cell, on_meta=on_meta) for cell in cells}
    measured = common.measure_cells(measure, [cell for cell in cells if not_here[cell] is None])
    return {cell: measured.get(cell, not_here[cell]) for cell in cells}


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
    if isinstance(measured, _NotHere):
        common.skip(measured.reason)
    if isinstance(measured, str):
        raise RuntimeError(f"{label} {kind} failed: {measured}")
    return measured


def _library():
    """The measured commit's functions for a quantized layer, ``(call, replay, rank_load)``:
    every format's ``moe_convert.layer_call``, ``replay.replay_load`` and ``replay.rank_load``
    (issue 28's format axis; the layout asked of the package, as ``library.module`` does), or
    on a commit before it ``quant_registry.quant_strategy_call`` and ``quant_replay``'s
    ``replay_quant_load`` and ``quant_rank_load``, which took the same arguments."""
    import moe_convert

    if hasattr(moe_convert, "LAYER_FORMATS"):
        replay = library.module("load.replay")
        return moe_convert.layer_call, replay.replay_load, replay.rank_load
    try:  # issue 28's first step: the format table in moe_convert.formats, modules flat
        from moe_convert.formats import layer_call
        from moe_convert.replay import rank_load, replay_load
    except ImportError:  # a commit before the format axis
        from moe_convert.quant_registry import quant_strategy_call as layer_call
        from moe_convert.quant_replay import quant_rank_load as rank_load
        from moe_convert.quant_replay import replay_quant_load as replay_load
    return layer_call, replay_load, rank_load


def _peak(label: str, kind: str) -> int:
    measure_memory = library.module("measuring.memory").measure_memory

    shape, strategy = _shape_and_strategy(label, kind)
    return measure_memory(_library()[0](shape, strategy, "meta")).peak_bytes


def _traffic(label: str, kind: str):
    measure_traffic = library.module("measuring.traffic").measure_traffic

    shape, strategy = _shape_and_strategy(label, kind)
    # Totals only (``bench_convert._count_traffic``'s reason): the per-op list is no figure.
    return dataclasses.replace(measure_traffic(_library()[0](shape, strategy, "meta")), ops=())


def _replay(label: str, kind: str):
    shape, strategy = _shape_and_strategy(label, kind)
    return _library()[1](
        shape,
        strategy,
        max_split_size_mb=wholemodel.VLLM_LOAD_MAX_SPLIT_MB,
        pool="sleep",
        device_bytes=None,
    )


def _time(label: str, kind: str):
    time_layer = library.module("measuring.timing").time_layer

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
    return _library()[2](*_shape_and_strategy(label, kind), wholemodel.LOAD_DEVICES[device])


def _cuda_memory(label: str, kind: str):
    cuda_memory = library.module("measuring.memory").cuda_memory

    shape, strategy = _shape_and_strategy(label, kind)
    return cuda_memory(_library()[0](shape, strategy, common.device()))


class _Grid:
    """Base of a format's benchmarks over its shapes x ``QUANT_KINDS`` (``params``: set by
    ``format_benchmarks``), every format's cells measured once per asv run in the figure's
    ``setup_cache``. No benchmark itself."""

    param_names = ["shape", "strategy"]
    timeout = 300.0

    def setup(self, results: dict, shape: str, kind: str) -> None:
        self.measured = _cell(results, shape, kind)


class _PeakMemory(_Grid):
    """Exact peak transient bytes of one full-size quantized layer (dispatch level, ``meta``):
    each strategy's ``QUANT_STRATEGIES[name].peak``. The PR gate compares it exactly."""

    version = "1"
    unit = "bytes"

    def setup_cache(self) -> dict:
        return _measure_grid(_peak)

    # 44 cells: about 30 s on the shared 2-core machine (the folded scale indices built once);
    # deepseek-r1-fp8block/tp8's 4 of them 3.0 s (load 1.3; each figure's alike, 3.0-3.4 s),
    # minimax-m3-mxfp8/tp4's 3.1 s (load 1.8-2.0; each figure's 2.9-3.7 s), MXINT4's 8 7.0 s
    # (load 4.5-5.4; traffic 8.6 s, replay 11.3 s, rank loads 8.7 and 10.0 s).
    setup_cache.timeout = 300.0

    def track_peak_transient_bytes(self, results: dict, shape: str, kind: str) -> int:
        return self.measured


class _Traffic(_Grid, common.TrafficFigures):
    """Exact bytes read + written and data-moving ops of one full-size quantized layer, on
    ``meta`` (``measuring.traffic``'s rule; each record's ``traffic`` and ``launches``), and
    their ratio to a copy of the layer: ``common.TrafficFigures``."""

    version = "1"

    def setup_cache(self) -> dict:
        return _measure_grid(_traffic)

    setup_cache.timeout = 300.0

    def setup(self, counts: dict, shape: str, kind: str) -> None:
        super().setup(counts, shape, kind)
        self.full = full_quant_shape(shape)


class _CudaMemory(common.CudaMemoryFigures):
    """CUDA caching-allocator peaks of one conversion of a full-size quantized layer (n/a without
    CUDA): ``common.CudaMemoryFigures``."""

    version = "1"
    param_names = _Grid.param_names
    timeout = _Grid.timeout

    def setup(self, shape: str, kind: str) -> None:
        common.require_cuda()
        if not _has_quant_formats():
            common.skip(_NO_QUANT)
        not_here = _not_here(shape, kind, on_meta=False)
        if not_here:
            common.skip(not_here.reason)
        self.measured = _cuda_memory(shape, kind)


class _SleepModeReplay(_Grid):
    """The quantized model's sleep-mode load replayed at ``max_split_size_mb`` 20 on an
    unbounded device (``load.replay.replay_load``): the peak reserved bytes, and the reserved
    growth per converted layer (segments stranded by 1-10 MiB temporaries)."""

    version = "1"
    unit = "bytes"

    def setup_cache(self) -> dict:
        return _measure_grid(_replay)

    # 44 cells: about 45 s on the shared 2-core machine for the first 28; 3.7 s for mxfp8's 4,
    # 11.3 s for mxint4's 8.
    setup_cache.timeout = 600.0

    def track_peak_reserved_bytes(self, results: dict, shape: str, kind: str) -> int:
        return self.measured.peak_reserved_bytes

    def track_reserved_growth_per_layer_bytes(self, results: dict, shape: str, kind: str) -> int:
        return self.measured.reserved_growth_per_layer_bytes


class _RankLoad(_Grid, common.RankLoadFigures):
    """The quantized rank's load as vLLM makes it (the default pool at ``max_split_size_mb`` 20,
    ``moe_convert.load.replay.rank_load``) on one device: ``common.RankLoadFigures``'
    figures, exact and gated, ``track_layers_lost_to_oom`` naming the OOM (its layer is the
    rank's layers less those lost). One class per device (``wholemodel.LOAD_DEVICES``), a third
    parameter would be a column moe_bench does not key results by; each writes its own
    ``setup_cache`` (asv shares an inherited one)."""

    version = "1"

    def setup(self, loads: dict, shape: str, kind: str) -> None:
        self.result = _cell(loads, shape, kind)


class _RankLoadGB200(_RankLoad):
    """``_RankLoad`` on a GB200: ``wholemodel.DEVICE_GB200_BYTES`` (184 GiB)."""

    def setup_cache(self) -> dict:
        return _measure_grid(functools.partial(_rank_load, "GB200"))

    # 44 cells: 21 s wall on the shared 2-core machine at load 3.2 for the first 28 (the
    # upstream paths' traces most of it; `setup_cache()` timed), 3.3 s for fp8block's 4, 2.9 s
    # for mxfp8's, 8.7 s for mxint4's 8.
    setup_cache.timeout = 300.0


class _RankLoadH200(_RankLoad):
    """``_RankLoad`` on an H200: ``wholemodel.DEVICE_141GB_BYTES`` (139.5 GiB of its 141 GB)."""

    def setup_cache(self) -> dict:
        return _measure_grid(functools.partial(_rank_load, "H200"))

    # 44 cells: 24 s wall on the shared 2-core machine at load 3.7 for the first 28, timed as the
    # GB200 one; 3.2 s for fp8block's 4, 3.4 s for mxfp8's, 10.0 s for mxint4's 8.
    setup_cache.timeout = 300.0


class _LayerTime(_Grid, common.LayerTimeFigures):
    """One quantized layer's time, its ratio to a same-size copy of all its tensors and the whole
    model's seconds: ``common.LayerTimeFigures``, by ``bench_convert.LayerTime``'s rules
    (``moe_convert.measuring.timing.time_layer`` of the format's ``LayerShape``,
    ``bench_convert.REPEATS`` calls), every format's cells measured once in ``setup_cache``; the
    cpu profile times ``CPU_PROFILE_QUANT_SHAPES`` (the other shapes n/a, saying so). Judged by
    the paired A/B in the PR gate."""

    version = "1"

    def setup_cache(self) -> dict:
        shapes = tuple(label for label in QUANT_SHAPES if is_timed(label))
        return _measure_grid(_time, shapes, on_meta=False)

    # The cpu profile's 16 cells of ours and the engines': 30 s on the shared 2-core machine
    # (load 3.5) for the first 12, 3.9 s for deepseek-r1-fp8block/tp8's 4 (load 1.2);
    # llama-4-maverick-fp8/tp8's fp8-flashinfer cell 22.0 s alone, fp8-legacy's 4.3 s beside it
    # (`quant._time` of each under the cpu profile, load 0.06-0.43).
    setup_cache.timeout = 900.0


class _Profile:
    """Experts per quantized layer ``LayerTime`` converts under the profile in use (n/a for a
    shape the cpu profile does not time): ``bench_convert.Profile`` for the quantized grid."""

    version = "1"
    unit = "experts"
    param_names = ["shape"]

    def setup(self, shape: str) -> None:
        if not _has_quant_formats():
            common.skip(_NO_QUANT)
        self.timed = timed_quant_shape(shape)
        if self.timed is None:
            _skip_untimed(shape)

    def track_timed_experts(self, shape: str) -> int:
        return self.timed.experts


#: The classes each format's module has, named without the ``_``.
_BENCHMARKS = (
    _PeakMemory,
    _Traffic,
    _CudaMemory,
    _SleepModeReplay,
    _RankLoadGB200,
    _RankLoadH200,
    _LayerTime,
    _Profile,
)


def format_benchmarks(fmt: str, module: str) -> dict[str, type]:
    """Format ``fmt``'s benchmark classes, for its module ``module`` (``bench_<fmt>``'s
    ``__name__``, which asv and ``moe_bench`` name them by): each of ``_BENCHMARKS`` made over
    the format's shapes (``FORMAT_SHAPES``), inheriting every method, ``setup_cache`` included."""
    shapes_and_kinds = [list(FORMAT_SHAPES[fmt]), list(QUANT_KINDS)]
    classes = {}
    for base in _BENCHMARKS:
        name = base.__name__.lstrip("_")
        classes[name] = type(
            name,
            (base,),
            {
                "__module__": module,
                "__qualname__": name,
                "__doc__": f"{fmt.upper()}: {base.__doc__}",
                "params": shapes_and_kinds[: len(base.param_names)],
            },
        )
    return classes
