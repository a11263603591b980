"""The sleep-mode load replayed through the caching-allocator model: what vLLM's sleep mode
reserves.

Parametrised over model shape x strategy (``common.SHAPES`` x ``common.STRATEGY_AXIS``). Each
figure is ``moe_convert.replay.replay_load`` in the ``sleep`` pool (vLLM's sleep-mode CuMem pool:
freed segments stay reserved) at ``max_split_size_mb`` 20 (what vLLM sets while loading), on an
unbounded device with the model's MoE weights only: the bytes the load needs, never an OOM.
The trace is recorded on ``meta`` at full size, so the figures are exact, deterministic and the
same on every machine. A strategy that brings back per-layer allocator churn (1-10 MiB
temporaries whose 20 MiB segments are stranded once free) shows as reserved growth per layer even
when its peak live bytes look fine.
"""

from __future__ import annotations

from moe_convert.replay import replay_load
from moe_convert.wholemodel import VLLM_LOAD_MAX_SPLIT_MB, SleepModeLoad

from . import common


def _replay_cell(shape: str, strategy: str) -> SleepModeLoad:
    """``replay.replay_load`` of one cell of the grid: the sleep pool at
    ``VLLM_LOAD_MAX_SPLIT_MB``, an unbounded device, the full-size shape."""
    return replay_load(
        common.full_shape(shape),
        strategy,
        max_split_size_mb=VLLM_LOAD_MAX_SPLIT_MB,
        pool="sleep",
        device_bytes=None,
    )


class SleepModeReplay(common.ShapeStrategyGrid):
    """Reserved memory of the sleep-mode load at ``max_split_size_mb`` 20, replayed (not run on
    CUDA: ``moe_convert.wholemodel.run_load`` is the run, checked by ``scripts/gpu-check``).

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

    def setup_cache(self) -> dict[tuple[str, str], SleepModeLoad | str]:
        return common.measure_grid(_replay_cell)

    # The whole grid in one process: 54 cells took about 10 s on the shared 2-core machine.
    setup_cache.timeout = 300.0

    def setup(self, loads: dict, shape: str, strategy: str) -> None:
        self.result = common.grid_cell(loads, shape, strategy)

    def track_peak_reserved_bytes(self, loads: dict, shape: str, strategy: str) -> int:
        return self.result.peak_reserved_bytes

    def track_reserved_growth_per_layer_bytes(self, loads: dict, shape: str, strategy: str) -> int:
        return self.result.reserved_growth_per_layer_bytes
