"""Step 6, ``asv``: ``asv run -E existing:python3 --quick`` of one layer's time on the check
shapes, published and zipped.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from moe_suite import selection

from . import plan


def _run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    print("[asv] $ " + " ".join(cmd), flush=True)
    return subprocess.run(cmd, cwd=plan.ROOT, text=True, **kwargs)


#: Step 6's benchmark: the time of one layer (memory is exact and checked by steps 1-2, the copy
#: ratio by step 5) of ``ASV_KINDS`` on ``plan.LOAD_SHAPE`` (asv matches ``name(param, ...)``
#: with the parameters' reprs): the step shows that the suite runs, publishes and travels on the
#: box; step 5 has the timings. Each benchmark runs in a fresh interpreter (``spawn``: a forked
#: child cannot use CUDA once its parent has touched it, and importing the suite asks torch
#: whether CUDA is there), some seconds each: at 4071513 two shapes x 8 strategies took 83 s with
#: publishing; at 7f04b26 two shapes x 15 kinds, and at 5add180 one shape's 15, did not finish
#: in the step's 80 s.
ASV_KINDS = ("inplace", "cycle_inplace")  # what vLLM ships, and ours in place
ASV_BENCHMARKS = (
    r"LayerTime\.track_layer_seconds\('"
    + re.escape(plan.LOAD_SHAPE)
    + "', '("
    + "|".join(ASV_KINDS)
    + r")'\)"
)


def step_asv(dry_run: bool, out: Path) -> dict:
    try:
        import asv  # noqa: F401
    except ImportError as error:
        return {
            "ok": False,
            "error": f"asv is not importable ({error}): run scripts/gpu-wheels "
            "here and carry .whl/",
        }
    if dry_run:
        return {"ok": True, "asv": "importable", "benchmarks": ASV_BENCHMARKS}
    commit = (
        shutil.which("git")
        and _run(["git", "rev-parse", "HEAD"], capture_output=True).stdout.strip()
    )
    if not commit:
        return {"ok": False, "error": "not a git checkout: asv needs the commit (clone the tree)"}
    if _run(["git", "rev-parse", "--verify", "-q", "main"], capture_output=True).returncode:
        return {
            "ok": False,
            "error": "no branch main here: asv.conf.json's branches need it (in a "
            "scratch clone: git branch main HEAD)",
        }
    machine = (
        _run(
            [sys.executable, "-m", "moe_bench", "machine", "--profile", "full"], capture_output=True
        ).stdout.strip()
        or "gpu-check"
    )
    # asv drops PYTHONPATH from the benchmarks' environment unless given as ASV_PYTHONPATH
    env = dict(os.environ, ASV_PYTHONPATH=os.environ.get("PYTHONPATH", ""))
    env = selection.environ(ASV_BENCHMARKS, env)  # the grids measure the cells run only
    bench = [
        sys.executable,
        "-m",
        "asv",
        "run",
        "-E",
        f"existing:{sys.executable}",
        "--quick",
        "--launch-method",
        "spawn",
        "--show-stderr",
        "--machine",
        machine,
        "--set-commit-hash",
        commit,
        "-b",
        ASV_BENCHMARKS,
    ]
    # leave time to publish and zip inside the step's box
    budget = next(step.budget_s for step in plan.STEPS if step.name == "asv") - 20
    try:
        returncode = _run(bench, env=env, timeout=budget).returncode
    except subprocess.TimeoutExpired:
        returncode = f"timed out after {budget} s"
    _run([sys.executable, "-m", "asv", "publish"], env=env)
    _run([sys.executable, "-m", "moe_bench", "dashboard", "offline", "html"], env=env)
    archive = out / "asv.zip"
    files = 0
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zipped:
        for folder in (plan.ROOT / "results" / machine, plan.ROOT / "html"):
            for path in folder.rglob("*") if folder.exists() else ():
                if path.is_file():
                    zipped.write(path, path.relative_to(plan.ROOT))
                    files += 1
    return {
        "ok": returncode == 0,
        "returncode": returncode,
        "machine": machine,
        "commit": commit,
        "archive": archive.name,
        "archived_files": files,
    }
