"""A refit: new checkpoint weights converted again into a layer that one load already converted,
in vLLM 0.34's two ways, and whether a strategy survives it (its reload safety).

Legend: L the layer's checkpoint bytes (every tensor the strategy takes), P the strategy's peak.

- ``direct`` (``VLLM_RELOAD_MODE=direct``): each tensor the first load converted is viewed back in
  checkpoint layout on its own storage (``formats.placement.checkpoint_views``, the views its
  ``restore`` returns too), the new weights are written into those views, and the strategy runs
  again on them. What is assumed where a converted tensor is
  not the checkpoint tensor's shape: the view is the converted tensor's storage from the
  tensor's own first byte, laid out contiguously in the checkpoint tensor's dtype and shape; it
  needs at least the checkpoint tensor's bytes there (MXFP4's float32 biases hold twice their
  bf16 checkpoint's: the view is their first half). A storage with fewer bytes than the
  checkpoint tensor (a strategy that quantizes a BF16 layer itself) cannot be viewed: the refit
  is refused with that reason (``view_problem``), as vLLM refuses online quantization.
- ``layerwise``: fresh checkpoint tensors (``empty_like``) receive the new weights, the strategy
  converts them, and each result is copied into the tensor the first load gave.
- ``streamed`` (ours, what vLLM #56570 asks for): no conversion runs; each expert's new slices
  are placed straight into the held layer (``formats.placement.place_layer``), which every
  strategy of a format leaves in the same bytes. For a strategy that takes its format's
  checkpoint; one that quantizes a BF16 layer itself is refused.

Two properties make a strategy reload-safe (``check_refit``; on CUDA where there is one, else on
CPU): every output of the refit lives in the storage the first load gave that output (its
address kept, as captured CUDA graphs need), and its bytes equal a cold conversion of the same
new weights. A strategy that breaks either in either of vLLM's ways (``VLLM_WAYS``) is not
reload-safe, with the tensor
and the property as the reason (``reload_safety``): a property of the strategy, not an error.
Figures of one refit (peak transient, traffic, launches) come from ``measuring`` on
``refit_call``, exact on ``meta``; its time (``time_refit``) against a same-size copy of the new
weights, as every time figure.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..formats.engines import gated_only
from ..formats.layer import Layer
from ..formats.placement import (
    checkpoint_views,
    moves,
    place_layer,
    restore,
    specs_of,
    view_problem,
)
from ..formats.records import FORMATS
from ..formats.registry import REGISTRY, UNAVAILABLE, Strategy
from ..formats.shape import LayerShape
from ..formats.table import convert, strategy_input, warm_layer_strategy
from ..measuring.memory import MemoryMeasurement, measure_memory
from ..measuring.timing import LayerTiming, time_interleaved
from ..measuring.traffic import TrafficMeasurement, measure_traffic

__all__ = [
    "REFITS",
    "VLLM_WAYS",
    "RefitCheck",
    "check_refit",
    "check_shapes",
    "direct_refit",
    "documented_reload_safety",
    "documented_reversibility",
    "held_refit_call",
    "layerwise_refit",
    "refit_call",
    "refit_memory",
    "refit_traffic",
    "reload_safety",
    "reverse_problem",
    "reversibility",
    "streamed_refit",
    "time_refit",
]

#: Sizes tried, smallest first, for the shapes a strategy's reload safety is checked on (H and I
#: per rank both this size): the first the format's check takes.
_CHECK_SIZES = (64, 128, 256, 512)
#: Experts of those shapes: two, so that an expert's offset is part of what is checked.
_CHECK_EXPERTS = 2


def direct_refit(held: Layer, new: Layer, *, strategy: str, gated: bool) -> Layer:
    """vLLM 0.34's direct reload of a layer ``held`` converted by ``strategy``: ``new`` (a layer
    of what the strategy takes, in checkpoint layout) written into ``checkpoint_views(held,
    specs_of(new))``, then ``convert`` of those views.

    Returns the conversion's result: views of ``held``'s storage for a strategy that works in
    place, new tensors (``held`` left holding ``new``'s checkpoint bytes) for one that does not.
    Peak transient: the conversion's on the views (P); traffic: 2 L for the writes, then the
    conversion's."""
    views = checkpoint_views(held, specs_of(new))
    for name, tensor in new.items():
        views[name].copy_(tensor)
    return convert(views, strategy=strategy, gated=gated)


def layerwise_refit(held: Layer, new: Layer, *, strategy: str, gated: bool) -> Layer:
    """vLLM's layerwise reload of a layer ``held`` converted by ``strategy``: fresh checkpoint
    tensors (``empty_like(new)``) receive ``new``, ``convert`` converts them, and each result is
    ``copy_``-ed into ``held``'s tensor of that name.

    Returns ``held``, its tensors holding the refit's bytes in their own storage. Peak
    transient: L (the fresh tensors) + P; traffic: 2 L, the conversion's, then 2 x the
    result's bytes. ``ValueError`` where the result has a tensor ``held`` lacks."""
    fresh = Layer(**{name: torch.empty_like(tensor) for name, tensor in new.items()})
    for name, tensor in new.items():
        fresh[name].copy_(tensor)
    result = convert(fresh, strategy=strategy, gated=gated)
    for name, tensor in result.items():
        if name not in held:
            raise ValueError(f"{strategy} returns {name}, which the held layer has no tensor for")
        held[name].copy_(tensor)
    return held


def _streamed_problem(strategy: str) -> str | None:
    """Why a streamed refit of ``strategy``'s layer cannot run, or ``None``."""
    record = REGISTRY[strategy]
    if record.takes != record.format:
        return (
            f"{strategy} quantizes a {record.takes} layer itself: a streamed refit places "
            f"{record.format} checkpoint slices"
        )
    return None


def streamed_refit(held: Layer, new: Layer, *, strategy: str, gated: bool) -> Layer:
    """Our refit of a layer ``held`` converted by ``strategy``: no conversion runs; ``new``'s
    experts (checkpoint layout) are placed straight into ``held`` (``place_layer``), the bytes
    every strategy of the format gives. Returns ``held``, in its own storage. Peak transient:
    none (MXINT4: one expert's slice); traffic: ``place_expert``'s. ``ValueError`` for a
    strategy that takes another format's layer (``_streamed_problem``)."""
    problem = _streamed_problem(strategy)
    if problem is not None:
        raise ValueError(problem)
    return place_layer(held, new, gated, FORMATS[REGISTRY[strategy].format])


#: way -> its refit, ``(held, new, *, strategy, gated) -> Layer``.
REFITS: dict[str, Callable[..., Layer]] = {
    "direct": direct_refit,
    "layerwise": layerwise_refit,
    "streamed": streamed_refit,
}
#: vLLM 0.34's ways, the ones a strategy's reload class is checked in (``streamed`` is ours: it
#: runs no strategy, so it says nothing of one).
VLLM_WAYS = ("direct", "layerwise")


def _refit_function(way: str) -> Callable[..., Layer]:
    if way not in REFITS:
        raise ValueError(f"unknown refit way {way!r}; ways: {', '.join(REFITS)}")
    return REFITS[way]


def _first_load(
    shape: LayerShape, strategy: str, device: torch.device | str
) -> tuple[Layer, Layer]:
    """The first load's converted layer (seed 0), the strategy's caches warmed, and the new
    checkpoint weights of a refit (seed 1): fresh layers of what ``strategy`` takes."""
    first = strategy_input(shape, strategy, device)
    warm_layer_strategy(shape, strategy, first.w13.device)
    held = convert(first, strategy=strategy, gated=shape.gated)
    return held, strategy_input(shape, strategy, device, seed=1)


def refit_call(
    shape: LayerShape, strategy: str, way: str, device: torch.device | str = "meta"
) -> Callable[[], Layer]:
    """One refit of a ``shape`` layer to call: the first load done (``convert`` of fresh
    tensors, caches warmed) and the new weights made, neither part of the call. What every
    refit figure measures (``refit_memory``, ``refit_traffic``, ``time_refit``). The same
    refit on every call. ``ValueError`` for a direct refit the converted layer cannot be viewed
    for (``view_problem``), or a streamed one of a strategy that quantizes its layer itself."""
    return _prepared_refit(shape, strategy, way, device)[2]


def held_refit_call(
    shape: LayerShape, strategy: str, way: str, device: torch.device | str = "meta"
) -> tuple[Layer, Callable[[], Layer]]:
    """``refit_call``'s call and the layer it refits (the first load's result, whose storage
    the call keeps or replaces): what ``replay.refit_trace`` needs to tell the two apart."""
    held, _, call = _prepared_refit(shape, strategy, way, device)
    return held, call


def _prepared_refit(
    shape: LayerShape, strategy: str, way: str, device: torch.device | str
) -> tuple[Layer, Layer, Callable[[], Layer]]:
    """``(held, new, call)``: the layer ``refit_call``'s call refits, the new checkpoint weights
    it takes in (never written) and the call."""
    refit = _refit_function(way)
    held, new = _first_load(shape, strategy, device)
    if way == "direct":
        checkpoint_views(held, specs_of(new))  # refused now, not inside a measurement
    if way == "streamed":
        if (problem := _streamed_problem(strategy)) is not None:
            raise ValueError(problem)
        refit(held, new, strategy=strategy, gated=shape.gated)  # place_expert's indices cached
    return held, new, lambda: refit(held, new, strategy=strategy, gated=shape.gated)


def refit_memory(
    shape: LayerShape, strategy: str, way: str, *, device: torch.device | str = "meta"
) -> MemoryMeasurement:
    """Dispatch-level peak transient bytes of one refit (``measure_memory`` of ``refit_call``):
    exact on ``meta`` at full size."""
    return measure_memory(refit_call(shape, strategy, way, device))


def refit_traffic(
    shape: LayerShape, strategy: str, way: str, *, device: torch.device | str = "meta"
) -> TrafficMeasurement:
    """Traffic and launches of one refit (``measure_traffic`` of ``refit_call``): exact on
    ``meta`` at full size."""
    return measure_traffic(refit_call(shape, strategy, way, device))


def time_refit(
    shape: LayerShape,
    strategy: str,
    way: str,
    *,
    device: torch.device | str = "cpu",
    repeats: int = 5,
    warmup: int = 1,
    threads: int | None = None,
    model_experts: int | None = None,
) -> LayerTiming:
    """One refit of a ``shape`` layer (``refit_call``) timed against a same-size ``copy_`` of
    the new checkpoint weights it takes in (``timing.time_interleaved``: copy, refit, copy,
    refit ..., ``warmup`` rounds untimed): ``copy_ratio`` 1.0 is every new byte read once and
    written once, a refit's floor. The refit leaves those weights as they are: nothing is
    restored between calls. Arguments as ``timing.time_layer``'s. Memory: the first load's
    layer, the new weights, their copy and the refit's peak transient."""
    _, new, call = _prepared_refit(shape, strategy, way, device)
    return time_interleaved(
        shape,
        strategy,
        list(new.values()),
        call,
        inplace=False,
        repeats=repeats,
        warmup=warmup,
        threads=threads,
        model_experts=model_experts,
    )


@dataclass(frozen=True)
class RefitCheck:
    """The two properties of one refit of one shape, checked on CPU."""

    strategy: str
    way: str  # a key of REFITS
    shape: str  # its label: E, H, I and gating
    moved: tuple[str, ...]  # outputs whose storage is not the one the first load gave
    differ: tuple[str, ...]  # outputs whose bytes (or shape, dtype) differ from a cold conversion
    refused: str = ""  # why the refit cannot run at all (``view_problem``), "" where it ran

    @property
    def safe(self) -> bool:
        return not (self.moved or self.differ or self.refused)

    @property
    def reason(self) -> str:
        """What breaks, by tensor and property ("" where nothing does)."""
        parts = [self.refused] if self.refused else []
        if self.moved:
            parts.append(f"{', '.join(self.moved)} in new storage")
        if self.differ:
            parts.append(f"{', '.join(self.differ)} not a cold conversion's bytes")
        return "; ".join(parts)


def _same_bytes(got: torch.Tensor, want: torch.Tensor) -> bool:
    return (got.shape, got.dtype) == (want.shape, want.dtype) and torch.equal(
        got.view(torch.uint8), want.view(torch.uint8)
    )


def _label(shape: LayerShape) -> str:
    return f"E{shape.experts} H{shape.hidden} I{shape.intermediate}" + (
        "" if shape.gated else " not gated"
    )


def check_refit(
    shape: LayerShape, strategy: str, way: str, *, device: torch.device | str = "cpu"
) -> RefitCheck:
    """Refit a ``shape`` layer converted by ``strategy`` on ``device``, then check each output:
    its storage the first load's (``untyped_storage().data_ptr()``), its bytes a cold
    conversion's of the same new weights."""
    refit = _refit_function(way)
    held, new = _first_load(shape, strategy, device)
    label = _label(shape)
    refused = view_problem(held, specs_of(new)) if way == "direct" else None
    if refused is not None:
        return RefitCheck(strategy, way, label, (), (), f"no checkpoint view ({refused})")
    if way == "streamed" and (problem := _streamed_problem(strategy)) is not None:
        return RefitCheck(strategy, way, label, (), (), problem)
    cold = convert(Layer(**{n: t.clone() for n, t in new.items()}), strategy=strategy,
                   gated=shape.gated)  # fmt: skip
    storages = {name: t.untyped_storage().data_ptr() for name, t in held.items()}
    got = refit(held, new, strategy=strategy, gated=shape.gated)
    moved = tuple(n for n, t in got.items() if storages.get(n) != t.untyped_storage().data_ptr())
    differ = tuple(n for n, t in got.items() if n not in cold or not _same_bytes(t, cold[n]))
    return RefitCheck(strategy, way, label, moved, differ)


def check_shapes(fmt: str) -> tuple[LayerShape, ...]:
    """The small shapes a strategy of format ``fmt`` is checked on: gated, and not gated where
    the format has it; two experts, H and I the smallest of ``_CHECK_SIZES`` its check takes."""
    shapes = []
    for gated in (True, False) if not FORMATS[fmt].gated_only else (True,):
        for size in _CHECK_SIZES:
            shape = LayerShape("refit-check", 1, _CHECK_EXPERTS, size, size, 1, gated, fmt)
            if shape.conversion_error is None:
                shapes.append(shape)
                break
    return tuple(shapes)


def _converted_check_shapes(record: Strategy) -> tuple[LayerShape, ...]:
    """``check_shapes`` of ``record``'s format that the strategy converts: the gated one alone
    where its engine's installed form converts gated layers only (``formats.engines.gated_only``):
    a not-gated layer is none it loads, so none it reloads or reverses."""
    shapes = check_shapes(record.format)
    return tuple(s for s in shapes if s.gated) if gated_only(record.name) else shapes


def reload_safety(strategy: str) -> str:
    """``strategy``'s reload class, checked (``check_refit``) on its format's ``check_shapes``
    in vLLM's two ways (``VLLM_WAYS``): ``reload-safe``, or ``not reload-safe`` and, per way
    that breaks, its reason (``direct: w13_bias, w2_bias in new storage (E2 H128 I128)``);
    ``not checked`` for one that cannot run here. Checked on CUDA where the machine has it (a
    strategy may need it: Triton, FlashInfer's quantizers), else on CPU. The checks run once
    per registered record and process."""
    return _registered_class(strategy, _checked_safety)


@functools.cache
def _checked_safety(record: Strategy) -> str:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    reasons = {}
    for way in VLLM_WAYS:
        for shape in _converted_check_shapes(record):
            check = check_refit(shape, record.name, way, device=device)
            if not check.safe:
                reasons.setdefault(way, f"{check.reason} ({check.shape})")
    if not reasons:
        return "reload-safe"
    return "not reload-safe: " + "; ".join(f"{way}: {why}" for way, why in reasons.items())


def documented_reload_safety(strategy: str) -> str:
    """The reload class docs/library.md's table shows: ``reload_safety``'s for a strategy that
    needs nothing beyond this library (``Strategy.needs`` empty), so that the page is the same
    on every machine; for one that needs more, where to read it once that is installed."""
    return _documented_class(strategy, reload_safety)


def reverse_problem(
    shape: LayerShape, strategy: str, *, device: torch.device | str = "cpu"
) -> str | None:
    """Why ``strategy``'s output of a fresh ``shape`` layer is not reversible in place, or
    ``None``: its tensors' storage too small for the layer it took (``view_problem``), or the
    bytes ``formats.placement.restore`` leaves there not that layer's (by tensor). The layer
    is converted on ``device`` and restored in place; a clone of it is the reference."""
    taken = strategy_input(shape, strategy, device)
    checkpoint = {name: t.clone() for name, t in taken.items()}
    converted = convert(taken, strategy=strategy, gated=shape.gated)
    problem = view_problem(converted, specs_of(taken))
    if problem is not None:
        return f"no room ({problem})"
    storages = {name: t.untyped_storage().data_ptr() for name, t in converted.items()}
    restored = restore(converted, shape)
    moved = [n for n, t in restored.items() if t.untyped_storage().data_ptr() != storages[n]]
    differ = [n for n, t in checkpoint.items() if n not in restored
              or not _same_bytes(restored[n], t)]  # fmt: skip
    parts = [f"{', '.join(moved)} in new storage"] * bool(moved)
    lossy = {n for n, move in moves(shape.fmt, shape.gated).items() if move.clamp is not None}
    why = f" (clamped to at least {shape.fmt.scale_min}: lossy)" if set(differ) <= lossy else ""
    parts += [f"{', '.join(differ)} not the checkpoint's bytes{why}"] * bool(differ)
    return "; ".join(parts) or None


def reversibility(strategy: str) -> str:
    """``strategy``'s inverse class, checked (``reverse_problem``) on its format's
    ``check_shapes``: ``reversible in place``, or ``not reversible in place`` and the first
    reason (``w13_scale, w2_scale not the checkpoint's bytes (E2 H128 I128)``); ``not
    checked`` for one that cannot run here. On CUDA where there is one, else on CPU; once per
    registered record and process."""
    return _registered_class(strategy, _checked_reversibility)


@functools.cache
def _checked_reversibility(record: Strategy) -> str:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    for shape in _converted_check_shapes(record):
        problem = reverse_problem(shape, record.name, device=device)
        if problem is not None:
            return f"not reversible in place: {problem} ({_label(shape)})"
    return "reversible in place"


def documented_reversibility(strategy: str) -> str:
    """The inverse class docs/library.md's table shows, as ``documented_reload_safety``."""
    return _documented_class(strategy, reversibility)


def _registered_class(strategy: str, checked: Callable[[Strategy], str]) -> str:
    """A checked class (``reload_safety``, ``reversibility``) of ``strategy``: ``checked`` on
    its registered record, or ``not checked`` for one that cannot run here."""
    if strategy in UNAVAILABLE:
        return "not checked (cannot run here)"
    return checked(REGISTRY[strategy])


def _documented_class(strategy: str, classify: Callable[[str], str]) -> str:
    """``classify(strategy)`` for a strategy that needs nothing beyond this library, so that
    docs/library.md's table is the same on every machine; for one that needs more, where to
    read it once that is installed."""
    record = REGISTRY.get(strategy) or UNAVAILABLE[strategy]
    if record.needs:
        return "checked where it runs (`python -m moe_convert strategies`)"
    return classify(strategy)
