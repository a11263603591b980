"""An engine's git history as asv's ``repo``: the config, and the nightly, PR and bisection uses.

``engine_config`` writes an asv config whose ``repo`` is an engine's checkout (vLLM's, FlashInfer's;
a path or a URL): each commit is built without compiling (vLLM's ``empty`` target) or taken from
the engine's per-commit wheels, and installed with this suite (from this checkout: asv 0.6.6 strips
``ASV_PYTHONPATH`` from the benchmark processes), the pinned torch and FlashInfer; the benchmarks
are ``engine_benchmarks/`` (the engine's converter beside the frozen transcriptions). Results,
dashboard and environments are named after the config, apart from the nightly's. Plain ``asv
run``, ``asv continuous``, ``asv find`` and ``asv publish`` work with it; the uses wrap them:

- ``nightly``: the newest commits of the engine's branch not yet measured here (at most ``limit``
  per night, within the newest ``window``), then the dashboard;
- ``pr``: the PR's head against its merge base (``asv continuous`` into a PR results folder: exact
  figures exactly; time by the paired A/B rule, ``benchmarks.engine_paired``), the PR comment;
  only the engine's own cells judged (the transcriptions are the same code at both commits);
- ``find``: ``asv find`` over a range for one figure, then checked: the commit it names and its
  parent must have the figure, and the change between them must be a regression (asv's search
  cannot tell a failed commit from a step, and then names a wrong commit: failed commits are
  named, and an answer that fails the check is none); where a commit of the range fails the
  cell, the answer is the first such commit, with its error.

``pr`` with ``--bench`` and ``find`` tell the benchmarks what asv runs of them
(``moe_suite.selection``), so a bisection step measures its cell, not every grid. Each result
is keyed to the engine's commit; the suite's commit that measured it and the FlashInfer
installed beside it are recorded beside the results (``engine_env.MEASURED``), and the export
carries them (``moe_bench.export``).
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import re
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from asv.config import Config
from asv.repo import get_repo
from asv.results import iter_results_for_machine

from moe_suite import selection
from moe_suite.metrics import ENGINE_FIGURES, EXACT, METRICS, NOISE_FACTOR, PAIRED

from .engine_env import read_measured, record, substitution

__all__ = [
    "BENCHMARK_MODULE",
    "BUILDS",
    "ENGINES",
    "EngineError",
    "EngineSpec",
    "engine_benchmarks",
    "engine_config",
    "failed_cells",
    "Finding",
    "figure_benchmark",
    "find",
    "nightly",
    "pr",
    "new_engine_commits",
    "reference_cell",
    "read_suite_commits",
    "record_suite_commit",
    "suite_commit",
]

ROOT = Path(__file__).resolve().parent.parent
#: asv's name of the engine suite's BF16 module (``engine_benchmarks/bench_engine.py``); each
#: quantized format's is ``bench_<format>``, as in the main suite (``engine_benchmarks``).
BENCHMARK_MODULE = "bench_engine"
#: The asv plugin every engine config names (``moe_bench.asv_atomic``; the "." is asv's: import
#: it with the config's folder first on ``sys.path``).
PLUGIN = ".moe_bench.asv_atomic"
#: How a commit becomes a wheel: built from its sources without compiling, or downloaded.
BUILDS = ("source", "wheel")
#: Held while this checkout is built into the suite's wheel (``_suite_wheel``); in ``build/``,
#: which setuptools writes there anyway (git-ignored).
SUITE_WHEEL_LOCK = ROOT / "build" / ".suite-wheel.lock"


class EngineError(Exception):
    """A use of an engine history failed; the message is the one line to print."""


@dataclass(frozen=True)
class EngineSpec:
    """How to build and install one engine's commit into an asv environment."""

    name: str  # --engine
    title: str  # as its project writes it: the dashboard's title
    distribution: str  # its package (pip uninstall)
    github: str  # owner/name: the export's repo
    build_requirements: tuple[str, ...]  # installed before a no-isolation build
    build_env: str  # environment of the wheel build
    wheel_index: str | None  # per-commit wheels, ``{commit}`` filled in; None: none published
    # the file of its tree that pins flashinfer-python, which its converter imports (installed
    # per commit: ``moe_bench.engine_env``); None: it does not import FlashInfer (or is it)
    flashinfer_pins: str | None

    @property
    def requirements(self) -> Path:
        """What the engine needs at import, beyond torch (``engine_benchmarks/requirements/``)."""
        return ROOT / "engine_benchmarks" / "requirements" / f"{self.name}.txt"


