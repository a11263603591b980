"""The asv arguments a script passes on (``scripts/bench``, ``scripts/nightly``: ``asv run``;
``scripts/compare``: ``asv continuous``), checked by asv's own parser before any work.

    python -m moe_bench.asv_args PROG COMMAND [ARG...] -- REVISION...

exits 0 when ``asv COMMAND ARG... REVISION...`` parses, else prints one line,
``PROG: error: asv COMMAND: MESSAGE``, and exits 2. Without it a mistyped option reached asv
only after the machine was recorded, and asv's usage block and exit status 2 read as a failed
benchmark: ``scripts/compare`` then timed both commits paired for minutes before failing.
``-h``/``--help`` is refused as well (asv would print its help and exit 0, and the script go on).
"""

from __future__ import annotations

import re
import sys
from typing import NoReturn

__all__ = ["asv_usage_error", "main"]


class _Refused(Exception):
    pass


def _refuse(message: str) -> NoReturn:
    raise _Refused(message)


def asv_usage_error(command: str, args: list[str], revisions: list[str]) -> str | None:
    """Why ``asv COMMAND ARGS REVISIONS`` does not parse (asv's own message), or None."""
    from asv.commands import make_argparser

    if any(arg in ("-h", "--help") for arg in args):
        return f"-h/--help: see `asv {command} --help` for the arguments passed on"
    parser, subparsers = make_argparser()
    if command not in subparsers.choices:
        return f"no such asv command {command!r}"
    for each in (parser, *subparsers.choices.values()):
        each.error = _refuse  # one message, no usage block, no exit
    try:
        # "--": an option that wants a value never takes a revision for it (`-b` alone)
        parsed = parser.parse_args([command, *args, "--", *revisions])
    except _Refused as refused:
        return str(refused)
    for regex in getattr(parsed, "bench", None) or []:  # asv would fail on it with a traceback
        try:
            re.compile(regex)
        except re.error as error:
            return f"argument --bench/-b: {regex!r} is not a regular expression ({error})"
    return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 2 or "--" not in argv[2:]:
        print(
            "python -m moe_bench.asv_args: error: usage: PROG COMMAND [ARG...] -- REVISION...",
            file=sys.stderr,
        )
        return 2
    prog, command, rest = argv[0], argv[1], argv[2:]
    split = len(rest) - 1 - rest[::-1].index("--")  # the last "--": ARGs may hold one of asv's
    error = asv_usage_error(command, rest[:split], rest[split + 1 :])
    if error is not None:
        print(f"{prog}: error: asv {command}: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
