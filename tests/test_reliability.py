"""Fault injection in the suite's operation: overlapping runs, SIGKILL at several points, result
files cut short or empty, a full disk while results are written, gpu-check without torch.

Real processes and real signals: the scripts run in a copy of the fixture's checkout
(``fixtures/asv_fixture``) with a stand-in ``asv`` (a shell function) only where the real one
would take minutes (``asv run``: building an environment, measuring); ``moe-bench publish`` runs
the real ``asv publish``. Each case checks what the user sees (exit status, the one line) and
that nothing else was lost. docs/reliability.md lists the cases and what survived them.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from asv import util
from fixtures.asv_fixture import CONF, git, make_repo
from fixtures.asv_fixture import OUT as FIXTURE_RESULTS

from moe_bench import asv_atomic
from moe_bench.results import load_results, new_commits

ROOT = Path(__file__).resolve().parents[1]
MACHINE = "fixture-box"
EX_TEMPFAIL = 75
FIXTURE_FILES = sorted((FIXTURE_RESULTS / MACHINE).glob("*-*.json"))  # oldest first by date
NEWEST = max(FIXTURE_FILES, key=lambda p: json.loads(p.read_text())["date"])


def _wait_for(predicate, what: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


@pytest.fixture
def checkout(tmp_path):
    """The fixture's git history with its results and this project's scripts, plus a stand-in
    ``asv`` whose ``run`` touches ``asv-started`` and then measures for a minute (an exported
    shell function); returns ``(repo, env)``. Needs the ``.venv`` that scripts/_env.sh makes
    (scripts/test)."""
    venv = Path(sys.prefix)
    if not (venv / ".installed-test,bench").exists():
        pytest.skip(
            f"{venv} was not set up by scripts/_env.sh (run the tests through scripts/test)"
        )
    repo = tmp_path / "repo"
    make_repo(repo)
    shutil.copytree(ROOT / "scripts", repo / "scripts")
    shutil.copytree(FIXTURE_RESULTS, repo / "results")
    env = {
        **os.environ,
        "MOE_VENV": str(venv),
        "HOME": str(tmp_path),
        "MOE_BENCH_MACHINE": MACHINE,
        "MOE_BENCH_PROFILE": "cpu",
        # An exported bash function: the scripts' bash takes it before the venv's asv on PATH.
        "BASH_FUNC_asv%%": (
            f'() {{ [ "$1" = run ] || return 99; touch {tmp_path}/asv-started; sleep 60; }}'
        ),
    }
    return repo, env


def _script(repo: Path, env: dict, name: str, *args: str, **extra_env: str):
    return subprocess.run(
        [str(repo / "scripts" / name), *args],
        cwd=repo,
        env={**env, **extra_env},
        capture_output=True,
        text=True,
        timeout=300,
    )


#: Files of a published dashboard that differ between two publishes of the same results: asv
#: writes the time of publishing into them. Only their presence is compared.
STAMPED = ("info.json", "regressions.json", "regressions.xml")


def _tree(folder: Path) -> dict[str, str]:
    """Every file under ``folder``: relative path -> sha256 of its bytes (``STAMPED``: present)."""
    return {
        str(p.relative_to(folder)): (
            "present" if p.name in STAMPED else hashlib.sha256(p.read_bytes()).hexdigest()
        )
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.mark.slow
def test_overlapping_runs_and_a_nightly_killed_while_measuring(checkout, tmp_path, monkeypatch):
    """A nightly measuring a new commit holds the checkout: a second run waits its bounded time
    and exits 75 naming it; killed (SIGKILL), it blocks nobody, loses no result, leaves html/ as
    it was, and the next nightly measures the same commit."""
    repo, env = checkout
    (repo / "revision.txt").write_text("new\n")
    git(repo, "commit", "-q", "-am", "a commit the nightly is killed measuring")
    new = git(repo, "rev-parse", "HEAD")
    (repo / "html").mkdir()
    (repo / "html" / "index.json").write_text('{"previous": "dashboard"}')
    nightly = subprocess.Popen(
        [str(repo / "scripts" / "nightly")],
        cwd=repo,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group: killed below with asv
    )
    try:
        _wait_for(
            lambda: (tmp_path / "asv-started").exists() or nightly.poll() is not None,
            "the nightly to start measuring",
        )
        assert nightly.poll() is None, "the nightly ended before it measured"
        for wait in ("0", "1"):
            started = time.monotonic()
            gate = _script(repo, env, "gate", MOE_BENCH_LOCK_WAIT=wait)
            assert gate.returncode == EX_TEMPFAIL, gate.stderr
            assert time.monotonic() - started >= int(wait)
            [line] = gate.stderr.splitlines()
            assert line.startswith("[gate] this checkout is busy: scripts/nightly (pid ")
            assert f"(pid {nightly.pid}, started 20" in line
            assert f"waited {wait} s (MOE_BENCH_LOCK_WAIT)" in line
    finally:
        os.killpg(nightly.pid, signal.SIGKILL)
        nightly.wait()
    assert nightly.returncode == -signal.SIGKILL
    assert load_results(repo / "results").equals(load_results(FIXTURE_RESULTS))
    assert (repo / "html" / "index.json").read_text() == '{"previous": "dashboard"}'
    monkeypatch.chdir(repo)  # the fixture's config names its repository "."
    assert new_commits(repo / "asv.conf.json", MACHINE) == [new]
    after = _script(repo, env, "gate", MOE_BENCH_LOCK_WAIT="0")  # the dead run's lock is free
    assert after.returncode != EX_TEMPFAIL and "busy" not in after.stderr


def test_lock_wait_must_be_whole_seconds(checkout):
    repo, env = checkout
    done = _script(repo, env, "gate", MOE_BENCH_LOCK_WAIT="soon")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "[gate] MOE_BENCH_LOCK_WAIT=soon: give whole seconds (0: do not wait)"
    ]


#: The tests of ``published``: on one pytest-xdist worker (scripts/test), which publishes once.
PUBLISHED = pytest.mark.xdist_group("reliability-published")


@pytest.fixture(scope="module")
def published_once(tmp_path_factory):
    """The fixture's checkout with the project's asv plugin, its dashboard published once for the
    module (``moe-bench publish``: 13-16 s here); ``published`` gives each test a copy."""
    repo = tmp_path_factory.mktemp("published") / "repo"
    make_repo(repo)
    shutil.copytree(FIXTURE_RESULTS, repo / "results")
    conf = {**CONF, "plugins": [".moe_bench.asv_atomic"]}
    (repo / "asv.conf.json").write_text(json.dumps(conf))
    _publish(repo)
    return repo


@pytest.fixture
def published(published_once, tmp_path):
    """A copy of ``published_once`` of this test's own (its config names the repo as ``.``);
    returns ``(repo, the dashboard's files)``."""
    repo = tmp_path / "repo"
    shutil.copytree(published_once, repo, symlinks=True)
    return repo, _tree(repo / "html")


def _publish(repo: Path, *args: str, check: bool = True):
    return subprocess.run(
        [sys.executable, "-m", "moe_bench", "publish", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        check=check,
        timeout=300,
    )


@PUBLISHED
@pytest.mark.slow
@pytest.mark.parametrize("delay_s", [0.0, 0.5, 1.5])
def test_publish_killed_leaves_the_previous_dashboard_or_the_new_one(published, delay_s):
    repo, previous = published
    (repo / "results" / MACHINE / NEWEST.name).unlink()  # the new dashboard differs
    publisher = subprocess.Popen(
        [sys.executable, "-m", "moe_bench", "publish"],
        cwd=repo,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _wait_for(lambda: any(repo.glob(".html.new-*")) or publisher.poll() is not None, "publish")
    time.sleep(delay_s)
    publisher.send_signal(signal.SIGKILL)
    publisher.wait()
    after_kill = _tree(repo / "html")
    _publish(repo)  # the next run publishes, removing what the killed one left
    new = _tree(repo / "html")
    assert new != previous
    assert after_kill in (previous, new)
    if delay_s == 0.0:
        assert after_kill == previous  # killed while asv wrote the new one
    assert not list(repo.glob(".html.*"))


@PUBLISHED
def test_publish_swaps_by_two_renames_where_the_filesystem_cannot_exchange(published, monkeypatch):
    from moe_bench import publish

    def cannot(a, b):
        raise OSError(22, "Invalid argument")  # what NFS answers to RENAME_EXCHANGE

    repo, previous = published
    monkeypatch.setattr(publish, "_exchange", cannot)
    new = repo / ".html.new-1"
    shutil.copytree(repo / "html", new)
    (new / "marker").write_text("new")
    publish.swap_in(new, repo / "html")
    assert _tree(repo / "html") == {**previous, "marker": _tree(new.parent / "html")["marker"]}
    assert not list(repo.glob(".html.*"))


_WRITER = """
import signal, sys
from asv import util
from moe_bench import asv_atomic
if sys.argv[2] == "atomic":
    asv_atomic.setup()
data = {"results": {f"bench_{i}": list(range(200)) for i in range(20000)}}
util.write_json(sys.argv[1], data, api_version=2)
"""


@pytest.mark.parametrize("writer", ["atomic", "asv's own"])
def test_a_results_file_killed_while_written(tmp_path, writer):
    """SIGKILL while a 50 MB results file is being written over a previous one: asv's own writer
    leaves it cut short; the plugin's leaves the previous file, whole."""
    target = tmp_path / "abcdef12-existing-py.json"
    util.write_json(str(target), {"previous": True}, api_version=2)
    previous = target.read_bytes()
    written = tmp_path / (f".{target.name}.*.tmp" if writer == "atomic" else target.name)
    process = subprocess.Popen([sys.executable, "-c", _WRITER, str(target), writer])
    _wait_for(
        lambda: any(p.stat().st_size > 1_000_000 for p in tmp_path.glob(written.name)),
        "the write to be under way",
        timeout_s=60,
    )
    process.send_signal(signal.SIGKILL)
    process.wait()
    if writer == "atomic":
        assert target.read_bytes() == previous
    else:
        assert len(target.read_bytes()) > 0
        with pytest.raises(ValueError):  # cut short: not JSON
            json.loads(target.read_bytes())


def _loaded(results: Path, capsys) -> tuple[pd.DataFrame, list[str]]:
    """``load_results(results)`` (what summary, gate and compare read) and the lines it wrote
    on stderr about what it left out."""
    frame = load_results(results)
    return frame, [line for line in capsys.readouterr().err.splitlines() if line]


@pytest.mark.parametrize("damage", ["truncated", "empty"])
def test_a_cut_short_results_file_costs_only_its_commit(tmp_path, capsys, damage):
    """A result file cut short (or empty) is left out with one line; every other figure loads as
    before; the nightly measures its commit again, and asv's run of it measures it anew."""
    results = tmp_path / "results"
    shutil.copytree(FIXTURE_RESULTS, results)
    bad = results / MACHINE / NEWEST.name
    bad.write_bytes(
        bad.read_bytes()[: len(bad.read_bytes()) // 2] if damage == "truncated" else b""
    )
    clean = load_results(FIXTURE_RESULTS)
    frame, [line] = _loaded(results, capsys)
    assert line.startswith(f"moe-bench: {bad}: left out, not a readable asv result")
    assert f"commit {NEWEST.name[:8]} counts as not measured" in line
    kept = clean[~clean["commit"].str.startswith(NEWEST.name[:8])].reset_index(drop=True)
    assert frame.equals(kept)

    repo = tmp_path / "repo"
    commits = make_repo(repo)
    config = tmp_path / "asv.conf.json"
    config.write_text(json.dumps({**CONF, "repo": str(repo), "results_dir": str(results)}))
    newest = next(c for c in commits if c.startswith(NEWEST.name[:8]))
    assert new_commits(config, MACHINE) == [newest]

    from asv.results import Results

    result = Results.load(str(NEWEST), machine_name=MACHINE)
    with pytest.raises(util.UserError, match="Error parsing JSON"):
        result.load_data(str(results))  # asv alone stops the commit's next run here
    asv_atomic.load_data_unless_cut_short(result, str(results))  # the plugin measures anew


@pytest.fixture
def small_disk(tmp_path):
    """A 1 MiB tmpfs (mounting needs root; elsewhere the test skips, saying so)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if done.returncode:
        pytest.skip(f"cannot mount a small tmpfs here: {done.stderr.strip() or 'not root'}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_a_full_disk_while_results_are_written(small_disk):
    """The disk fills while a commit's results are written: the write fails (asv reports it and
    exits), the previous results file stays whole, nothing half-written is left to be read."""
    results = small_disk / "results"
    shutil.copytree(FIXTURE_RESULTS, results)
    target = results / MACHINE / NEWEST.name
    previous = target.read_bytes()
    data = {"results": {f"bench_{i}": list(range(200)) for i in range(2000)}}  # about 2.5 MB
    with pytest.raises(OSError, match="No space left on device"):
        asv_atomic.atomic_write_json(str(target), data, api_version=2)
    assert target.read_bytes() == previous
    assert not list(results.rglob(".*.tmp"))
    assert load_results(results).equals(load_results(FIXTURE_RESULTS))


def test_gpu_check_without_torch_is_one_line(tmp_path):
    """``scripts/gpu-check --dry-run`` where ``python3`` has no torch (a venv without the
    system's packages): one line naming the interpreter and what to do, exit 2."""
    venv = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    done = subprocess.run(
        [str(ROOT / "scripts" / "gpu-check"), str(tmp_path / "out"), "--dry-run"],
        env={**os.environ, "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"[gpu-check] {venv / 'bin' / 'python3'} cannot import torch: run scripts/gpu-check on "
        "the GPU box (its python3 has torch), or here with .venv active "
        "(. .venv/bin/activate; scripts/test makes it)"
    ]


def _foreign(results: Path, commit: str, **params: str) -> Path:
    """A copy of the fixture's oldest result as commit ``commit``, with machine ``params``."""
    data = json.loads(FIXTURE_FILES[0].read_text())
    data["commit_hash"] = commit
    data["params"].update(params)
    path = results / MACHINE / f"{commit[:8]}-{data['env_name']}.json"
    path.write_text(json.dumps(data))
    return path


def test_several_machines_gathered_wrongly_are_named_not_counted_twice(tmp_path, capsys):
    """A machine folder copied twice and another box's result in a folder of the same name:
    one line each, left out; the figures are the clean history's, none counted twice."""
    results = tmp_path / "results"
    shutil.copytree(FIXTURE_RESULTS, results)
    shutil.copytree(results / MACHINE, results / f"{MACHINE}-copy")
    other_box = _foreign(results, "f" * 40, cpu="Another CPU")
    clean = load_results(FIXTURE_RESULTS)
    frame, lines = _loaded(results, capsys)
    assert set(lines) == {
        f"moe-bench: {results / MACHINE}-copy: left out: its machine.json names machine "
        f"'{MACHINE}', another folder's (a copy of results/{MACHINE}/?); gather each machine "
        "folder once, under its name",
        f"moe-bench: {other_box}: left out: measured on other hardware than "
        f"{results / MACHINE / 'machine.json'} (cpu 'Another CPU', not 'fixture CPU'): two boxes "
        "under one machine name; name each apart (MOE_BENCH_MACHINE) and gather each folder once",
    }
    assert frame.equals(clean)


def test_a_host_of_the_same_kind_shares_the_history(tmp_path, capsys):
    """RAM a few bytes apart (issue 22's two hosts): the same hardware, kept and read."""
    results = tmp_path / "results"
    shutil.copytree(FIXTURE_RESULTS, results)
    (results / MACHINE / "machine.json").write_text(
        json.dumps({"cpu": "fixture CPU", "machine": MACHINE, "ram": "25276502016", "version": 1})
    )
    _foreign(results, "e" * 40, ram="25275990016")
    frame, lines = _loaded(results, capsys)
    assert lines == [] and (frame["commit"] == "e" * 40).any()


@PUBLISHED
@pytest.mark.slow
def test_a_result_of_a_commit_not_on_main_is_named_and_the_rest_published(published):
    repo, previous = published
    stray = _foreign(repo / "results", "e" * 40)  # a PR commit's result among the nightly's
    done = _publish(repo, "--summary", "summary")  # as scripts/bench and scripts/nightly do
    assert done.stderr.splitlines()[0] == (
        f"moe-bench publish: {stray.relative_to(repo)}: commit eeeeeeee is not on main: not on "
        "the dashboard (asv graphs branch commits only); the summary and the gate read it"
    )
    assert _tree(repo / "html").keys() == previous.keys()
    # the summary of the same results beside it, its plots the front page's, copied
    assert done.stdout.splitlines()[-1] == str(Path("summary", "summary.md"))
    text = (repo / "summary" / "summary.md").read_text()
    images = [line.split("](")[1].rstrip(")") for line in text.splitlines() if "](" in line]
    plots = repo / "html" / "plots"
    assert images and sorted(images) == sorted(p.name for p in plots.iterdir())
    assert all((repo / "summary" / i).read_bytes() == (plots / i).read_bytes() for i in images)


@PUBLISHED
def test_an_engine_history_has_no_summary_to_publish(published):
    """Its front page is the engine's: ``--summary`` is refused in one line, before asv runs."""
    repo, previous = published
    conf = json.loads((repo / "asv.conf.json").read_text())
    (repo / "engine.conf.json").write_text(json.dumps({**conf, "engine": "vllm"}))
    done = _publish(repo, "--config", "engine.conf.json", "--summary", "summary", check=False)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        "moe-bench publish: error: engine.conf.json is an engine's history: its front page is "
        "the engine's, not a summary (publish it without --summary)"
    ]
    assert _tree(repo / "html") == previous and not (repo / "summary").exists()


def test_a_python3_that_cannot_make_the_venv_is_one_line(checkout, tmp_path):
    """A fresh checkout where ``python3 -m venv`` fails (Debian without python3-venv)."""
    repo, env = checkout
    bare = tmp_path / "no-venv"
    bare.mkdir()
    (bare / "python3").write_text(
        "#!/bin/sh\necho 'The virtual environment was not created successfully because ensurepip"
        " is not available.' >&2\necho 'apt install python3-venv' >&2\nexit 1\n"
    )
    (bare / "python3").chmod(0o755)
    done = _script(
        repo, env, "gate", MOE_VENV=str(tmp_path / "venv"), PATH=f"{bare}:{os.environ['PATH']}"
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"[setup] creating {tmp_path / 'venv'}",
        "[setup] python3 -m venv failed: The virtual environment was not created successfully "
        "because ensurepip is not available. (a python3 >= 3.10 with venv on PATH? Debian: "
        "apt-get install python3-venv)",
    ]


#: Mistyped arguments of the scripts: (script, its arguments, the one line's text). Each is
#: refused before asv (the stand-in would leave ``asv-started``) and before the machine is
#: recorded (``~/.asv-machine.json``).
BAD_SCRIPT_ARGS = [
    ("compare", [], "give BASE HEAD first"),
    ("compare", ["-b", "Layer", "HEAD"], "give BASE HEAD first"),
    ("compare", ["HEAD~1"], "give BASE HEAD first"),
    ("compare", ["HEAD~1", "HEAD", "-b"], "-b needs a regex"),
    ("compare", ["nosuch", "HEAD"], "'nosuch' is not a commit of this checkout"),
    ("compare", ["HEAD~1", "HEAD", "--bogus"], "asv continuous: unrecognized arguments: --bogus"),
    ("compare", ["HEAD~1", "HEAD", "-b", "x("], "'x(' is not a regular expression"),
    ("compare", ["HEAD~1", "HEAD", "--help"], "asv continuous --help"),
    ("bench", ["--bogus"], "scripts/bench: error: asv run: unrecognized arguments: --bogus"),
    ("bench", ["-b"], "asv run: argument --bench/-b: expected one argument"),
    ("nightly", ["--bogus"], "scripts/nightly: error: asv run: unrecognized arguments: --bogus"),
    ("gate", ["--budget", "x"], "moe-bench gate: error: unrecognized arguments: --budget x"),
    ("gate", ["--result", "r"], "moe-bench gate: error: unrecognized arguments: --result r"),
    ("preview", ["--port", "x"], "moe-bench dashboard serve: error: argument --port: 'x'"),
]


@pytest.mark.parametrize(
    ("script", "args", "text"),
    BAD_SCRIPT_ARGS,
    ids=[" ".join([s, *a]) for s, a, _ in BAD_SCRIPT_ARGS],
)
def test_a_mistyped_script_argument_is_one_line_before_any_work(
    checkout, tmp_path, script, args, text
):
    repo, env = checkout
    done = _script(repo, env, script, *args)
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.splitlines()) == 1 and text in done.stderr, done.stderr
    assert not (tmp_path / "asv-started").exists()
    assert not (tmp_path / ".asv-machine.json").exists()


def test_gpu_check_refuses_a_mistyped_argument_in_one_line(tmp_path, capsys):
    from moe_bench.gpucheck.__main__ import main

    with pytest.raises(SystemExit) as stop:
        main([str(tmp_path), "--dryrun"])
    assert stop.value.code == 2
    assert capsys.readouterr().err == "scripts/gpu-check: error: unrecognized arguments: --dryrun\n"
