"""The command-line parser of ``moe-bench`` (``moe_bench.cli``): argparse, with each usage error
on one line, ``PROG: error: MESSAGE``, and exit status 2."""

from __future__ import annotations

import argparse
from typing import NoReturn

__all__ = ["ArgumentParser"]


class ArgumentParser(argparse.ArgumentParser):
    """argparse without the usage block before an error (``--help`` shows it): scripts/ log one
    line that says what was wrong. Raise through ``parser.error(message)`` for rules of your own.
    No abbreviations: ``--budget`` is not taken for ``--budgets``, so a flag has one spelling and
    a mistyped one is an error, not whichever flag it happens to begin."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")
