"""``moe-bench`` reads results where torch is not installed (docs/architecture.md): ``summary``,
``gate``, ``compare``'s verdict and ``publish`` of the committed results (``results/``) run in a
process where ``import torch`` and ``import moe_convert`` fail (a ``sitecustomize`` on
``PYTHONPATH`` puts a meta-path finder in front that refuses both, as an environment without
them would), and say what they say with the library: the same output, the same tables; only
the per-layer rank-load plot, which replays the library's load, is missing, one line saying why.
With the library: ``gate`` and ``compare`` as commands too; the summary and the dashboard as
conftest's ``committed_results`` made them, in the test process, for the browser test too.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import COMMITTED_RESULTS, committed_config

from moe_bench.rankload import NO_CURVES

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"
#: Two commits of the committed results on one machine: compare's base and head.
BASE, HEAD = "7cb55b82", "673df469"

#: What an environment without torch answers to an import of it or of the library.
BLOCKER = """
import sys


class _NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in ("torch", "moe_convert"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _NotInstalled())
"""

# one xdist group with the browser test: both read conftest's committed_results
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(COMMITTED_RESULTS)]


@pytest.fixture(scope="module")
def blocked(tmp_path_factory) -> dict[str, str]:
    """The environment of a process where torch and moe_convert cannot be imported."""
    folder = tmp_path_factory.mktemp("blocker")
    (folder / "sitecustomize.py").write_text(BLOCKER)
    return {**os.environ, "PYTHONPATH": f"{folder}{os.pathsep}{ROOT}"}


@pytest.fixture(scope="module")
def with_library() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def _moe_bench(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "moe_bench", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_the_blocker_blocks(blocked):
    done = subprocess.run(
        [sys.executable, "-c", "import torch"], env=blocked, capture_output=True, text=True
    )
    assert done.returncode == 1 and "No module named 'torch'" in done.stderr


@pytest.mark.parametrize(
    "args",
    [("gate", "--results", str(RESULTS)), ("compare", BASE, HEAD, "--results", str(RESULTS))],
    ids=["gate", "compare"],
)
def test_gate_and_compare_say_what_they_say_with_torch(blocked, with_library, args):
    without, with_torch = _moe_bench(blocked, *args), _moe_bench(with_library, *args)
    assert without.stderr == with_torch.stderr
    assert (without.returncode, without.stdout) == (with_torch.returncode, with_torch.stdout)
    assert without.stdout  # a verdict was printed


def _summary(env: dict[str, str], out: Path) -> str:
    done = _moe_bench(env, "summary", "--results", str(RESULTS), "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{out / 'summary.md'}\n"
    return (out / "summary.md").read_text()


def test_summary_says_what_it_says_with_torch_but_the_replayed_plot(
    blocked, committed_results, tmp_path
):
    without = _summary(blocked, tmp_path / "without")
    with_torch = committed_results[1].read_text()
    plot = "![rank-load-per-layer](rank-load-per-layer.png)"
    assert NO_CURVES not in with_torch and plot in with_torch
    assert without.replace(f"{NO_CURVES}\n\n", "") == with_torch.replace(f"{plot}\n\n", "")
    assert not (tmp_path / "without" / "rank-load-per-layer.png").exists()


def _front_page(env: dict[str, str], tmp: Path) -> str:
    """``moe-bench publish`` of the committed results into ``tmp/html``; its front page."""
    done = _moe_bench(env, "publish", "--config", str(committed_config(tmp)))
    assert done.returncode == 0, done.stderr
    published = f"dashboard published: {tmp / 'html' / 'index.html'} (works offline)"
    assert done.stdout.splitlines()[-1] == published  # after asv publish's progress
    return (tmp / "html" / "index.html").read_text()


def test_publish_shows_the_tables_it_shows_with_torch(blocked, committed_results, tmp_path):
    without = _front_page(blocked, tmp_path)
    with_torch = (committed_results[0] / "index.html").read_text()
    tables = re.compile(r"<table.*?</table>", re.DOTALL)
    assert tables.findall(without) == tables.findall(with_torch) != []
    assert NO_CURVES in without and NO_CURVES not in with_torch
    plots = re.compile(r'<img src="([^"]+)"')
    drawn = plots.findall(with_torch)
    assert "plots/rank-load-per-layer.png" in drawn
    assert plots.findall(without) == [p for p in drawn if p != "plots/rank-load-per-layer.png"]
