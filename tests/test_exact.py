"""The acceptance dump of the suite's exact figures (``benchmarks.exact``)."""

from __future__ import annotations

import json

from benchmarks import exact


def test_dump_runs_the_exact_figures_of_a_class_as_asv_does(tmp_path):
    figures = exact.dump(r"^bench_convert\.Profile\.")
    assert figures["bench_convert.Profile.track_timed_experts[qwen3-235b-a22b/tp4]"] in (8, 128)
    assert all(key.startswith("bench_convert.Profile.track_timed_experts[") for key in figures)


def test_diff_names_every_changed_or_one_sided_figure(tmp_path, capsys):
    before, after = tmp_path / "before.json", tmp_path / "after.json"
    before.write_text(json.dumps({"a[x]": 1, "b[x]": 2, "c[x]": "n/a: why"}))
    after.write_text(json.dumps({"a[x]": 1, "b[x]": 3, "d[x]": 4}))
    assert exact.main(["diff", str(before), str(after)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "b[x]: 2 -> 3",
        "c[x]: 'n/a: why' -> '(absent)'",
        "d[x]: '(absent)' -> 4",
        "3 differences",
    ]
    assert exact.main(["diff", str(before), str(before)]) == 0
