"""``moe_bench.engine_env``: the FlashInfer an engine commit's environment gets (its pin, or the
nearest release the index has) and the record beside the results. Fixed version lists and a pip
stood in for: no network."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from asv.results import iter_results_paths

from moe_bench import engine, engine_env
from moe_bench.engine_env import MEASURED, nearest, read_measured, read_pin, record, substitution

#: The index's flashinfer-python releases around vLLM 0.34.0's pin, newest first, as ``pip index
#: versions`` lists them (2026-12): no 0.7.3.
INDEX = ["0.7.4", "0.7.2.post1", "0.7.2", "0.7.1", "0.7.0.post1", "0.7.0", "0.6.18.post1"]


@pytest.mark.parametrize(
    ("wanted", "chosen"),
    [
        ("0.7.3", "0.7.4"),  # vLLM 0.34.0's pin: the next release, not 0.7.2.post1
        ("0.7.2.post1", "0.7.2.post1"),  # on the index: itself
        ("0.7.2", "0.7.2"),
        ("0.6.19", "0.7.0"),  # across a minor release: still the next one
        ("0.7.5", "0.7.4"),  # newer than any: the newest
        ("0.5.0", "0.6.18.post1"),  # older than any: the oldest
    ],
)
def test_the_nearest_release_is_the_pinned_one_or_the_next(wanted, chosen):
    assert nearest(wanted, INDEX) == chosen


def test_no_release_to_stand_in_is_one_line():
    with pytest.raises(ValueError, match="no release on the package index to stand in for 0.7.3"):
        nearest("0.7.3", [])


def test_the_pin_is_read_from_the_commits_requirements(tmp_path: Path):
    pins = tmp_path / "cuda.txt"
    pins.write_text(
        "# Dependencies for NVIDIA GPUs\n-r common.txt\nnumba == 0.61.2 # comment\n"
        "torch==2.14.0\nflashinfer_python==0.7.3 ; platform_system == 'Linux'  # FlashInfer\n"
    )
    assert read_pin(pins, "flashinfer-python") == "0.7.3"  # the name as PEP 503 normalizes it
    assert read_pin(pins, "torch") == "2.14.0"
    assert read_pin(pins, "xformers") is None  # not named
    pins.write_text("flashinfer-python>=0.7.0\n")
    assert read_pin(pins, "flashinfer-python") is None  # not pinned to one release
    assert read_pin(tmp_path / "absent.txt", "flashinfer-python") is None


def test_the_record_merges_two_writers_per_commit(tmp_path: Path):
    a, b = "a" * 40, "b" * 40
    record(tmp_path, a, flashinfer="0.7.4", flashinfer_pinned="0.7.3")  # the install step
    record(tmp_path, b, flashinfer="0.7.2.post1", flashinfer_pinned="0.7.2.post1")
    engine.record_suite_commit(tmp_path, [a, b], "s" * 40)  # the nightly, after the run
    record(tmp_path, a, flashinfer="0.7.4", flashinfer_pinned="")  # measured again, unpinned
    assert read_measured(tmp_path) == {
        a: {"flashinfer": "0.7.4", "flashinfer_pinned": "", "suite": "s" * 40},
        b: {"flashinfer": "0.7.2.post1", "flashinfer_pinned": "0.7.2.post1", "suite": "s" * 40},
    }
    assert engine.read_suite_commits(tmp_path) == {a: "s" * 40, b: "s" * 40}
    assert read_measured(tmp_path / "none") == {}


def test_asvs_results_walk_does_not_read_the_record(tmp_path: Path, caplog):
    """asv takes every ``*.json`` under the results folder for a result: a record named so made
    each ``asv publish`` warn three times "Skipping results: could not load .../machine.json"."""
    (tmp_path / "machine-a").mkdir()
    (tmp_path / "machine-a" / "machine.json").write_text('{"machine": "machine-a", "version": 1}')
    (tmp_path / "benchmarks.json").write_text('{"version": 2}')
    engine.record_suite_commit(tmp_path, ["a" * 40], "s" * 40)
    assert (tmp_path / MEASURED).is_file()
    assert list(iter_results_paths(str(tmp_path))) == []
    assert "Skipping results" not in caplog.text


@pytest.mark.parametrize(
    ("facts", "said"),
    [
        (
            {"flashinfer": "0.7.4", "flashinfer_pinned": "0.7.3"},
            "flashinfer-python==0.7.3 is not on the package index: 0.7.4, the nearest release "
            "there, installed instead",
        ),
        ({"flashinfer": "0.7.2.post1", "flashinfer_pinned": "0.7.2.post1"}, None),
        ({"flashinfer": "0.7.4", "flashinfer_pinned": ""}, None),  # nothing pinned: the newest
        ({"suite": "s" * 40}, None),  # not installed by engine_env (FlashInfer as the engine)
    ],
)
def test_a_substitution_is_one_warning_line(facts, said):
    assert substitution(facts) == said


def _run_install(
    monkeypatch,
    tmp_path: Path,
    pins: str | None,
    *args: str,
    installed: str | None = None,
    index: list[str] = INDEX,
):
    """``engine_env.main`` on a tree whose requirements/cuda.txt holds ``pins``, with the index
    offering ``index`` (its queries counted) and pip recording what it was asked to install (and
    installing that release, or 0.7.4), the environment's torch 2.13.0+cpu and FlashInfer
    ``installed`` (None: none). Returns the exit code, pip's requests, the index queries and the
    record (None where nothing was recorded)."""
    tree = tmp_path / "build"
    (tree / "requirements").mkdir(parents=True)
    if pins is not None:
        (tree / "requirements" / "cuda.txt").write_text(pins)
    held = {"torch": "2.13.0+cpu"} | ({"flashinfer-python": installed} if installed else {})
    asked, queries = [], []

    def pip(command, **kwargs):
        asked.append(command[command.index("install") + 1 :])
        held["flashinfer-python"] = command[-1].partition("==")[2] or "0.7.4"
        return subprocess.CompletedProcess(command, 0)

    def version(distribution):
        if distribution not in held:
            raise engine_env.PackageNotFoundError(distribution)
        return held[distribution]

    monkeypatch.setattr(engine_env, "_available", lambda distribution: queries.append(1) or index)
    monkeypatch.setattr(engine_env.subprocess, "run", pip)
    monkeypatch.setattr(engine_env, "version", version)
    argv = [str(tree), "c" * 40, "--record", str(tmp_path / "results")]
    code = engine_env.main([*argv, "--pins", "requirements/cuda.txt", *args])
    return code, asked, len(queries), read_measured(tmp_path / "results").get("c" * 40)


def test_vllm_0_34_0s_pin_gets_the_nearest_release_and_a_warning(monkeypatch, tmp_path, capsys):
    code, asked, _, facts = _run_install(monkeypatch, tmp_path, "flashinfer-python==0.7.3\n")
    assert code == 0
    assert asked == [["--no-deps", "-q", "flashinfer-python==0.7.4"]]
    assert facts == {"flashinfer": "0.7.4", "flashinfer_pinned": "0.7.3", "torch": "2.13.0+cpu"}
    err = capsys.readouterr().err.splitlines()
    assert err == [f"warning: cccccccc: {substitution(facts)}"]


def test_without_a_pin_the_newest_and_with_flashinfer_that_release(monkeypatch, tmp_path):
    _, asked, _, facts = _run_install(monkeypatch, tmp_path, None)
    assert asked == [["--no-deps", "-q", "flashinfer-python"]]  # pip's newest, as before
    assert facts == {"flashinfer": "0.7.4", "flashinfer_pinned": "", "torch": "2.13.0+cpu"}
    _, asked, _, _ = _run_install(
        monkeypatch, tmp_path / "2", "flashinfer-python==0.7.3\n", "--flashinfer", "0.7.2"
    )
    assert asked == [["--no-deps", "-q", "flashinfer-python==0.7.2"]]  # over the commit's pin


@pytest.mark.parametrize(
    ("pins", "installed", "wanted", "queries"),
    [
        (None, "0.7.2", None, 0),  # unpinned: any release kept, as pip keeps it
        ("flashinfer-python==0.7.2\n", "0.7.2", None, 0),  # the pin itself: no pip, no index
        ("flashinfer-python==0.7.2\n", "0.7.4", "0.7.2", 1),
        # the nearest release: the index asked again (it may have the pinned one by now)
        ("flashinfer-python==0.7.3\n", "0.7.4", "0.7.4", 1),
    ],
)
def test_a_release_installed_as_asked_is_kept_without_pip(
    monkeypatch, tmp_path, pins, installed, wanted, queries
):
    """A commit of a history is installed over the previous one's environment: where that
    environment's FlashInfer is what the commit asks for, neither pip nor the index is run."""
    code, asked, asked_index, facts = _run_install(monkeypatch, tmp_path, pins, installed=installed)
    pip = [["--no-deps", "-q", f"flashinfer-python=={wanted}"]] if wanted else []
    assert code == 0 and (asked, asked_index) == (pip, queries)
    assert facts["flashinfer"] == (wanted or installed)


