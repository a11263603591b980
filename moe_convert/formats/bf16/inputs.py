"""BF16's fresh layers: seeded random weights (``BF16.inputs``, through
``formats.table.layer_tensors``, what every measurement takes).

Legend: E experts, M13 rows of w13 (2I gated, I not), H hidden, I intermediate per rank; every
weight bf16, checkpoint layout (w13 ``[E, M13, H]``, w2 ``[E, H, I]``).
"""

from __future__ import annotations

import torch

from ..shape import LayerShape

__all__ = ["layer_weights", "random_weights"]


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
