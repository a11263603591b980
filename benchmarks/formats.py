"""Every format's figures, written once (BF16, NVFP4, MXFP4, FP8 per-tensor, DeepSeek block-FP8,
MXFP8, MXINT4): each format's grid, its measurements and the benchmark classes each format's
modules make their own.

Each format's figures are classes of its module of the suite, made by ``format_benchmarks`` from
this module's: ``PeakMemory``, ``Traffic``, ``CudaMemory``, ``LayerTime``, ``Profile``,
``SleepModeReplay``, ``RankLoadReplay``, ``RankLoadGB200``, ``RankLoadH200``,
``RankLoadTime``, ``Refit`` and ``RefitTime``. A quantized format's module is
``bench_<format>.py``, all of them (``bench_nvfp4.PeakMemory.track_peak_transient_bytes``);
BF16's are the modules asv has recorded since before the formats, ``bench_convert`` (a layer's
conversion: ``CONVERSION``) and ``bench_allocator`` (the rank's load: ``LOAD``), and since the
refit ``bench_refit`` (``REFIT``, and BF16's alone, ``HEADLINE``'s ``RefitReplay``), so their
history reads on. Each figure of a
quantized format is judged and shown as its BF16 sibling (``moe_suite.metrics.quant_sibling``).
This module itself holds no benchmark: its classes are private, which asv's discovery skips.

A format's grid is its catalog shapes (``FORMAT_SHAPES``) x its strategies (``kinds``; a
refit's fewer of both, ``refit_shapes`` x ``refit_kinds``), the
parameters named ``shape`` and ``strategy`` as everywhere in the suite (moe_bench keys results
by them): BF16's strategies by name (``common.STRATEGY_AXIS``), a quantized format's by kind
(``QUANT_KINDS``: ``fast`` on ``kimi-k2-nvfp4/tp8`` is ``nvfp4-fast``, ``strategy_name``), so
the grid reads as one row per model and one column per strategy. Every figure but time,
``CudaMemory`` and ``RankLoadTime`` is full size on ``meta``: exact, deterministic, the same on
every machine and in every profile. Time (``LayerTime``) converts the profile's expert count
(``common.profile``) beside a same-size copy; the paired A/B of ``benchmarks.paired`` decides it
in the PR gate; the reduced profiles (cpu, smoke) time ``CPU_PROFILE_SHAPES`` only.

Each figure's ``setup_cache`` is defined here once, so asv (which keys a cache by the function's
file and line) runs it once per run for every format's classes: it measures every format's
cells, each in a worker process (``common.measure_cells``), and each class reads its own.

asv takes this file from the checkout and the library from the measured commit
(``library``): a commit without a format's record (``moe_convert.FORMATS``) makes its cells
n/a; a commit before the format axis measures each format through its own functions
(``_library``). So this module imports from the library only what every measurable commit has,
the rest when measuring.
"""

from __future__ import annotations

import dataclasses
import operator

import torch

from moe_suite.metrics import (
    REFIT_EP_FIGURES,
    REFIT_FIGURES,
    REFIT_REPLAY_FIGURES,
    REFIT_TIME_WAYS,
    REFIT_WAYS,
)
from moe_suite.selection import selects

from . import common, library

wholemodel = library.module("load.wholemodel")

