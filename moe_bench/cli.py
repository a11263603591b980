"""``moe-bench``: the one command of the tooling around the asv suite; scripts/ call it.

    moe-bench machine [--profile P] [--name NAME] [--shell]    record this machine for asv
    moe-bench new-commits MACHINE [--config asv.conf.json]     commits to measure next there
    moe-bench measurable REVISION... [--config asv.conf.json]  can the suite measure them?
    moe-bench summary [--results DIR] [--out DIR]              summary.md and plots
    moe-bench compare RESULTS_DIR BASE HEAD [--paired FILE] [--markdown FILE]   the PR verdict
    moe-bench gate [--results DIR] [--budgets FILE] [--machine NAME] [--commit HASH]   budgets
    moe-bench export RESULTS_DIR --out FILE [--format pytorch-v3] [--machine NAME] [--commit HASH]
    moe-bench publish [--config asv.conf.json]                 the dashboard, whole or not at all
    moe-bench dashboard offline HTML_DIR | serve [HTML_DIR] [--port N] [--config FILE]

Each subcommand is a ``cmd_NAME(args) -> int`` over the library functions of its module, which
is imported only when the subcommand runs (``gate`` needs no torch, ``machine`` no pandas). A
usage error is one line, ``moe-bench NAME: error: MESSAGE``, exit 2 (``argparsing``); so are
missing or corrupt results, budgets and paired files. ``python -m moe_bench`` is the same command,
for a checkout on ``PYTHONPATH`` without the console script (scripts/gpu-check).
"""

from __future__ import annotations

import argparse
import errno
import re
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from .argparsing import ArgumentParser
from .profiles import PROFILES

__all__ = ["main"]

PROG = "moe-bench"


def _error(args: argparse.Namespace, message: object) -> int:
    """Print ``moe-bench NAME: error: MESSAGE`` on stderr; return exit status 2."""
    print(f"{PROG} {args.command}: error: {message}", file=sys.stderr)
    return 2