ENGINES = {
    # vLLM's `empty` target builds its Python code only (no CUDA, no .so): 33 s for 0.33.0 here
    # (../shared/notes/engine-history.md); its setup.py imports torch, so no build isolation.
    "vllm": EngineSpec(
        name="vllm",
        title="vLLM",
        distribution="vllm",
        github="vllm-project/vllm",
        build_requirements=(
            "setuptools>=77,<81",
            "setuptools-scm>=8",
            "setuptools-rust",
            "wheel",
            "jinja2",
        ),
        build_env="VLLM_TARGET_DEVICE=empty",
        wheel_index="https://wheels.vllm.ai/{commit}/cu130",
        flashinfer_pins="requirements/cuda.txt",
    ),
    # FlashInfer's Python package without its AOT kernels: the helpers every engine calls. Its
    # build backend pip-installs NVIDIA's compilers and NIXL unless FLASHINFER_BUILD_NO_PIP, and
    # tries its expert-parallel builds (CUDA) unless BUILD_NVEP=0 (found building 0.7.x here).
    "flashinfer": EngineSpec(
        name="flashinfer",
        title="FlashInfer",
        distribution="flashinfer-python",
        github="flashinfer-ai/flashinfer",
        build_requirements=("setuptools>=77", "wheel", "packaging", "apache-tvm-ffi"),
        build_env="FLASHINFER_BUILD_NO_PIP=1 BUILD_NVEP=0",
        wheel_index=None,
        flashinfer_pins=None,
    ),
}


def engine_benchmarks() -> dict[str, str]:
    """Every figure of the engine suite, ``module.class.method`` -> its format: each module of
    ``engine_benchmarks/`` (BF16's and each quantized format's) x ``ENGINE_FIGURES``, all in the
    metrics table (a quantized module's by ``format_figure``)."""
    stems = sorted(path.stem for path in (ROOT / "engine_benchmarks").glob("bench_*.py"))
    return {
        f"{stem}.{name.partition('.')[2]}": (
            "bf16" if stem == BENCHMARK_MODULE else stem.removeprefix("bench_")
        )
        for stem in stems
        for name in ENGINE_FIGURES
    }


def _thresholds(engine: str) -> tuple[dict[str, float], dict[str, None]]:
    """asv's ``regressions_thresholds`` and ``regressions_first_commits`` for the engine suite,
    from the metrics table: exact figures any rise, time-derived ratios beyond ``NOISE_FACTOR``,
    absolute seconds never (one machine name may cover hosts of different speed); and never a
    cell of another strategy than ``engine``'s own (``reference_cell``): the transcriptions and
    the engines installed beside it are the same code at every commit of ``engine``, so a step
    of theirs is the host's, not the history's."""
    thresholds: dict[str, float] = {".*": 0.0}
    never: dict[str, None] = {}
    for name in engine_benchmarks():
        m = METRICS[name]
        pattern = re.escape(name)
        if m.rule == PAIRED and m.host_bound:
            never[pattern] = None
        elif m.rule == PAIRED:
            thresholds[pattern] = NOISE_FACTOR - 1
        else:
            assert m.rule == EXACT, name
        # asv names a cell ``name('shape', 'strategy')`` and matches from its start
        never[rf"{pattern}\('[^']*', '(?!{re.escape(engine)}'\))"] = None
    return thresholds, never


def reference_cell(strategy: str, engine: str) -> bool:
    """Whether an engine suite's cell of ``strategy`` is a reference line in ``engine``'s history:
    every strategy but the engine's own (``vllm`` in vLLM's; BF16's axis and each format's kind
    are named alike), the same code at each of its commits."""
    return strategy != engine