#: Each format's catalog shapes, ``model/tpN``: BF16's ``common.SHAPES``, each quantized format's
#: ``formats.catalog.CATALOG``'s, written out: parameters must not depend on the installed
#: library.
FORMAT_SHAPES = {
    "bf16": common.SHAPES,
    "nvfp4": ("kimi-k2-nvfp4/tp8", "deepseek-r1-nvfp4/tp4", "qwen3-235b-a22b-nvfp4/tp4"),
    "mxfp4": ("gpt-oss-120b-mxfp4/tp1", "gpt-oss-120b-mxfp4/tp2", "gpt-oss-20b-mxfp4/tp1"),
    "fp8": ("llama-4-maverick-fp8/tp8",),
    "fp8block": ("deepseek-r1-fp8block/tp8",),
    "mxfp8": ("minimax-m3-mxfp8/tp4",),
    "mxint4": ("kimi-k2-thinking-mxint4/tp4", "kimi-k2-thinking-mxint4/tp8"),
}
#: The format of every shape of the suite.
FORMAT_OF = {label: fmt for fmt, labels in FORMAT_SHAPES.items() for label in labels}
#: The shapes of the refit by EP (``RefitByEP``), BF16's: a rank's share (``model/epN``: E/N
#: experts, each whole) of NeMo-RL's reports' model (Qwen3-30B-A3B) and of DeepSeek-V3, at each
#: EP from 2 to 64 (EP 1 is ``qwen3-30b-a3b/tp1``'s ``Refit``). Written out: parameters must not
#: depend on the installed library.
REFIT_EP_SHAPES = tuple(
    f"{model}/ep{ep}" for model in ("qwen3-30b-a3b", "deepseek-v3") for ep in (2, 4, 8, 16, 32, 64)
)
#: The refit by EP's strategies: vLLM's conversion since #45589 and its in-place form, and ours
#: that streams. Its 36 cells took 33 s on the shared 2-core machine (load 6).
REFIT_EP_STRATEGIES = ("preallocated", "inplace", "streaming")
#: The strategies of each quantized format: the upstream path, this library's, then
#: FlashInfer's own helper (``<format>-flashinfer``, a BF16 layer in: registered for FP8
#: per-tensor where FlashInfer is installed, for NVFP4, MXFP8 and MXINT4 where CUDA is too, never
#: for MXFP4 and block-FP8; FP8's runs on meta, the others' meta figures are n/a, the reason
#: given), then the streaming placement (``<format>-streaming``, issue 38). asv keys a
#: benchmark's history by its parameter list: a kind is added at the end, never moved.
QUANT_KINDS = ("legacy", "preallocated", "inplace", "fast", "flashinfer", "streaming")
#: The shapes the cpu profile times: BF16's all, and per quantized format the one of the
#: smallest expert (every shape of a format runs the same code; on CPU, time serves the paired
#: A/B of a change). BF16's 54 cells took 43 s on the shared 2-core machine; the quantized grid
#: 77 s at 8 experts (load 3.7-4.0), the first three 30 s of it; deepseek-r1-fp8block/tp8's four
#: cells 3.9 s (load 1.2-1.3); the full profile times every shape. minimax-m3-mxfp8/tp4 is not
#: timed here: its four cells took 9.0 s (load 1.8-2.0), most of it the upstream path's 0.3 s
#: calls, and its three kinds of ours run NVFP4's code, whose qwen3-235b-a22b-nvfp4/tp4 cells the
#: profile times. Neither MXINT4 shape is timed here: at 8 experts mxint4-legacy's calls took
#: 0.87-1.05 s (its sign step: 120 passes over the weights), a cell 13-14 s (load 4.5-8,
#: /tmp/i29/cpu_time.py in docs/formats.md).
CPU_PROFILE_SHAPES = (
    *FORMAT_SHAPES["bf16"],
    "qwen3-235b-a22b-nvfp4/tp4",
    "gpt-oss-120b-mxfp4/tp2",
    "llama-4-maverick-fp8/tp8",
    "deepseek-r1-fp8block/tp8",
)
#: Timed calls per cell, each paired with the same-size copy just before it. One count for
#: every time figure, since they all come from the same calls: 9 is Google Benchmark's "lowest
#: reasonable" repetition count for a rank-based comparison (the copy ratio is a median of
#: per-call ratios), and the layer's and the whole model's seconds are medians of those calls.
REPEATS = 9
#: The devices a rank's load is replayed on, one class each (``RankLoad<device>``): ``Replay``,
#: so named since before the others, as full as vLLM #45589's rank was (the rank's MoE weights
#: and ``wholemodel.PR45589_HEADROOM_BYTES``, whatever the model), then
#: ``wholemodel.LOAD_DEVICES``' (a GB200, an H200).
RANK_LOAD_DEVICES = ("Replay", "GB200", "H200")
#: BF16's classes in each of its two modules: a layer's conversion (``bench_convert``) and the
#: rank's load (``bench_allocator``).
CONVERSION = ("PeakMemory", "Traffic", "CudaMemory", "LayerTime", "Profile")
LOAD = ("SleepModeReplay", *(f"RankLoad{device}" for device in RANK_LOAD_DEVICES), "RankLoadTime")
#: BF16's classes of a refit, in ``bench_refit``: its exact figures and classes (``Refit``), its
#: time (``RefitTime``).
REFIT = ("Refit", "RefitTime")
#: BF16's strategies refitted (``Refit``, ``RefitTime``), by name: vLLM's conversion before and
#: after #45589 (``legacy``, ``preallocated``), its in-place form (``inplace``), the committed
#: results' best strategies of the headline's shapes (``batched``, ``preallocated``,
#: ``strided_inplace``) and ours that streams (``streaming``). Not every strategy: a cell refits
#: a full-size layer three ways (0.8-6 s each on the shared 2-core machine).
REFIT_STRATEGIES = ("legacy", "preallocated", "inplace", "batched", "strided_inplace", "streaming")
#: A quantized format's kinds refitted: the transcription of vLLM's preparation (``legacy``), the
#: format's in-place strategy (``inplace``) and ours that streams (``streaming``). Either axis:
#: asv keys a history by its parameters, so a strategy is added at the end, never moved.
QUANT_REFIT_KINDS = ("legacy", "inplace", "streaming")
#: The shapes of each format's refit grid (``Refit``, ``RefitTime``): BF16's all (the rank-load
#: headline's), a quantized format's one, the one its engine grid measures
#: (``engine_benchmarks.bench_engine.QUANT_SHAPES``; MXFP4, which has none there, the one
#: ``LayerTime`` times in the cpu profile): every shape of a format refits by the same code, and
#: a full-size refit cell is 5-40 s of dispatch on meta on the shared 2-core machine (load 7.5-8.5;
#: kimi-k2-nvfp4/tp8's 384 experts 32-34 s). A shape is added at the end, never moved.
REFIT_SHAPES = {
    "bf16": FORMAT_SHAPES["bf16"],
    "nvfp4": ("qwen3-235b-a22b-nvfp4/tp4",),
    "mxfp4": ("gpt-oss-120b-mxfp4/tp2",),
    "fp8": ("llama-4-maverick-fp8/tp8",),
    "fp8block": ("deepseek-r1-fp8block/tp8",),
    "mxfp8": ("minimax-m3-mxfp8/tp4",),
    "mxint4": ("kimi-k2-thinking-mxint4/tp8",),
}
#: Refits replayed in a row after the load, per cell and way of ``RefitReplay``. 20: from its
#: first refit on a form's growth and driver calls per refit are its steady state's, so the
#: margin over that growth says how many more would fit; on the headline's shapes ``inplace``,
#: whose one-expert scratch strands a 20 MiB segment a layer in the sleep pool, runs out at
#: refits 15-31 on ``RefitReplay``'s device (the larger ones "none in 20" with their growth),
#: every other form makes no driver call. The cost decides: at 40 the grid's 36 cells took
#: 260 s (about 100 s of CPU) on the shared 2-core machine (load 6-7.5), ``preallocated``'s
#: 514-1,026 events a layer 0.1-0.2 s a refit of a whole rank, most of it.
REFIT_REPLAYS = 20
#: The shapes ``RefitTime`` times in the cpu profile: the rank-load headline's first and, per
#: quantized format, the one ``LayerTime`` times (``CPU_PROFILE_SHAPES``): a timed refit cell
#: (two ways) took 2.3-9.8 s on the shared 2-core machine (load 4.5), so one shape a format.
REFIT_CPU_PROFILE_SHAPES = (
    "qwen3-235b-a22b/tp4",
    "qwen3-235b-a22b-nvfp4/tp4",
    "gpt-oss-120b-mxfp4/tp2",
    "llama-4-maverick-fp8/tp8",
    "deepseek-r1-fp8block/tp8",
)


def kinds(fmt: str) -> tuple[str, ...]:
    """The strategy axis of format ``fmt``'s grid: BF16's strategies (``common.STRATEGY_AXIS``),
    a quantized format's kinds (``QUANT_KINDS``)."""
    return common.STRATEGY_AXIS if fmt == "bf16" else QUANT_KINDS


def refit_shapes(fmt: str) -> tuple[str, ...]:
    """The shape axis of format ``fmt``'s refit grid (``REFIT_SHAPES``)."""
    return REFIT_SHAPES[fmt]


def refit_kinds(fmt: str) -> tuple[str, ...]:
    """The strategy axis of format ``fmt``'s refit grid: ``REFIT_STRATEGIES`` for BF16, a
    quantized format's ``QUANT_REFIT_KINDS``."""
    return REFIT_STRATEGIES if fmt == "bf16" else QUANT_REFIT_KINDS


def strategy_name(fmt: str, kind: str) -> str:
    """The library's name of format ``fmt``'s strategy ``kind`` (``Strategy.kind``'s inverse):
    BF16's strategies are named by their kind, a quantized format's ``<format>-<kind>``."""
    return kind if fmt == "bf16" else f"{fmt}-{kind}"


def format_of(label: str) -> str:
    """The format of the suite's shape ``label``: ``FORMAT_OF``'s, BF16 for ``REFIT_EP_SHAPES``."""
    return "bf16" if label in REFIT_EP_SHAPES else FORMAT_OF[label]


def full_shape(label: str):
    """The full-size layer shape of ``label`` from the measured commit's catalog: a ``model/tpN``
    by ``library.layer_shape``, a ``model/epN`` (``REFIT_EP_SHAPES``) by its
    ``shape_from_label``."""
    if label in REFIT_EP_SHAPES:
        return library.module("formats.catalog").shape_from_label(label)
    return library.layer_shape(label, FORMAT_OF[label])


