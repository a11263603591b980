"""scripts/engine-history (``moe_bench.engine_history``): a git history of released sources, made
here from small sdists written by the test (no network, no vLLM)."""

from __future__ import annotations

import io
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from moe_bench import engine_history
from moe_bench.engine_history import HistoryError, build_history, main

# A release's PKG-INFO time: the commit's date.
STAMPS = {"0.23.0": 1_780_000_000, "0.24.0": 1_781_000_000, "0.31.0": 1_790_000_000}


def _sdist(folder: Path, version: str, files: dict[str, str], *, prefix: str = "vllm-") -> Path:
    """``folder/<prefix>VERSION.tar.gz``: ``<prefix>VERSION/`` with PKG-INFO and ``files``."""
    folder.mkdir(exist_ok=True)
    path = folder / f"{prefix}{version}.tar.gz"
    with tarfile.open(path, "w:gz") as archive:
        for name, text in {"PKG-INFO": f"Version: {version}\n", **files}.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{prefix}{version}/{name}")
            info.size, info.mtime = len(data), STAMPS[version]
            archive.addfile(info, io.BytesIO(data))
    return path


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


@pytest.fixture
def sdists(tmp_path: Path) -> Path:
    folder = tmp_path / "sdists"
    # vllm/_version.py: what setuptools-scm rewrites at build time, left out of every commit.
    _sdist(
        folder,
        "0.23.0",
        {"vllm/form.py": "legacy\n", "vllm/gone.py": "x\n", "vllm/_version.py": "v = 1\n"},
    )
    # An ignored file is still the release's (vLLM's sdists carry their .gitignore).
    _sdist(folder, "0.24.0", {"vllm/form.py": "preallocated\n", ".gitignore": "*.txt\n"})
    _sdist(folder, "0.31.0", {"vllm/form.py": "inplace\n", "notes.txt": "y\n"})
    return folder


def test_one_tagged_commit_per_release_in_version_order(tmp_path: Path, sdists: Path) -> None:
    dest = tmp_path / "vllm"
    lines: list[str] = []
    releases = build_history(dest, ["0.24.0", "0.23.0"], sdists=sdists, log=lines.append)
    assert [r.version for r in releases] == ["0.23.0", "0.24.0"]
    assert _git(dest, "log", "--format=%s", "main").splitlines() == [
        "vLLM 0.24.0: the sdist vllm-0.24.0.tar.gz from the package index",
        "vLLM 0.23.0: the sdist vllm-0.23.0.tar.gz from the package index",
    ]
    assert _git(dest, "rev-parse", "v0.23.0^{commit}") == releases[0].commit
    assert _git(dest, "show", "v0.24.0:vllm/form.py") == "preallocated"
    # Each tree is the release's alone: a file the next release dropped is gone.
    assert _git(dest, "ls-tree", "-r", "--name-only", "v0.24.0").split() == [
        ".gitignore",
        "PKG-INFO",
        "vllm/form.py",
    ]
    assert "vllm/_version.py" not in _git(dest, "ls-tree", "-r", "--name-only", "v0.23.0")
    assert _git(dest, "log", "-1", "--format=%at", "v0.23.0") == str(STAMPS["0.23.0"])
    assert len(lines) == 2 and "tagged v0.24.0" in lines[1]

    # Extended with a newer release: the ones there are kept, the ignored file committed.
    again = build_history(dest, ["0.23.0", "0.24.0", "0.31.0"], sdists=sdists, log=lines.append)
    assert [r.added for r in again] == [False, False, True]
    assert again[:2] == [r.__class__(r.version, r.commit, False) for r in releases]
    assert _git(dest, "show", "v0.31.0:notes.txt") == "y"
    assert _git(dest, "status", "--porcelain") == ""