def engine_config(
    engine: str,
    repo: str,
    out: Path,
    *,
    branch: str = "main",
    build: str = "source",
    torch: str = "2.13.0",
    flashinfer: str = "",
    requirements: Path | None = None,
) -> dict:
    """The asv config that measures ``engine``'s history at ``repo`` (a path or a git URL).

    Written to ``out`` with a constraints file beside it (``<out stem>.constraints.txt``: the
    torch build stays ``torch``); results, dashboard and environments are folders named after
    ``out``'s stem, beside it. This suite is built into a wheel once, here, from the checkout
    as it is (``suite_commit`` in the config; every environment installs that wheel): write the
    config again after updating the suite. ``requirements`` overrides the engine's import-time
    packages (``EngineSpec.requirements``). Each commit gets the flashinfer-python it pins, or
    ``flashinfer`` at every commit; where the index lacks that release, the nearest it has
    (``moe_bench.engine_env``). ``EngineError`` for an unknown engine or build, a wheel route
    the engine does not publish, or an ``out`` whose folder this interpreter's asv could not
    load the config's plugin from.
    """
    if engine not in ENGINES:
        raise EngineError(f"--engine {engine!r}: not one of {', '.join(ENGINES)}")
    spec = ENGINES[engine]
    if build not in BUILDS:
        raise EngineError(f"--build {build!r}: not one of {', '.join(BUILDS)}")
    if build == "wheel" and spec.wheel_index is None:
        raise EngineError(f"--build wheel: {engine} publishes no per-commit wheels; use source")
    if not re.fullmatch(r"[0-9][0-9A-Za-z.+]*", torch):
        raise EngineError(f"--torch {torch!r}: give a version, e.g. 2.13.0")
    if flashinfer and not re.fullmatch(r"[0-9][0-9A-Za-z.+]*", flashinfer):
        raise EngineError(f"--flashinfer {flashinfer!r}: give a version, e.g. 0.7.4")
    local = Path(repo).expanduser()
    if "://" not in repo and "@" not in repo:
        if not (local / ".git").exists() and not (local / "objects").is_dir():
            raise EngineError(f"--repo {repo!r}: not a git checkout (nor a URL)")
        repo = str(local.resolve())
    out = out.resolve()
    folder = out.parent
    folder.mkdir(parents=True, exist_ok=True)
    if not _plugin_importable(folder):
        raise EngineError(
            f"--out {str(out)!r}: asv, run by {sys.executable}, imports its plugin "
            f"{PLUGIN.lstrip('.')} from the config's folder or its installed packages, here "
            f"from neither: install this suite (pip install -e {ROOT}) or write the config "
            f"in {ROOT}"
        )
    stem = out.name.removesuffix(".json").removesuffix(".conf").removeprefix("asv.")
    constraints = folder / f"{stem}.constraints.txt"
    requirements = (requirements or spec.requirements).resolve()
    if not requirements.is_file():
        raise EngineError(f"--requirements {str(requirements)!r}: no such file")
    if build == "source":
        build_command = [
            f"python -m pip install -c {constraints} "
            + " ".join(f'"{r}"' for r in spec.build_requirements),
            f"{spec.build_env} python -m pip wheel --no-deps --no-build-isolation "
            "-w {build_cache_dir} {build_dir}".strip(),
        ]
    else:
        build_command = [  # asv fills {commit} and {build_cache_dir}
            "python -m pip download --no-deps --pre --only-binary :all: "
            f"--index-url {spec.wheel_index} -d {{build_cache_dir}} {spec.distribution}"
        ]
    suite_wheel = _suite_wheel(folder / ".asv" / f"{stem}-suite")
    results_dir = folder / f"results-{stem}"
    # the FlashInfer the commit pins, or the nearest release the index has, recorded beside
    # the results; run by this suite's wheel, installed the step before
    flashinfer_env = (
        f"in-dir={{env_dir}} python -m moe_bench.engine_env {{build_dir}} {{commit}} "
        f"--record {results_dir} --pins {spec.flashinfer_pins}"
        + (f" --flashinfer {flashinfer}" if flashinfer else "")
    )
    install_command = [
        f"in-dir={{env_dir}} python -m pip install -c {constraints} -r {requirements}",
        # this suite (built from this checkout by engine-config: the benchmarks import it) and
        # the commit, in one pip run (neither brings a dependency)
        "in-dir={env_dir} python -m pip install --no-deps --force-reinstall "
        f"{suite_wheel} {{wheel_file}}",
        *([flashinfer_env] if spec.flashinfer_pins else []),
    ]
    thresholds, never = _thresholds(engine)
    conf = {
        "version": 1,
        "project": spec.distribution,
        "repo": repo,
        "dvcs": "git",
        "branches": [branch],
        "plugins": [PLUGIN],
        "environment_type": "virtualenv",
        "build_command": build_command,
        "install_command": install_command,
        "uninstall_command": [f"return-code=any python -m pip uninstall -y {spec.distribution}"],
        "matrix": {"req": {"torch": [torch]}},
        "benchmark_dir": str(ROOT / "engine_benchmarks"),
        "env_dir": str(folder / ".asv" / f"env-{stem}"),
        "results_dir": str(results_dir),
        "html_dir": str(folder / f"html-{stem}"),
        "default_benchmark_timeout": 600,
        "install_timeout": 3600,
        "build_cache_size": 16,
        "regressions_thresholds": thresholds,
        "regressions_first_commits": never,
        # not asv's (it ignores unknown keys): what the uses and the export read
        "engine": engine,
        "engine_github": spec.github,
        "suite_commit": suite_commit(),
    }
    constraints.write_text(f"torch=={torch}\n")
    out.write_text(json.dumps(conf, indent=4) + "\n")
    return conf