def is_timed(label: str, cpu_profile_shapes: tuple[str, ...] | None = None) -> bool:
    """Whether the profile in use times ``label``: every shape in the full profile; in a reduced
    one (``cpu``, ``smoke``) ``cpu_profile_shapes`` (``LayerTime``'s, ``CPU_PROFILE_SHAPES``, by
    default). From the label alone: a commit without the formats answers it too (its cells are
    n/a, not failed)."""
    shapes = CPU_PROFILE_SHAPES if cpu_profile_shapes is None else cpu_profile_shapes
    return common.timed_experts() is None or label in shapes


def timed_shape(label: str):
    """The shape ``LayerTime`` converts under the profile in use: the full shape, or in a reduced
    profile each expert's geometry kept but ``common.timed_experts()`` experts; ``None`` for a
    shape it does not time (``is_timed``)."""
    if not is_timed(label):
        return None
    shape, experts = full_shape(label), common.timed_experts()
    return shape if experts is None else shape.with_experts(experts)


def _shape_and_strategy(label: str, kind: str):
    """The full-size shape of ``label`` and its format's strategy of ``kind``."""
    return full_shape(label), strategy_name(format_of(label), kind)


@dataclasses.dataclass(frozen=True)
class _NotHere:
    """A cell not measured here (asv shows n/a), and why."""

    reason: str


def _format_missing(fmt: str) -> _NotHere | None:
    """Why the measured commit has no ``fmt`` layers: a quantized format it has no record of
    (``moe_convert.FORMATS``, every format's since issue 36, the quantized ones' since issue 18;
    BF16's layers every commit has)."""
    import moe_convert

    if fmt != "bf16" and fmt not in getattr(moe_convert, "FORMATS", {}):
        return _NotHere(f"this commit's library has no {fmt} layers (moe_convert.FORMATS)")
    return None


def _not_here(label: str, kind: str, *, on_meta: bool) -> _NotHere | None:
    """Why the cell cannot be measured here: its format is not in this commit's library, its
    strategy is not registered (what it needs, or that the library has none of that name), or,
    for a figure measured on meta, its strategy cannot run there (``Strategy.not_on_meta``);
    ``None`` where it can."""
    import moe_convert

    missing = _format_missing(format_of(label))
    if missing:
        return missing
    strategy = strategy_name(format_of(label), kind)
    record = library.strategy_records(moe_convert).get(strategy)
    if record is None:
        unavailable = library.unavailable_records(moe_convert).get(strategy)
        why = (
            f"it needs {unavailable.needs}" if unavailable else "this library has no such strategy"
        )
        return _NotHere(f"{strategy} is not registered here: {why} (docs/library.md)")
    if on_meta and getattr(record, "not_on_meta", ""):
        return _NotHere(
            f"{strategy} cannot run on meta ({record.not_on_meta}): its figures are its "
            "record's formulas (python -m moe_convert strategies)"
        )
    return None


def _measure_grid(
    reader,
    measure,
    labels: tuple[str, ...] | None = None,
    *,
    on_meta: bool = True,
    axis=kinds,
    missing: _NotHere | None = None,
) -> dict[tuple[str, str], object]:
    """``measure(shape, kind)`` of every cell of ``labels`` (every format's shapes, by default)
    x its format's ``axis`` (``kinds``, by default; ``format_of``) that the run selects
    (``_selected``: a benchmark of a class sharing ``reader``'s ``setup_cache`` reads it), each
    in a worker process (``common.measure_cells``: a cell that fails holds the reason's text); a
    cell not measured here holds a ``_NotHere`` (``on_meta``: ``measure`` runs on meta), every
    cell ``missing`` where given (what the measured commit's library lacks)."""
    labels = tuple(FORMAT_OF) if labels is None else labels
    readers = _readers(type(reader).setup_cache)
    cells = [
        (label, kind)
        for label in labels
        for kind in axis(format_of(label))
        if _selected(readers, label, kind)
    ]
    not_here = {cell: missing or _not_here(*cell, on_meta=on_meta) for cell in cells}
    measured = common.measure_cells(measure, [cell for cell in cells if not_here[cell] is None])
    return {cell: measured.get(cell, not_here[cell]) for cell in cells}


def _readers(setup_cache) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The classes whose ``setup_cache`` is ``setup_cache`` (asv runs it once for all of them),
    by name, each with its benchmarks (``track_`` methods)."""
    return tuple(
        (base.__name__.lstrip("_"), tuple(m for m in dir(base) if m.startswith("track_")))
        for base in (*_BENCHMARKS, *_HEADLINE)
        if getattr(base, "setup_cache", None) is setup_cache
    )


def _module_of(fmt: str, name: str) -> str:
    """The module (asv's first name) of format ``fmt``'s class ``name``: a quantized format's
    own; BF16's by what the class measures (``CONVERSION``, ``LOAD``, the refit's)."""
    if fmt != "bf16":
        return f"bench_{fmt}"
    if name in CONVERSION:
        return "bench_convert"
    return "bench_allocator" if name in LOAD else "bench_refit"


def _selected(readers, label: str, kind: str) -> bool:
    """Whether the run selects a benchmark of ``readers`` (``_readers``) at the cell
    ``(label, kind)`` (``moe_suite.selection``: asv's ``--bench`` of a run this suite's commands
    start, matched as asv matches it; every cell where none is given)."""
    fmt = format_of(label)
    return any(
        selects(f"{_module_of(fmt, name)}.{name}.{method}", (label, kind))
        for name, methods in readers
        for method in methods
    )


def _skip_untimed(label: str, shapes: str = "CPU_PROFILE_SHAPES") -> None:
    common.skip(f"the {common.profile()} profile does not time {label} ({shapes})")


def _cell(results: dict, label: str, kind: str):
    """The cell's result from ``_measure_grid``'s: skips one not measured here (n/a, saying
    why); raises ``RuntimeError`` with the reason's text where its measurement failed."""
    if (label, kind) not in results:
        _skip_untimed(label)
    measured = results[label, kind]
    if isinstance(measured, _NotHere):
        common.skip(measured.reason)
    if isinstance(measured, str):
        raise RuntimeError(f"{label} {kind} failed: {measured}")
    return measured