def test_history_is_only_appended_to(tmp_path: Path, sdists: Path) -> None:
    dest = tmp_path / "vllm"
    build_history(dest, ["0.24.0"], sdists=sdists, log=lambda _: None)
    with pytest.raises(HistoryError, match=r"up to 0\.24\.0 already; 0\.23\.0 is older"):
        build_history(dest, ["0.23.0"], sdists=sdists, log=lambda _: None)
    with pytest.raises(HistoryError, match="give release numbers"):
        build_history(tmp_path / "other", ["latest"], sdists=sdists, log=lambda _: None)


def test_missing_sdist_without_metadata_tools_is_one_line(
    tmp_path: Path, sdists: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """An sdist to download where vLLM's setup.py could not run: one line saying what to install."""
    real = engine_history.importlib.util.find_spec
    monkeypatch.setattr(
        engine_history.importlib.util,
        "find_spec",
        lambda name: None if name == "setuptools_rust" else real(name),
    )
    status = main([str(tmp_path / "vllm"), "0.23.0", "0.99.0", "--sdists", str(sdists)])
    err = capsys.readouterr().err
    assert status == 1 and len(err.splitlines()) == 1
    assert "vllm-0.99.0.tar.gz is not in" in err
    assert re.search(r"imports [a-z_, ]*setuptools_rust", err)
    assert _git(tmp_path / "vllm", "tag").split() == ["v0.23.0"]  # what was done stays done


def test_flashinfer_history_carries_its_checkout_version_file(tmp_path: Path) -> None:
    """The same mechanism for FlashInfer: its sdists' PEP 625 name, its build-written file left
    out and its checkout's version.txt put in (else every commit builds as 0.0.0+unknown)."""
    folder = tmp_path / "sdists"
    for version in ("0.23.0", "0.24.0"):
        meta = f'__version__ = "{version}"\n'
        files = {"flashinfer/fused_moe/prepare.py": "x\n", "flashinfer/_build_meta.py": meta}
        _sdist(folder, version, files, prefix="flashinfer_python-")
    dest = tmp_path / "flashinfer"
    releases = build_history(
        dest, ["0.24.0", "0.23.0"], engine="flashinfer", sdists=folder, log=lambda _: None
    )
    assert [r.version for r in releases] == ["0.23.0", "0.24.0"]
    assert _git(dest, "ls-tree", "-r", "--name-only", "v0.24.0").split() == [
        "PKG-INFO",
        "flashinfer/fused_moe/prepare.py",
        "version.txt",
    ]
    assert _git(dest, "show", "v0.23.0:version.txt") == "0.23.0"
    assert _git(dest, "log", "-1", "--format=%s", "v0.24.0") == (
        "FlashInfer 0.24.0: the sdist flashinfer_python-0.24.0.tar.gz from the package index"
    )
    assert _git(dest, "status", "--porcelain") == ""


def test_each_download_is_said_before_and_after(
    tmp_path: Path, sdists: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pip is silent while it downloads an sdist (vLLM's are some 50 MB): a line says which
    release is being fetched, one its size once there; an sdist already there says nothing."""
    held = (sdists / "vllm-0.31.0.tar.gz").rename(tmp_path / "held.tar.gz")  # on the "index"
    monkeypatch.setattr(engine_history.importlib.util, "find_spec", lambda name: object())
    run = subprocess.run

    def pip_download(command, **kwargs):  # pip saves the sdist; git runs as it is
        if command[1:3] != ["-m", "pip"]:
            return run(command, **kwargs)
        shutil.copy(held, sdists / held.name.replace("held", "vllm-0.31.0"))
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(engine_history.subprocess, "run", pip_download)
    lines: list[str] = []
    build_history(tmp_path / "vllm", ["0.24.0", "0.31.0"], sdists=sdists, log=lines.append)
    assert len(lines) == 4, lines
    assert "0.24.0: committed" in lines[0]  # in the folder already: no download line
    assert lines[1] == (
        f"[engine-history] 0.31.0: downloading vllm-0.31.0.tar.gz (pip download) into {sdists}"
    )
    assert re.fullmatch(
        r"\[engine-history\] 0\.31\.0: vllm-0\.31\.0\.tar\.gz, 0\.0 MB, in \d+ s", lines[2]
    )
    assert "0.31.0: committed" in lines[3]