def _plugin_importable(folder: Path) -> bool:
    """Whether asv, run by this interpreter, can load an engine config in ``folder``: it changes
    into the config's folder, puts "." first on ``sys.path`` and imports ``PLUGIN`` (asv 0.6.6's
    ``PluginManager.import_plugin``), so the plugin comes from there or the installed packages."""
    done = subprocess.run(
        [sys.executable, "-c", f"import {PLUGIN.lstrip('.')}"], cwd=folder, capture_output=True
    )
    return done.returncode == 0


def _suite_wheel(folder: Path) -> Path:
    """This checkout built into a wheel in ``folder`` (emptied first); its path.

    One build at a time per checkout (``SUITE_WHEEL_LOCK``, a ``flock``): setuptools builds in
    the checkout's ``build/`` and ``*.egg-info``, and two ``engine-config`` runs at once (two
    configs, or the tests on two workers) failed there (``file or directory:
    'build/bdist.linux-x86_64/wheel/./moe_convert_bench-0.1.0-py3.11.egg-info'``)."""
    if folder.is_dir():
        for old in folder.glob("*.whl"):
            old.unlink()
    SUITE_WHEEL_LOCK.parent.mkdir(exist_ok=True)
    with SUITE_WHEEL_LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        done = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(folder), str(ROOT)],
            capture_output=True,
            text=True,
        )
    wheels = list(folder.glob("*.whl"))
    if done.returncode != 0 or len(wheels) != 1:
        raise EngineError(f"building this suite's wheel failed: {done.stderr.strip()[-300:]}")
    return wheels[0]


def suite_commit() -> str:
    """This checkout's commit, ``-dirty`` appended where its tracked files have changes."""
    head = _git(ROOT, "rev-parse", "HEAD")
    dirty = subprocess.run(
        ["git", "-C", str(ROOT), "diff", "--quiet", "HEAD"], capture_output=True
    ).returncode
    return head + ("-dirty" if dirty else "")


