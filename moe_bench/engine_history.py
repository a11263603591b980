"""A git history of an engine's released sources: one commit per release, oldest first, tagged.

    scripts/engine-history DEST VERSION... [--engine vllm|flashinfer] [--sdists DIR]

asv measures the commits of a git repository (``repo``); an engine's own repository is large and
its tags are far apart in commits, so for a walk over releases this builds a small one: for each
release, the file tree of its source distribution from the package index, committed in version
order on ``main`` and tagged ``vX`` (vLLM's and FlashInfer's own tag names, so setuptools-scm
gives each vLLM commit its release's version). Nothing is built; each tree is the sdist's, whole
(``.gitignore``'d files included), less the file a build writes and plus the version file the
engine's checkout has where the sdist lacks it (``SOURCES``). The commit dates are the sdist's
``PKG-INFO`` time, so the dashboard's time axis is the releases'.

The sdists are read from ``--sdists`` (``<name>-X.tar.gz``, the name normalized as PEP 625 says)
and downloaded there when absent with ``pip download --no-deps --no-binary :all:``. pip prepares
an sdist's metadata before saving it, which runs the engine's build backend: its imports must be
importable here (``Source.metadata_needs``; scripts/engine-history installs the project's
``engine`` extra), and pip runs without build isolation (with ``--no-binary :all:`` an isolated
build compiles its build requirements from source too, and vLLM's names a CUDA torch).

Run again with more releases (newer than the last one committed) to extend the history: the
releases already tagged there are kept as they are.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from packaging.version import InvalidVersion, Version

from .argparsing import ArgumentParser

__all__ = ["SOURCES", "Release", "Source", "build_history", "download_sdist", "main"]

PROG = "engine-history"
AUTHOR = "moe-convert-bench engine-history"


@dataclass(frozen=True)
class Source:
    """How one engine's releases come from the package index into its history."""

    distribution: str  # the package on the index
    label: str  # the engine's name in commit subjects
    metadata_needs: tuple[str, ...]  # what its build backend imports to give pip the metadata
    download_env: tuple[tuple[str, str], ...]  # for that step; "{version}" filled in
    build_written: str  # the file a build writes into the tree: never committed
    version_file: str | None  # the engine's checkout holds its version there, its sdist not

    @property
    def sdist_prefix(self) -> str:
        """``<name>-`` of its sdists: the name normalized (PEP 625: ``flashinfer_python``)."""
        return re.sub(r"[-_.]+", "_", self.distribution).lower() + "-"


SOURCES = {
    # setup.py imports torch, setuptools-scm and setuptools-rust; VLLM_VERSION_OVERRIDE keeps it
    # from asking git or CUDA for the version. setuptools-scm writes vllm/_version.py at build
    # time: tracked, it turns an asv build's checkout dirty and pip refuses the wheel (its version
    # gains ``.dev0+g<hash>.d<date>``); vLLM's own checkout ignores it.
    "vllm": Source(
        distribution="vllm",
        label="vLLM",
        metadata_needs=("torch", "setuptools_scm", "setuptools_rust"),
        download_env=(("VLLM_VERSION_OVERRIDE", "{version}"), ("VLLM_TARGET_DEVICE", "empty")),
        build_written="vllm/_version.py",
        version_file=None,
    ),
    # FlashInfer's build_backend.py writes flashinfer/_build_meta.py from version.txt (its
    # checkout's; the sdist ships the written file instead), rewriting it in any git checkout:
    # without version.txt every commit would build as 0.0.0+unknown. Without
    # FLASHINFER_BUILD_NO_PIP it pip-installs NVIDIA compilers and NIXL while giving metadata,
    # and BUILD_NVEP=0 skips its expert-parallel builds (CUDA).
    "flashinfer": Source(
        distribution="flashinfer-python",
        label="FlashInfer",
        metadata_needs=("setuptools", "packaging"),
        download_env=(("FLASHINFER_BUILD_NO_PIP", "1"), ("BUILD_NVEP", "0")),
        build_written="flashinfer/_build_meta.py",
        version_file="version.txt",
    ),
}


