"""Publish the dashboard so that ``html_dir`` is always a whole one: the previous or the new.

The dashboard is the front page, ``html_dir/index.html`` (``report.write_front_page``: the
summary's tables and plots, each figure linked to its graph), over asv-tachyon's explorer in
``html_dir/explore/`` (``asv publish``, made offline by ``dashboard.make_offline``).
``asv publish`` first deletes its folder and then writes it file by file: a run killed in
between leaves no dashboard or half of one. ``publish`` writes a hidden folder beside
``html_dir`` (``.NAME.new-PID``), the explorer and then the front page in it, and only then
swaps it in: in one step where the filesystem can (``renameat2``'s ``RENAME_EXCHANGE``: Linux
ext4, xfs, btrfs, tmpfs), else by two renames (NFS; a kill between them leaves the previous
dashboard in ``.NAME.old-PID``). A kill before the swap leaves the previous dashboard and a
hidden folder, which the next ``publish`` removes. Results of commits not on the configured
branches, which asv's graphs leave out silently, are named first (``history.off_branch``).
An engine config's (``engine_page.engine_axis``) front page is its engine's history instead, and
its explorer names each engine commit by release, environment and subject (``write_subjects``)
and its selectors the versions the environments held (``write_environments``).

    moe-bench publish [--config asv.conf.json]   # scripts/bench and scripts/nightly
"""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import subprocess
import sys
from pathlib import Path

from .dashboard import configured_dir, explorer_link, make_offline
from .engine_page import engine_axis, write_environments, write_subjects
from .history import off_branch
from .report import write_front_page

__all__ = ["EXPLORE", "PublishError", "publish", "swap_in"]

#: The explorer's folder in ``html_dir`` (asv's output and asv-tachyon's UI).
EXPLORE = "explore"

_RENAME_EXCHANGE = 2  # linux/fs.h
_AT_FDCWD = -100
_libc = ctypes.CDLL(None, use_errno=True)


class PublishError(RuntimeError):
    """``asv publish`` failed; the message says how, and that the previous dashboard stays."""


def _exchange(a: Path, b: Path) -> None:
    """Swap the two paths in one step (``renameat2(..., RENAME_EXCHANGE)``); ``OSError`` where
    the filesystem or the C library cannot."""
    renameat2 = getattr(_libc, "renameat2", None)
    if renameat2 is None:  # glibc before 2.28, musl
        raise OSError(errno.ENOSYS, "renameat2 is not in this C library")
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE):
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), str(a))


def swap_in(new: Path, html_dir: Path) -> None:
    """Make the folder ``new`` be ``html_dir``; the previous ``html_dir`` (if any) is deleted."""
    if not html_dir.exists():
        new.rename(html_dir)
        return
    old = html_dir.with_name(f".{html_dir.name}.old-{os.getpid()}")
    try:
        _exchange(new, html_dir)
        new.rename(old)
    except OSError as error:
        if error.errno not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
            raise
        html_dir.rename(old)  # the filesystem cannot exchange: two renames
        new.rename(html_dir)
    shutil.rmtree(old)


def publish(config: Path, summary: Path | None = None) -> Path:
    """The dashboard of ``config``'s results into a fresh folder (``asv publish`` into its
    ``EXPLORE`` folder, made offline; the front page over it), swapped in as the config's
    ``html_dir``; return ``html_dir``. ``summary``: a folder for ``moe-bench summary``'s page of
    the same results too, its plots the front page's (``write_front_page``; not for an engine's
    history, whose front page is no summary: ``PublishError``). Raises ``PublishError`` if asv
    fails, ``dashboard.OfflineError`` as ``make_offline`` does and ``results.ResultsError`` as
    ``write_front_page`` does; each time the previous dashboard stays and the fresh folder goes.
    """
    html_dir = configured_dir(config, "html_dir").absolute()
    engine = engine_axis(config)  # None: the suite's own history
    if engine is not None and summary is not None:
        raise PublishError(
            f"{config} is an engine's history: its front page is the engine's, not a summary "
            "(publish it without --summary)"
        )
    for line in off_branch(config):  # asv leaves them out of the graphs without a word
        print(f"moe-bench publish: {line}", file=sys.stderr)
    for left in html_dir.parent.glob(f".{html_dir.name}.*-*"):  # of a run killed before
        shutil.rmtree(left, ignore_errors=True)
    new = html_dir.with_name(f".{html_dir.name}.new-{os.getpid()}")
    explore = new / EXPLORE
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "asv",
            "--config",
            str(config),
            "publish",
            "--html-dir",
            str(explore),
        ]
    )
    try:
        if done.returncode:
            raise PublishError(
                f"asv publish exited {done.returncode} (its output above); {html_dir} is unchanged"
            )
        make_offline(explore)
        if engine is not None:  # its selectors: the measured versions, before links are made
            write_environments(explore, engine)
        write_front_page(
            configured_dir(config, "results_dir"),
            new,
            link=explorer_link(explore, f"{EXPLORE}/", every_series=engine is not None),
            explore=f"{EXPLORE}/",
            engine=engine,
            summary=summary,
        )
        if engine is not None:  # the explorer names the engine's commits by their subjects
            write_subjects(explore, engine)
    except BaseException:
        shutil.rmtree(new, ignore_errors=True)
        raise
    swap_in(new, html_dir)
    return html_dir
