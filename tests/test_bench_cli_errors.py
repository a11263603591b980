"""User errors of the ``moe_bench`` entry points scripts/ call (``machine``, ``dashboard``): exit
status 2, one line on stderr naming the bad value, nothing recorded or served first."""

from __future__ import annotations

import socket

import pytest

from moe_bench import dashboard, machine


@pytest.fixture
def no_work(monkeypatch):
    def started(*args, **kwargs):
        raise AssertionError("work started before the arguments were checked")

    monkeypatch.setattr(machine, "record_machine", started)
    monkeypatch.setattr(dashboard, "serve", started)


def _error_line(main, argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as stop:
        main(argv)
    out, err = capsys.readouterr()
    assert stop.value.code == 2 and "Traceback" not in out + err and out == ""
    lines = err.splitlines()
    assert len(lines) == 1 and ": error: " in lines[0], err
    return lines[0]


BAD = [
    (machine.main, ["--profile", "gpu"], ["'gpu'", "full", "cpu"]),
    (machine.main, ["--name", ""], ["''", "folder name"]),
    (machine.main, ["--name", "a/b"], ["'a/b'"]),
    (machine.main, ["--name=-x"], ["'-x'"]),
    (machine.main, ["--name", "../up"], ["'../up'"]),
    (dashboard.main, [], ["command"]),
    (dashboard.main, ["offline"], ["html_dir"]),
    (dashboard.main, ["offline", "/no/such/html"], ["'/no/such/html'", "asv publish"]),
    (dashboard.main, ["serve", "/no/such/html"], ["'/no/such/html'", "asv publish"]),
    (dashboard.main, ["serve", "--config", "/no/such/asv.conf.json"], ["'/no/such/asv.conf.json'"]),
    (dashboard.main, ["serve", "--port", "70000"], ["'70000'", "65535"]),
    (dashboard.main, ["serve", "--port", "-1"], ["'-1'"]),
]


@pytest.mark.parametrize("main, argv, needles", BAD,
                         ids=[f"{main.__module__.split('.')[-1]} {' '.join(argv)}" for main, argv, _ in BAD])
def test_bad_invocation(main, argv, needles, capsys, no_work):
    line = _error_line(main, argv, capsys)
    for needle in needles:
        assert needle in line


def test_config_that_is_not_json(tmp_path, capsys, no_work):
    config = tmp_path / "asv.conf.json"
    config.write_text("{not json")
    line = _error_line(dashboard.main, ["serve", "--config", str(config)], capsys)
    assert str(config) in line and "not valid JSON" in line


def test_port_in_use(tmp_path, capsys, monkeypatch):
    (tmp_path / "index.html").write_text("<html></html>")
    monkeypatch.setattr(dashboard, "make_offline", lambda html_dir: None)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = _error_line(dashboard.main, ["serve", str(tmp_path), "--port", str(port)], capsys)
    assert f"127.0.0.1:{port}" in line and "in use" in line