def _library(fmt: str):
    """The measured commit's functions for a layer of ``fmt``, ``(call, replay_load)``: a
    measurement's call (``moe_convert.layer_call``: a fresh layer, the strategy's caches warmed,
    one conversion to call) and ``replay.replay_load``, which take every format since the format
    axis (issue 28). On a commit before it, BF16's ``inputs.strategy_call`` and
    ``replay.replay_load``, or the quantized formats' ``quant_registry.quant_strategy_call`` and
    ``quant_replay.replay_quant_load``, which took the same arguments."""
    import moe_convert

    replay = library.module("load.replay")
    if library.has_format_axis():
        return moe_convert.layer_call, replay.replay_load
    if fmt == "bf16":
        return library.module("formats.bf16.inputs").strategy_call, replay.replay_load
    try:  # issue 28's first step: the format table in moe_convert.formats, modules flat
        from moe_convert.formats import layer_call

        return layer_call, replay.replay_load
    except ImportError:  # a commit before the format axis
        from moe_convert.quant_registry import quant_strategy_call
        from moe_convert.quant_replay import replay_quant_load

        return quant_strategy_call, replay_quant_load


def _call(label: str, kind: str, device: str):
    shape, strategy = _shape_and_strategy(label, kind)
    return _library(FORMAT_OF[label])[0](shape, strategy, device)


def _peak(label: str, kind: str) -> int:
    measure_memory = library.module("measuring.memory").measure_memory

    return measure_memory(_call(label, kind, "meta")).peak_bytes


def _traffic(label: str, kind: str):
    measure_traffic = library.module("measuring.traffic").measure_traffic

    # Totals only: the per-op list is no figure, and every cell's process loads the cache it
    # goes into.
    return dataclasses.replace(measure_traffic(_call(label, kind, "meta")), ops=())


def _cuda_memory(label: str, kind: str):
    cuda_memory = library.module("measuring.memory").cuda_memory

    return cuda_memory(_call(label, kind, common.device()))


def _replay(label: str, kind: str):
    """The sleep-mode load: vLLM's sleep pool at ``VLLM_LOAD_MAX_SPLIT_MB``, an unbounded device,
    the full-size shape."""
    shape, strategy = _shape_and_strategy(label, kind)
    return _library(FORMAT_OF[label])[1](
        shape,
        strategy,
        max_split_size_mb=wholemodel.VLLM_LOAD_MAX_SPLIT_MB,
        pool="sleep",
        device_bytes=None,
    )


def _loaded_bytes(label: str, kind: str) -> int:
    """The rank's MoE weights as loaded for the cell's strategy (``layer_bytes`` x
    ``moe_layers``, which every commit's shapes have): of the layers it takes
    (``formats.table.taken_shape``: BF16 ones for FlashInfer's helpers, which quantize them
    themselves), the format's own on a commit before such strategies."""
    shape, strategy = _shape_and_strategy(label, kind)
    table = library.module("formats.table") if library.has_format_axis() else None
    taken = getattr(table, "taken_shape", None)
    loaded = shape if taken is None else taken(shape, strategy)
    return loaded.layer_bytes * loaded.moe_layers


def _rank_loads(label: str, kind: str) -> dict[str, object]:
    """The rank's load as vLLM makes it without sleep mode (the default pool at
    ``VLLM_LOAD_MAX_SPLIT_MB``: ``replay.rank_load``), replayed on each of
    ``RANK_LOAD_DEVICES``: device -> its ``RankLoad``, or a ``_NotHere`` where the rank's
    weights do not fit the device (``replay.WeightsDoNotFit``) or this commit's library does
    not know it. One process replays all three, so a layer's trace is recorded once."""
    replay = library.module("load.replay")
    shape, strategy = _shape_and_strategy(label, kind)
    devices = {
        "Replay": _loaded_bytes(label, kind) + wholemodel.PR45589_HEADROOM_BYTES,
        **getattr(wholemodel, "LOAD_DEVICES", {}),
    }
    loads: dict[str, object] = {}
    for device in RANK_LOAD_DEVICES:
        if device not in devices:
            loads[device] = _NotHere(f"this commit's library has no {device} (LOAD_DEVICES)")
            continue
        try:
            loads[device] = _library(FORMAT_OF[label])[1](
                shape,
                strategy,
                max_split_size_mb=wholemodel.VLLM_LOAD_MAX_SPLIT_MB,
                pool="default",
                device_bytes=devices[device],
            )
        except replay.WeightsDoNotFit as error:
            loads[device] = _NotHere(f"the weights {strategy} takes do not fit: {error}")
    return loads


def _time(label: str, kind: str):
    time_layer = library.module("measuring.timing").time_layer

    shape, strategy = _shape_and_strategy(label, kind)
    return time_layer(
        timed_shape(label),
        strategy,
        device=common.device(),
        repeats=REPEATS,
        threads=common.CPU_THREADS,
        model_experts=shape.experts,
    )


def _rank_load_run(label: str, kind: str):
    """``RankLoadTime``'s load: ``RankLoadReplay``'s, run on this CUDA device, a ballast first
    so that it has the same headroom (``PR45589_HEADROOM_BYTES``) whatever its size. A commit
    before the format axis runs BF16's load only."""
    if FORMAT_OF[label] != "bf16" and not library.has_format_axis():
        return _NotHere("this commit's wholemodel.run_load takes BF16 layers only")
    shape, strategy = _shape_and_strategy(label, kind)
    free = torch.cuda.mem_get_info()[0]
    loaded = _loaded_bytes(label, kind)
    return wholemodel.run_load(
        shape,
        strategy,
        max_split_size_mb=wholemodel.VLLM_LOAD_MAX_SPLIT_MB,
        other_weights_bytes=max(0, free - loaded - wholemodel.PR45589_HEADROOM_BYTES),
    )


def _no_refit(function: str) -> _NotHere | None:
    """Why the measured commit cannot refit: its ``load.refit`` lacks ``function``
    (``refit_call`` before issue 38, ``time_refit`` before the refit was timed)."""
    try:
        refit = library.module("load.refit")
    except ModuleNotFoundError:
        refit = None
    if not hasattr(refit, function):
        return _NotHere(f"this commit's library has no refit (moe_convert.load.refit.{function})")
    return None


def _refit_ways(shape, strategy: str) -> dict[str, tuple[int, int, int]]:
    """``way -> (peak transient bytes, traffic bytes, launches)`` (``REFIT_FIGURES``) of one
    refit of the full-size layer ``shape`` converted by ``strategy``, on meta (one
    ``refit_call`` per way: memory and traffic counted on the same call, each call the same
    refit)."""
    refit = library.module("load.refit")
    measure_memory = library.module("measuring.memory").measure_memory
    measure_traffic = library.module("measuring.traffic").measure_traffic
    figures = {}
    for way in REFIT_WAYS:
        call = refit.refit_call(shape, strategy, way)
        counted = measure_traffic(call)
        figures[way] = (measure_memory(call).peak_bytes, counted.traffic_bytes, counted.launches)
    return figures


def _refit(label: str, kind: str) -> dict[str, object]:
    """``_refit_ways`` of ``label``'s full-size layer converted by its format's ``kind``, then
    ``reload_safe`` and ``reversible_in_place``: the strategy's two classes."""
    refit = library.module("load.refit")
    shape, strategy = _shape_and_strategy(label, kind)
    figures: dict[str, object] = dict(_refit_ways(shape, strategy))
    figures["reload_safe"] = refit.reload_safety(strategy) == "reload-safe"
    figures["reversible_in_place"] = refit.reversibility(strategy) == "reversible in place"
    return figures