def _machine_name(text: str) -> str:
    """A machine name: asv makes it a folder, ``results/<name>/``."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", text):
        raise argparse.ArgumentTypeError(
            f"{text!r}: a machine name is a folder name of letters, digits, '.', '_' and '-', "
            "not starting with '.', '_' or '-' (e.g. h200, cpu-2core-xeon)"
        )
    return text


def _port(text: str) -> int:
    if not text.isdigit() or int(text) > 65535:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a TCP port: give 0 (a free one) to 65535"
        )
    return int(text)


def cmd_machine(args: argparse.Namespace) -> int:
    from . import machine
    from .profiles import detect_device, profile_from_env

    device = detect_device()
    try:
        profile = args.profile or profile_from_env(device)
    except ValueError as err:  # MOE_BENCH_PROFILE names no profile
        args.parser.error(str(err))
    name = machine.record_machine(profile, args.name)
    if args.shell:  # names and profiles are [A-Za-z0-9._-]: nothing to quote
        print(f"machine={name}\ndevice={device}\nprofile={profile}")
    else:
        print(name)
    return 0


def cmd_new_commits(args: argparse.Namespace) -> int:
    from .results import new_commits

    print(*new_commits(args.config, args.machine), sep="\n")
    return 0


def cmd_measurable(args: argparse.Namespace) -> int:
    from .results import ResultsError, unmeasurable

    try:
        older = unmeasurable(args.config, args.revisions)
    except ResultsError as err:
        return _error(args, err)
    if older:
        return _error(
            args,
            f"{', '.join(older)}: older than the oldest commit this suite can measure "
            f"(oldest_commit in {args.config}); compare commits at or after it "
            "(docs/benchmarks.md)",
        )
    return 0


def cmd_summary(args: argparse.Namespace) -> int:
    from .report import write_summary
    from .results import ResultsError

    try:
        print(write_summary(args.results, args.out))
    except ResultsError as err:
        return _error(args, err)
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from .compare import PairedError, commit_hash, compare_commits, gate_failed, load_paired
    from .report import comment_markdown
    from .results import ResultsError, load_results

    try:
        frame = load_results(args.results_dir)
        base, head = commit_hash(frame, args.base), commit_hash(frame, args.head)
    except ResultsError as err:
        return _error(args, f"{args.results_dir}: {err}")
    threshold, paired = None, None
    if args.paired is not None:
        try:
            threshold, paired = load_paired(args.paired, base, head)
        except PairedError as err:
            return _error(args, err)
    table = compare_commits(frame, base, head, paired)
    report = comment_markdown(table, base, head, paired_threshold=threshold)
    if args.markdown is not None:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(report)
    print(report)
    return 1 if gate_failed(table) else 0


def cmd_gate(args: argparse.Namespace) -> int:
    import pandas as pd

    from .gate import (
        ERRORS,
        BudgetError,
        check_budgets,
        failed_benchmarks,
        load_budgets,
        verdict_table,
    )
    from .results import ResultsError, load_results

    try:
        budgets = load_budgets(args.budgets)
        frame = load_results(args.results, machine=args.machine)
    except (BudgetError, ResultsError) as err:
        return _error(args, err)
    verdicts = check_budgets(frame, budgets, commit=args.commit)
    if not verdicts:
        return _error(
            args,
            f"no budget in {args.budgets} applies to the results in {args.results} "
            f"(machines: {', '.join(sorted(frame['machine'].unique()))})",
        )
    table = verdict_table(verdicts)
    bad = table[table["status"] != "ok"]
    with pd.option_context("display.width", 200, "display.max_rows", None):
        print((bad if len(bad) else table).to_string(index=False))
    errors = bad["status"].isin(ERRORS)
    if errors.any():
        return _error(args, f"{errors.sum()} budgeted results failed, missing or n/a (see table)")
    failed = failed_benchmarks(frame, args.commit)
    if failed:
        return _error(
            args,
            f"{len(failed)} benchmark(s) failed in the results checked: "
            + "; ".join(failed[:5])
            + ("; ..." if len(failed) > 5 else "")
            + " (see the asv log)",
        )
    if len(bad):
        print(f"gate: {len(bad)} over budget", file=sys.stderr)
        return 1
    print(f"gate: all {len(table)} checked results within budget")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from .export import write_records
    from .results import ResultsError, load_results

    try:
        frame = load_results(args.results_dir, machine=args.machine)
        count, commits = write_records(
            args.results_dir, frame, args.out, machine=args.machine, commit=args.commit
        )
    except ResultsError as err:
        return _error(args, err)
    print(
        f"{count} {args.format} records of commit {', '.join(c[:8] for c in commits)} in {args.out}"
    )
    return 0


def cmd_publish(args: argparse.Namespace) -> int:
    from .dashboard import OfflineError
    from .publish import PublishError, publish
    from .results import ResultsError

    try:
        html_dir = publish(args.config)
    except (PublishError, OfflineError, ResultsError) as error:
        return _error(args, error)
    print(f"dashboard published: {html_dir / 'index.html'} (works offline)")
    return 0


def cmd_dashboard(args: argparse.Namespace) -> int:
    from . import dashboard

    html_dir = args.html_dir
    if html_dir is None:
        try:
            html_dir = dashboard.configured_dir(args.config, "html_dir")
        except FileNotFoundError:
            args.parser.error(
                f"argument --config: no such file: {str(args.config)!r} (run from "
                "the repository root, or give --config PATH or the html_dir)"
            )
        except ValueError as error:  # asv's JSON reader
            args.parser.error(f"argument --config: {str(args.config)!r} is not valid JSON: {error}")
    if args.action == "offline":
        try:
            dashboard.make_offline(html_dir)
        except dashboard.OfflineError as error:
            args.parser.error(str(error))
        print(f"dashboard in {html_dir} works offline")
        return 0
    try:
        dashboard.check_published(html_dir)
    except FileNotFoundError as error:
        args.parser.error(str(error))
    try:
        server, url = dashboard.serve(html_dir, args.port)
    except OSError as error:
        if error.errno not in (errno.EADDRINUSE, errno.EACCES):
            raise
        args.parser.error(
            f"argument --port: cannot serve on 127.0.0.1:{args.port}: {error.strerror}"
        )
    print(f"dashboard of {html_dir} at {url}  (Ctrl-C stops)", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        server.shutdown()
    return 0


def _add(
    sub, name: str, handler: Callable[[argparse.Namespace], int], help: str, **kwargs
) -> ArgumentParser:
    parser = sub.add_parser(name, help=help, description=help, **kwargs)
    parser.set_defaults(handler=handler, parser=parser)
    return parser


def build_parser() -> ArgumentParser:
    """The ``moe-bench`` parser: one subparser per subcommand, each with its ``handler``."""
    parser = ArgumentParser(
        prog=PROG,
        description="The tooling around the asv suite: record the "
        "machine, summarise, judge a PR, check budgets, serve the dashboard.",
        epilog="docs/cli.md lists the subcommands and their exit statuses",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    machine = _add(
        sub,
        "machine",
        cmd_machine,
        "record this machine for asv (~/.asv-machine.json) and print its name",
    )
    machine.add_argument(
        "--profile",
        choices=PROFILES,
        default=None,
        help="the benchmark profile this machine runs (default: "
        "$MOE_BENCH_PROFILE, else full on CUDA and cpu elsewhere)",
    )
    machine.add_argument(
        "--name", type=_machine_name, default=None, help="machine name (default: derived)"
    )
    machine.add_argument(
        "--shell",
        action="store_true",
        help="print machine=NAME, device=cuda|cpu and profile=P lines (for eval)",
    )

    commits = _add(
        sub,
        "new-commits",
        cmd_new_commits,
        "print the commits of the configured "
        "branches not yet measured on MACHINE, newest first (HEAD without history)",
    )
    commits.add_argument("machine")
    commits.add_argument("--config", type=Path, default=Path("asv.conf.json"))

    measurable = _add(
        sub,
        "measurable",
        cmd_measurable,
        "exit 0 when the suite can measure every REVISION, else 2 naming those older than the "
        "config's oldest_commit",
    )
    measurable.add_argument("revisions", nargs="+", metavar="REVISION")
    measurable.add_argument("--config", type=Path, default=Path("asv.conf.json"))

    summary = _add(
        sub,
        "summary",
        cmd_summary,
        "write summary.md and plots of the latest results; print its path",
    )
    summary.add_argument("--results", default="results", help="asv results_dir (default results)")
    summary.add_argument(
        "--out", default="artifacts/summary", help="folder to write (default artifacts/summary)"
    )

    compare = _add(
        sub,
        "compare",
        cmd_compare,
        "the PR verdict of HEAD against BASE: exit 0 "
        "nothing fails, 1 a regression or failure, 2 missing or corrupt results",
    )
    compare.add_argument("results_dir")
    compare.add_argument("base")
    compare.add_argument("head")
    compare.add_argument(
        "--paired",
        type=Path,
        default=None,
        help="the paired A/B result (benchmarks.paired): it decides time figures",
    )
    compare.add_argument("--markdown", type=Path, default=None, help="write the PR comment here")

    gate = _add(
        sub,
        "gate",
        cmd_gate,
        "check budgets.json against the latest results: exit 0 "
        "within budget, 1 over, 2 malformed, missing, failed or n/a",
    )
    gate.add_argument("--results", default="results", help="asv results_dir (default results)")
    gate.add_argument("--budgets", default="budgets.json", help="budgets file")
    gate.add_argument("--machine", default=None, help="check only this machine's results")
    gate.add_argument("--commit", default=None, help="check this commit (default: latest)")

    export = _add(
        sub,
        "export",
        cmd_export,
        "write the figures of a commit as records of the PyTorch OSS benchmark database (v3: "
        "what the PyTorch HUD reads), one JSON list (docs/ecosystem.md)",
    )
    export.add_argument("results_dir")
    export.add_argument("--out", type=Path, required=True, help="the .json file to write")
    export.add_argument(
        "--format", choices=["pytorch-v3"], default="pytorch-v3", help="the record schema"
    )
    export.add_argument("--machine", default=None, help="export only this machine's results")
    export.add_argument("--commit", default=None, help="export this commit (default: latest)")
    publish = _add(
        sub,
        "publish",
        cmd_publish,
        "the front page (index.html: the summary's tables, plots) and the explorer (asv publish, "
        "made offline, in explore/) into a fresh folder, then swapped in as html_dir: html_dir "
        "is the previous dashboard or the new one, never half",
    )
    publish.add_argument("--config", type=Path, default=Path("asv.conf.json"))

    dashboard = _add(sub, "dashboard", cmd_dashboard, "the asv dashboard, offline, on 127.0.0.1")
    actions = dashboard.add_subparsers(dest="action", required=True, metavar="ACTION")
    offline = actions.add_parser(
        "offline", help="make a folder `asv publish` wrote work without internet"
    )
    offline.add_argument("html_dir", type=Path)
    offline.set_defaults(parser=offline)
    serve = actions.add_parser(
        "serve", help="serve what `moe-bench publish` wrote on 127.0.0.1 until Ctrl-C"
    )
    serve.add_argument("html_dir", type=Path, nargs="?", help="default: html_dir of --config")
    serve.add_argument("--config", type=Path, default=Path("asv.conf.json"))
    serve.add_argument("--port", type=_port, default=8080, help="0 picks a free port")
    serve.set_defaults(parser=serve)
    return parser


def main(argv: list[str] | None = None) -> int:
    args, unknown = build_parser().parse_known_args(argv)
    if unknown:  # named by the subcommand's parser, not the top one's
        args.parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    return args.handler(args)
