"""Shared test helpers: the one place that decides a test cannot run here, and says why; the
full-size shapes the exact figures are checked on.

Use the marks (``@requires_flashinfer``, ``@requires_cuda``, ``@requires_sm100``, or
``pytestmark = requires_sm100`` for a whole module); ``missing(need)`` gives the reason itself.
Checks are cheap (no kernel is built or loaded at collection time).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from pathlib import Path

import pytest
import torch

# Without a GPU, run Triton kernels in Triton's interpreter (CPU tensors), so that the `triton`
# strategies register and every strategy test covers them. Set before moe_convert is imported.
if not torch.cuda.is_available() and importlib.util.find_spec("triton") is not None:
    os.environ.setdefault("TRITON_INTERPRET", "1")

__all__ = [
    "FULL_SIZE",
    "missing",
    "requires",
    "requires_chromium",
    "requires_cuda",
    "requires_flashinfer",
    "requires_sm100",
]

# Compute capability major of the SM100 family (B200, GB200: 10.0; B300: 10.3), the only GPUs
# FlashInfer's TRTLLM-gen BF16 MoE kernels are built for.
SM100_MAJOR = 10


def missing(need: str) -> str | None:
    """Why ``need`` is not available on this machine, or ``None`` when it is.

    ``need`` is ``"flashinfer"`` (flashinfer-python importable), ``"cuda"`` (a CUDA device
    torch can use), ``"sm100"`` (CUDA device 0 is of the SM100 family and FlashInfer is
    installed: what the TRTLLM BF16 MoE kernel needs) or ``"chromium"`` (Debian's chromium on
    ``PATH``, for the dashboard's browser test).
    """
    if need == "flashinfer":
        if importlib.util.find_spec("flashinfer") is None:
            return "flashinfer-python is not installed (pip install -e '.[test]')"
        return None
    if need == "cuda":
        if not torch.cuda.is_available():
            build = (
                f"built for CUDA {torch.version.cuda}"
                if torch.version.cuda
                else "built without CUDA"
            )
            return f"no CUDA device (torch {torch.__version__}, {build})"
        return None
    if need == "sm100":
        reason = missing("cuda")
        if reason is None:
            major, minor = torch.cuda.get_device_capability(0)
            if major != SM100_MAJOR:
                reason = (
                    f"{torch.cuda.get_device_name(0)} is SM{major}{minor}, not SM100 "
                    "(B200/GB200/B300): the TRTLLM BF16 MoE kernel is SM100-only"
                )
        return reason or missing("flashinfer")
    if need == "chromium":
        if shutil.which("chromium") is None:
            return (
                "Debian's chromium is not on PATH (scripts/test installs it with apt-get as root)"
            )
        return None
    raise ValueError(f"unknown need {need!r}; known: 'flashinfer', 'cuda', 'sm100', 'chromium'")


def requires(need: str) -> pytest.MarkDecorator:
    """A mark that skips the test, with the reason from ``missing(need)``, where it is missing."""
    reason = missing(need)
    return pytest.mark.skipif(reason is not None, reason=reason or "")


requires_flashinfer = requires("flashinfer")
requires_cuda = requires("cuda")
requires_sm100 = requires("sm100")
requires_chromium = requires("chromium")


# Imported here, not at the top: TRITON_INTERPRET (above) must be set before moe_convert loads.
import moe_convert  # noqa: E402
from moe_convert import LayerShape, layer_shape  # noqa: E402

#: Real models' layers at full size (and a non-gated one), on which tests/test_memory.py and
#: tests/test_traffic.py check every registered formula to the byte, on ``meta``.
FULL_SIZE = [
    layer_shape("qwen3-235b-a22b", 4),
    layer_shape("deepseek-v3", 8),
    layer_shape("deepseek-v3", 1),  # T13 = 14 GiB: free on meta
    layer_shape("mixtral-8x7b", 2),
    LayerShape("relu2", 2, 64, 2048, 1024, 8, gated=False),
]


@pytest.fixture(scope="session")
def warm_grids() -> None:
    """This process has imported what measuring a grid's cell on ``meta`` imports.

    A grid's ``setup_cache`` measures its cells in a worker forked from this process
    (``benchmarks.isolation``), which inherits its imports: without this, every worker imported
    torch's dispatch machinery (``torch._dynamo``) on its first cell, and FlashInfer's helpers
    on a ``-flashinfer`` one, again for each ``setup_cache`` a test calls (11 to 30 s each on
    this 2-core machine under load). For the tests of modules that import ``benchmarks``."""
    from benchmarks import formats

    formats._peak("qwen3-30b-a3b/tp2", "strided_copy")
    if "fp8-flashinfer" in moe_convert.REGISTRY:
        formats._peak("llama-4-maverick-fp8/tp8", "flashinfer")


ROOT = Path(__file__).resolve().parents[1]
#: The xdist group of the tests that read ``committed_results`` (built once per worker).
COMMITTED_RESULTS = "committed-results"


def committed_config(tmp: Path) -> Path:
    """``tmp/asv.conf.json``: the project's asv config publishing the committed results into
    ``tmp/html``, its branch the checked-out commit (CI checks out a commit, not ``main``)."""
    from asv.util import load_json

    conf = load_json(str(ROOT / "asv.conf.json"), js_comments=True)
    conf.pop("plugins")  # it makes asv's writes atomic; publishing writes no result
    conf |= {
        "repo": str(ROOT),
        "results_dir": str(ROOT / "results"),
        "html_dir": str(tmp / "html"),
        "branches": ["HEAD"],
    }
    (tmp / "asv.conf.json").write_text(json.dumps(conf))
    return tmp / "asv.conf.json"


@pytest.fixture(scope="session")
def committed_results(tmp_path_factory) -> tuple[Path, Path]:
    """``(html_dir, summary.md)`` of the committed results (``results/``), published and
    summarised with the library in this process, as scripts/bench's ``moe-bench publish
    --summary`` does (``committed_config``). The browser's front page and the without-torch
    comparison read the same one (their modules' tests are one xdist group,
    ``COMMITTED_RESULTS``): once: 20.4 s alone, 23-37 s in three scripts/test runs (2026-12-04)."""
    from moe_bench.publish import publish

    tmp = tmp_path_factory.mktemp("committed")
    return publish(committed_config(tmp), tmp / "summary"), tmp / "summary" / "summary.md"


#: Under pytest-xdist, the order in which the work is handed out (scripts/test passes
#: ``--no-loadscope-reorder``): first the tests of these xdist groups (the engine history, asv
#: over a git history, 5-6 minutes on one worker), then the other ``slow`` tests, then these
#: groups (the engine PRs: they start on the other worker once the history's first test has left
#: its asv environment to copy, test_engine_asv.py), then the rest.
FIRST = ("engine-history",)
AFTER_SLOW = ("engine-pulls",)


def _group(item) -> str | None:
    mark = item.get_closest_marker("xdist_group")
    return mark.args[0] if mark else None


def pytest_collection_modifyitems(config, items):
    """On pytest-xdist's workers (scripts/test): ``FIRST``'s tests, then the other ``slow`` ones,
    then ``AFTER_SLOW``'s, then the rest, each in file order. The longest work is handed out
    early and the short tests fill in behind it on both workers, instead of a long test starting
    last on one of them. Every worker sorts the same collection alike, as xdist requires.
    Without xdist the order is the files'."""
    if hasattr(config, "workerinput"):

        def rank(item) -> int:
            group = _group(item)
            if group in FIRST:
                return 0
            if group in AFTER_SLOW:
                return 2
            return 1 if item.get_closest_marker("slow") else 3

        items.sort(key=rank)