def _refit_time(label: str, kind: str) -> dict[str, object]:
    """``way -> LayerTiming`` of each of ``REFIT_TIME_WAYS``: one refit of the profile's layer
    (``timed_shape``) converted by its format's ``kind``, timed against a same-size copy of the
    new weights (``load.refit.time_refit``: ``REPEATS`` calls, as ``LayerTime``'s)."""
    time_refit = library.module("load.refit").time_refit
    shape, strategy = _shape_and_strategy(label, kind)
    return {
        way: time_refit(
            timed_shape(label),
            strategy,
            way,
            device=common.device(),
            repeats=REPEATS,
            threads=common.CPU_THREADS,
            model_experts=shape.experts,
        )
        for way in REFIT_TIME_WAYS
    }


def _rank_refit(label: str, kind: str) -> dict[str, tuple[int, int, int]]:
    """``way -> (peak transient bytes, traffic bytes, launches)`` (``REFIT_EP_FIGURES``) of a
    whole rank's refit, every MoE layer in turn, exact on meta (as ``python -m moe_convert
    refit --ep all``): one layer's peak (the layers refit one after another), the rank's
    traffic and launches (``_refit_ways``' x ``moe_layers``)."""
    shape, strategy = _shape_and_strategy(label, kind)
    layers = shape.moe_layers
    return {
        way: (peak, traffic * layers, launches * layers)
        for way, (peak, traffic, launches) in _refit_ways(shape, strategy).items()
    }


def _refit_replay(label: str, kind: str) -> dict[str, tuple[int, int, int, int]]:
    """``way -> (oom_refit, reserved growth per refit, driver calls per refit, margin)``
    (``REFIT_REPLAY_FIGURES``) of each of ``REFIT_WAYS``: the rank load of ``label`` converted
    by ``kind``, then ``REFIT_REPLAYS`` refits of every layer (``refit_replay.replay_refits``:
    the sleep-mode pool at ``max_split_size_mb`` 20) on ``RankLoadReplay``'s device (the rank's
    MoE weights and vLLM #45589's headroom). ``oom_refit``: the refit that runs out of memory,
    0 the first load, ``REFIT_REPLAYS + 1`` where none of them does; the growth and driver
    calls (``cudaMalloc``, ``cudaFree``, refused ``cudaMalloc``) are the last refit's that
    completed (its steady state), 0 where none did; the margin: the device's bytes less the
    peak reserved bytes."""
    replay_refits = library.module("load.refit_replay").replay_refits
    shape, strategy = _shape_and_strategy(label, kind)
    device = _loaded_bytes(label, kind) + wholemodel.PR45589_HEADROOM_BYTES
    figures = {}
    for way in REFIT_WAYS:
        replay = replay_refits(shape, strategy, REFIT_REPLAYS, way=way, device_bytes=device)
        done = [r for r in replay.rounds if r.oom_layer is None]
        last = done[-1] if done else None
        figures[way] = (
            REFIT_REPLAYS + 1 if replay.oom_refit is None else replay.oom_refit,
            last.reserved_growth_bytes if last else 0,
            last.num_device_alloc + last.num_device_free + last.num_device_alloc_failed
            if last
            else 0,
            replay.margin_bytes,
        )
    return figures


class _Grid:
    """Base of a format's benchmarks over its shapes x ``kinds`` (``params``: set by
    ``format_benchmarks``), every format's cells measured once per asv run in the figure's
    ``setup_cache``. No benchmark itself."""

    param_names = ["shape", "strategy"]
    timeout = 300.0
    #: The format's strategy axis (``format_benchmarks``): its ``kinds``.
    strategy_axis = staticmethod(kinds)

    def setup(self, results: dict, shape: str, kind: str) -> None:
        self.measured = _cell(results, shape, kind)


class _PeakMemory(_Grid):
    """Exact peak transient bytes of one full-size layer, counted at dispatch level on ``meta``
    with the strategy's index caches warmed: its record's ``peak`` (``T13 + T2`` for
    ``strided_copy``). Deterministic: the PR gate compares it exactly."""

    version = "1"
    unit = "bytes"

    def setup_cache(self) -> dict:
        return _measure_grid(self, _peak)

    # Every format's 139 cells: 21.1 s on the quiet 2-core EPYC host (``setup_cache()`` of
    # each figure timed in one process, load 0.0 -> 0.9: PeakMemory 21.1 s, Traffic 23.4 s,
    # SleepModeReplay 32.3 s, the rank loads 51.3 s). Earlier, alone: MXINT4's 8 7.0 s (load
    # 4.5-5.4), deepseek-r1-fp8block/tp8's 4 3.0 s, minimax-m3-mxfp8/tp4's 3.1 s.
    setup_cache.timeout = 600.0

    def track_peak_transient_bytes(self, results: dict, shape: str, kind: str) -> int:
        return self.measured


class _Traffic(_Grid):
    """Exact work of one full-size layer, counted at dispatch level on ``meta``: no noise at
    all. ``traffic_bytes`` (bytes read + written), ``launches`` (data-moving ops; CUDA kernel
    launches) and ``traffic_ratio`` (traffic / 2 x layer bytes: 1.0 is a copy of the layer, the
    out-of-place floor), by ``measuring.traffic``'s counting rule; each strategy's record
    states its formulas. The PR gate compares them exactly, so an extra copy, a per-expert loop
    or a lost fusion fails it whatever the machine's load."""

    version = "1"

    def setup_cache(self) -> dict:
        return _measure_grid(self, _traffic)

    # Every format's cells: 23.4 s (``_PeakMemory``'s timing run).
    setup_cache.timeout = 600.0

    def setup(self, counts: dict, shape: str, kind: str) -> None:
        super().setup(counts, shape, kind)
        self.full = full_shape(shape)

    def track_traffic_bytes(self, counts: dict, shape: str, kind: str) -> int:
        return self.measured.traffic_bytes

    track_traffic_bytes.unit = "bytes"

    def track_launches(self, counts: dict, shape: str, kind: str) -> int:
        return self.measured.launches

    track_launches.unit = "launches"

    def track_traffic_ratio(self, counts: dict, shape: str, kind: str) -> float:
        return self.measured.traffic_bytes / (2 * self.full.layer_bytes)

    track_traffic_ratio.unit = "ratio"


