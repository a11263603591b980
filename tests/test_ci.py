"""The CI recipes run as written: ci/buildkite/ (the GB200 nightly and the labelled PR gate, from
a kickoff that takes the pipeline from main) and .github/workflows/ (the CPU gate).

Their YAML parses; every command they call is a tool of the agent's (``EXTERNAL``) or one of
this repository, present and given arguments it accepts (``moe-bench`` lines through its own
parser, scripts against the usage line of their header); every file a step reads was written
by a command before it; the kickoff, run with stand-ins for ``curl`` and ``buildkite-agent``,
uploads the right pipeline for each kind of build."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml
from asv.util import load_json

from moe_bench.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
BUILDKITE = ROOT / "ci" / "buildkite"
WORKFLOWS = ROOT / ".github" / "workflows"
#: Tools of the CI machine itself (git, tar; Buildkite's agent, GitHub's CLI) and shell builtins.
EXTERNAL = {"git", "tar", "buildkite-agent", "gh", "exit"}
#: What each script the recipes call writes, as the files and folders a later step reads: each
#: entry is checked against the script itself (``test_scripts_write_what_the_recipes_read``).
SCRIPT_WRITES = {
    "scripts/nightly": ("html", "artifacts/summary"),
    "scripts/compare": ("artifacts/compare/pr-comment.md", "artifacts/compare/paired.json"),
}


def _steps(path: Path) -> list[list[str]]:
    """A recipe's jobs, each as its shell lines in order (Buildkite's ``command``/``commands``
    with ``$$`` unescaped; the ``run`` of a workflow's steps), plus the files it keeps
    (``artifact_paths``; ``upload-artifact``'s path) as ``read PATH`` lines."""
    data = yaml.safe_load(path.read_text())
    jobs = []
    if "steps" in data:  # Buildkite
        for step in data["steps"]:
            lines = step.get("commands") or [step["command"]]
            lines = [line.replace("$$", "$") for line in lines]
            jobs.append(lines + [f"read {p}" for p in step.get("artifact_paths", [])])
    else:  # GitHub Actions
        for job in data["jobs"].values():
            lines = []
            for step in job["steps"]:
                if "run" in step:
                    lines.append(step["run"])
                elif step["uses"].startswith("actions/upload-artifact"):
                    lines.append(f"read {step['with']['path']}")
            jobs.append(lines)
    return jobs


RECIPES = sorted([*BUILDKITE.glob("*.yml"), *WORKFLOWS.glob("*.yml")])
JOBS = [
    pytest.param(path, lines, id=f"{path.relative_to(ROOT)}:{index}")
    for path in RECIPES
    for index, lines in enumerate(_steps(path))
]


def simple_commands(line: str) -> list[list[str]]:
    """The simple commands of a shell line as argv lists: split on ``;``, ``&&``, ``||`` and
    ``|``; a ``$(...)`` substitution is its own command (and ``SUBST`` in the outer one); a
    redirection stays in the argv as ``<`` or ``>`` followed by its path."""
    inner = re.findall(r"\$\(([^()]*)\)", line)
    outer = re.sub(r"\$\([^()]*\)", "SUBST", line)
    commands = [cmd for text in inner for cmd in simple_commands(text)]
    lexer = shlex.shlex(outer, posix=True, punctuation_chars=";&|<>")
    lexer.whitespace_split = True
    current: list[str] = []
    for token in [*lexer, ";"]:
        if token in (";", "&&", "||", "|", "&"):
            if current and not re.fullmatch(r"\w+=.*", current[0]):  # skip `status=$?`
                commands.append(current)
            current = []
        else:
            current.append(token)
    return commands


def usage_arguments(script: Path) -> int:
    """How many arguments the usage line in ``script``'s header requires: its words in capitals
    before the first ``[``: ``scripts/compare BASE HEAD [extra asv continuous args]`` gives 2."""
    name = script.relative_to(ROOT).as_posix()
    usage = re.search(rf"`{re.escape(name)}([^`]*)`", script.read_text())
    assert usage, f"{name}: no usage line (`{name} ARGS`) in its header"
    return len(re.findall(r"\b[A-Z][A-Z_]+\b", usage[1].split("[")[0]))


def moe_bench_writes(argv: list[str]) -> list[str]:
    """Parse ``moe-bench ARGV`` with its own parser (a usage error fails the test); the files it
    writes (``--out``)."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exit:
        pytest.fail(f"moe-bench {' '.join(argv)}: the parser refused it (exit {exit.code})")
    return [str(getattr(args, key)) for key in ("out",) if getattr(args, key, None)]


def check_job(lines: list[str]) -> None:
    """Every command of the job exists and accepts its arguments; every file read was written
    before it (by a redirection, ``--out``, ``tar -f`` or a script's ``SCRIPT_WRITES``)."""
    written: list[str] = []

    def read(path: str) -> None:
        path = re.split(r"[*]", path)[0].rstrip("/")  # a glob: its folder
        # the file itself, a file in a folder written, or a folder holding a file written
        assert any(
            path == w or path.startswith(w + "/") or w.startswith(path + "/") for w in written
        ), f"{path} is read, but no earlier command of the job writes it (written: {written})"

    for line in lines:
        if line.startswith("read "):
            read(line.removeprefix("read "))
            continue
        for argv in simple_commands(line):
            program, args = argv[0], argv[1:]
            for op, path in zip(args, args[1:], strict=False):
                if op == "<":
                    read(path)
            if program.endswith("moe-bench"):
                written += moe_bench_writes(args)
            elif program in EXTERNAL:
                if program == "tar":
                    written.append(args[args.index("-czf") + 1])
                    for path in args[args.index("-czf") + 2 :]:
                        read(path)
                if program == "gh" and "--body-file" in args:
                    read(args[args.index("--body-file") + 1])
                if program == "buildkite-agent":
                    assert args[0] in ("annotate", "artifact", "pipeline"), argv
            else:
                script = ROOT / program
                assert script.is_file() and os.access(script, os.X_OK), f"{program}: no such script"
                assert len(args) >= usage_arguments(script), f"{argv}: too few arguments"
                written += SCRIPT_WRITES.get(program, ())


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: str(p.relative_to(ROOT)))
def test_recipe_parses(path):
    assert isinstance(yaml.safe_load(path.read_text()), dict)


@pytest.mark.parametrize(("path", "lines"), JOBS)
def test_every_command_exists_and_reads_what_an_earlier_one_wrote(path, lines):
    check_job(lines)


def test_the_nightly_exports_and_keeps_the_dashboard():
    (lines,) = _steps(BUILDKITE / "nightly.yml")
    assert lines[1].startswith("scripts/nightly")
    export = next(argv for line in lines for argv in simple_commands(line) if "export" in argv)
    assert export[1:5] == ["export", "--results", "results", "--machine"]
    assert {
        "read artifacts/pytorch-v3/moe-convert-bench.json",
        "read artifacts/dashboard.tar.gz",
    } <= set(lines)


def test_the_pr_gate_compares_against_the_merge_base_and_annotates():
    (lines,) = _steps(BUILDKITE / "pr-gate.yml")
    compare = simple_commands(lines[1])
    assert compare[0] == ["git", "merge-base", "FETCH_HEAD", "HEAD"]
    assert compare[1] == ["scripts/compare", "SUBST", "HEAD"]
    assert lines[2].startswith("buildkite-agent annotate")


def test_checking_catches_a_wrong_argument_and_an_unwritten_file():
    with pytest.raises(pytest.fail.Exception, match="refused"):
        check_job(["moe-bench export --schema csv --out x.json"])
    with pytest.raises(AssertionError, match="too few arguments"):
        check_job(["scripts/compare HEAD"])
    with pytest.raises(AssertionError, match="no earlier command"):
        check_job(["buildkite-agent annotate < artifacts/compare/other.md", "scripts/compare A B"])


def test_scripts_write_what_the_recipes_read():
    nightly = (ROOT / "scripts" / "nightly").read_text()
    html_dir = load_json(str(ROOT / "asv.conf.json"), js_comments=True)["html_dir"]
    summary_out = build_parser().parse_args(["summary"]).out
    assert f"moe-bench publish --summary {summary_out}" in nightly  # the html_dir, the summary
    assert SCRIPT_WRITES["scripts/nightly"] == (html_dir, summary_out)
    compare = (ROOT / "scripts" / "compare").read_text()
    assert "out=artifacts/compare" in compare
    for name in ("pr-comment.md", "paired.json"):
        assert f'"$out/{name}"' in compare
        assert f"artifacts/compare/{name}" in SCRIPT_WRITES["scripts/compare"]


def _kickoff(tmp_path, labels: str, **env) -> str:
    """Run the kickoff with stand-ins: ``curl`` prints ``labels`` (GitHub's JSON), and
    ``buildkite-agent`` prints what it was asked. Returns its output."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in {
        "curl": f"echo '{labels}'",
        "buildkite-agent": 'echo "buildkite-agent $*"',
    }.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    process = subprocess.run(
        [str(BUILDKITE / "kickoff.sh")],
        env={
            "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            "BUILDKITE_REPO": "git@github.com:example/moe-convert-bench.git",
            **env,
        },
        capture_output=True,
        text=True,
        check=True,
    )
    return process.stdout


@pytest.mark.parametrize(
    ("labels", "env", "uploaded"),
    [
        ('[{"name": "perf-benchmarks"}]', {"BUILDKITE_PULL_REQUEST": "7"}, "pr-gate.yml"),
        ('[{"name": "documentation"}]', {"BUILDKITE_PULL_REQUEST": "7"}, None),
        ("[]", {"BUILDKITE_PULL_REQUEST": "7"}, None),
        (
            "[]",
            {
                "BUILDKITE_PULL_REQUEST": "false",
                "BUILDKITE_SOURCE": "schedule",
                "BUILDKITE_BRANCH": "main",
            },
            "nightly.yml",
        ),
        ("[]", {"BUILDKITE_PULL_REQUEST": "false", "BUILDKITE_BRANCH": "main"}, None),
    ],
)
def test_the_kickoff_uploads_the_pipeline_of_the_build(tmp_path, labels, env, uploaded):
    out = _kickoff(tmp_path, labels, **env)
    uploads = re.findall(r"buildkite-agent pipeline upload (\S+)", out)
    assert uploads == ([str(BUILDKITE / uploaded)] if uploaded else []), out
    for name in uploads:
        assert Path(name).is_file()


def test_the_kickoff_runs_from_the_pipeline_main_gives():
    """The pipeline's own step replaces ci/buildkite/ with main's before running the kickoff."""
    (step,) = yaml.safe_load((BUILDKITE / "pipeline.yml").read_text())["steps"]
    commands = simple_commands(step["command"])
    assert commands[:2] == [
        ["git", "fetch", "origin", "main"],
        ["git", "checkout", "FETCH_HEAD", "--", "ci/buildkite"],
    ]
    assert commands[2] == ["ci/buildkite/kickoff.sh"]


def test_the_cpu_gate_posts_the_comment_compare_writes():
    workflow = yaml.safe_load((WORKFLOWS / "cpu-gate.yml").read_text())
    steps = workflow["jobs"]["compare"]["steps"]
    run = [step["run"] for step in steps if "run" in step]
    assert simple_commands(run[0])[-1] == ["scripts/compare", "SUBST", "HEAD"]
    assert simple_commands(run[1]) == [
        ["gh", "pr", "comment", "$PR_NUMBER", "--body-file", "artifacts/compare/pr-comment.md"]
    ]
    assert workflow["permissions"]["pull-requests"] == "write"
