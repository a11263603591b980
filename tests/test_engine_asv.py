"""An engine's git history as asv's repo, end to end on a tiny engine (``tests/engine_repo.py``):
the config, a nightly over commits, the PR command, the bisection and the export
(``moe_bench.engine``, docs/engines.md). No network and no vLLM: the tiny engine has vLLM's module
path and function, and asv builds it as vLLM's ``empty`` target is built.

One asv environment per history (torch from the local index, flashinfer-python): the slow
part, ~85 s, then 20-30 s per measured commit. One history for the module, or one per
pytest-xdist worker (the two groups below; the second copies the first's environment where it
can, ``SHARED_ENV``). Each use runs ``moe-bench`` as a subprocess with ``HOME`` in the test's
folder (asv's machine file lives there).
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from asv.config import Config
from asv.util import load_json
from conftest import missing
from engine_repo import Commit, checkout, commit, make_engine_repo

from moe_bench import engine
from moe_bench.engine_env import read_measured
from moe_suite.metrics import METRICS

ROOT = Path(__file__).resolve().parent.parent
MACHINE = "engine-test"
PEAK = "bench_engine.PeakMemory.track_peak_transient_bytes"
FP8_PEAK = "bench_fp8.PeakMemory.track_peak_transient_bytes"
CONFIG = "asv.engine-vllm.conf.json"  # engine-config's, in the history's home

pytestmark = pytest.mark.slow
# Under pytest-xdist (scripts/test: ``--dist loadgroup``) the asv-driving tests run as two groups,
# each on one worker with its own history (the module fixture is built once per worker that
# runs a group; the environment copied where the other group left one, ``SHARED_ENV``): the
# nightly, the export of its results, one PR run and the bisection of ``regress`` in one; three
# PR runs and the bisections of ``clone`` and ``broken`` in the other. In a group the tests run
# in file order (the export reads the nightly's results). Without xdist the marks do nothing.
HISTORY = pytest.mark.xdist_group("engine-history")
PULLS = pytest.mark.xdist_group("engine-pulls")
# The PR runs measure what they judge (engine-pr's --bench, asv's -b and the paired run's): the
# tiny engine's own cell (``vllm``) of BF16's, FP8 per-tensor's and MXFP4's grids (n/a in the
# other formats', where only the transcriptions, never judged, are measured), so those three
# cells are every verdict a PR of it can get. One PR run (the per-expert form back) measures
# every cell of every grid, shows the reference cells and holds the other formats' engine
# cells n/a.
JUDGED_HERE = r"^bench_(engine|fp8|mxfp4)\.\w+\.\w+\('[^']+', 'vllm'\)"
BF16_ONLY = r"^bench_engine\.\w+\.\w+\('[^']+', 'vllm'\)"


#: Under pytest-xdist each group's history has an asv environment of its own, the same one
#: (virtualenv, torch, the tiny engine's requirements and FlashInfer: ~85 s here; asv names its
#: folder by its matrix, not its path). The first group to have one leaves a hard-linked copy in
#: the workers' common folder; a group whose history starts after that copies it instead of
#: building its own (tests/conftest.py hands the PR group out after the other slow tests).
#: Left out: asv's checkout of the engine, its built wheels and its record of what it installed
#: (a home's own; asv uninstalls and installs each commit anyway).
SHARED_ENV = "engine-env"
HOMES_OWN = ("project", "asv-build-cache", "asv-install-status.json")


def _shared_env(home: Path) -> Path | None:
    """The workers' common copy of the environment (None without xdist: one history)."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return None
    return home.parent.parent / SHARED_ENV  # home: <session's basetemp>/<worker's>/engineN


def _env_dir(home: Path) -> Path:
    """The asv environments' folder of ``home``'s history (its config's ``env_dir``)."""
    return Path(json.loads((home / CONFIG).read_text())["env_dir"])


def _leave_environment(home: Path) -> None:
    """Leave ``home``'s asv environment, once it has one, for the other worker's history: a
    hard-linked copy renamed into place (the other worker sees all of it or nothing)."""
    shared = _shared_env(home)
    if shared is None or shared.exists() or not (home / CONFIG).is_file():
        return
    env_dir = _env_dir(home)
    if not env_dir.is_dir():
        return

    def homes_own(folder: str, names: list[str]) -> list[str]:
        return [n for n in names if n in HOMES_OWN and Path(folder).parent == env_dir]

    staging = shared.with_name(f"{SHARED_ENV}.{os.getpid()}")
    shutil.copytree(env_dir, staging, symlinks=True, copy_function=os.link, ignore=homes_own)
    try:
        staging.rename(shared)
    except OSError:  # the other worker's came first
        shutil.rmtree(staging)


