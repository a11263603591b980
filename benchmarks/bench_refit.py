"""BF16 refits of the rank-load headline's shapes: one full-size layer, converted once, then new
checkpoint weights converted again into it (``moe_convert.load.refit``), in each way of
``REFITS``: vLLM 0.34's ``direct`` and ``layerwise`` and our ``streamed``.

Per way the refit's peak transient bytes, traffic and launches, exact on ``meta``; and the
strategy's two classes as 0/1 (``reload_safety``: every output keeps the first load's storage and
holds a cold conversion's bytes in vLLM's two ways; ``reversibility``: ``restore`` gives the
checkpoint's bytes back in place), checked on the library's small shapes, the same at every
shape. ``moe_bench`` reads these beside ``bench_convert``'s first load for the summary's refit
block, without the library. A commit before the refit (issue 38) has every cell n/a.
"""

from __future__ import annotations

from moe_suite.metrics import REFIT_FIGURES, REFIT_WAYS

from . import common, formats, library

#: The strategies refitted: vLLM's conversion before and after #45589 (``legacy``,
#: ``preallocated``), its in-place form (``inplace``), the committed results' best strategies
#: of the headline's shapes (``batched``, ``preallocated``, ``strided_inplace``) and ours that
#: streams (``streaming``). Not every strategy: a cell refits a full-size layer three ways
#: (0.8-6 s each on the shared 2-core machine). asv keys a history by its parameters: a
#: strategy is added at the end, never moved.
STRATEGIES = ("legacy", "preallocated", "inplace", "batched", "strided_inplace", "streaming")


def _refit(label: str, strategy: str) -> dict[str, object]:
    """``way -> (peak transient bytes, traffic bytes, launches)`` (``REFIT_FIGURES``) of one
    refit of ``label``'s full-size layer converted by ``strategy``, on meta (one ``refit_call``
    per way: memory and traffic counted on the same call, each call the same refit), then
    ``reload_safe`` and ``reversible_in_place``: the strategy's two classes."""
    refit = library.module("load.refit")
    measure_memory = library.module("measuring.memory").measure_memory
    measure_traffic = library.module("measuring.traffic").measure_traffic
    shape = formats.full_shape(label)
    figures: dict[str, object] = {}
    for way in REFIT_WAYS:
        call = refit.refit_call(shape, strategy, way)
        counted = measure_traffic(call)
        figures[way] = (measure_memory(call).peak_bytes, counted.traffic_bytes, counted.launches)
    figures["reload_safe"] = refit.reload_safety(strategy) == "reload-safe"
    figures["reversible_in_place"] = refit.reversibility(strategy) == "reversible in place"
    return figures


def _no_refit() -> formats._NotHere | None:
    """Why the measured commit cannot refit: it has no ``load.refit`` (before issue 38)."""
    try:
        library.module("load.refit")
    except ModuleNotFoundError:
        return formats._NotHere("this commit's library has no refit (moe_convert.load.refit)")
    return None


class Refit:
    """One refit per way of a full-size BF16 layer (exact on meta), and the strategy's reload
    and inverse classes (1 where it has the property). Every cell measured once per asv run, in
    ``setup_cache``, each in a worker process."""

    version = "1"
    param_names = ["shape", "strategy"]
    params = [list(common.SHAPES), list(STRATEGIES)]
    timeout = 300.0

    def setup_cache(self) -> dict:
        cells = [(label, strategy) for label in common.SHAPES for strategy in STRATEGIES]
        missing = _no_refit()
        not_here = {cell: missing or formats._not_here(*cell, on_meta=True) for cell in cells}
        measured = common.measure_cells(_refit, [cell for cell in cells if not not_here[cell]])
        return {cell: measured.get(cell, not_here[cell]) for cell in cells}

    # 36 cells: 141 s on the shared 2-core machine (niced, load average 5.4-6.4).
    setup_cache.timeout = 600.0

    def setup(self, results: dict, shape: str, strategy: str) -> None:
        self.measured = formats._cell(results, shape, strategy)

    def track_reload_safe(self, results: dict, shape: str, strategy: str) -> int:
        return int(self.measured["reload_safe"])

    track_reload_safe.unit = "class"

    def track_reversible_in_place(self, results: dict, shape: str, strategy: str) -> int:
        return int(self.measured["reversible_in_place"])

    track_reversible_in_place.unit = "class"


def _way_figure(way: str, index: int, unit: str):
    """``Refit``'s ``index``-th figure of ``REFIT_FIGURES`` (in ``unit``) of refit way ``way``."""

    def track(self, results: dict, shape: str, strategy: str) -> int:
        return self.measured[way][index]

    track.unit = unit
    return track


# One method per way and figure, named as the metrics table lists them (``REFIT``).
for _way in REFIT_WAYS:
    for _index, (_figure, _unit) in enumerate(REFIT_FIGURES):
        setattr(Refit, f"track_{_way}_{_figure}", _way_figure(_way, _index, _unit))
