"""What an engine commit's asv environment gets beside the engine, and the record of it.

An engine config's ``install_command`` (``moe_bench.engine.engine_config``) runs this module in
the asv environment once per engine commit, after this suite's wheel and the engine's::

    python -m moe_bench.engine_env BUILD_DIR COMMIT --record RESULTS_DIR \
        [--pins requirements/cuda.txt] [--flashinfer VERSION]

It installs flashinfer-python (``--no-deps``): the release ``--flashinfer`` names, else the one
the commit pins (the ``flashinfer-python==X`` line of its ``--pins`` file, as vLLM's
``requirements/cuda.txt`` has it), else the newest; nothing where the environment already has
it (an earlier commit's install: no pip run, no index query; unpinned, any release). A release
the package index lacks (vLLM 0.34.0 pins 0.7.3; the index has 0.7.2.post1, then 0.7.4) gives
way to the nearest one it has (``nearest``), with one warning line: the engine still gets its
environment. The version installed is recorded beside the results (``MEASURED``), which the
nightly reads to repeat the warning (asv shows an install step's output only when it fails) and
the export to fill in its ``dependencies``.

Only the standard library and ``packaging`` (the engine's requirements have it): this runs in the
engine's environment, where asv is not installed.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections.abc import Iterable
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

__all__ = [
    "FLASHINFER",
    "KEY",
    "MEASURED",
    "main",
    "nearest",
    "read_measured",
    "read_pin",
    "record",
    "substitution",
]

#: Beside an engine config's results (``<results_dir>/measured-by.jsonl``): what measured each
#: engine commit, one JSON object a line, ``{"commit": ..., KEY: VALUE}``, a later line's keys
#: over an earlier one's: ``suite`` (this suite's commit; ``-dirty`` where its checkout had
#: changes), ``flashinfer`` (the flashinfer-python installed) and ``flashinfer_pinned`` (what
#: the commit or ``--flashinfer`` asked for; "" where nothing was pinned). JSON Lines, not
#: ``.json``: asv reads every ``*.json`` under the results folder as a result, and warns at each
#: of a publish's three passes that the folder has no machine.json; and two writers append to
#: it (the install step in asv's environment, the nightly after the run).
MEASURED = "measured-by.jsonl"
#: The distribution this module installs; ``KEY``, its name in the record, is its key in the
#: export's ``dependencies`` (``moe_bench.export.DEPENDENCIES``) and in machine.json.
FLASHINFER = "flashinfer-python"
KEY = "flashinfer"


def record(results_dir: str | Path, commit: str, **facts: str) -> None:
    """Append ``facts`` of ``commit`` to ``results_dir``'s ``MEASURED`` (one ``write`` of one
    short line in append mode: two writers at once do not interleave)."""
    path = Path(results_dir) / MEASURED
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps({"commit": commit, **facts}, sort_keys=True) + "\n"
    with path.open("a") as out:
        out.write(line)


def read_measured(results_dir: str | Path) -> dict[str, dict[str, str]]:
    """``MEASURED`` of ``results_dir``: engine commit -> its facts, merged in line order ({}
    where there is no such file)."""
    path = Path(results_dir) / MEASURED
    if not path.is_file():
        return {}
    merged: dict[str, dict[str, str]] = {}
    for line in path.read_text().splitlines():
        if line.strip():
            facts = json.loads(line)
            merged.setdefault(facts.pop("commit"), {}).update(facts)
    return merged


def read_pin(path: Path, distribution: str) -> str | None:
    """The version ``path`` (a pip requirements file) pins ``distribution`` to with ``==``;
    None where the file is absent or pins it otherwise or not at all."""
    if not path.is_file():
        return None
    for line in path.read_text().splitlines():
        text = line.split("#", 1)[0].strip()
        if not text or text.startswith("-"):
            continue
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            continue
        if canonicalize_name(requirement.name) != canonicalize_name(distribution):
            continue
        specs = list(requirement.specifier)
        if len(specs) == 1 and specs[0].operator == "==" and "*" not in specs[0].version:
            return specs[0].version
        return None
    return None


def nearest(wanted: str, available: Iterable[str]) -> str:
    """``wanted`` where ``available`` (releases on the index) has it, else the oldest newer
    release (it carries the pinned one's changes: what the engine was written against, as far
    as the index allows), else the newest older one. ``ValueError`` where ``available`` is
    empty."""
    releases = sorted({Version(v): v for v in available}.items())
    if not releases:
        raise ValueError(f"no release on the package index to stand in for {wanted}")
    target = Version(wanted)
    for release, text in releases:
        if release >= target:
            return text
    return releases[-1][1]


def substitution(facts: dict[str, str]) -> str | None:
    """The one warning line where the flashinfer-python installed is not the one pinned
    (``facts``: one commit's ``read_measured``); None where it is, or nothing was pinned."""
    pinned, used = facts.get(f"{KEY}_pinned", ""), facts.get(KEY, "")
    if not pinned or not used or Version(pinned) == Version(used):
        return None
    return (
        f"{FLASHINFER}=={pinned} is not on the package index: {used}, the nearest release "
        "there, installed instead"
    )


def _available(distribution: str) -> list[str]:
    """The releases of ``distribution`` the package index offers this interpreter (``pip index
    versions``: pip's own index settings; no pre-releases)."""
    done = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", distribution],
        capture_output=True,
        text=True,
    )
    listed = re.search(r"^Available versions: (.*)$", done.stdout, re.MULTILINE)
    return [v.strip() for v in listed.group(1).split(",")] if listed else []


