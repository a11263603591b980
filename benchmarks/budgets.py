"""budgets.json's derived limits: an entry that names a ``formula`` has its limit computed from it.

A budget's ``formula`` is text in the legend of ``moe_convert.formulas`` (``T13 + T2``,
``max(S13, S2, 10 MiB)``), evaluated on the entry's full-size shape (``model/tpN`` of any
format's catalog, ``moe_convert.formats.catalog.shape_from_label``: ``qwen3-235b-a22b/tp4``,
``kimi-k2-nvfp4/tp8``); its ``max`` (or ``min``) is that number. The gate (``moe_bench.gate``)
reads only the number and never imports ``moe_convert``; this module keeps the number equal to
the formula, and tests/test_budgets.py fails when it is not. Entries without a formula
(whole-model seconds on GB200: measured, not derived) are left as they are.

Usage: ``python -m benchmarks.budgets [--write] [--budgets budgets.json]``. Without ``--write``:
exit 0 when every derived limit is current, 1 naming those that are not. With it: rewrite them.
Exit 2 when the file cannot be read or a formula or shape is not valid.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from moe_convert.formats.catalog import shape_from_label
from moe_convert.formulas import Formula

__all__ = ["derived_limit", "stale_entries", "update"]

#: The limit keys a budget entry may hold (moe_bench.gate.DIRECTIONS).
_DIRECTIONS = ("max", "min")


def derived_limit(entry: dict) -> int:
    """The limit ``entry["formula"]`` gives on ``entry["shape"]`` at full size.

    Raises ``ValueError`` naming the entry for a formula outside the legend or an unknown shape.
    """
    try:
        return Formula(entry["formula"]).evaluate(shape_from_label(entry["shape"]))
    except ValueError as error:
        where = f"{entry.get('shape')} {entry.get('strategy') or ''}".strip()
        raise ValueError(f"budget {where}: {error}") from None


def stale_entries(document: dict) -> list[str]:
    """One line per entry whose limit is not its formula's figure: what it holds, what it should."""
    stale = []
    for i, entry in enumerate(document["budgets"]):
        if "formula" not in entry:
            continue
        want = derived_limit(entry)
        for direction in (d for d in _DIRECTIONS if d in entry and entry[d] != want):
            stale.append(
                f"budget #{i} ({entry['shape']} {entry.get('strategy') or ''}, "
                f"{entry['formula']}): {direction} is {entry[direction]}, "
                f"the formula gives {want}"
            )
    return stale


def update(document: dict) -> dict:
    """``document`` with every formula's limit set to its figure (a new dict; the order kept)."""
    budgets = []
    for entry in document["budgets"]:
        if "formula" in entry:
            want = derived_limit(entry)
            entry = {key: (want if key in _DIRECTIONS else value) for key, value in entry.items()}
        budgets.append(entry)
    return {**document, "budgets": budgets}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.budgets",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--budgets", default="budgets.json", help="budgets file (default budgets.json)"
    )
    parser.add_argument("--write", action="store_true", help="rewrite the derived limits")
    args = parser.parse_args(argv)
    path = Path(args.budgets)
    try:
        document = json.loads(path.read_text())
        stale = stale_entries(document)
    except (OSError, json.JSONDecodeError, KeyError, TypeError, ValueError) as error:
        print(f"budgets: error: {path}: {error}", file=sys.stderr)
        return 2
    if args.write:
        if stale:
            path.write_text(json.dumps(update(document), indent=1) + "\n")
        print(f"budgets: {path}: {len(stale)} limit(s) rewritten from their formulas")
        return 0
    for line in stale:
        print(f"budgets: {path}: {line}", file=sys.stderr)
    if stale:
        print("budgets: run `python -m benchmarks.budgets --write` to derive them", file=sys.stderr)
        return 1
    print(f"budgets: {path}: every derived limit is its formula's figure")
    return 0


if __name__ == "__main__":
    sys.exit(main())
