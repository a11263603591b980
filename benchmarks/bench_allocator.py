"""The whole rank's load through the caching allocator: replayed everywhere, run on CUDA.

Parametrised over model shape x strategy (``common.SHAPES`` x ``common.STRATEGY_AXIS``), every
MoE layer of the rank (``load.wholemodel``'s rank load) at ``max_split_size_mb`` 20, what
vLLM sets while loading. The replays (``moe_convert.load.replay.replay_load``) record each layer's
trace on ``meta`` at full size, so their figures are exact, deterministic and the same on every
machine, in seconds and without a GPU:

- ``SleepModeReplay``: vLLM's sleep-mode pool on an unbounded device: the bytes the load needs;
- ``RankLoadReplay``: vLLM's load without sleep mode (the default pool) on a device with PR
  #45589's headroom: the driver calls (``cudaMalloc``, ``cudaFree``, refused ``cudaMalloc``,
  retries) that made its legacy load 10.7 s instead of 2.4 s, and whether it fits.

A strategy that brings back per-layer allocator churn (1-10 MiB temporaries whose 20 MiB
segments are stranded once free) shows in both, even when its peak live bytes look fine.
``RankLoadTime`` runs the same load on CUDA and times it (``wholemodel.run_load``).
"""

from __future__ import annotations

import torch

from . import common, library

replay = library.module("load.replay")
wholemodel = library.module("load.wholemodel")


def _replay_cell(shape: str, strategy: str) -> wholemodel.RankLoad:
    """``replay.replay_load`` of one cell of the grid: the sleep pool at
    ``VLLM_LOAD_MAX_SPLIT_MB``, an unbounded device, the full-size shape."""
    return replay.replay_load(
        common.full_shape(shape),
        strategy,
        max_split_size_mb=wholemodel.VLLM_LOAD_MAX_SPLIT_MB,
        pool="sleep",
        device_bytes=None,
    )


class SleepModeReplay(common.ShapeStrategyGrid):
    """Reserved memory of the sleep-mode load at ``max_split_size_mb`` 20, replayed (not run on
    CUDA: ``moe_convert.load.wholemodel.run_load`` is the run, checked by ``scripts/gpu-check``).

    ``peak_reserved_bytes``: the peak over loading every layer's weights and converting each in
    turn. ``reserved_growth_per_layer_bytes``: the steady-state rise of reserved memory per
    converted layer (median over layers after the first); zero unless the strategy strands
    segments, and then multiplied by the model's layer count.

    The whole grid is replayed once per asv run, in ``setup_cache`` (one process; asv passes its
    result to every method and parameter), so both figures of a cell come from one replay. A run
    that selects a few cells (``-b``) still replays the whole grid.
    """

    # 1: was SleepModeLoad (v1), renamed; the same figures. Replayed once in setup_cache instead
    # of once per method's process: the same replay_load calls, so the same values.
    version = "1"
    unit = "bytes"

    def setup_cache(self) -> dict[tuple[str, str], wholemodel.RankLoad | str]:
        return common.measure_grid(_replay_cell)

    # The whole grid in one process: 54 cells took about 10 s on the shared 2-core machine.
    setup_cache.timeout = 300.0

    def setup(self, loads: dict, shape: str, strategy: str) -> None:
        self.result = common.grid_cell(loads, shape, strategy)

    def track_peak_reserved_bytes(self, loads: dict, shape: str, strategy: str) -> int:
        return self.result.peak_reserved_bytes

    def track_reserved_growth_per_layer_bytes(self, loads: dict, shape: str, strategy: str) -> int:
        return self.result.reserved_growth_per_layer_bytes


def rank_load_replay(shape: str, strategy: str) -> wholemodel.RankLoad:
    """``RankLoadReplay``'s load: the default pool at ``VLLM_LOAD_MAX_SPLIT_MB``, the full-size
    rank's MoE weights and ``PR45589_HEADROOM_BYTES`` to spare (what vLLM #45589's Qwen3-235B
    TP4 rank had on a 141 GB device)."""
    full = common.full_shape(shape)
    return replay.replay_load(
        full,
        strategy,
        max_split_size_mb=wholemodel.VLLM_LOAD_MAX_SPLIT_MB,
        pool="default",
        device_bytes=full.model_bytes + wholemodel.PR45589_HEADROOM_BYTES,
    )


class RankLoadReplay(common.ShapeStrategyGrid, common.RankLoadFigures):
    """The driver calls of the whole rank's load without sleep mode, replayed (exact; gated):
    ``common.RankLoadFigures``' figures. ``moe_bench`` prices the calls with a device's recorded
    costs (``moe_convert.load.loadtime``).
    """

    version = "1"

    def setup_cache(self) -> dict[tuple[str, str], wholemodel.RankLoad | str]:
        return common.measure_grid(rank_load_replay)

    # The whole grid: 76 s wall (42 s of CPU) on the shared 2-core machine under load 5.4
    # (`RankLoadReplay().setup_cache()`, timed); legacy's 94- and 58-layer replays are most of it.
    setup_cache.timeout = 600.0

    def setup(self, loads: dict, shape: str, strategy: str) -> None:
        self.result = common.grid_cell(loads, shape, strategy)


def _rank_load_run(shape: str, strategy: str) -> wholemodel.RankLoad:
    """``RankLoadTime``'s load: ``RankLoadReplay``'s, run on this CUDA device, a ballast first
    so that it has the same headroom (``PR45589_HEADROOM_BYTES``) whatever its size."""
    full = common.full_shape(shape)
    free = torch.cuda.mem_get_info()[0]
    return wholemodel.run_load(
        full,
        strategy,
        max_split_size_mb=wholemodel.VLLM_LOAD_MAX_SPLIT_MB,
        other_weights_bytes=max(0, free - full.model_bytes - wholemodel.PR45589_HEADROOM_BYTES),
    )


class RankLoadTime(common.ShapeStrategyGrid):
    """Seconds of the whole rank's conversions, run on CUDA (``wholemodel.run_load``, the
    default pool at 20 MiB, a ballast leaving ``RankLoadReplay``'s headroom, so its driver calls
    are the replayed ones on any device): the load time vLLM's users see, allocator calls
    included. CUDA only (n/a elsewhere: ``moe_bench`` shows the predicted time there); a rank
    whose weights do not fit this device is n/a, saying so. One run per cell, all in
    ``setup_cache``."""

    version = "1"

    def setup_cache(self) -> dict[tuple[str, str], wholemodel.RankLoad | str]:
        if common.device() != "cuda":
            return {}
        return common.measure_grid(_rank_load_run)

    # 6 shapes x the strategies: legacy's loads take seconds each on a GB200.
    setup_cache.timeout = 1800.0

    def setup(self, loads: dict, shape: str, strategy: str) -> None:
        common.require_cuda()
        free = torch.cuda.mem_get_info()[0]
        if common.full_shape(shape).model_bytes > free:
            common.skip(f"{shape}'s MoE weights do not fit the {free / 2**30:.1f} GiB free here")
        self.result = common.grid_cell(loads, shape, strategy)
        if self.result.oom:  # a partial load's seconds are no load time
            raise RuntimeError(f"{shape} {strategy}: {self.result.oom_message}")

    def track_load_seconds(self, loads: dict, shape: str, strategy: str) -> float:
        return self.result.seconds

    track_load_seconds.unit = "seconds"
