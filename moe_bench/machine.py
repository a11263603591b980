"""Record this machine for asv: its name, asv's defaults, and the facts asv has no field for.

asv keys its results history by machine name (``results/<machine>/``) and copies every key of
the machine's entry in ``~/.asv-machine.json`` into ``results/<machine>/machine.json``, the
dashboard's filters and graph paths. This adds ``gpu``, ``gpus``, ``cuda``, ``driver``,
``torch``, ``flashinfer``, ``vllm``, ``sglang`` and ``profile`` to what ``asv machine --yes``
records: the engines' versions separate one engine release's history from the next.

The name says what the machine is: ``cpu-2core-xeon``, ``gb200``, ``h200``; a profile other
than the device's default (``moe_suite.profiles.default_profile``) is appended
(``h200-cpu-profile``), so the two never share a history series. Hosts of one kind share
the name and its history (several GB200 boxes, a CI pool): ``moe_bench.hardware`` tells their
time figures apart (docs/benchmarks.md).

Usage: ``moe-bench machine [--profile cpu] [--name NAME] [--shell]`` prints the name recorded.
"""

from __future__ import annotations

import importlib.metadata
import re
import shutil
import subprocess

import torch
from asv.machine import Machine, MachineCollection

from moe_suite.profiles import PROFILES, default_profile

__all__ = [
    "ENVIRONMENT_FACTS",
    "machine_facts",
    "machine_name",
    "record_machine",
    "steady_facts",
]


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _driver() -> str:
    if shutil.which("nvidia-smi") is None:
        return "n/a"
    query = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
    done = subprocess.run(query, capture_output=True, text=True, check=False)
    return done.stdout.splitlines()[0].strip() if done.returncode == 0 and done.stdout else "n/a"


def machine_facts(profile: str) -> dict[str, str]:
    """GPU, CUDA, driver, torch, FlashInfer, vLLM and SGLang versions here, and ``profile``.

    Versions are those of the Python running this (scripts/bench's ``.venv``; asv's benchmark
    environments install the same pins). Values are strings ("n/a" where there is no GPU).
    """
    if profile not in PROFILES:
        raise ValueError(f"profile {profile!r}; valid profiles: {', '.join(PROFILES)}")
    cuda = torch.cuda.is_available()
    count = torch.cuda.device_count() if cuda else 0
    return {
        "gpu": torch.cuda.get_device_name(0) if cuda else "n/a",
        "gpus": str(count),
        "cuda": str(torch.version.cuda) if cuda else "n/a",
        "driver": _driver() if cuda else "n/a",
        "torch": torch.__version__,
        "flashinfer": _version("flashinfer-python"),
        "vllm": _version("vllm"),
        "sglang": _version("sglang"),
        "profile": profile,
    }


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def machine_name(facts: dict[str, str], defaults: dict[str, str]) -> str:
    """``gb200``, ``h200`` ... from the GPU name; ``cpu-<N>core-<family>`` without a GPU."""
    if facts["gpu"] != "n/a":
        name = _slug(facts["gpu"].removeprefix("NVIDIA "))
    else:
        cpu = defaults.get("cpu", "").lower()
        family = next(
            (f for f in ("xeon", "epyc", "grace", "ryzen", "core") if f in cpu),
            _slug(defaults.get("arch", "cpu")),
        )
        name = f"cpu-{defaults['num_cpu']}core-{family}"
    expected = default_profile("cuda" if facts["gpu"] != "n/a" else "cpu")
    return name if facts["profile"] == expected else f"{name}-{facts['profile']}-profile"


def steady_facts(os_name: str, ram: str) -> dict[str, str]:
    """``os`` and ``ram`` as asv's defaults give them (``Linux 6.18.44-fc-v1098``, bytes), kept
    as the machine keeps them from one host to the next: the kernel's series (``Linux 6.18``)
    and whole GiB (``24 GiB``).

    asv draws one line per set of a machine's facts, so a fact that moves with every cloud host
    of the same machine (the kernel's build suffix, the few KiB the hypervisor keeps) would
    start a new line at every run and leave the dashboard's graph of the newest run a single
    point; a real change (another kernel series, more memory) still starts one.
    """
    system, _, release = os_name.partition(" ")
    series = ".".join(release.split(".")[:2])
    steady = {"os": f"{system} {series}" if series else os_name}
    if ram.isdigit():
        steady["ram"] = f"{round(int(ram) / 2**30)} GiB"
    return steady


#: ``machine_facts``' versions of what asv's environment holds: this Python's where the suite's
#: benchmarks run in it (``environment_type: existing``), another's in an engine history's
#: environments (``engine_env`` records those, per commit).
ENVIRONMENT_FACTS = ("torch", "flashinfer", "vllm", "sglang")


def record_machine(profile: str, name: str | None = None, *, environment: bool = True) -> str:
    """Write this machine's entry (asv defaults, ``os`` and ``ram`` as ``steady_facts`` keeps
    them, + ``machine_facts``, less ``ENVIRONMENT_FACTS`` where not ``environment``) to
    ``~/.asv-machine.json``.

    What ``asv machine --yes --machine NAME`` does, plus the facts. Returns the name.
    """
    facts = machine_facts(profile)
    if not environment:
        facts = {key: value for key, value in facts.items() if key not in ENVIRONMENT_FACTS}
    info = Machine.get_defaults()
    info.update(steady_facts(info.get("os", ""), info.get("ram", "")))
    info["machine"] = name or machine_name(facts, info)
    info.update(facts)
    MachineCollection.save(info["machine"], info)
    return info["machine"]