class HistoryError(Exception):
    """One line saying what went wrong and how to fix it (printed by ``main``, exit 1)."""


@dataclass(frozen=True)
class Release:
    """One release committed into the history."""

    version: str
    commit: str  # full hash of its commit in the history
    added: bool  # committed by this run (False: tagged there already, kept)


def _git(repo: Path, *args: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
    )
    if done.returncode != 0:
        said = (done.stderr.strip() or done.stdout.strip()).splitlines()
        raise HistoryError(f"git {' '.join(args)} in {repo}: {said[-1] if said else 'failed'}")
    return done.stdout.strip()


def download_sdist(source: Source, version: str, into: Path, log=print) -> Path:
    """``into/<name>-VERSION.tar.gz``, downloaded from the package index where not there yet,
    with a line to ``log`` before and after (pip is silent meanwhile: vLLM's are some 50 MB).

    Raises ``HistoryError`` (one line) where pip cannot prepare the engine's metadata here or
    the index has no such sdist.
    """
    path = into / f"{source.sdist_prefix}{version}.tar.gz"
    if path.is_file():
        return path
    missing = [name for name in source.metadata_needs if importlib.util.find_spec(name) is None]
    if missing:
        raise HistoryError(
            f"{path.name} is not in {into}, and downloading it makes pip run "
            f"{source.label}'s build backend, which imports {', '.join(missing)}: not "
            f"importable by {sys.executable} (run scripts/engine-history, which installs them, "
            "or put the sdist there)"
        )
    into.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
    command += ["--no-build-isolation", "-d", str(into), f"{source.distribution}=={version}"]
    env = {name: value.format(version=version) for name, value in source.download_env}
    log(f"[{PROG}] {version}: downloading {path.name} (pip download) into {into}")
    start = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, **env})
    if done.returncode != 0 or not path.is_file():
        said = [line for line in done.stderr.splitlines() if "ERROR" in line] or ["no sdist saved"]
        raise HistoryError(f"pip download {source.distribution}=={version}: {said[-1].strip()}")
    size = path.stat().st_size / 1e6
    log(f"[{PROG}] {version}: {path.name}, {size:.1f} MB, in {time.monotonic() - start:.0f} s")
    return path


def _tagged(repo: Path) -> list[str]:
    """The releases committed in ``repo`` already, oldest first (its ``vX`` tags on ``main``)."""
    if not (repo / ".git").is_dir() or not _git(repo, "rev-list", "--all", "--max-count=1"):
        return []
    names = _git(repo, "tag", "--merged", "HEAD", "--list", "v*").split()
    return sorted((name[1:] for name in names), key=Version)


def _commit_tree(repo: Path, source: Source, sdist: Path, version: str) -> str:
    """Replace ``repo``'s work tree with ``sdist``'s top folder, commit it and tag ``vVERSION``."""
    with tarfile.open(sdist) as archive:
        top = f"{source.sdist_prefix}{version}"
        members = archive.getmembers()
        outside = [m.name for m in members if m.name.split("/")[0] != top]
        if outside:
            raise HistoryError(f"{sdist.name}: {outside[0]!r} is outside its folder {top}/")
        when = next((m.mtime for m in members if m.name == f"{top}/PKG-INFO"), None)
        if when is None:
            raise HistoryError(f"{sdist.name} has no {top}/PKG-INFO: not an sdist of {version}")
        for entry in repo.iterdir():
            if entry.name == ".git":
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        with tempfile.TemporaryDirectory(dir=repo.parent) as scratch:
            # The "data" filter refuses absolute paths, links out of the folder and device files.
            archive.extractall(scratch, filter="data")
            for entry in (Path(scratch) / top).iterdir():
                entry.rename(repo / entry.name)
    (repo / source.build_written).unlink(missing_ok=True)
    if source.version_file:
        (repo / source.version_file).write_text(f"{version}\n")
    _git(repo, "add", "--all", "--force", ".")
    stamp = f"@{when} +0000"
    identity = {"GIT_AUTHOR_NAME": AUTHOR, "GIT_COMMITTER_NAME": AUTHOR}
    identity |= {"GIT_AUTHOR_EMAIL": "engine-history@localhost"}
    identity |= {"GIT_COMMITTER_EMAIL": "engine-history@localhost"}
    identity |= {"GIT_AUTHOR_DATE": stamp, "GIT_COMMITTER_DATE": stamp}
    message = f"{source.label} {version}: the sdist {sdist.name} from the package index"
    _git(repo, "commit", "--quiet", "--allow-empty", "-m", message, env=identity)
    _git(repo, "tag", f"v{version}", env=identity)
    return _git(repo, "rev-parse", "HEAD")


