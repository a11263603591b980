"""Inputs of a measurement: seeded random weights, full-size layers, a strategy's caches warmed.

Legend: E experts, M13 rows of w13 (2I gated, I not), H hidden, I intermediate per rank; every
weight bf16, checkpoint layout (w13 ``[E, M13, H]``, w2 ``[E, H, I]``).

Every measurement (``memory``, ``timing``, ``traffic``), the sleep-mode load (``replay``,
``wholemodel``), the asv suite, ``moe_bench.gpucheck`` (scripts/gpu-check), the CLI and the
tests take their weights from here, so "a fresh layer" means one thing everywhere:
``layer_weights`` (on ``meta`` sizes without memory, elsewhere ``random_weights``), with the
strategy's index caches warmed by ``warm_strategy`` before anything is measured.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..registry import convert
from ..shape import LayerShape

__all__ = ["layer_weights", "random_weights", "strategy_call", "warm_strategy"]


def random_weights(
    w13_shape: tuple[int, ...],
    w2_shape: tuple[int, ...],
    *,
    seed: int = 0,
    device: torch.device | str = "cpu",
) -> tuple[torch.Tensor, torch.Tensor]:
    """bf16 tensors of random bit patterns (every byte value occurs), reproducible by ``seed``.

    Drawn on ``device`` itself (no host round trip for a full-size layer on a GPU), so the
    bits are reproducible per device type, not across them. New tensors.
    """
    gen = torch.Generator(device=device).manual_seed(seed)

    def bits(shape: tuple[int, ...]) -> torch.Tensor:
        raw = torch.randint(-(2**15), 2**15, shape, dtype=torch.int16, device=device, generator=gen)
        return raw.view(torch.bfloat16)

    return bits(w13_shape), bits(w2_shape)


def layer_weights(
    shape: LayerShape, device: torch.device | str, *, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Fresh bf16 ``w13 [E, M13, H]`` and ``w2 [E, H, I]`` of ``shape`` on ``device``.

    ``meta``: ``torch.empty`` (sizes, no memory). Elsewhere: ``random_weights`` of ``seed``.
    """
    device = torch.device(device)
    if device.type == "meta":
        return (
            torch.empty(shape.w13_shape, dtype=torch.bfloat16, device=device),
            torch.empty(shape.w2_shape, dtype=torch.bfloat16, device=device),
        )
    return random_weights(shape.w13_shape, shape.w2_shape, seed=seed, device=device)


def warm_strategy(shape: LayerShape, strategy: str, device: torch.device) -> None:
    """Fill the caches ``strategy`` keeps per row count and device, so a measured call finds them.

    One call on a 1-expert layer of the same per-expert shape: it fills ``layout``'s row-index
    ``lru_cache`` (``w13_row_index``, ``w2_row_index``, both ``fold_swap`` variants as the strategy
    uses them) and FlashInfer's permute-index cache alike. ``device`` must be the weights'
    ``tensor.device`` (``cuda:0``, not ``cuda``): it is part of the cache key.
    """
    w13, w2 = layer_weights(shape.with_experts(1), device)
    convert(w13, w2, strategy=strategy, gated=shape.gated)


def strategy_call(
    shape: LayerShape, strategy: str, device: torch.device | str
) -> Callable[[], tuple[torch.Tensor, torch.Tensor]]:
    """Fresh weights of ``shape`` on ``device``, the strategy warmed, and one conversion to call."""
    w13, w2 = layer_weights(shape, device)
    warm_strategy(shape, strategy, w13.device)
    return lambda: convert(w13, w2, strategy=strategy, gated=shape.gated)
