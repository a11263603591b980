"""``moe-bench``: the one command of the tooling around the asv suite; scripts/ call it.

    moe-bench machine [--profile P] [--name NAME] [--shell]    record this machine for asv
    moe-bench new-commits MACHINE [--config FILE]              commits to measure next there
    moe-bench measurable REVISION... [--config FILE]           can the suite measure them?
    moe-bench summary [--results DIR] [--out DIR]              summary.md and plots
    moe-bench compare BASE HEAD [--results DIR] [--paired FILE] [--out FILE]   the PR verdict
    moe-bench gate [--results DIR] [--budgets FILE] [--machine NAME] [--commit HASH]   budgets
    moe-bench export --out FILE [--results DIR] [--config FILE] [--schema pytorch-v3]
                     [--machine NAME] [--commit HASH]          records for the PyTorch HUD
    moe-bench publish [--config FILE] [--summary DIR]          the dashboard, whole or not at all
    moe-bench dashboard offline HTML_DIR | serve [HTML_DIR] [--port N] [--config FILE]
    moe-bench engine-config --engine vllm|flashinfer --repo PATH_OR_URL [--out FILE]   an engine
    moe-bench engine-nightly --config FILE [--limit N] [--verbose]   the engine's newest commits
    moe-bench engine-pr --config FILE BASE HEAD [--out DIR]    an engine PR against its merge base
    moe-bench engine-find --config FILE GOOD BAD FIGURE [--shape S] [--strategy S]   first bad one

One convention for every subcommand (docs/cli.md, "One convention"): ``--results DIR`` the asv
results folder (default ``results``, asv.conf.json's results_dir; export: ``--config``'s),
``--config FILE`` an asv config file (default asv.conf.json; an engine config where the engine
commands need one), ``--out PATH`` what the subcommand writes, ``--machine NAME`` an asv machine.

Each subcommand is a ``cmd_NAME(args) -> int`` over the library functions of its module, which
is imported only when the subcommand runs (``summary``, ``gate``, ``compare`` and ``publish``
need no torch, ``machine`` no pandas). A
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

from moe_suite.profiles import PROFILES

from .argparsing import ArgumentParser

__all__ = ["main"]

PROG = "moe-bench"


def _error(args: argparse.Namespace, message: object) -> int:
    """Print ``moe-bench NAME: error: MESSAGE`` on stderr; return exit status 2."""
    print(f"{PROG} {args.command}: error: {message}", file=sys.stderr)
    return 2


#: ``--results``'s default: asv.conf.json's results_dir.
DEFAULT_RESULTS = "results"
#: ``--config``'s default: this suite's asv config.
DEFAULT_CONFIG = Path("asv.conf.json")


def _add_results(parser: argparse.ArgumentParser, default: str | None = DEFAULT_RESULTS) -> None:
    parser.add_argument(
        "--results",
        default=default,
        metavar="DIR",
        help="the asv results folder (default: "
        + (f"{default}, asv.conf.json's results_dir)" if default else "--config's results_dir)"),
    )


def _add_config(parser: argparse.ArgumentParser, **kwargs) -> None:
    kwargs.setdefault("default", DEFAULT_CONFIG)
    kwargs.setdefault("help", f"the asv config file (default {DEFAULT_CONFIG})")
    parser.add_argument("--config", type=Path, metavar="FILE", **kwargs)


def _machine_name(text: str) -> str:
    """A machine name: asv makes it a folder, ``results/<name>/``."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", text):
        raise argparse.ArgumentTypeError(
            f"{text!r}: a machine name is a folder name of letters, digits, '.', '_' and '-', "
            "not starting with '.', '_' or '-' (e.g. h200, cpu-2core-xeon)"
        )
    return text


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer >= 1")
    return int(text)


def _port(text: str) -> int:
    if not text.isdigit() or int(text) > 65535:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a TCP port: give 0 (a free one) to 65535"
        )
    return int(text)


def cmd_machine(args: argparse.Namespace) -> int:
    from moe_suite.profiles import detect_device, profile_from_env

    from . import machine

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
        frame = load_results(args.results)
        base, head = commit_hash(frame, args.base), commit_hash(frame, args.head)
    except ResultsError as err:
        return _error(args, f"{args.results}: {err}")
    threshold, paired = None, None
    if args.paired is not None:
        try:
            threshold, paired = load_paired(args.paired, base, head)
        except PairedError as err:
            return _error(args, err)
    table = compare_commits(frame, base, head, paired, bench=args.bench)
    report = comment_markdown(table, base, head, paired_threshold=threshold)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(report)
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
    from .dashboard import configured_dir
    from .export import EngineRun, write_records
    from .results import ResultsError, load_results

    try:
        engine = EngineRun.from_config(args.config) if args.config else None
        results = args.results or (
            configured_dir(args.config, "results_dir") if args.config else DEFAULT_RESULTS
        )
    except (OSError, ValueError, KeyError) as err:
        return _error(args, f"--config {str(args.config)!r}: not a readable asv config ({err})")
    try:
        frame = load_results(results, machine=args.machine)
        count, commits = write_records(
            results,
            frame,
            args.out,
            machine=args.machine,
            commit=args.commit,
            engine=engine,
        )
    except ResultsError as err:
        return _error(args, err)
    print(
        f"{count} {args.schema} records of commit {', '.join(c[:8] for c in commits)} in {args.out}"
    )
    return 0


