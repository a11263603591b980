"""NVTX ranges around this suite's CUDA work, so that an ``nsys`` trace of it lines up with a
trace of an engine's model load (vLLM's and NeMo-RL's profiles are nsys traces with NVTX ranges).

Names say what the range is: ``moe_convert/<strategy>/<shape>`` for a conversion
(``registry.convert``), ``moe_load/<strategy>/<model/tpN>/layer<i>`` for each layer of a rank's
load (``wholemodel.run_load``), ``gpu_check/<step>`` for a step of ``scripts/gpu-check``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

__all__ = ["nvtx_range"]


@contextlib.contextmanager
def nvtx_range(name: str, device: torch.device | str) -> Iterator[None]:
    """Push the ``torch.cuda.nvtx`` range ``name`` around the block when ``device`` is a CUDA
    device (``cuda``, ``cuda:1``, a ``torch.device``); pop it when the block ends, also on an
    exception.

    Anywhere else (``cpu``, ``meta``) nothing is called: a CPU build of torch has no NVTX (its
    ``range_push`` raises), and a conversion on CPU pays for no profiling hook. A range marks
    the host-side interval only: CUDA work is asynchronous, and nsys ties the kernels launched
    inside it to the range.
    """
    if torch.device(device).type != "cuda":
        yield
        return
    torch.cuda.nvtx.range_push(name)
    try:
        yield
    finally:
        torch.cuda.nvtx.range_pop()
