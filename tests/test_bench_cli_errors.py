"""User errors of ``moe-bench`` (``moe_bench.cli``), the command scripts/ call: exit status 2, one
line on stderr naming the bad value, nothing recorded or served first."""

from __future__ import annotations

import socket

import pytest

from moe_bench import cli, dashboard, machine


@pytest.fixture
def no_work(monkeypatch):
    def started(*args, **kwargs):
        raise AssertionError("work started before the arguments were checked")

    monkeypatch.setattr(machine, "record_machine", started)
    monkeypatch.setattr(dashboard, "serve", started)


def _error_line(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as stop:
        cli.main(argv)
    out, err = capsys.readouterr()
    assert stop.value.code == 2 and "Traceback" not in out + err and out == ""
    lines = err.splitlines()
    assert len(lines) == 1 and ": error: " in lines[0], err
    return lines[0]


BAD = [
    ([], ["COMMAND"]),
    (["machines"], ["'machines'", "machine"]),
    (["machine", "--profile", "gpu"], ["'gpu'", "full", "cpu"]),
    (["machine", "--name", ""], ["''", "folder name"]),
    (["machine", "--name", "a/b"], ["'a/b'"]),
    (["machine", "--name=-x"], ["'-x'"]),
    (["machine", "--name", "../up"], ["'../up'"]),
    (["compare", "main"], ["head"]),
    # the spellings before one convention (docs/cli.md): refused, naming the argument
    (["compare", "results", "main", "HEAD"], ["unrecognized arguments: HEAD"]),
    (["compare", "main", "HEAD", "--markdown", "x.md"], ["--markdown"]),
    (["export", "results", "--out", "x.json"], ["unrecognized arguments: results"]),
    (["export", "--out", "x.json", "--format", "pytorch-v3"], ["--format"]),
    (["export", "--out", "x.json", "--schema", "csv"], ["'csv'", "pytorch-v3"]),
    (["engine-nightly", "asv.engine-vllm.conf.json"], ["required: --config"]),
    (["engine-nightly", "--config", "x.json", "--limit", "0"], ["--limit", "'0'", ">= 1"]),
    (["engine-nightly", "--config", "x.json", "--window", "-3"], ["--window", "'-3'"]),
    (["new-commits", "../up"], ["'../up'", "folder name"]),
    (["engine-pr", "--config", "x.json", "main"], ["head"]),
    (["engine-find", "--config", "x.json", "a", "b", "peak"], ["'peak'", "peak_transient_bytes"]),
    (["gate", "--budget"], ["--budget"]),
    (["gate", "--budget", "b.json"], ["unrecognized arguments: --budget b.json"]),  # no abbrev.
    (["dashboard", "serve", "--conf", "x"], ["moe-bench dashboard serve:", "--conf"]),
    (["summary", "extra"], ["moe-bench summary: error: unrecognized arguments: extra"]),
    (["dashboard", "offline", "html", "--port", "1"], ["moe-bench dashboard offline:", "--port 1"]),
    (["new-commits"], ["machine"]),
    (["dashboard"], ["ACTION"]),
    (["dashboard", "offline"], ["html_dir"]),
    (["dashboard", "offline", "/no/such/html"], ["'/no/such/html'", "asv publish"]),
    (["dashboard", "serve", "/no/such/html"], ["'/no/such/html'", "moe-bench publish"]),
    (["dashboard", "serve", "--config", "/no/such/asv.conf.json"], ["'/no/such/asv.conf.json'"]),
    (["dashboard", "serve", "--port", "70000"], ["'70000'", "65535"]),
    (["dashboard", "serve", "--port", "-1"], ["'-1'"]),
]


@pytest.mark.parametrize("argv, needles", BAD, ids=[" ".join(argv) for argv, _ in BAD])
def test_bad_invocation(argv, needles, capsys, no_work):
    line = _error_line(argv, capsys)
    assert line.startswith("moe-bench")
    for needle in needles:
        assert needle in line


def test_profile_variable_that_names_no_profile(monkeypatch, capsys, no_work):
    monkeypatch.setenv("MOE_BENCH_PROFILE", "gpu")
    line = _error_line(["machine"], capsys)
    assert line.startswith("moe-bench machine: error:") and "MOE_BENCH_PROFILE='gpu'" in line


def test_config_that_is_not_json(tmp_path, capsys, no_work):
    config = tmp_path / "asv.conf.json"
    config.write_text("{not json")
    line = _error_line(["dashboard", "serve", "--config", str(config)], capsys)
    assert str(config) in line and "not valid JSON" in line


def test_port_in_use(tmp_path, capsys):
    (tmp_path / "index.html").write_text("<html></html>")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = _error_line(["dashboard", "serve", str(tmp_path), "--port", str(port)], capsys)
    assert f"127.0.0.1:{port}" in line and "in use" in line


@pytest.mark.parametrize(
    ("command", "args", "revisions", "text"),
    [
        ("continuous", ["-b", "LayerTime", "--launch-method", "spawn"], ["a", "b"], None),
        ("run", ["--bench=Peak", "-a", "repeat=2"], ["HEAD^!"], None),
        ("continuous", ["--bogus"], ["a", "b"], "unrecognized arguments: --bogus"),
        ("continuous", ["-b"], ["a", "b"], "argument --bench/-b: expected one argument"),
        ("run", ["-b", "x("], ["HEAD^!"], "'x(' is not a regular expression"),
        ("run", ["-h"], ["HEAD^!"], "asv run --help"),
        ("runn", [], [], "no such asv command 'runn'"),
    ],
)
def test_the_asv_arguments_a_script_passes_on(command, args, revisions, text):
    """``moe_bench.asv_args``: asv's own parser, its message in one line, nothing run."""
    from moe_bench.asv_args import asv_usage_error

    error = asv_usage_error(command, args, revisions)
    assert error == text if text is None else text in error


def test_asv_args_prints_one_line(capsys):
    from moe_bench.asv_args import main

    assert main(["scripts/bench", "run", "--bogus", "--", "HEAD^!"]) == 2
    assert capsys.readouterr().err == (
        "scripts/bench: error: asv run: unrecognized arguments: --bogus\n"
    )
    assert main(["scripts/bench", "run", "-b", "x", "--", "HEAD^!"]) == 0