def cmd_publish(args: argparse.Namespace) -> int:
    from .dashboard import OfflineError
    from .publish import PublishError, publish
    from .results import ResultsError

    try:
        html_dir = publish(args.config, args.summary)
    except (PublishError, OfflineError, ResultsError) as error:
        return _error(args, error)
    print(f"dashboard published: {html_dir / 'index.html'} (works offline)")
    if args.summary is not None:
        print(args.summary / "summary.md")
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


def cmd_engine_config(args: argparse.Namespace) -> int:
    from .engine import EngineError, engine_config

    args.out = args.out or Path(f"asv.engine-{args.engine}.conf.json")
    try:
        conf = engine_config(
            args.engine,
            args.repo,
            args.out,
            branch=args.branch,
            build=args.build,
            torch=args.torch,
            flashinfer=args.flashinfer,
            requirements=args.requirements,
        )
    except EngineError as err:
        return _error(args, err)
    print(
        f"{args.out}: {conf['engine']} at {conf['repo']} ({conf['branches'][0]}); results in "
        f"{conf['results_dir']}; then: asv --config {args.out} run|continuous|find|publish, "
        f"or moe-bench engine-nightly|engine-pr|engine-find --config {args.out} (docs/engines.md)"
    )
    return 0


def _engine_machine(args: argparse.Namespace) -> str:
    """Record this machine for asv (as ``moe-bench machine``, less the versions of what the
    engine's environments hold: each commit's install step records those, ``engine_env``); its
    name."""
    from moe_suite.profiles import detect_device, profile_from_env

    from . import machine

    return machine.record_machine(
        profile_from_env(detect_device()), args.machine, environment=False
    )


def _engine_use(args: argparse.Namespace, use: Callable[..., object]) -> object:
    """Run one engine use; its ``EngineError`` (or asv's ``UserError``) is one line, exit 2."""
    from asv.util import UserError

    from .engine import EngineError

    try:
        return use()
    except (EngineError, UserError) as err:
        return _error(args, err)


def cmd_engine_nightly(args: argparse.Namespace) -> int:
    from .engine import nightly

    return _engine_use(
        args,
        lambda: nightly(
            args.config,
            _engine_machine(args),
            limit=args.limit,
            window=args.window,
            verbose=args.verbose,
        ),
    )


def cmd_engine_pr(args: argparse.Namespace) -> int:
    from .engine import pr

    return _engine_use(
        args,
        lambda: pr(
            args.config,
            _engine_machine(args),
            args.base,
            args.head,
            args.out,
            bench=args.bench,
            verbose=args.verbose,
        ),
    )


