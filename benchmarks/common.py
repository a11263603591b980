"""BF16's axes, the profile, the device, the skip helpers and the cells' worker of the asv suite.

Parameter values are readable names: shapes ``model/tpN``, strategies by their registry name
(``benchmarks.formats`` makes every format's grid). Nothing heavy happens at import: every input
is made when a benchmark measures.

The profile (``MOE_BENCH_PROFILE``: ``full``, ``cpu`` or ``smoke``; default ``full`` where CUDA
is available, ``cpu`` elsewhere: ``moe_suite.profiles`` decides, scripts/ export it) sets how many
experts the *timed* benchmarks convert (``moe_suite.profiles.TIMED_EXPERTS``): ``full`` every
expert of the layer; ``cpu`` and ``smoke`` each expert's geometry (I, H) but 8 experts, so a
2-core CI machine finishes, or one. Memory benchmarks are always full size, on ``meta``.
``bench_convert.Profile.track_timed_experts`` records the expert count in the results, so a
reduced profile's figure can never pass for a full one.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

import moe_convert
from moe_suite.profiles import TIMED_EXPERTS, detect_device, profile_from_env
from moe_suite.shapes import SHAPES  # the BF16 axis (moe_bench.gpucheck times it too)

from . import isolation, library

__all__ = [
    "SHAPES",
    "STRATEGY_AXIS",
    "OPTIONAL_STRATEGIES",
    "CPU_THREADS",
    "CELL_TIMEOUT_S",
    "profile",
    "device",
    "skip",
    "require_cuda",
    "measure_cells",
]

T = TypeVar("T")


#: Strategies registered only where they can run: the registry's records with a non-empty
#: ``needs`` (``flashinfer`` where its package is installed, ``triton`` and ``triton_inplace`` where
#: Triton is and a GPU (or its interpreter) is there, the installed engines' adapters). They are
#: always on the axis (n/a where absent), so a benchmark's parameter list, and with it the keys of
#: its results history, is the same on every machine: a machine without FlashInfer shows
#: ``flashinfer`` as n/a instead of silently changing the parameter grid that the nightly history
#: is keyed by. Written out, in registration order, because the order cannot be read back from
#: the records: the registry files each record in ``REGISTRY`` or ``UNAVAILABLE`` as it
#: registers, so where some are installed and others not (an SGLang box without vLLM) the two
#: dicts no longer tell which came first. tests/test_asv_suite.py checks that these are exactly
#: the records with ``needs``, registered here or not.
OPTIONAL_STRATEGIES = (
    "flashinfer",
    "triton",
    "triton_inplace",
    "vllm",
    "sglang-installed",
    "cycle_inplace",
)

#: Every BF16 strategy of the measured commit that needs nothing more (registered everywhere), in
#: registry order, then the optional ones (registered here or not), so the order too is the same
#: on every machine.
STRATEGY_AXIS = (
    tuple(
        name
        for name, record in library.strategy_records(moe_convert).items()
        if getattr(record, "format", "bf16") == "bf16" and not record.needs
    )
    + OPTIONAL_STRATEGIES
)

#: CPU threads of every timed call. One: with two threads, a busy neighbour on one of a 2-core
#: machine's cores stalls every parallel region (8 experts of qwen3-235b-a22b/tp4, strided_copy:
#: median 13.9 -> 24.0 ms, max/min 1.19 -> 2.37 with one core kept busy), while one thread
#: keeps its time within noise; the figures then measure the code, not the neighbours.
CPU_THREADS = 1

#: Seconds one cell of a grid may take before it is stopped and recorded as failed
#: (``measure_cells``). The slowest cell found, RankLoadReplay's legacy on qwen3-235b-a22b/tp4,
#: took 10.6 s on the shared 2-core machine under load 4.2, its three devices' replays 3.1 s
#: alone (docs/reliability.md); LayerTime's BF16 cells, 54, 43 s in the cpu profile: 120 s is
#: room for a loaded machine, not a hang.
CELL_TIMEOUT_S = 120.0


def skip(reason: str) -> None:
    """Skip the current benchmark (asv shows n/a): raise from ``setup`` with the reason."""
    raise NotImplementedError(reason)


@functools.cache
def device() -> str:
    """``cuda`` where a CUDA device is available, else ``cpu``. Sets nothing: what times CPU
    calls sets ``CPU_THREADS`` threads itself (``moe_convert.measuring.timing``'s ``threads=``)."""
    return detect_device()


@functools.cache
def profile() -> str:
    """The profile in use: ``MOE_BENCH_PROFILE``, else the device's (``moe_suite.profiles``)."""
    return profile_from_env(device())


def timed_experts() -> int | None:
    """Experts a timed layer converts under the profile in use (``None``: every expert)."""
    return TIMED_EXPERTS[profile()]


def require_cuda() -> None:
    """Skip unless a CUDA device is available."""
    if device() != "cuda":
        skip("needs a CUDA device; none is available here")


def measure_cells(
    measure: Callable[[str, str], T],
    cells: list[tuple[str, str]],
    *,
    timeout_s: float = CELL_TIMEOUT_S,
) -> dict[tuple[str, str], T | str]:
    """``measure(*cell)`` of each cell, one after another in a worker process
    (``isolation.measure_cells``): a cell whose call raises, kills its process or runs past
    ``timeout_s`` gets the reason's text instead, so it fails its own figures
    (``formats._cell``) and not the grid's. On CUDA ``measure`` must be a module-level function
    (the worker is spawned and imports it)."""
    # fork: torch is imported already, the worker starts at once; CUDA cannot be used after it
    start_method = "spawn" if device() == "cuda" else "fork"
    return isolation.measure_cells(measure, cells, timeout_s=timeout_s, start_method=start_method)