def _git(repo: Path | str, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise EngineError(f"git {' '.join(args)} in {repo}: {done.stderr.strip() or 'failed'}")
    return done.stdout.strip()


def read_suite_commits(results_dir: str | Path) -> dict[str, str]:
    """Engine commit -> the suite commit that measured it, from ``results_dir``'s
    ``engine_env.MEASURED`` ({} where none)."""
    measured = read_measured(results_dir)
    return {commit: facts["suite"] for commit, facts in measured.items() if "suite" in facts}


def record_suite_commit(results_dir: str | Path, commits: list[str], suite: str) -> None:
    """Record that ``suite`` measured the engine's ``commits`` (``engine_env.MEASURED``)."""
    for commit in commits:
        record(results_dir, commit, suite=suite)


def load_config(config: Path) -> Config:
    """asv's config, refused with one line where it is not an engine config."""
    if not config.is_file():
        raise EngineError(
            f"--config {str(config)!r}: no such file (write one: moe-bench engine-config)"
        )
    conf = Config.load(str(config))
    if getattr(conf, "engine", None) not in ENGINES:
        raise EngineError(
            f"--config {str(config)!r} is not an engine config (no 'engine' key): write one "
            "with moe-bench engine-config"
        )
    return conf


def new_engine_commits(config: Path, machine: str, *, limit: int, window: int) -> list[str]:
    """The newest commits of the config's branch not yet measured on ``machine``, newest first:
    at most ``limit``, among the branch's newest ``window`` (first-parent) commits."""
    conf = load_config(config)
    repo = get_repo(conf)
    measured = {r.commit_hash for r in iter_results_for_machine(conf.results_dir, machine)}
    newest = repo.get_branch_commits(conf.branches[0])[:window]
    return [c for c in newest if c not in measured][:limit]


def _say(use: str, message: str) -> None:
    """A progress line on stderr: ``[engine-<use>] message``."""
    print(f"[engine-{use}] {message}", file=sys.stderr, flush=True)


def _asv(config: Path, *args: str, select: str | None = None) -> int:
    """``asv --config config ARGS`` in this interpreter's environment, its output streamed;
    ``select``: the run's ``--bench`` regex, told to the benchmarks (``moe_suite.selection``:
    they measure only what it selects)."""
    command = [sys.executable, "-m", "asv", "--config", str(config), *args]
    return subprocess.run(command, env=selection.environ(select)).returncode


def _asv_output(config: Path, *args: str, select: str | None = None) -> tuple[int, str]:
    """``_asv``, its output also returned (asv prints its answers there, not in a file)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "asv", "--config", str(config), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=selection.environ(select),
    )
    lines = []
    for line in process.stdout:
        sys.stderr.write(line)
        lines.append(line)
    return process.wait(), "".join(lines)


def _launch_method() -> str:
    """asv's launch method: a fresh interpreter per benchmark on CUDA, forked on CPU."""
    from moe_suite.profiles import detect_device

    return "spawn" if detect_device() == "cuda" else "forkserver"


def engine_repo_path(conf: Config) -> str:
    """The engine's git directory asv reads (its local checkout, or asv's mirror of a URL),
    brought up to date first."""
    repo = get_repo(conf)
    repo.pull()
    return repo._path


def subject(repo: str, commit: str) -> str:
    """``commit``'s short hash and subject line in ``repo``."""
    return _git(repo, "log", "-1", "--format=%h %s", commit)


def resolve(repo: str, revision: str) -> str:
    """The full hash of ``revision`` in ``repo``; ``EngineError`` naming it where git has none."""
    done = subprocess.run(
        ["git", "-C", repo, "rev-parse", "--verify", "-q", f"{revision}^{{commit}}"],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise EngineError(f"{revision!r} is not a commit of the engine's repository {repo}")
    return done.stdout.strip()


def run_commits(config: Path, machine: str, commits: list[str], asv_args=()) -> int:
    """``asv run`` of exactly ``commits`` (a hash file), saved under ``machine``."""
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as hashes:
        hashes.write("\n".join(commits) + "\n")
        hashes.flush()
        return _asv(
            config,
            "run",
            "--machine",
            machine,
            "--launch-method",
            _launch_method(),
            "--show-stderr",
            *asv_args,
            f"HASHFILE:{hashes.name}",
        )


@contextmanager
def _output_to(log: Path | None):
    """Within, what this process and its children write to stdout and stderr goes to ``log``
    (None: where it goes)."""
    if log is None:
        yield
        return
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    try:
        with log.open("w") as out:
            os.dup2(out.fileno(), 1)
            os.dup2(out.fileno(), 2)
            yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, kept in enumerate(saved, start=1):
            os.dup2(kept, fd)
            os.close(kept)


def nightly(
    config: Path, machine: str, *, limit: int, window: int, verbose: bool = False, asv_args=()
) -> int:
    """Measure the newest unmeasured commits (``new_engine_commits``), record the suite's commit
    beside them, publish. asv's output (its result tables: some 340 lines a commit) goes to
    ``<results_dir>/<machine>/nightly.log``, or here with ``verbose``; a few lines are printed
    (what a cron mail wants), and a commit whose pinned FlashInfer the index lacks is named.
    Exit status: 0, or asv's where a benchmark failed."""
    from .publish import publish

    conf = load_config(config)
    engine_repo_path(conf)  # fetch a URL's new commits first
    commits = new_engine_commits(config, machine, limit=limit, window=window)
    if not commits:
        _say(
            "nightly",
            f"{machine}: nothing new among the newest {window} commits of {conf.branches[0]}",
        )
        return 0
    log = None if verbose else Path(conf.results_dir) / machine / "nightly.log"
    _say(
        "nightly",
        f"{machine}: {len(commits)} commit(s) of {conf.engine} "
        f"{conf.branches[0]}: {' '.join(c[:8] for c in commits)}"
        + (f"; asv's output in {log}" if log else ""),
    )
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
    with _output_to(log):
        status = run_commits(config, machine, commits, asv_args)
        record_suite_commit(conf.results_dir, commits, conf.suite_commit)
        html = publish(config)
    measured = read_measured(conf.results_dir)
    for commit in commits:
        warning = substitution(measured.get(commit, {}))
        if warning:
            _say("nightly", f"warning: {commit[:8]}: {warning}")
    for line in failed_cells(conf.results_dir, machine, commits):
        _say("nightly", line + (f" (their errors: {log})" if log else ""))
    _say("nightly", f"results: {conf.results_dir}/{machine}/  dashboard: {html}  (exit {status})")
    return status


def failed_cells(results_dir: str | Path, machine: str, commits: list[str]) -> list[str]:
    """A line per commit of ``commits`` whose cells failed on ``machine`` in ``results_dir``,
    naming them (``a07d54e4: 2 cell(s) failed: bench_fp8.LayerTime.track_copy_ratio
    (llama-4-maverick-fp8/tp8 vllm), ...``): what a nightly's non-zero exit is about."""
    from .results import ResultsError, load_results

    try:
        df = load_results(results_dir, machine=machine)
    except ResultsError:  # nothing measured: asv's own output says why
        return []
    failed = df[df["failed"] & df["commit"].isin(commits)]
    lines = []
    for commit in commits:
        cells = failed[failed["commit"] == commit]
        if not cells.empty:
            named = ", ".join(f"{c.benchmark} ({c.shape} {c.strategy})" for c in cells.itertuples())
            lines.append(f"{commit[:8]}: {len(cells)} cell(s) failed: {named}")
    return lines


def figure_benchmark(figure: str, shape: str) -> str:
    """The engine suite's benchmark of ``figure`` (its method without ``track_``:
    ``peak_transient_bytes``, ``traffic_bytes``, ``launches``, ``layer_seconds``,
    ``copy_ratio``) in the module of ``shape``'s format (``engine_benchmarks``); ``EngineError``
    listing the figures for another name, or the formats for a shape of none measured."""
    from moe_convert.formats.catalog import shape_from_label

    fmt = shape_from_label(shape).format
    names = {
        name.rpartition(".track_")[2]: name for name, of in engine_benchmarks().items() if of == fmt
    }
    if not names:
        measured = sorted(set(engine_benchmarks().values()))
        raise EngineError(
            f"--shape {shape!r}: its format, {fmt}, is not measured by the engine suite "
            f"(formats: {', '.join(measured)})"
        )
    if figure not in names:
        raise EngineError(f"figure {figure!r}: not one of {', '.join(names)}")
    return names[figure]


def cell_regex(benchmark: str, shape: str, strategy: str) -> str:
    """asv's ``-b`` regex selecting one cell (asv matches ``name('shape', 'strategy')``)."""
    return re.escape(f"{benchmark}('{shape}', '{strategy}')")


def _cell_values(conf: Config, machine: str, benchmark: str, shape: str, strategy: str):
    """commit -> (value, failed) of one cell in ``machine``'s results ({} where none)."""
    from .results import ResultsError, load_results

    try:
        frame = load_results(conf.results_dir, machine=machine)
    except ResultsError:
        return {}
    rows = frame[
        (frame["benchmark"] == benchmark)
        & (frame["shape"] == shape)
        & (frame["strategy"] == strategy)
    ]
    return {row["commit"]: (row["value"], bool(row["failed"])) for _, row in rows.iterrows()}


@dataclass(frozen=True)
class Finding:
    """``find``'s answer: the first bad commit, how many commits it measured, and the problem
    that makes the search untrustworthy (None when the answer is checked); ``reason`` where the
    answer is the first commit whose cell fails: the cell's error there."""

    commit: str | None
    runs: int
    failed: tuple[str, ...]  # commits of the range measured without the figure (failed or n/a)
    problem: str | None
    reason: str | None = None


def _logs(output: str) -> dict[str, str]:
    """asv's log of each commit it ran (``For <project> commit <hash>``), by 8-hex prefix."""
    parts = re.split(r"For \S+ commit ([0-9a-f]{8})", output)
    return {commit: text for commit, text in zip(parts[1::2], parts[2::2], strict=True)}


def _failure(log: str, shape: str) -> str | None:
    """The error of ``shape``'s failed cell in one commit's asv log (its setup's line, as
    ``engine_benchmarks`` raises it); None where the log has none."""
    found = re.findall(rf"{re.escape(shape)} \S+: failed: (.+)", log)
    return found[-1].strip() if found else None


def _run_cell(config: Path, machine: str, commit: str, regex: str) -> dict[str, str]:
    """``asv run`` of the cells ``regex`` selects at ``commit`` alone; its log (``_logs``)."""
    _, output = _asv_output(
        config, "run", "--machine", machine, "--launch-method", _launch_method(),
        "--show-stderr", "--bench", regex, f"{commit}^!", select=regex,
    )  # fmt: skip
    return _logs(output)


def _first_failure(
    config: Path, machine: str, searched: list[str], values: dict, logs: dict, cell: tuple
) -> tuple[str, str, int] | None:
    """The first commit of ``searched`` (oldest first) whose cell fails, its error and the
    commits measured to find it; None where no commit measured so far fails. Between the
    newest commit before the first failed one that does not fail (skipped, n/a, counts as not
    failing) and that one, the commits are bisected: each run's log is kept (``logs``)."""
    benchmark, shape, strategy = cell
    conf = load_config(config)

    def fails(commit: str) -> bool:
        return commit in values and values[commit][1]

    if not any(fails(c) for c in searched):
        return None
    hi = next(i for i, c in enumerate(searched) if fails(c))
    lo = max((i for i in range(hi) if searched[i] in values), default=-1)
    runs = 0
    while hi - lo > 1:
        mid = (lo + hi) // 2
        logs.update(_run_cell(config, machine, searched[mid], cell_regex(*cell)))
        values.update(_cell_values(conf, machine, benchmark, shape, strategy))
        runs += 1
        lo, hi = (lo, mid) if fails(searched[mid]) else (mid, hi)
    commit = searched[hi]
    if _failure(logs.get(commit[:8], ""), shape) is None:  # measured before this search
        logs.update(_run_cell(config, machine, commit, cell_regex(*cell)))
        runs += 1
    reason = _failure(logs.get(commit[:8], ""), shape)
    return commit, reason or "its error is in asv's log above", runs


def find(
    config: Path,
    machine: str,
    good: str,
    bad: str,
    figure: str,
    shape: str,
    strategy: str,
    *,
    improvement: bool = False,
    asv_args=(),
) -> Finding:
    """``asv find`` over ``good..bad`` for one cell, then its answer checked from the results.

    The range searched starts at ``good`` itself (asv never names the first commit of its
    range). The named commit must have the figure, and so must its parent (measured when the
    search did not), and the change between them must be a regression by the metrics table's
    rule (an improvement with ``improvement``: asv's ``--invert``). asv's three-point search
    takes a failed commit's cell for a value when the deselected cells around it are stored as
    n/a, and then names a wrong commit (so does a commit where the engine's function is n/a, as
    a commit that does not import is to an adapter that reads the code): every commit of the
    range measured without the figure is reported, and an answer that does not pass the check
    is a ``problem``, never a commit; unless a commit of the range fails the cell (failed, not
    n/a): then the answer is the first such commit, with the cell's error there
    (``Finding.reason``, ``_first_failure``).
    """
    from moe_suite.metrics import judge

    conf = load_config(config)
    repo = engine_repo_path(conf)
    good, bad = resolve(repo, good), resolve(repo, bad)
    benchmark = figure_benchmark(figure, shape)
    commits = _git(repo, "rev-list", "--first-parent", "--reverse", f"{good}..{bad}").split()
    if not commits:
        raise EngineError(
            f"{good[:8]}..{bad[:8]}: no commits in the range (is {bad[:8]} a "
            f"descendant of {good[:8]}?)"
        )
    parent = _git(repo, "rev-list", "--first-parent", "--max-count=2", good).split()[1:]
    span = f"{parent[0]}..{bad}" if parent else f"{good}..{bad}"
    regex = cell_regex(benchmark, shape, strategy)
    _say(
        "find",
        f"{len(commits)} commit(s) after {good[:8]} up to {bad[:8]}: the "
        f"{'improvement' if improvement else 'regression'} of {benchmark} ({shape}, {strategy})",
    )
    status, output = _asv_output(
        config,
        "find",
        "--machine",
        machine,
        "--launch-method",
        _launch_method(),
        "--show-stderr",  # a failed cell's error, for the answer that names it
        *(["--invert"] if improvement else []),
        *asv_args,
        span,
        regex,
        select=regex,
    )
    values = _cell_values(conf, machine, benchmark, shape, strategy)
    searched = [good, *commits]
    logs = _logs(output)
    runs = len(logs)  # asv's line per commit run
    answer = re.search(r"Greatest (?:regression|improvement) found: ([0-9a-f]+)", output)
    cell = (benchmark, shape, strategy)
    if status != 0 or answer is None:
        failed = tuple(c for c in searched if c in values and math.isnan(values[c][0]))
        problem = f"asv find exited {status} without an answer (its log is above)"
        found = Finding(None, runs, failed, problem)
        return _or_failure(found, config, machine, searched, values, logs, cell)
    named = resolve(repo, answer.group(1))
    before = _git(repo, "rev-parse", f"{named}^")
    # asv names the only commit of a two-commit search without measuring either: measure them
    unmeasured = [c for c in (before, named) if c not in values]
    for commit in unmeasured:
        logs.update(_run_cell(config, machine, commit, regex))
    values.update(_cell_values(conf, machine, benchmark, shape, strategy))
    runs += len(unmeasured)
    failed = tuple(c for c in searched if c in values and math.isnan(values[c][0]))
    old, new = values.get(before, (math.nan, True))[0], values.get(named, (math.nan, True))[0]
    if math.isnan(new):
        problem = f"asv named {named[:8]}, which has no figure"
    elif math.isnan(old):
        problem = f"the parent of {named[:8]} has no figure to compare"
    else:
        verdict = judge(METRICS[benchmark], old, new)
        wanted = "improved" if improvement else "regressed"
        if verdict == wanted:
            return Finding(named, runs, failed, None)
        problem = (
            f"the step found, {named[:8]}, is not {wanted} against its parent ({old:g} -> "
            f"{new:g}: {verdict})"
        )
    found = Finding(None, runs, failed, problem)
    return _or_failure(found, config, machine, searched, values, logs, cell)


def _or_failure(
    found: Finding,
    config: Path,
    machine: str,
    searched: list[str],
    values: dict,
    logs: dict,
    cell: tuple,
) -> Finding:
    """``found`` (no checked answer), or, where a commit of the range fails the cell, the first
    such commit and its error (``_first_failure``): a failed cell is the range's first bad
    commit that asv's search, which takes no failure for a value, cannot name."""
    first = _first_failure(config, machine, searched, values, logs, cell)
    if first is None:
        return found
    commit, reason, runs = first
    return Finding(commit, found.runs + runs, found.failed, None, reason)


def pr_config(config: Path) -> Path:
    """The PR runs' config beside ``config`` (``<stem>.pr.conf.json``): the same environments,
    results and dashboard in folders of their own (``-pr``), so a PR never enters the history."""
    conf = json.loads(config.read_text())
    history = f"--record {conf['results_dir']} "  # engine_env's record goes with the results
    conf["results_dir"] += "-pr"
    conf["html_dir"] += "-pr"
    conf["install_command"] = [
        c.replace(history, f"--record {conf['results_dir']} ") for c in conf["install_command"]
    ]
    path = config.with_name(
        config.name.removesuffix(".json").removesuffix(".conf") + ".pr.conf.json"
    )
    path.write_text(json.dumps(conf, indent=4) + "\n")
    return path


def pr(
    config: Path,
    machine: str,
    base: str,
    head: str,
    out: Path,
    *,
    bench: str | None = None,
    verbose: bool = False,
) -> int:
    """The engine PR ``head`` against its merge base with ``base``: ``asv continuous`` (every
    figure of both, exact ones judged exactly), the paired A/B timing (``benchmarks.
    engine_paired``: the time verdict of every format's engine cell), the verdict and PR
    comment (``moe_bench.compare``, the engine's own cells judged, the reference cells shown).
    asv's and the paired run's output (some 900 lines, with asv's own comparison of every cell,
    the reference cells' times included, which is no verdict of this suite) go to
    ``out/asv.log``, or here with ``verbose``; printed: a few progress lines and the comment.
    Exit 0 nothing regressed or failed, 1 a regression or failure (the comment's "passed" or
    "FAILED" and nothing else decides), 2 missing results."""
    from .compare import PairedError, compare_commits, gate_failed, load_paired
    from .report import comment_markdown
    from .results import ResultsError, load_results

    config, out = config.resolve(), out.resolve()  # the paired run works in this checkout
    conf = load_config(config)
    repo = engine_repo_path(conf)
    head = resolve(repo, head)
    base = _git(repo, "merge-base", resolve(repo, base), head)
    pr_conf = pr_config(config)
    results = Path(conf.results_dir + "-pr")
    bench_args = ("--bench", bench) if bench else ()
    out.mkdir(parents=True, exist_ok=True)
    log = None if verbose else out / "asv.log"
    _say(
        "pr",
        f"{subject(repo, head)} against its merge base {subject(repo, base)}"
        + (f"; asv's output in {log}" if log else ""),
    )
    paired = out / "paired.json"
    paired.unlink(missing_ok=True)  # an earlier run's is no verdict of this one
    with _output_to(log):
        _asv(
            pr_conf,
            "continuous",
            "--machine",
            machine,
            "--launch-method",
            _launch_method(),
            "--show-stderr",
            *bench_args,
            base,
            head,
            select=bench,
        )
        record_suite_commit(results, [base, head], conf.suite_commit)
        _say("pr", f"paired timing of {base[:8]} and {head[:8]}, alternated")
        subprocess.run(
            [
                sys.executable,
                "-m",
                "benchmarks.engine_paired",
                str(pr_conf),
                base,
                head,
                "--out",
                str(paired),
                *bench_args,
            ],
            cwd=ROOT,
        )
    try:
        frame = load_results(results, machine=machine)
        threshold, rows = load_paired(paired, base, head)
    except (ResultsError, PairedError) as err:
        _say(
            "pr", f"missing or corrupt results: {err}" + (f" (asv's output: {log})" if log else "")
        )
        return 2
    # The verdict is the table's alone: asv's and the paired run's exit statuses judge cells the
    # table keeps out (asv's: the reference cells' times) or has as rows (the paired run's).
    table = compare_commits(frame, base, head, rows, engine=conf.engine, bench=bench)
    report = comment_markdown(table, base, head, paired_threshold=threshold)
    (out / "pr-comment.md").write_text(report)
    print(report)
    failed = gate_failed(table)
    _say("pr", f"PR comment: {out / 'pr-comment.md'}; {'FAILED' if failed else 'passed'}")
    return 1 if failed else 0