def cmd_engine_find(args: argparse.Namespace) -> int:
    from .engine import engine_repo_path, find, load_config, subject

    def use() -> int:
        conf = load_config(args.config)
        strategy = args.strategy or conf.engine
        found = find(
            args.config,
            _engine_machine(args),
            args.good,
            args.bad,
            args.figure,
            args.shape,
            strategy,
            improvement=args.improvement,
        )
        for commit in found.failed:
            print(
                f"moe-bench engine-find: commit {commit[:8]} has no figure (it failed, or the "
                "engine's function is n/a there): asv's search cannot tell that from a step",
                file=sys.stderr,
            )
        if found.problem:
            print(f"moe-bench engine-find: no answer: {found.problem}", file=sys.stderr)
            return 1
        what = "improvement" if args.improvement else "regression"
        named = subject(engine_repo_path(conf), found.commit)
        if found.reason:  # the first commit whose cell fails: the answer, with its error
            print(f"first failure: {named} ({found.runs} commits measured): {found.reason}")
        else:
            print(f"first {what}: {named} ({found.runs} commits measured)")
        return 0

    return _engine_use(args, use)


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
    commits.add_argument("machine", type=_machine_name)
    _add_config(commits)

    measurable = _add(
        sub,
        "measurable",
        cmd_measurable,
        "exit 0 when the suite can measure every REVISION, else 2 naming those older than the "
        "config's oldest_commit",
    )
    measurable.add_argument("revisions", nargs="+", metavar="REVISION")
    _add_config(measurable)

    summary = _add(
        sub,
        "summary",
        cmd_summary,
        "write summary.md and plots of the latest results; print its path",
    )
    _add_results(summary)
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
    compare.add_argument("base")
    compare.add_argument("head")
    _add_results(compare)
    compare.add_argument(
        "--paired",
        type=Path,
        default=None,
        help="the paired A/B result (benchmarks.paired): it decides time figures",
    )
    compare.add_argument(
        "--out", type=Path, default=None, metavar="FILE", help="write the PR comment here too"
    )
    compare.add_argument(
        "--bench", "-b", default=None, help="asv's -b regex the PR run was limited to"
    )

    gate = _add(
        sub,
        "gate",
        cmd_gate,
        "check budgets.json against the latest results: exit 0 "
        "within budget, 1 over, 2 malformed, missing, failed or n/a",
    )
    _add_results(gate)
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
    export.add_argument(
        "--out", type=Path, required=True, metavar="FILE", help="the .json file to write"
    )
    _add_results(export, default=None)
    export.add_argument(
        "--schema", choices=["pytorch-v3"], default="pytorch-v3", help="the record schema"
    )
    export.add_argument("--machine", default=None, help="export only this machine's results")
    export.add_argument("--commit", default=None, help="export this commit (default: latest)")
    _add_config(
        export,
        default=None,
        help="the asv config whose results these are (default: results/, this suite's); an "
        "engine config (engine-config): the records carry the engine's commit",
    )
    publish = _add(
        sub,
        "publish",
        cmd_publish,
        "the front page (index.html: the summary's tables, plots) and the explorer (asv publish, "
        "made offline, in explore/) into a fresh folder, then swapped in as html_dir: html_dir "
        "is the previous dashboard or the new one, never half",
    )
    _add_config(publish)
    publish.add_argument(
        "--summary",
        type=Path,
        default=None,
        metavar="DIR",
        help="also write `summary`'s page of the same results here (its plots the front page's, "
        "drawn once); its path is printed last",
    )

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
    _add_config(serve)
    serve.add_argument("--port", type=_port, default=8080, help="0 picks a free port")
    serve.set_defaults(parser=serve)

    engine = _add(
        sub,
        "engine-config",
        cmd_engine_config,
        "write an asv config whose repo is an engine's git history (docs/engines.md)",
    )
    engine.add_argument("--engine", required=True, choices=["vllm", "flashinfer"])
    engine.add_argument("--repo", required=True, help="the engine's git checkout or URL")
    engine.add_argument(
        "--out",
        type=Path,
        default=None,
        help="config to write (default asv.engine-ENGINE.conf.json)",
    )
    engine.add_argument("--branch", default="main", help="the branch the nightly follows")
    engine.add_argument(
        "--build",
        choices=["source", "wheel"],
        default="source",
        help="source: build each commit without compiling; wheel: the engine's per-commit wheel",
    )
    engine.add_argument("--torch", default="2.13.0", help="torch version of the environments")
    engine.add_argument(
        "--flashinfer", default="", help="flashinfer-python version (vLLM; default newest)"
    )
    engine.add_argument(
        "--requirements",
        type=Path,
        default=None,
        help="the engine's import-time packages (default engine_benchmarks/requirements/)",
    )

    def engine_use(name: str, handler, help: str) -> ArgumentParser:
        parser = _add(sub, name, handler, help)
        _add_config(parser, required=True, default=None, help="an engine config (engine-config)")
        parser.add_argument(
            "--machine", type=_machine_name, default=None, help="machine name (default: derived)"
        )
        return parser

    nightly = engine_use(
        "engine-nightly",
        cmd_engine_nightly,
        "measure the engine's newest unmeasured commits, then publish the dashboard",
    )
    nightly.add_argument("--limit", type=_positive, default=4, help="commits per night (default 4)")
    nightly.add_argument(
        "--window", type=_positive, default=100, help="among the branch's newest N (default 100)"
    )
    nightly.add_argument(
        "--verbose",
        action="store_true",
        help="asv's output here (default: in RESULTS/MACHINE/nightly.log, a few lines here)",
    )

    pr = engine_use(
        "engine-pr",
        cmd_engine_pr,
        "an engine PR against its merge base: exit 0 nothing fails, 1 a regression or failure",
    )
    pr.add_argument("base", help="the branch the PR goes into (e.g. origin/main)")
    pr.add_argument("head", help="the PR's head")
    pr.add_argument(
        "--out", type=Path, default=Path("artifacts/engine-pr"), help="PR comment and paired.json"
    )
    pr.add_argument("--bench", "-b", default=None, help="asv's -b regex (the paired run too)")
    pr.add_argument(
        "--verbose",
        action="store_true",
        help="asv's output here (default: in OUT/asv.log, a few lines and the comment here)",
    )

    find = engine_use(
        "engine-find",
        cmd_engine_find,
        "the first commit in GOOD..BAD where FIGURE got worse (asv find, checked)",
    )
    find.add_argument("good")
    find.add_argument("bad")
    find.add_argument(
        "figure",
        choices=[
            "peak_transient_bytes",
            "traffic_bytes",
            "launches",
            "layer_seconds",
            "copy_ratio",
        ],
    )
    find.add_argument("--shape", default="qwen3-235b-a22b/tp4")
    find.add_argument("--strategy", default=None, help="default: the engine's own")
    find.add_argument(
        "--improvement", action="store_true", help="find where it got better (asv's --invert)"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args, unknown = build_parser().parse_known_args(argv)
    if unknown:  # named by the subcommand's parser, not the top one's
        args.parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    return args.handler(args)
