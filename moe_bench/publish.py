"""Publish the dashboard so that ``html_dir`` is always a whole one: the previous or the new.

``asv publish`` first deletes ``html_dir`` and then writes it file by file: a run killed in
between leaves no dashboard or half of one. ``publish`` has asv write a hidden folder beside
``html_dir`` (``.NAME.new-PID``), makes it work offline (``dashboard.make_offline``), and only then
swaps it in: in one step where the filesystem can (``renameat2``'s ``RENAME_EXCHANGE``: Linux
ext4, xfs, btrfs, tmpfs), else by two renames (NFS; a kill between them leaves the previous
dashboard in ``.NAME.old-PID``). A kill before the swap leaves the previous dashboard and a
hidden folder, which the next ``publish`` removes. Results of commits not on the configured
branches, which asv's graphs leave out silently, are named first (``history.off_branch``).

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

from .dashboard import configured_html_dir, make_offline
from .history import off_branch

__all__ = ["PublishError", "publish", "swap_in"]

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


def publish(config: Path) -> Path:
    """``asv publish`` under ``config`` into a fresh folder, made offline, swapped in as the
    config's ``html_dir``; return ``html_dir``. Raises ``PublishError`` if asv fails (the
    previous dashboard stays) and ``dashboard.OfflineError`` as ``make_offline`` does."""
    html_dir = Path(configured_html_dir(config)).absolute()
    for line in off_branch(config):  # asv leaves them out of the graphs without a word
        print(f"moe-bench publish: {line}", file=sys.stderr)
    for left in html_dir.parent.glob(f".{html_dir.name}.*-*"):  # of a run killed before
        shutil.rmtree(left, ignore_errors=True)
    new = html_dir.with_name(f".{html_dir.name}.new-{os.getpid()}")
    done = subprocess.run(
        [sys.executable, "-m", "asv", "--config", str(config), "publish", "--html-dir", str(new)]
    )
    if done.returncode:
        shutil.rmtree(new, ignore_errors=True)
        raise PublishError(
            f"asv publish exited {done.returncode} (its output above); {html_dir} is unchanged"
        )
    make_offline(new)
    swap_in(new, html_dir)
    return html_dir