def _moe_bench(home: Path, *args: str) -> subprocess.CompletedProcess:
    # the smoke profile: one expert a timed layer (moe_suite.profiles), every step of every use
    # run, in the least time; the figures these tests read are exact, or a paired verdict.
    # pip installs without byte-compiling (PIP_COMPILE=0) and the history's processes write the
    # bytecode of what they import (this machine sets PYTHONDONTWRITEBYTECODE), as Python does
    # by default: pip compiles every module, 31 s of flashinfer-python's 36 s install (3,559
    # modules, a few hundred of which a measurement imports) and half of torch's
    env = dict(
        os.environ,
        HOME=str(home),
        PIP_CACHE_DIR=str(Path.home() / ".cache" / "pip"),
        PIP_COMPILE="0",
        MOE_BENCH_PROFILE="smoke",
    )
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    done = subprocess.run(
        [sys.executable, "-m", "moe_bench", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=home,
        timeout=1200,
    )
    _leave_environment(home)
    return done


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    """The tiny engine's history, its config (asv.engine-vllm.conf.json) and the commits by name.

    main: legacy -> preallocated -> inplace -> a FlashInfer pin the index lacks (``u1``) -> docs,
    no pin (``u2``); on ``u2``, branch ``ok``: a docstring edit of the converter; ``clone``: a
    copy of w13 before the in-place converter (its contract broken); ``regress``: docs, the
    per-expert form back (``bad``), docs, docs; ``broken``: a commit that does not import, its
    fix, the per-expert form (``bad2``); ``quantcopy``: an extra full copy of w13 in vLLM's FP8
    per-tensor rotation and one in gpt-oss's MXFP4 preparation, and a sleep per expert in BF16's
    converter (time only) (``quantbad``).
    """
    if missing("flashinfer"):  # the tiny engine imports FlashInfer's helpers, as vLLM does
        pytest.skip(missing("flashinfer"))
    home = tmp_path_factory.mktemp("engine")
    repo = home / "engine-vllm"  # not "vllm": the current folder is on a module path
    names = ["legacy", "preallocated", "inplace", "u1", "u2"]
    hashes = dict(
        zip(
            names,
            make_engine_repo(
                repo,
                [
                    Commit("legacy", "0.23.0", "the per-expert form"),
                    Commit("preallocated", "0.24.0", "preallocated outputs (#45589)"),
                    Commit("inplace", "0.31.0", "in place (#54699)"),
                    # vLLM 0.34.0's pin, which the index lacks: the nearest release instead
                    Commit("inplace", "0.31.0", "pin FlashInfer 0.7.3", flashinfer="0.7.3"),
                    Commit("inplace", "0.31.0", "docs: another note"),
                ],
            ),
            strict=True,
        )
    )
    date = 1_800_000_000
    for branch, changes in (
        ("ok", [("ok", Commit("inplace_doc", "0.31.0", "docs: a docstring edit"))]),
        ("clone", [("clone", Commit("inplace_clone", "0.31.0", "copy w13 before converting"))]),
        (
            "regress",
            [
                ("x1", Commit("inplace", "0.31.0", "docs: before")),
                ("bad", Commit("per_expert", "0.31.0", "the per-expert form back")),
                ("x2", Commit("per_expert", "0.31.0", "docs: after")),
                ("x3", Commit("per_expert", "0.31.0", "docs: after, again")),
            ],
        ),
        (
            "broken",
            [
                ("broken", Commit("broken", "0.31.0", "a commit that does not import")),
                ("fixed", Commit("inplace", "0.31.0", "fix the import")),
                ("bad2", Commit("per_expert", "0.31.0", "the per-expert form back, again")),
            ],
        ),
        (
            "quantcopy",
            [
                (
                    "quantbad",
                    Commit(
                        "inplace_slow",
                        "0.31.0",
                        "bf16: a sleep per expert; fp8, mxfp4: clone w13 first",
                        fp8="fp8_copy",
                        mxfp4="mxfp4_copy",
                    ),
                )
            ],
        ),
    ):
        checkout(repo, branch, hashes["u2"])
        for name, change in changes:
            date += 3600
            hashes[name] = commit(repo, change, date=date)
    subprocess.run(["git", "-C", str(repo), "checkout", "-q", "main"], check=True)
    requirements = ROOT / "engine_benchmarks" / "requirements" / "flashinfer.txt"
    done = _moe_bench(
        home,
        "engine-config",
        "--engine",
        "vllm",
        "--repo",
        str(repo),
        "--requirements",
        str(requirements),
    )
    assert done.returncode == 0, done.stderr
    shared = _shared_env(home)
    if shared is not None and shared.is_dir():  # the other worker's history left one
        shutil.copytree(shared, _env_dir(home), symlinks=True, copy_function=os.link)
    return home, home / CONFIG, hashes


def _values(config: Path, commit: str, benchmark: str = PEAK) -> dict[str, float]:
    """strategy -> value of ``benchmark`` at ``commit`` in the config's results."""
    conf = load_json(str(config))
    (path,) = (Path(conf["results_dir"]) / MACHINE).glob(f"{commit[:8]}-*.json")
    data = load_json(str(path))
    columns = data["result_columns"]
    row = dict(zip(columns, data["results"][benchmark], strict=False))
    strategies = row["params"][1]
    return {
        s.strip("'"): (math.nan if v is None else v)
        for s, v in zip(strategies, row["result"], strict=True)
    }


def test_the_engine_suite_measures_every_bf16_adapter():
    """Every BF16 adapter of an installed engine, and FlashInfer's helpers, is on the engine
    suite's axis (n/a where not installed), with the three forms vLLM had as reference lines."""
    sys.path.insert(0, str(ROOT / "engine_benchmarks"))
    try:
        import bench_engine
    finally:
        sys.path.pop(0)
    from moe_convert.formats.bf16.engines import ENGINES

    assert {e.strategy for e in ENGINES} | {"flashinfer"} == set(bench_engine.ENGINE_STRATEGIES)
    assert bench_engine.REFERENCE_STRATEGIES == ("legacy", "preallocated", "inplace")


def test_the_engine_suite_times_as_the_suite_does():
    """The engine suite cannot import ``benchmarks`` (its environments hold this suite's wheel,
    which ships ``moe_convert``, ``moe_suite`` and ``moe_bench`` only): the experts a profile
    times both read from ``moe_suite.profiles``; the threads and repeats it writes again, held
    here to the suite's, so an engine's seconds stay comparable with the nightly's."""
    sys.path.insert(0, str(ROOT / "engine_benchmarks"))
    try:
        import bench_engine
    finally:
        sys.path.pop(0)
    from benchmarks import common, formats

    assert bench_engine.CPU_THREADS == common.CPU_THREADS
    assert bench_engine.REPEATS == formats.REPEATS


@HISTORY
def test_the_config_is_asvs_with_the_engine_as_repo(history):
    home, config, hashes = history
    conf = Config.load(str(config))
    assert conf.repo == str(home / "engine-vllm") and conf.branches == ["main"]
    assert conf.benchmark_dir == str(ROOT / "engine_benchmarks")
    assert "VLLM_TARGET_DEVICE=empty" in conf.build_command[-1]
    assert "--no-build-isolation" in conf.build_command[-1]
    # this suite into every environment (asv 0.6.6 strips ASV_PYTHONPATH) with the commit, then
    # the FlashInfer each commit pins (moe_bench.engine_env, run by that suite)
    steps = conf.install_command
    assert "moe_convert_bench" in steps[1] and "{wheel_file}" in steps[1]
    assert "--pins requirements/cuda.txt" in steps[2] and f"--record {conf.results_dir}" in steps[2]
    pr = Config.load(str(engine.pr_config(config)))  # a PR's record goes with its results
    assert f"--record {conf.results_dir}-pr " in pr.install_command[2]
    assert conf.matrix == {"req": {"torch": ["2.13.0"]}}
    # apart from the nightly's results, dashboard and environments
    assert {conf.results_dir, conf.html_dir, conf.env_dir}.isdisjoint(
        {"results", "html", ".asv/env"}
    )
    assert conf.suite_commit.startswith(engine.suite_commit()[:40])
    # the dashboard's regressions view judges the engine's figures by the metrics table's rules
    thresholds = json.loads(config.read_text())["regressions_thresholds"]
    for name, m in METRICS.items():
        if name.startswith("bench_engine.") and m.unit == "ratio":
            assert thresholds[re.escape(name)] == pytest.approx(m.factor - 1)


@HISTORY
def test_flashinfer_as_the_engine_builds_flashinfer_itself(history, tmp_path):
    home, _, _ = history
    done = _moe_bench(
        home,
        "engine-config",
        "--engine",
        "flashinfer",
        "--repo",
        str(home / "engine-vllm"),  # any git history: the config is not run here
        "--out",
        str(tmp_path / "fi.conf.json"),
    )
    assert done.returncode == 0, done.stderr
    conf = Config.load(str(tmp_path / "fi.conf.json"))
    assert conf.engine == "flashinfer" and conf.engine_github == "flashinfer-ai/flashinfer"
    assert not any("engine_env" in c for c in conf.install_command)  # it is the repo
    assert "VLLM_TARGET_DEVICE" not in conf.build_command[-1]
    # FlashInfer's build backend would pip-install NVIDIA's compilers into the environment
    assert conf.build_command[-1].startswith("FLASHINFER_BUILD_NO_PIP=1 BUILD_NVEP=0 ")
    assert conf.results_dir.endswith("results-fi")


@HISTORY
@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--engine", "vllm", "--repo", "/no/such/checkout"], ["not a git checkout"]),
        (
            ["--engine", "flashinfer", "--repo", "engine-vllm", "--build", "wheel"],
            ["per-commit wheels"],
        ),
        (["--engine", "vllm", "--repo", "engine-vllm", "--torch", "2.13; rm"], ["--torch"]),
        (["--engine", "sglang", "--repo", "vllm"], ["invalid choice"]),
    ],
)
def test_config_errors_are_one_line(history, tmp_path, args, words):
    home, _, _ = history
    done = _moe_bench(home, "engine-config", *args, "--out", str(tmp_path / "x.conf.json"))
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) <= 2  # argparse's usage line, then the error
    assert all(w in done.stderr for w in words), done.stderr