def test_an_index_without_a_release_is_one_line(monkeypatch, tmp_path, capsys):
    pins = "flashinfer-python==0.7.3\n"
    code, asked, queries, facts = _run_install(monkeypatch, tmp_path, pins, index=[])
    assert (code, asked, queries, facts) == (1, [], 1, None)  # nothing installed or recorded
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "engine_env: no release on the package index to stand in for 0.7.3 (pip index versions "
        "flashinfer-python)"
    ]


def test_a_config_asv_could_not_load_is_refused_in_one_line(tmp_path: Path, monkeypatch):
    """asv imports the config's plugin (``moe_bench.asv_atomic``) from the config's folder or
    its installed packages: an interpreter without this suite installed cannot load a config
    outside the checkout, so ``engine_config`` says so rather than write it."""
    repo = tmp_path / "engine"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    bare = tmp_path / "bare"  # a Python without this suite (nor asv)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    monkeypatch.setattr(sys, "executable", str(bare / "bin" / "python"))
    out = tmp_path / "elsewhere" / "asv.engine-vllm.conf.json"
    with pytest.raises(engine.EngineError) as error:
        engine.engine_config("vllm", str(repo), out)
    message = str(error.value)
    assert "\n" not in message and "moe_bench.asv_atomic" in message, message
    assert "pip install -e" in message and not out.exists()
