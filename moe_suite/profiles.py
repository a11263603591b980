"""The benchmark profile and its default: the one place both are decided.

The profile sets how many experts the *timed* benchmarks convert (docs/benchmarks.md):
``full`` every expert of the layer, ``cpu`` ``benchmarks.common.CPU_PROFILE_EXPERTS`` of them.
Its default is ``full`` where CUDA is available and ``cpu`` elsewhere; ``MOE_BENCH_PROFILE``
overrides it. Read by ``moe_bench.machine`` (which records it, and names a machine running the
non-default profile apart), by ``moe-bench machine --shell`` (scripts/ export what it prints) and
by ``benchmarks/common.py`` (from the checkout, ``benchmarks/__init__.py``) inside asv's
per-commit environment, which has neither asv nor pandas, and by the engine suite: so this
module imports nothing but the standard library (and torch, a dependency of the project, in
``detect_device`` only).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

__all__ = ["PROFILES", "ENV", "detect_device", "default_profile", "profile_from_env"]

#: The valid profiles, the default of a CUDA machine first.
PROFILES = ("full", "cpu")
#: The environment variable that chooses the profile.
ENV = "MOE_BENCH_PROFILE"


def detect_device() -> str:
    """``cuda`` where torch sees a CUDA device, else ``cpu``."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def default_profile(device: str) -> str:
    """``full`` on ``cuda``, ``cpu`` on any other device."""
    return "full" if device == "cuda" else "cpu"


def profile_from_env(device: str, environ: Mapping[str, str] = os.environ) -> str:
    """``MOE_BENCH_PROFILE`` from ``environ``, or ``default_profile(device)`` where it is unset.

    Raises ``ValueError`` naming the value for one not in ``PROFILES``.
    """
    name = environ.get(ENV) or default_profile(device)
    if name not in PROFILES:
        raise ValueError(f"{ENV}={name!r}; valid profiles: {', '.join(PROFILES)}")
    return name
