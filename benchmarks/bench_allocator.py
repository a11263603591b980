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

import functools

from moe_convert.replay import replay_load
from moe_convert.wholemodel import SleepModeLoad

from . import common

#: vLLM's max_split_size_mb during load_model (vLLM #41268).
MAX_SPLIT_MB = 20


@functools.cache
def _replayed(shape: str, strategy: str) -> SleepModeLoad:
    """One replay per (shape, strategy) and process: asv_runner calls ``setup`` before each call."""
    return replay_load(common.full_shape(shape), strategy, max_split_size_mb=MAX_SPLIT_MB,
                       pool="sleep", device_bytes=None)


class SleepModeReplay:
    """Reserved memory of the sleep-mode load at ``max_split_size_mb`` 20, replayed (not run on
    CUDA: ``moe_convert.wholemodel.run_load`` is the run, checked by ``scripts/gpu-check``).

    ``peak_reserved_bytes``: the peak over loading every layer's weights and converting each in
    turn. ``reserved_growth_per_layer_bytes``: the steady-state rise of reserved memory per
    converted layer (median over layers after the first); zero unless the strategy strands
    segments, and then multiplied by the model's layer count.
    """

    version = "1"  # 1: was SleepModeLoad (v1), renamed; the same figures
    unit = "bytes"
    params = [list(common.SHAPES), list(common.STRATEGY_AXIS)]
    param_names = ["shape", "strategy"]
    timeout = 300.0

    def setup(self, shape: str, strategy: str) -> None:
        common.require_strategy(strategy)
        self.result = _replayed(shape, strategy)

    def track_peak_reserved_bytes(self, shape: str, strategy: str) -> int:
        return self.result.peak_reserved_bytes

    def track_reserved_growth_per_layer_bytes(self, shape: str, strategy: str) -> int:
        return self.result.reserved_growth_per_layer_bytes