def build_history(
    dest: Path, versions: list[str], *, engine: str = "vllm", sdists: Path, log=print
) -> list[Release]:
    """Make or extend ``dest``: a git repository, one tagged commit per release of ``versions``.

    ``engine`` names the ``SOURCES`` entry. ``versions`` are sorted (``packaging.version``);
    those tagged in ``dest`` already are kept, and the others must all be newer than its newest
    release (a history is only appended to). ``sdists`` is where the sdists are read from or
    downloaded to. ``log`` receives one progress line per release and two per download.
    Returns every release of ``versions`` with its commit.
    """
    source = SOURCES[engine]
    try:
        ordered = sorted(set(versions), key=Version)
    except InvalidVersion as error:
        raise HistoryError(f"{error}: give release numbers such as 0.24.0") from None
    done = _tagged(dest)
    new = [v for v in ordered if v not in done]
    if done and new and Version(new[0]) < Version(done[-1]):
        raise HistoryError(
            f"{dest} has releases up to {done[-1]} already; {new[0]} is older: "
            "a history is only appended to (build it again in a new folder)"
        )
    if not done:
        if dest.exists() and any(dest.iterdir()):
            raise HistoryError(
                f"{dest} is not empty and holds no release history: give a new folder"
            )
        dest.mkdir(parents=True, exist_ok=True)
        _git(dest, "init", "--quiet", "--initial-branch", "main")
    releases = []
    for version in ordered:
        if version in done:
            commit = _git(dest, "rev-parse", f"v{version}^{{commit}}")
            releases.append(Release(version, commit, added=False))
            log(f"[{PROG}] {version}: kept, {commit[:12]} (tagged there already)")
            continue
        sdist = download_sdist(source, version, sdists, log)
        commit = _commit_tree(dest, source, sdist, version)
        releases.append(Release(version, commit, added=True))
        log(f"[{PROG}] {version}: committed {commit[:12]}, tagged v{version}")
    return releases


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(
        prog=PROG,
        description="A git repository of an engine's released sources, one tagged commit per "
        "release.",
    )
    parser.add_argument("--engine", choices=sorted(SOURCES), default="vllm")
    parser.add_argument("dest", type=Path, help="the repository to make or extend")
    parser.add_argument("versions", nargs="+", metavar="VERSION", help="releases, e.g. 0.24.0")
    parser.add_argument(
        "--sdists",
        type=Path,
        help="where the sdists are read from or downloaded to (default: DEST/../sdists)",
    )
    args = parser.parse_args(argv)
    dest = args.dest.resolve()
    sdists = (args.sdists or dest.parent / "sdists").resolve()
    if sdists == dest or dest in sdists.parents:
        parser.error(f"--sdists {sdists} is inside the history {dest}: give a folder beside it")
    try:
        releases = build_history(
            dest, args.versions, engine=args.engine, sdists=sdists, log=partial(print, flush=True)
        )
    except HistoryError as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 1
    added = sum(release.added for release in releases)
    print(f"[{PROG}] {dest}: {len(releases)} releases on main ({added} added)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
