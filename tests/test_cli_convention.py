"""One command-line convention (docs/cli.md, "One convention") across ``python -m moe_convert``
and ``moe-bench``: every subcommand and every flag of both is in docs/cli.md, and a flag that
both, or several subcommands, take means the same thing in each."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from moe_bench.cli import build_parser as bench_parser
from moe_convert.cli.commands import build_parser as convert_parser
from moe_convert.formats.records import FORMATS

DOC = (Path(__file__).resolve().parents[1] / "docs" / "cli.md").read_text()


def _subcommands(parser: argparse.ArgumentParser, prefix: str = "") -> dict[str, argparse.Action]:
    """``NAME`` -> the subparser, for every subcommand (nested ones as ``dashboard serve``)."""
    found = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                full = f"{prefix}{name}"
                found[full] = child
                found.update(_subcommands(child, f"{full} "))
    return found


CONVERT = _subcommands(convert_parser())
BENCH = _subcommands(bench_parser())
EVERY = [("moe_convert", n, p) for n, p in CONVERT.items()] + [
    ("moe-bench", n, p) for n, p in BENCH.items()
]


def _options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {
        option: action
        for action in parser._actions
        for option in action.option_strings
        if option.startswith("--") and option != "--help"
    }


@pytest.mark.parametrize(("cli", "name", "parser"), EVERY, ids=[f"{c} {n}" for c, n, _ in EVERY])
def test_every_subcommand_and_its_flags_are_in_docs_cli_md(cli, name, parser):
    # a subcommand's row (or sentence) starts with its name in backquotes
    assert re.search(rf"`{re.escape(name)}\b", DOC), f"{cli} {name} is not in docs/cli.md"
    for option in _options(parser):
        assert re.search(rf"{re.escape(option)}\b", DOC), f"{cli} {name} {option}: not in cli.md"


def test_both_commands_have_every_subcommand_the_docs_list():
    assert {"shapes", "strategies", "verify", "measure", "replay", "engines"} <= set(CONVERT)
    assert {"compare", "export", "gate", "summary", "engine-pr", "dashboard serve"} <= set(BENCH)


def _everywhere(option: str) -> list[tuple[str, argparse.Action]]:
    return [
        (f"{cli} {name}", _options(parser)[option])
        for cli, name, parser in EVERY
        if option in _options(parser)
    ]


def test_the_results_folder_is_always_the_results_flag():
    takers = dict(_everywhere("--results"))
    assert {"moe-bench summary", "moe-bench gate", "moe-bench compare", "moe-bench export"} <= set(
        takers
    )
    # the same default: asv.conf.json's results_dir (export: --config's, else that one)
    assert {action.default for action in takers.values()} <= {"results", None}
    for cli, name, parser in EVERY:  # and never a positional
        dests = {a.dest for a in parser._actions if not a.option_strings}
        assert not dests & {"results", "results_dir"}, f"{cli} {name}"


def test_config_is_always_an_asv_config_file():
    for where, action in _everywhere("--config"):
        assert where.startswith("moe-bench") and action.type is Path, where
        assert action.default in (Path("asv.conf.json"), None), where
    for cli, name, parser in EVERY:
        positionals = {a.dest for a in parser._actions if not a.option_strings}
        assert "config" not in positionals, f"{cli} {name}"


def test_markdown_is_always_a_switch():
    takers = _everywhere("--markdown")
    assert takers
    for where, action in takers:
        assert action.nargs == 0, f"{where}: --markdown takes no value (a file is --out)"


def test_format_is_always_a_weight_format():
    takers = _everywhere("--format")
    assert {w for w, _ in takers} == {
        "moe_convert verify",
        "moe_convert measure",
        "moe_convert replay",
        "moe_convert simulate",
        "moe_convert refit",
    }
    for where, action in takers:
        for name in FORMATS:
            assert action.type(name) == name, where