class _CudaMemory:
    """CUDA caching-allocator peaks of one conversion of a full-size layer (n/a without CUDA).

    ``peak_allocated`` is rounded to the allocator's blocks; ``peak_reserved`` is what the
    process holds from the driver, what an OOM is about; ``alloc_retries`` counts cache flushes
    the allocator needed (non-zero means the conversion fragmented the cache). Measured in the
    cell's own process: no ``setup_cache``."""

    version = "1"
    unit = "bytes"
    param_names = _Grid.param_names
    timeout = _Grid.timeout

    def setup(self, shape: str, kind: str) -> None:
        common.require_cuda()
        not_here = _not_here(shape, kind, on_meta=False)
        if not_here:
            common.skip(not_here.reason)
        self.measured = _cuda_memory(shape, kind)

    def track_peak_allocated_bytes(self, shape: str, kind: str) -> int:
        return self.measured.peak_allocated_bytes

    def track_peak_reserved_bytes(self, shape: str, kind: str) -> int:
        return self.measured.peak_reserved_bytes

    def track_alloc_retries(self, shape: str, kind: str) -> int:
        return self.measured.num_alloc_retries

    track_alloc_retries.unit = "retries"


class _LayerTime(_Grid):
    """One layer's time, its ratio to a same-size copy of all its tensors and the whole model's
    seconds.

    One measurement per timed cell (``measuring.timing.time_layer``: ``REPEATS`` calls on the
    profile's layer, each timed with CUDA events on CUDA and paired with the copy just before
    it; in-place inputs restored before every call, untimed), read by three figures:

    - ``layer_seconds``: the median seconds of one conversion of the profile's layer;
    - ``copy_ratio``: the median of strategy / copy per call (1.0 is one read and one write of
      every byte: the out-of-place limit). A ratio cancels most of this machine's run-to-run
      noise;
    - ``whole_model_seconds``: the per-layer median scaled to the model's experts (the work is
      linear in experts; exact in the full profile), times the model's MoE layers, one rank.

    Every format's timed cells are measured once per asv run, in ``setup_cache``; the cpu
    profile times ``CPU_PROFILE_SHAPES`` (the other shapes n/a, saying so). Judged by the
    paired A/B in the PR gate.
    """

    # 1: one measurement for three figures (were TimeConvert, CopyRatio, WholeModel)
    version = "1"

    def setup_cache(self) -> dict:
        return _measure_grid(
            self, _time, tuple(label for label in FORMAT_OF if is_timed(label)), on_meta=False
        )

    # The cpu profile: BF16's 54 cells 43 s on the shared 2-core machine (niced, beside other
    # jobs); the quantized 16 of ours and the engines' 30 s (load 3.5) for the first 12, 3.9 s
    # for deepseek-r1-fp8block/tp8's 4 (load 1.2); llama-4-maverick-fp8/tp8's fp8-flashinfer
    # cell 22.0 s alone, fp8-legacy's 4.3 s beside it (load 0.06-0.43). The full profile: BF16's
    # grid on an H200 about 20 s (gpu-check step 5).
    setup_cache.timeout = 900.0

    def track_layer_seconds(self, timings: dict, shape: str, kind: str) -> float:
        return self.measured.seconds

    track_layer_seconds.unit = "seconds"

    def track_copy_ratio(self, timings: dict, shape: str, kind: str) -> float:
        return self.measured.copy_ratio

    track_copy_ratio.unit = "ratio"

    def track_whole_model_seconds(self, timings: dict, shape: str, kind: str) -> float:
        return self.measured.whole_model_seconds

    track_whole_model_seconds.unit = "seconds"


class _Profile:
    """The number of experts ``LayerTime`` converts per layer under the profile in use (n/a for
    a shape a reduced profile does not time): ``common.timed_experts()``, the model's expert count
    in the full profile. Stored beside every run so that time figures of two profiles are never
    read as one series."""

    version = "1"
    unit = "experts"
    param_names = ["shape"]

    def setup(self, shape: str) -> None:
        missing = _format_missing(FORMAT_OF[shape])
        if missing:
            common.skip(missing.reason)
        self.timed = timed_shape(shape)
        if self.timed is None:
            _skip_untimed(shape)

    def track_timed_experts(self, shape: str) -> int:
        return self.timed.experts


class _SleepModeReplay(_Grid):
    """The rank's load under vLLM's sleep mode, replayed at ``max_split_size_mb`` 20 on an
    unbounded device (``load.replay.replay_load``; not run on CUDA:
    ``moe_convert.load.wholemodel.run_load`` is the run, checked by ``scripts/gpu-check``).

    ``peak_reserved_bytes``: the peak over loading every layer's weights and converting each in
    turn. ``reserved_growth_per_layer_bytes``: the steady-state rise of reserved memory per
    converted layer (median over layers after the first); zero unless the strategy strands
    segments (1-10 MiB temporaries whose 20 MiB segments stay once free), and then multiplied by
    the model's layer count. Both figures of a cell come from one replay, in ``setup_cache``.
    """

    # 1: was SleepModeLoad (v1), renamed; the same figures.
    version = "1"
    unit = "bytes"

    def setup_cache(self) -> dict:
        return _measure_grid(self, _replay)

    # Every format's cells: 32.3 s (``_PeakMemory``'s timing run).
    setup_cache.timeout = 600.0

    def track_peak_reserved_bytes(self, results: dict, shape: str, kind: str) -> int:
        return self.measured.peak_reserved_bytes

    def track_reserved_growth_per_layer_bytes(self, results: dict, shape: str, kind: str) -> int:
        return self.measured.reserved_growth_per_layer_bytes


