"""``moe-bench machine`` and the profile rule it shares with the suite (``moe_bench.profiles``):
``MOE_BENCH_PROFILE``, else ``full`` on CUDA and ``cpu`` elsewhere; scripts/ eval ``--shell``."""

from __future__ import annotations

import pytest

from moe_bench import cli, machine, profiles


@pytest.mark.parametrize(
    "device, environ, expected",
    [
        ("cuda", {}, "full"),
        ("cpu", {}, "cpu"),
        ("cuda", {"MOE_BENCH_PROFILE": "cpu"}, "cpu"),
        ("cpu", {"MOE_BENCH_PROFILE": "full"}, "full"),
        ("cpu", {"MOE_BENCH_PROFILE": ""}, "cpu"),  # empty is unset, as in the scripts' ${VAR:-...}
    ],
)
def test_profile_from_env(device, environ, expected):
    assert profiles.profile_from_env(device, environ) == expected


def test_profile_from_env_names_a_bad_value():
    with pytest.raises(ValueError, match="MOE_BENCH_PROFILE='fast'; valid profiles: full, cpu"):
        profiles.profile_from_env("cpu", {"MOE_BENCH_PROFILE": "fast"})


@pytest.fixture
def recorded(monkeypatch):
    """``record_machine``'s calls, recording nothing; the device is ``cuda``."""
    calls = []

    def record(profile, name=None):
        calls.append((profile, name))
        return name or machine.machine_name({"gpu": "NVIDIA H200", "profile": profile}, {})

    monkeypatch.setattr(machine, "record_machine", record)
    monkeypatch.setattr(profiles, "detect_device", lambda: "cuda")
    monkeypatch.delenv("MOE_BENCH_PROFILE", raising=False)
    return calls


@pytest.mark.parametrize(
    "argv, environ, out",
    [
        ([], {}, "h200"),
        (["--profile", "cpu"], {}, "h200-cpu-profile"),
        ([], {"MOE_BENCH_PROFILE": "cpu"}, "h200-cpu-profile"),
        (["--profile", "full"], {"MOE_BENCH_PROFILE": "cpu"}, "h200"),  # the flag wins
        (["--name", "box", "--shell"], {}, "machine=box\ndevice=cuda\nprofile=full"),
    ],
)
def test_machine_prints_the_name_recorded(recorded, monkeypatch, capsys, argv, environ, out):
    for key, value in environ.items():
        monkeypatch.setenv(key, value)
    assert cli.main(["machine", *argv]) == 0
    assert capsys.readouterr().out == out + "\n"
    assert len(recorded) == 1
