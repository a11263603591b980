"""``moe-bench machine`` and the profile rule it shares with the suite (``moe_suite.profiles``):
``MOE_BENCH_PROFILE``, else ``full`` on CUDA and ``cpu`` elsewhere; scripts/ eval ``--shell``."""

from __future__ import annotations

import pytest

from moe_bench import cli, machine
from moe_suite import profiles


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
    valid = "valid profiles: full, cpu, smoke"
    with pytest.raises(ValueError, match=f"MOE_BENCH_PROFILE='fast'; {valid}"):
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


def test_one_machine_on_two_cloud_hosts_records_the_same_facts():
    # Two runs of cpu-2core-epyc of the committed history: another kernel build, 16 KiB less RAM
    first = machine.steady_facts("Linux 6.18.44-fc-v1045", "25275990016")
    second = machine.steady_facts("Linux 6.18.44-fc-v1098", "25275973632")
    assert first == second == {"os": "Linux 6.18", "ram": "24 GiB"}
    # a real change still shows
    assert machine.steady_facts("Linux 6.19.1", str(48 * 2**30)) == {
        "os": "Linux 6.19",
        "ram": "48 GiB",
    }
    assert machine.steady_facts("Darwin", "") == {"os": "Darwin"}  # nothing to read: as given


def test_the_committed_results_record_steady_facts():
    """Every committed run's os and ram as ``steady_facts`` keeps them, so a machine's history is
    one line per figure on the dashboard (results/ was rewritten once when the rule came)."""
    import json
    from pathlib import Path

    results = Path(__file__).resolve().parents[1] / "results"
    for path in results.glob("*/*.json"):
        data = json.loads(path.read_text())
        params = data.get("params", data)
        assert machine.steady_facts(params["os"], params["ram"]) == {"os": params["os"]}, path
