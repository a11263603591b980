"""The benchmark profile and its default: the one place both are decided.

The profile sets how many experts the *timed* benchmarks convert (``TIMED_EXPERTS``,
docs/benchmarks.md), in the main suite and the engine suite alike. Its default is ``full``
where CUDA is available and ``cpu`` elsewhere; ``MOE_BENCH_PROFILE`` overrides it. Read by
``moe_bench.machine`` (which records it, and names a machine running the non-default profile
apart), by ``moe-bench machine --shell`` (scripts/ export what it prints) and by
``benchmarks/common.py`` (from the checkout, ``benchmarks/__init__.py``) inside asv's
per-commit environment, which has neither asv nor pandas, and by the engine suite: so this
module imports nothing but the standard library (and torch, a dependency of the project, in
``detect_device`` only).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

__all__ = [
    "PROFILES",
    "ENV",
    "TIMED_EXPERTS",
    "detect_device",
    "default_profile",
    "profile_from_env",
]

#: The valid profiles, the default of a CUDA machine first.
PROFILES = ("full", "cpu", "smoke")
#: Experts a timed layer converts under each profile, each expert's geometry (I/TP, H) kept
#: (``None``: every expert of the layer). ``cpu``: 8, so a 2-core CPU finishes and a layer's
#: time is still its conversion's, not the call's overhead; ``smoke``: one, every step of a run
#: in the least time (the suites' own tests, a new config's first try), its seconds no figure
#: of the code. The reduced profiles time a few shapes only (``benchmarks.formats.is_timed``).
TIMED_EXPERTS = {"full": None, "cpu": 8, "smoke": 1}
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