def _installed(distribution: str) -> str | None:
    """The version of ``distribution`` installed here; None where it is not."""
    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


def _requirement(pinned: str | None, installed: str | None) -> str | None:
    """What pip installs for a commit that pins ``pinned`` (None or "": nothing) where
    ``installed`` is there: None where it is what the commit asks for (an earlier commit's
    install kept: no pip run, no index query, which took 19 s on PyPI for vLLM 0.34.0's tree,
    docs/engines.md; unpinned, pip keeps any installed release too); else the pinned release or
    the nearest the index has (``nearest``: ``ValueError`` where it lists none); else, with no
    pin, the newest."""
    if installed is not None and (not pinned or Version(pinned) == Version(installed)):
        return None
    if not pinned:
        return FLASHINFER
    return f"{FLASHINFER}=={nearest(pinned, _available(FLASHINFER))}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m moe_bench.engine_env",
        description="Install the flashinfer-python an engine commit pins (or the nearest "
        "release the index has) and record it beside the results.",
    )
    parser.add_argument("build_dir", type=Path, help="the engine commit's checkout")
    parser.add_argument("commit", help="the engine commit")
    parser.add_argument("--record", type=Path, required=True, help="the config's results_dir")
    parser.add_argument("--pins", default=None, help="the file of the tree that pins FlashInfer")
    parser.add_argument("--flashinfer", default="", help="this release at every commit")
    args = parser.parse_args(argv)
    pinned = args.flashinfer or (args.pins and read_pin(args.build_dir / args.pins, FLASHINFER))
    try:
        requirement = _requirement(pinned, _installed(FLASHINFER))
    except ValueError as err:  # the index lists no release
        print(f"engine_env: {err} (pip index versions {FLASHINFER})", file=sys.stderr)
        return 1
    if requirement is not None:
        command = [sys.executable, "-m", "pip", "install", "--no-deps", "-q", requirement]
        done = subprocess.run(command)
        if done.returncode != 0:
            return done.returncode
    # torch too: what the environment held beside the engine, shown on its dashboard
    facts = {KEY: version(FLASHINFER), f"{KEY}_pinned": pinned or "", "torch": version("torch")}
    record(args.record, args.commit, **facts)
    warning = substitution(facts)
    if warning:
        print(f"warning: {args.commit[:8]}: {warning}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
