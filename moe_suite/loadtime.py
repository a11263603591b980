"""The load-time model: a rank load's seconds from its conversions and its allocator events.

A rank load (``moe_convert.load.wholemodel.RankLoad``) spends its time converting layers and,
under vLLM's ``max_split_size_mb:20``, talking to the driver: every segment the caching allocator
makes is a ``cudaMalloc``, every one it gives back a ``cudaFree`` (which waits for the device),
and on a full device every new segment first costs a ``cudaMalloc`` that fails. So

    predicted seconds = layers x one layer's conversion (steady state, cached allocator)
                        + num_device_alloc x cudaMalloc + num_device_free x cudaFree
                        + num_device_alloc_failed x a refused cudaMalloc

with the event counts of the load's conversions (a replay counts all three; a run the first two)
and the costs measured on the device (``moe_convert.load.loadtime.measure_event_costs``, by
``scripts/gpu-check``'s step ``load``) and recorded with its name (``DeviceCosts``, in
``COSTS_FILE``), so that a machine without a GPU predicts the load time of a named device from
the last costs recorded for it. The model is additive on purpose: where the measured whole-rank
time (``wholemodel.run_load``) differs from it, the difference is a finding
(docs/allocator.md), not a parameter to fit.

The records and the arithmetic, standard library only: ``moe_bench``'s summary prices the
suite's replayed driver calls with them where torch is not installed; the measuring is
``moe_convert.load.loadtime``'s.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

__all__ = [
    "COSTS_FILE",
    "DeviceCosts",
    "EventCosts",
    "append_costs",
    "predict_load_seconds",
    "read_costs",
]

#: Where ``scripts/gpu-check`` records each run's ``DeviceCosts`` (a JSON list, oldest first).
COSTS_FILE = Path(__file__).resolve().parent.parent / "docs" / "gpu-results" / "device-costs.json"


@dataclass(frozen=True)
class EventCosts:
    """Seconds of one allocator event on a device, medians of ``samples`` each."""

    cuda_malloc_seconds: float  # a cudaMalloc of a 20 MiB segment (the 1-10 MiB requests' size)
    cuda_free_seconds: float  # a cudaFree of one, on an idle device
    failed_cuda_malloc_seconds: float  # a refused round less its cudaFree and cudaMalloc
    samples: int


@dataclass(frozen=True)
class DeviceCosts:
    """What ``scripts/gpu-check`` records for a device: event costs and per-layer seconds.

    ``layer_seconds`` is ``{shape label: {strategy: seconds of one layer}}``, each the median of
    ``timing.time_layer`` on that device (steady state: the allocator serves it from cache).
    """

    device: str  # torch.cuda.get_device_name
    torch: str
    commit: str  # this repository's commit that measured it
    date: str  # ISO 8601, UTC
    events: EventCosts
    layer_seconds: dict[str, dict[str, float]]

    @classmethod
    def from_json(cls, record: dict) -> DeviceCosts:
        return cls(**{**record, "events": EventCosts(**record["events"])})


def predict_load_seconds(
    *,
    layers: int,
    layer_seconds: float,
    num_device_alloc: int,
    num_device_free: int,
    num_device_alloc_failed: int,
    events: EventCosts,
) -> float:
    """Seconds of a load's conversions by the model above (see the module docstring).

    ``layers`` converted (``RankLoad.layers_converted``: a load that ran out of memory is
    predicted up to its OOM layer), each ``layer_seconds`` (one layer's steady-state conversion
    on the device ``events`` are for), and the load's event counts: a replay's
    (``replay.replay_load``; a run does not know its refused ``cudaMalloc`` calls, and its
    seconds are measured anyway) or the suite's ``RankLoadReplay`` figures.
    """
    return (
        layers * layer_seconds
        + num_device_alloc * events.cuda_malloc_seconds
        + num_device_free * events.cuda_free_seconds
        + num_device_alloc_failed * events.failed_cuda_malloc_seconds
    )


def read_costs(path: Path = COSTS_FILE, *, device: str | None = None) -> DeviceCosts | None:
    """The last ``DeviceCosts`` recorded in ``path`` (for ``device``, when named); None if none."""
    if not path.exists():
        return None
    records = [DeviceCosts.from_json(r) for r in json.loads(path.read_text())]
    matching = [r for r in records if device is None or r.device == device]
    return matching[-1] if matching else None


def append_costs(costs: DeviceCosts, path: Path = COSTS_FILE) -> None:
    """Add ``costs`` to the records in ``path`` (made if missing), written whole then renamed."""
    records = json.loads(path.read_text()) if path.exists() else []
    records.append(asdict(costs))
    scratch = path.with_suffix(".tmp")
    scratch.write_text(json.dumps(records, indent=1) + "\n")
    scratch.replace(path)