@HISTORY
def test_nightly_measures_the_newest_commits_then_publishes(history):
    home, config, hashes = history
    # the first night: the newest commit (--limit 1); the next: what is left within the window
    # (--window 2: u1, not inplace), then nothing. Two measured commits: u2 (no pin) and u1
    # (a pin the index lacks)
    done = _moe_bench(
        home, "engine-nightly", "--config", str(config), "--machine", MACHINE, "--limit", "1"
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"1 commit(s) of vllm main: {hashes['u2'][:8]}" in done.stderr
    conf = Config.load(str(config))
    log = (Path(conf.results_dir) / MACHINE / "nightly.log").read_text()
    assert re.search(r"Running \d+ total benchmarks", log) and "Writing index" in log  # publish
    values = _values(config, hashes["u2"])
    # the installed engine and the frozen transcriptions on one grid; SGLang not installed
    assert math.isnan(values["sglang-installed"])
    assert values["vllm"] < values["preallocated"] < values["legacy"]
    # every format's vLLM cell on the same commit: FP8's and MXFP4's measured (MXFP4's the
    # transcription's figures), the others' n/a (the tiny engine has no such function), each
    # beside its transcription
    fp8 = _values(config, hashes["u2"], FP8_PEAK)
    assert fp8["vllm"] > 0 and fp8["legacy"] > 0
    mxfp4 = _values(config, hashes["u2"], "bench_mxfp4.PeakMemory.track_peak_transient_bytes")
    assert mxfp4["vllm"] == mxfp4["legacy"] > 0
    nvfp4 = _values(config, hashes["u2"], "bench_nvfp4.PeakMemory.track_peak_transient_bytes")
    assert math.isnan(nvfp4["vllm"]) and nvfp4["legacy"] > 0
    nightly = ("engine-nightly", "--config", str(config), "--machine", MACHINE, "--window", "2")
    done = _moe_bench(home, *nightly)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"1 commit(s) of vllm main: {hashes['u1'][:8]}" in done.stderr
    # quiet, as a cron mail wants: asv's tables in the log; u1's FlashInfer said in one line
    lines = done.stderr.splitlines()
    assert len(lines) <= 4, done.stderr
    assert re.search(
        rf"warning: {hashes['u1'][:8]}: flashinfer-python==0\.7\.3 is not on the package index: "
        r"\S+, the nearest release there, installed instead",
        done.stderr,
    )
    suite = engine.read_suite_commits(conf.results_dir)
    assert suite == dict.fromkeys([hashes["u1"], hashes["u2"]], conf.suite_commit)
    measured = read_measured(conf.results_dir)
    assert measured[hashes["u1"]]["flashinfer_pinned"] == "0.7.3"
    assert measured[hashes["u2"]]["flashinfer_pinned"] == ""
    # what the environment held beside the engine, recorded by its install step; none of it in
    # the machine's entry (this suite's own versions would show in the explorer as measured)
    assert measured[hashes["u2"]]["torch"].startswith(conf.matrix["req"]["torch"][0])
    entry = json.loads((home / ".asv-machine.json").read_text())[MACHINE]
    assert "vllm" not in entry and "flashinfer" not in entry
    # the front page: the engine's history (docs/dashboard.md, "The engine dashboard")
    page = (Path(conf.html_dir) / "index.html").read_text()
    assert "<title>vLLM main: " in page and ", 2 commits</title>" in page
    done = _moe_bench(home, *nightly)
    assert done.returncode == 0 and "nothing new" in done.stderr


@PULLS
def test_the_per_expert_form_back_fails_the_pr(history):
    home, config, hashes = history
    out = home / "pr-bad"
    done = _moe_bench(
        home, "engine-pr", "--config", str(config), "main", hashes["bad"], "--machine", MACHINE,
        "--out", str(out),
    )  # fmt: skip
    assert done.returncode == 1, done.stderr[-3000:]
    comment = (out / "pr-comment.md").read_text()
    assert comment.startswith("## PR gate: FAILED")
    assert re.search(r"PeakMemory.track_peak_transient_bytes.*vllm: regressed", comment)
    assert re.search(r"Traffic.track_launches.*vllm: regressed", comment)
    # the merge base, not main's tip, is the base
    assert f"`{hashes['u2'][:8]}` (base)" in comment or hashes["u2"][:8] in comment
    assert "BF16 `PeakMemory.track_peak_transient_bytes` qwen3-235b-a22b/tp4 vllm: " in comment
    # the transcriptions are the same code at both commits: shown, never judged
    assert not re.search(r"(legacy|preallocated|inplace): (regressed|failed)", comment)
    assert re.search(r"\| preallocated +\|.*\| reference +\|", comment), comment
    paired = json.loads((out / "paired.json").read_text())
    assert (paired["base"], paired["head"]) == (hashes["u2"], hashes["bad"])
    # the engine's own cell of every grid (the rest is the same code); where the tiny engine
    # has no such function, n/a in both
    verdicts = {row["format"]: row["verdict"] for row in paired["rows"]}
    assert {row["strategy"] for row in paired["rows"]} == {"vllm"}
    assert verdicts.pop("bf16") == "regressed"
    assert verdicts.pop("fp8") != "failed" and verdicts.pop("mxfp4") != "failed"
    assert set(verdicts.values()) == {"n/a"}


@PULLS
def test_a_docstring_edit_passes_the_pr(history):
    home, config, hashes = history
    out = home / "pr-ok"
    done = _moe_bench(
        home, "engine-pr", "--config", str(config), "main", "ok", "--machine", MACHINE,
        "--out", str(out), "--bench", JUDGED_HERE,
    )  # fmt: skip
    assert done.returncode == 0, (out / "pr-comment.md").read_text()
    assert (out / "pr-comment.md").read_text().startswith("## PR gate: passed")
    verdict = done.stderr.strip().splitlines()[-1]  # nothing beside it to contradict it
    assert verdict.endswith("; passed") and "exit" not in verdict
    # quiet: asv's comparison (the reference cells' times too, no verdict of this suite) is in
    # the log, not above the verdict
    assert len(done.stderr.splitlines()) <= 4, done.stderr[-3000:]
    log = (out / "asv.log").read_text()
    assert "total benchmarks" in log and "paired timing of" in log


@PULLS
def test_a_copy_before_the_in_place_converter_fails_as_the_breach_it_is(history):
    """The PR's converter returns new tensors where its code reads as in place: the verdict says
    the PR broke the contract, in those words, and still gives the peak it costs."""
    home, config, hashes = history
    out = home / "pr-clone"
    done = _moe_bench(
        home, "engine-pr", "--config", str(config), "main", hashes["clone"], "--machine", MACHINE,
        "--out", str(out), "--bench", BF16_ONLY,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr[-3000:]
    comment = (out / "pr-comment.md").read_text()
    assert comment.startswith("## PR gate: FAILED")
    assert re.search(r"BF16 `PeakMemory.track_peak_transient_bytes` \S+ vllm: regressed", comment)
    assert (
        "no longer honours the in place (#54699) form its code reads as: it returned new tensors"
        in comment
    )
    assert "the adapter's reading of its code is wrong" not in comment


@PULLS
def test_find_names_the_first_commit_whose_cell_fails_and_why(history):
    home, config, hashes = history
    done = _moe_bench(
        home, "engine-find", "--config", str(config), hashes["u2"], "clone", "layer_seconds",
        "--machine", MACHINE,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith(f"first failure: {hashes['clone'][:7]} copy w13 before")
    assert "no longer honours the in place (#54699) form" in done.stdout


@HISTORY
def test_each_format_fails_the_pr_by_its_own_figures(history):
    """One head, a change per format: each format's cell (``bench_fp8``, ``bench_mxfp4``, judged
    as the main suite's figures of the format) names the format, its shape and the figures an
    extra copy raised; BF16's converter, slowed only (a sleep per expert), fails by its paired
    time row alone, its bytes and launches unchanged."""
    home, config, hashes = history
    out = home / "pr-quantbad"
    done = _moe_bench(
        home, "engine-pr", "--config", str(config), "main", hashes["quantbad"],
        "--machine", MACHINE, "--out", str(out), "--bench", JUDGED_HERE,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr[-3000:]
    comment = (out / "pr-comment.md").read_text()
    assert comment.startswith("## PR gate: FAILED"), comment
    for title, shape in (
        ("FP8 per-tensor", "llama-4-maverick-fp8/tp8"),
        ("MXFP4", "gpt-oss-120b-mxfp4/tp2"),
    ):
        cell = rf"{re.escape(shape)} vllm: regressed"
        assert re.search(rf"{title} `PeakMemory.track_peak_transient_bytes` {cell}", comment)
        assert re.search(rf"{title} `Traffic.track_traffic_bytes` {cell}", comment), comment
    assert "- BF16 `paired.time_ratio` qwen3-235b-a22b/tp4 vllm: regressed" in comment
    # no BF16 byte or launch moved: only its time row fails
    failing = [line for line in comment.splitlines() if line.startswith("- BF16 ")]
    assert all("`paired.time_ratio`" in line for line in failing), failing
    assert "track_peak_transient_bytes` qwen3-235b-a22b/tp4" not in comment


@HISTORY
def test_find_names_the_injected_commit(history):
    home, config, hashes = history
    done = _moe_bench(
        home, "engine-find", "--config", str(config), hashes["u2"], "regress",
        "peak_transient_bytes",
        "--machine", MACHINE,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith(f"first regression: {hashes['bad'][:7]} the per-expert form back")
    runs = int(re.search(r"\((\d+) commits measured\)", done.stdout).group(1))
    commits = 4  # x1, bad, x2, x3 after u2
    assert runs <= math.ceil(math.log2(commits)) + 2


@PULLS
def test_a_failing_commit_in_the_range_does_not_mislead_find(history):
    home, config, hashes = history
    done = _moe_bench(
        home, "engine-find", "--config", str(config), hashes["u2"], "broken",
        "peak_transient_bytes",
        "--machine", MACHINE,
    )  # fmt: skip
    named = re.search(r"first regression: (\w+)", done.stdout)
    if done.returncode == 0:  # the search did not step on it, or the check passed: right answer
        assert named.group(1) == hashes["bad2"][:7]
    else:  # it did: said, and no commit named
        assert done.returncode == 1 and named is None
        assert f"commit {hashes['broken'][:8]} has no figure" in done.stderr
        assert "no answer" in done.stderr


@HISTORY
def test_the_export_keys_records_to_the_engines_commit(history):
    home, config, hashes = history
    out = home / "export" / "engine.json"
    done = _moe_bench(
        home,
        "export",
        "--machine",
        MACHINE,
        "--commit",
        hashes["u2"],
        "--config",
        str(config),
        "--out",
        str(out),
    )
    assert done.returncode == 0, done.stderr
    records = json.loads(out.read_text())
    assert records
    conf = Config.load(str(config))
    suite = conf.suite_commit
    installed = read_measured(conf.results_dir)[hashes["u2"]]["flashinfer"]
    for record in records:
        deps = record["dependencies"]
        assert (deps["vllm"]["repo"], deps["vllm"]["branch"], deps["vllm"]["sha"]) == (
            "vllm-project/vllm",
            "main",
            hashes["u2"],
        )
        assert deps["moe-convert-bench"]["sha"] == suite
        # the FlashInfer installed beside that commit, not this suite's own
        assert deps["flashinfer"]["version"] == installed
        assert deps["moe-convert-bench"]["extra_info"] == {"role": "measuring suite"}
    metadata = json.loads(out.with_name("engine.json.metadata").read_text())
    assert metadata == {
        "repo": "vllm-project/vllm",
        "head_branch": "main",
        "head_sha": hashes["u2"],
    }