class _RankLoad(_Grid):
    """The driver calls of the rank's load as vLLM makes it without sleep mode (the default pool
    at ``max_split_size_mb`` 20), replayed on one device (a class per ``RANK_LOAD_DEVICES``'
    device: a third parameter would be a column moe_bench does not key results by): exact and
    gated. ``moe_bench`` prices the calls with a device's recorded costs
    (``moe_convert.load.loadtime``).

    Every figure counts the conversions' events (from the end of loading), as
    ``torch.cuda.memory_stats()`` names them: ``num_device_alloc`` (segments made:
    ``cudaMalloc``), ``num_device_free`` (segments given back: ``cudaFree``, each waiting for
    the device), ``num_device_alloc_failed`` (``cudaMalloc`` calls the full device refused: the
    model's own count) and ``num_alloc_retries`` (full releases of the cache); then the peak
    reserved bytes and the layers an OOM left unconverted (0 when the load fits; the OOM's
    layer is the rank's layers less those lost). Two facts of the load beside them, for
    ``moe_bench``, which reads results without the library: the rank's MoE layers and the bytes
    the device lends (the summary predicts the load's seconds over the layers converted and
    places the sleep-mode peak against that device). A strategy that brings back per-layer allocator
    churn (vLLM #45589's 10.7 s legacy load instead of 2.4 s) shows here even when its peak live
    bytes look fine.

    One ``setup_cache`` for every device (asv shares it between the classes that inherit it):
    each cell's process replays the three loads, recording each layer's trace once.
    """

    version = "1"
    device = ""  # a name of RANK_LOAD_DEVICES: set by each device's class

    def setup_cache(self) -> dict:
        return _measure_grid(self, _rank_loads)

    # Every format's cells on three devices: 51.3 s (``_PeakMemory``'s timing run); legacy's
    # 94- and 58-layer replays most of it.
    setup_cache.timeout = 900.0

    def setup(self, loads: dict, shape: str, kind: str) -> None:
        self.result = _cell(loads, shape, kind)[self.device]
        if isinstance(self.result, _NotHere):
            common.skip(self.result.reason)

    def track_num_device_alloc(self, loads: dict, shape: str, kind: str) -> int:
        return self.result.num_device_alloc

    track_num_device_alloc.unit = "calls"

    def track_num_device_free(self, loads: dict, shape: str, kind: str) -> int:
        return self.result.num_device_free

    track_num_device_free.unit = "calls"

    def track_num_device_alloc_failed(self, loads: dict, shape: str, kind: str) -> int:
        return self.result.num_device_alloc_failed

    track_num_device_alloc_failed.unit = "calls"

    def track_num_alloc_retries(self, loads: dict, shape: str, kind: str) -> int:
        return self.result.num_alloc_retries

    track_num_alloc_retries.unit = "retries"

    def track_peak_reserved_bytes(self, loads: dict, shape: str, kind: str) -> int:
        return self.result.peak_reserved_bytes

    track_peak_reserved_bytes.unit = "bytes"

    def track_layers_lost_to_oom(self, loads: dict, shape: str, kind: str) -> int:
        return self.result.layers - self.result.layers_converted

    track_layers_lost_to_oom.unit = "layers"

    def track_moe_layers(self, loads: dict, shape: str, kind: str) -> int:
        return self.result.layers

    track_moe_layers.unit = "layers"

    def track_device_bytes(self, loads: dict, shape: str, kind: str) -> int:
        return self.result.device_bytes

    track_device_bytes.unit = "bytes"


class _RankLoadReplay(_RankLoad):
    """``_RankLoad`` on a device as full as vLLM #45589's Qwen3-235B TP4 rank was: the rank's
    MoE weights and ``PR45589_HEADROOM_BYTES`` (29.89 GiB) to spare, whatever the model."""

    device = "Replay"


class _RankLoadGB200(_RankLoad):
    """``_RankLoad`` on a GB200: ``wholemodel.DEVICE_GB200_BYTES`` (184 GiB)."""

    device = "GB200"


class _RankLoadH200(_RankLoad):
    """``_RankLoad`` on an H200: ``wholemodel.DEVICE_141GB_BYTES`` (139.5 GiB of its 141 GB)."""

    device = "H200"


class _RankLoadTime(_Grid):
    """Seconds of the whole rank's conversions, run on CUDA (``wholemodel.run_load``, the
    default pool at 20 MiB, a ballast leaving ``RankLoadReplay``'s headroom, so its driver calls
    are the replayed ones on any device): the load time vLLM's users see, allocator calls
    included. CUDA only (n/a elsewhere: ``moe_bench`` shows the predicted time there); a rank
    whose weights do not fit this device is n/a, saying so. One run per cell, all in
    ``setup_cache``."""

    version = "1"

    def setup_cache(self) -> dict:
        if common.device() != "cuda":
            return {}
        return _measure_grid(self, _rank_load_run, on_meta=False)

    # Every format's shapes x their strategies: legacy's loads take seconds each on a GB200.
    setup_cache.timeout = 1800.0

    def setup(self, loads: dict, shape: str, kind: str) -> None:
        common.require_cuda()
        not_here = _not_here(shape, kind, on_meta=False)
        if not_here:
            common.skip(not_here.reason)
        free = torch.cuda.mem_get_info()[0]
        if _loaded_bytes(shape, kind) > free:
            common.skip(f"{shape}'s MoE weights do not fit the {free / 2**30:.1f} GiB free here")
        super().setup(loads, shape, kind)
        if self.measured.oom:  # a partial load's seconds are no load time
            raise RuntimeError(f"{shape} {kind}: {self.measured.oom_message}")

    def track_load_seconds(self, loads: dict, shape: str, kind: str) -> float:
        return self.measured.seconds

    track_load_seconds.unit = "seconds"


class _Refit(_Grid):
    """One refit per way of ``REFIT_WAYS`` of a full-size layer (``load.refit``: vLLM 0.34's
    ``direct`` and ``layerwise``, our ``streamed``), exact on meta: its peak transient bytes,
    traffic and launches; and the strategy's reload and inverse classes (1 where it has the
    property: ``reload_safety``, ``reversibility``, checked on the library's small shapes, the
    same at every shape). The format's shapes x its ``refit_kinds``; every format's cells
    measured once per asv run, in ``setup_cache``. A commit before the refit has every cell
    n/a."""

    version = "1"
    shape_axis = staticmethod(refit_shapes)
    strategy_axis = staticmethod(refit_kinds)

    def setup_cache(self) -> dict:
        labels = tuple(label for fmt in REFIT_SHAPES for label in refit_shapes(fmt))
        return _measure_grid(
            self, _refit, labels, axis=refit_kinds, missing=_no_refit("refit_call")
        )

    # BF16's 36 cells: 141 s on the shared 2-core machine (niced, load average 5.4-6.4); every
    # format's at all its catalog shapes, 69 cells: 614 s under a load of 3.2-9.2 (other
    # helpers' jobs beside it), hence one shape per quantized format (REFIT_SHAPES): 54 cells,
    # 234 s under a load of 2.4-5.2.
    setup_cache.timeout = 900.0

    def track_reload_safe(self, results: dict, shape: str, kind: str) -> int:
        return int(self.measured["reload_safe"])

    track_reload_safe.unit = "class"

    def track_reversible_in_place(self, results: dict, shape: str, kind: str) -> int:
        return int(self.measured["reversible_in_place"])

    track_reversible_in_place.unit = "class"


def _way_figure(way: str, read, unit: str):
    """A ``track_`` method of refit way ``way``'s figure ``read(measured[way])``, in ``unit``."""

    def track(self, results: dict, shape: str, kind: str):
        return read(self.measured[way])

    track.unit = unit
    return track


# One method per way and figure, named as the metrics table lists them (``REFIT``).
for _way in REFIT_WAYS:
    for _index, (_figure, _unit) in enumerate(REFIT_FIGURES):
        setattr(
            _Refit, f"track_{_way}_{_figure}", _way_figure(_way, operator.itemgetter(_index), _unit)
        )


