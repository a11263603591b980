"""``python -m moe_convert measure``: JSON lines that parse, with their keys and exact peaks."""

from __future__ import annotations

import io
import json
import sys

import pytest

from moe_convert import layer_shape, strategies
from moe_convert.cli.commands import main

BASE_KEYS = {"strategy", "model", "tp", "device", "experts", "peak_transient_bytes", "allocations"}
TIME_KEYS = {
    "seconds_median",
    "seconds_iqr",
    "copy_seconds_median",
    "copy_ratio",
    "gbps",
    "whole_model_seconds",
}
CPU_KEYS = {"minor_faults", "allocator_peak_bytes"}


#: ``measure`` of two strategies on a 2-expert layer: seconds on a CPU.
SMALL_MEASURE = [
    "measure",
    *("--experts", "2", "--hidden", "256", "--intermediate", "128"),
    *("--strategy", "strided_copy,inplace"),
]


def _json_lines(capsys, argv: list[str]) -> list[dict]:
    assert main(argv) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_measure_json_on_meta_at_full_size(capsys):
    records = _json_lines(
        capsys,
        [
            "measure",
            "--model",
            "qwen3-235b-a22b",
            "--tp",
            "4",
            "--strategy",
            "all",
            "--device",
            "meta",
            "--json",
        ],
    )
    assert [r["strategy"] for r in records] == sorted(strategies("bf16"))
    shape = layer_shape("qwen3-235b-a22b", 4)
    for record in records:
        assert BASE_KEYS <= record.keys() and not TIME_KEYS & record.keys()
        assert (record["model"], record["tp"], record["device"], record["experts"]) == (
            "qwen3-235b-a22b",
            4,
            "meta",
            128,
        )
        assert isinstance(record["peak_transient_bytes"], int) and isinstance(
            record["allocations"], int
        )
    by_name = {r["strategy"]: r for r in records}
    assert by_name["strided_copy"]["peak_transient_bytes"] == shape.w13_bytes + shape.w2_bytes
    assert by_name["strided_inplace"]["peak_transient_bytes"] == max(
        shape.w13_expert_bytes, 10 * 2**20
    )


def test_measure_json_on_cpu_has_time_and_allocator_figures(capsys):
    records = _json_lines(
        capsys,
        [
            *SMALL_MEASURE,
            "--device",
            "cpu",
            "--repeats",
            "2",
            "--json",
        ],
    )
    assert [r["strategy"] for r in records] == ["strided_copy", "inplace"]
    for record in records:
        assert BASE_KEYS | TIME_KEYS | CPU_KEYS <= record.keys()
        assert record["copy_ratio"] > 0 and record["gbps"] > 0
        assert record["whole_model_seconds"] == pytest.approx(record["seconds_median"])  # 1 layer
    inplace = records[1]  # the CPU index_select(dim=1) hidden copy: one more expert
    assert inplace["allocator_peak_bytes"] == 2 * inplace["peak_transient_bytes"]


def test_measure_table(capsys):
    assert main(["measure", "--model", "deepseek-v3", "--tp", "8", "--device", "meta"]) == 0
    out = capsys.readouterr().out
    assert "deepseek-v3/tp8" in out
    for name in strategies("bf16"):
        assert name in out
    assert "GiB" in out and "{" not in out


def test_measure_notes_a_shape_the_kernel_cannot_take(capsys):
    argv = ["measure", "--model", "qwen3-235b-a22b", "--tp", "8", "--strategy", "strided_copy"]
    assert main(argv) == 0
    assert "note: the SM100 kernel cannot take this shape: I/TP = 192" in capsys.readouterr().out
    assert main(argv + ["--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["tp"] == 8 and "I/TP = 192" in err  # stdout stays JSON lines


def test_seconds_column_never_prints_exponents():
    from moe_convert.cli.commands import _seconds

    assert [_seconds(s) for s in (0.9996, 1.2345, 12.3e-6)] == ["999.6 ms", "1.234 s", "12.3 us"]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    "terminal, quiet, shown", [(True, False, True), (True, True, False), (False, False, False)]
)
def test_progress_bar_only_on_a_terminal_without_quiet(monkeypatch, capsys, terminal, quiet, shown):
    stderr = _Terminal() if terminal else io.StringIO()
    monkeypatch.setattr(sys, "stderr", stderr)
    argv = [
        *SMALL_MEASURE,
        "--json",
    ] + (["--quiet"] if quiet else [])
    assert main(argv) == 0
    assert ("measure on meta:   0%|" in stderr.getvalue()) == shown  # the bar, at its start
    assert len(capsys.readouterr().out.splitlines()) == 2  # the JSON lines, bar or not