class _RefitTime(_Grid):
    """One refit per way of ``REFIT_TIME_WAYS`` (vLLM's ``direct`` and our ``streamed``) timed
    as ``LayerTime`` times a conversion (``load.refit.time_refit``: ``REPEATS`` calls on the
    profile's layer, each paired with a same-size copy of the new weights just before it):
    ``<way>_seconds``, the median seconds of one refit, and ``<way>_copy_ratio``, the median of
    refit / copy per call (1.0: every new byte read once and written once, a refit's floor).
    The format's shapes x its ``refit_kinds``; the cpu profile times
    ``REFIT_CPU_PROFILE_SHAPES`` (the other cells n/a, saying so). Not paired in the PR gate
    (``benchmarks.paired`` pairs conversions): judged as every unpaired time figure."""

    version = "1"
    shape_axis = staticmethod(refit_shapes)
    strategy_axis = staticmethod(refit_kinds)

    def setup_cache(self) -> dict:
        labels = tuple(
            label
            for fmt in REFIT_SHAPES
            for label in refit_shapes(fmt)
            if is_timed(label, REFIT_CPU_PROFILE_SHAPES)
        )
        return _measure_grid(
            self,
            _refit_time,
            labels,
            on_meta=False,
            axis=refit_kinds,
            missing=_no_refit("time_refit"),
        )

    # The cpu profile's 18 cells (two ways each) on the shared 2-core machine, other helpers'
    # jobs beside it: 97.5 s under a load of 4.7-5.3, 431 s under 7.6-8.5.
    setup_cache.timeout = 900.0

    def setup(self, results: dict, shape: str, kind: str) -> None:
        if not is_timed(shape, REFIT_CPU_PROFILE_SHAPES):
            _skip_untimed(shape, "REFIT_CPU_PROFILE_SHAPES")
        super().setup(results, shape, kind)


for _way in REFIT_TIME_WAYS:
    setattr(
        _RefitTime,
        f"track_{_way}_seconds",
        _way_figure(_way, operator.attrgetter("seconds"), "seconds"),
    )
    setattr(
        _RefitTime,
        f"track_{_way}_copy_ratio",
        _way_figure(_way, operator.attrgetter("copy_ratio"), "ratio"),
    )


class _RefitReplay(_Grid):
    """A whole rank's refits in a row, replayed (``load.refit_replay.replay_refits``): the rank
    load in vLLM's sleep-mode pool at ``max_split_size_mb`` 20, then ``REFIT_REPLAYS`` refits
    of every layer in each way of ``REFIT_WAYS``, on ``RankLoadReplay``'s device (the rank's MoE
    weights and vLLM #45589's 29.89 GiB of headroom), exact on meta at full size: per way the
    refit that runs out of memory (``oom_refit``: 0 the first load, ``REFIT_REPLAYS + 1`` none
    of them), the steady state's reserved growth and driver calls per refit, and the margin (the
    device's bytes less the peak reserved); then ``refits``, ``REFIT_REPLAYS`` (for
    ``moe_bench``, which reads results without the library). BF16's headline shapes x
    ``refit_kinds`` only (``bench_refit``): a quantized format's replays took 348 s for its 18
    cells on the shared 2-core machine (load 8.5). What 0.34 runs differs: docs/allocator.md."""

    version = "1"
    shape_axis = staticmethod(refit_shapes)
    strategy_axis = staticmethod(refit_kinds)

    def setup_cache(self) -> dict:
        try:
            library.module("load.refit_replay")
        except ModuleNotFoundError:
            missing = _NotHere("this commit's library has no refit replay (load.refit_replay)")
        else:
            missing = None
        return _measure_grid(
            self, _refit_replay, REFIT_SHAPES["bf16"], axis=refit_kinds, missing=missing
        )

    # BF16's 36 cells, 3 ways each: at 40 refits 260 s (load 6-7.5), hence REFIT_REPLAYS 20.
    setup_cache.timeout = 600.0

    def track_refits(self, results: dict, shape: str, kind: str) -> int:
        return REFIT_REPLAYS

    track_refits.unit = "refits"


for _way in REFIT_WAYS:
    for _index, (_figure, _unit, _) in enumerate(REFIT_REPLAY_FIGURES):
        setattr(
            _RefitReplay,
            f"track_{_way}_{_figure}",
            _way_figure(_way, operator.itemgetter(_index), _unit),
        )


def _ep_shapes(fmt: str) -> tuple[str, ...]:
    return REFIT_EP_SHAPES


def _ep_strategies(fmt: str) -> tuple[str, ...]:
    return REFIT_EP_STRATEGIES


class _RefitByEP(_Grid):
    """A whole rank's refit by EP (``REFIT_EP_SHAPES``: a rank's share of E/EP experts, each
    whole, x ``REFIT_EP_STRATEGIES``), per way of ``REFIT_WAYS``, exact on meta at full size:
    one layer's peak transient bytes, the rank's traffic and launches (every MoE layer). BF16's
    alone (``bench_refit``); a commit before the refit has every cell n/a."""

    version = "1"
    shape_axis = staticmethod(_ep_shapes)
    strategy_axis = staticmethod(_ep_strategies)

    def setup_cache(self) -> dict:
        return _measure_grid(
            self, _rank_refit, REFIT_EP_SHAPES, axis=_ep_strategies, missing=_no_refit("refit_call")
        )

    # 36 cells: 33 s on the shared 2-core machine (load 6).
    setup_cache.timeout = 600.0


for _way in REFIT_WAYS:
    for _index, (_figure, _unit) in enumerate(REFIT_EP_FIGURES):
        setattr(
            _RefitByEP,
            f"track_{_way}_{_figure}",
            _way_figure(_way, operator.itemgetter(_index), _unit),
        )


#: The classes each format's modules have, named without the ``_``.
_BENCHMARKS = (
    _PeakMemory,
    _Traffic,
    _CudaMemory,
    _LayerTime,
    _Profile,
    _SleepModeReplay,
    _RankLoadReplay,
    _RankLoadGB200,
    _RankLoadH200,
    _RankLoadTime,
    _Refit,
    _RefitTime,
)
#: Every figure class a format has, by name.
CLASSES = tuple(base.__name__.lstrip("_") for base in _BENCHMARKS)
_HEADLINE = (_RefitReplay, _RefitByEP)
#: BF16's classes of its headline's models alone (``bench_refit``), no format's.
HEADLINE = tuple(base.__name__.lstrip("_") for base in _HEADLINE)


def format_benchmarks(fmt: str, module: str, names: tuple[str, ...] = CLASSES) -> dict[str, type]:
    """Format ``fmt``'s benchmark classes ``names`` (``CLASSES``, by default; BF16's
    ``bench_refit`` adds ``HEADLINE``'s), for its module
    ``module`` (the ``__name__`` of the module that holds them, which asv and ``moe_bench`` name
    them by): each made over the format's shapes (``FORMAT_SHAPES``; a refit's
    ``refit_shapes``) x its strategies (``kinds``; a refit's ``refit_kinds``), inheriting every
    method, ``setup_cache`` included."""
    classes = {}
    for base in (*_BENCHMARKS, *_HEADLINE):
        name = base.__name__.lstrip("_")
        if name not in names:
            continue
        shapes = getattr(base, "shape_axis", FORMAT_SHAPES.get)
        axis = getattr(base, "strategy_axis", kinds)
        shapes_and_kinds = [list(shapes(fmt)), list(axis(fmt))]
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
