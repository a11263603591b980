"""The registry of records and its formulas: every strategy states its facts, formulas evaluate
safely, and docs/library.md's strategies table is the registry's.

The figures themselves are checked to the byte in test_memory.py and test_traffic.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from moe_convert import (
    FORMATS,
    REGISTRY,
    UNAVAILABLE,
    Formula,
    LayerShape,
    Strategy,
    convert,
    layer_shape,
    layer_tensors,
    register,
    strategies,
)
from moe_convert.cli import commands as cli
from moe_convert.formats import registry
from moe_convert.formats.registry import (
    MARKDOWN_BEGIN,
    MARKDOWN_END,
    strategies_markdown,
    update_markdown,
)
from moe_convert.formulas import LEGEND, sizes
from moe_convert.load.refit import documented_reload_safety, documented_reversibility

ROOT = Path(__file__).resolve().parent.parent
LIBRARY_DOC = ROOT / "docs" / "library.md"
QWEN = layer_shape("qwen3-235b-a22b", 4)  # w13 [128, 768, 4096], w2 [128, 4096, 384]
RELU2 = LayerShape("relu2", 2, 64, 2048, 1024, 8, gated=False)  # w13 [64, 1024, 2048]
# BF16's strategies, registered here and not: every one states its figures (a quantized
# engine adapter's are measured, not stated).
BF16 = strategies("bf16")
BF16_UNAVAILABLE = strategies("bf16", available=False)


@pytest.mark.parametrize("name", sorted([*BF16, *BF16_UNAVAILABLE]))
def test_every_strategy_states_its_facts(name):
    record = REGISTRY.get(name) or UNAVAILABLE[name]
    assert record.name == name and record.origin
    for field in ("peak", "traffic", "launches"):
        assert isinstance(getattr(record, field), Formula), (
            f"register {name!r} with {field}=Formula(...)"
        )
    assert name in REGISTRY or record.needs, f"{name} is not available here: say what it needs"


def test_the_docs_table_is_the_registry_s():
    text = LIBRARY_DOC.read_text()
    assert update_markdown(text, documented_reload_safety, documented_reversibility) == text, (
        "docs/library.md's strategies table is stale: run "
        "`python -m moe_convert strategies --update docs/library.md`"
    )


def test_the_table_lists_every_strategy_with_its_formulas():
    table = strategies_markdown(documented_reload_safety, documented_reversibility)
    for record in [*strategies("bf16").values(), *strategies("bf16", available=False).values()]:
        row = next(line for line in table.splitlines() if line.startswith(f"| `{record.name}` |"))
        assert f"`{record.peak.gated}`" in row and record.result in row
    assert (
        "| `legacy` | vLLM before PR #45589 (0.16.0 to 0.23.0) | - | new tensors | "
        "not reload-safe: direct: w13, w2 in new storage (E2 H64 I64) | reversible in place "
        "| `3 T13 + 2 T2`; "
        "not gated " in table
    )


def test_update_command_rewrites_only_the_table(tmp_path, capsys):
    page = tmp_path / "page.md"
    page.write_text(f"# Title\n\n{MARKDOWN_BEGIN}\nold table\n{MARKDOWN_END}\n\nAfter.\n")
    assert cli.main(["strategies", "--update", str(page)]) == 0
    text = page.read_text()
    assert (
        text.startswith(f"# Title\n\n{MARKDOWN_BEGIN}\nLegend: E experts")
        and "old table" not in text
    )
    assert (
        text.endswith(f"{MARKDOWN_END}\n\nAfter.\n")
        and update_markdown(text, documented_reload_safety, documented_reversibility) == text
    )
    assert "updated" in capsys.readouterr().out


def test_update_command_without_markers_is_a_usage_error(tmp_path, capsys):
    page = tmp_path / "page.md"
    page.write_text("# no table here\n")
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["strategies", "--update", str(page)])
    assert exit_info.value.code == 2
    assert "no strategies table" in capsys.readouterr().err
    assert page.read_text() == "# no table here\n"


def test_legend_values_are_the_shape_s_sizes():
    values = sizes(QWEN)
    assert set(values) == set(LEGEND)
    assert values["E"] == 128 and values["MiB"] == 2**20
    assert (values["T13"], values["T2"]) == (QWEN.w13_bytes, QWEN.w2_bytes)
    assert (values["S13"], values["S2"]) == (768 * 4096 * 2, 4096 * 384 * 2)
    assert (values["X13"], values["X2"]) == (8 * 768, 8 * 4096)  # X13 = 8 M13, X2 = 8 H
    assert sizes(RELU2)["X13"] == 8 * 1024


@pytest.mark.parametrize(
    "text, value",
    [
        ("T13 + T2", QWEN.layer_bytes),
        ("3 T13 + 2 T2", 3 * QWEN.w13_bytes + 2 * QWEN.w2_bytes),  # a space multiplies
        ("3*T13 + 2*T2", 3 * QWEN.w13_bytes + 2 * QWEN.w2_bytes),
        ("2 (T13 + T2) + E (5 X13 + X2)", 2 * QWEN.layer_bytes + 128 * (5 * 8 * 768 + 8 * 4096)),
        ("max(S13, S2, 10 MiB)", 10 * 2**20),  # S13 is 6 MiB
        ("3 max(S13, S2)", 3 * 768 * 4096 * 2),
        ("S13 - X13", 768 * 4096 * 2 - 8 * 768),
        ("cdiv(E, max(1, 16 MiB // S13))", 64),  # 2 experts of 6 MiB per 16 MiB group
        ("-(-E // 3)", 43),
        ("0", 0),
    ],
)
def test_formula_evaluates_on_a_shape(text, value):
    assert Formula(text).evaluate(QWEN) == value


def test_formula_picks_the_not_gated_text_for_a_non_gated_layer():
    formula = Formula("3 T13 + 2 T2", "2 T13 + 2 T2")
    assert formula.evaluate(QWEN) == 3 * QWEN.w13_bytes + 2 * QWEN.w2_bytes
    assert formula.evaluate(RELU2) == 2 * RELU2.layer_bytes
    assert Formula("T13").evaluate(RELU2) == RELU2.w13_bytes  # no not-gated text: the same one
    assert str(formula) == "3 T13 + 2 T2; not gated 2 T13 + 2 T2" and str(Formula("T13")) == "T13"


@pytest.mark.parametrize(
    "text, bad",
    [
        ("__import__('os').system('true')", "__import__('os').system('true')"),
        ("T13 ** 2", "T13 ** 2"),
        ("T13 / 2", "T13 / 2"),
        ("T3 + T2", "T3"),
        ("min(S13, S2)", "min(S13, S2)"),
        ("T13.real", "T13.real"),
        ("1.5 T13", "1.5"),
    ],
)
def test_formula_refuses_anything_but_the_legend_s_arithmetic(text, bad):
    with pytest.raises(ValueError, match=f"formula .*: {re.escape(repr(bad))} is not allowed"):
        Formula(text)


def test_formula_that_does_not_parse_says_so():
    with pytest.raises(ValueError, match=r"formula 'T13 \+' does not parse"):
        Formula("T13 +")
    with pytest.raises(ValueError, match="is not allowed"):
        Formula("T13", not_gated="T13 ** 2")  # both texts are checked


def test_one_registry_holds_every_format_and_its_views_split_it():
    views = {fmt: strategies(fmt) for fmt in FORMATS}
    assert set(REGISTRY) == set().union(*views.values())
    assert sum(map(len, views.values())) == len(REGISTRY)  # no strategy in two formats' views
    assert {r.format for r in views["bf16"].values()} == {"bf16"}
    quantized = {n: r for n, r in REGISTRY.items() if r.format != "bf16"}
    assert {r.format for r in quantized.values()} == set(FORMATS) - {"bf16"}
    assert REGISTRY["nvfp4-fast"].kind == "fast" and REGISTRY["legacy"].kind == "legacy"
    # one record type for every format, registered here or not
    assert all(type(r) is Strategy for r in [*REGISTRY.values(), *UNAVAILABLE.values()])


def test_the_views_are_read_from_the_one_registry(monkeypatch):
    monkeypatch.setattr(registry, "REGISTRY", dict(REGISTRY))  # leave the real one as it was
    register(
        "nvfp4-probe",
        format="nvfp4",
        inplace=False,
        origin="test",
        peak=None,
        traffic=None,
        launches=None,
    )(lambda layer, gated: layer)
    nvfp4 = strategies("nvfp4")
    assert registry.REGISTRY["nvfp4-probe"].format == "nvfp4" and "nvfp4-probe" in nvfp4
    assert "nvfp4-probe" not in REGISTRY  # the real registry, left as it was
    assert "nvfp4-probe" not in strategies("bf16")
    # taking it out of a view of another format leaves it registered
    assert strategies("bf16").pop("nvfp4-probe", None) is None and "nvfp4-probe" in strategies(
        "nvfp4"
    )
    assert registry.REGISTRY.pop("nvfp4-probe").name == "nvfp4-probe"
    assert "nvfp4-probe" not in strategies("nvfp4") and "nvfp4-probe" in nvfp4  # a snapshot
    # a record of another format never becomes BF16's, whatever name it is stored under
    registry.REGISTRY["nvfp4-fast-alias"] = REGISTRY["nvfp4-fast"]
    assert "nvfp4-fast-alias" not in strategies("bf16") and "nvfp4-fast-alias" in strategies(
        "nvfp4"
    )


def test_a_quantized_name_is_format_dash_kind_and_its_format_is_read_at_conversion(monkeypatch):
    monkeypatch.setattr(registry, "REGISTRY", dict(REGISTRY))
    with pytest.raises(ValueError, match="'fast' of nvfp4 must be named nvfp4-<kind>"):
        register(
            "fast",
            format="nvfp4",
            inplace=False,
            origin="t",
            peak=None,
            traffic=None,
            launches=None,
        )
    register(
        "fp3-probe",
        format="fp3",
        inplace=False,
        origin="test",
        peak=None,
        traffic=None,
        launches=None,
    )(lambda layer, gated: layer)
    assert registry.REGISTRY["fp3-probe"].format == "fp3"  # registered: no format is checked yet
    layer = layer_tensors(layer_shape("gpt-oss-20b-mxfp4", 1).with_experts(1), "meta")
    # convert reads the package's registry, which the copy above stands in for
    monkeypatch.setitem(REGISTRY, "fp3-probe", registry.REGISTRY["fp3-probe"])
    with pytest.raises(
        ValueError, match="takes format 'fp3', which has no record; formats: bf16, nvfp4"
    ):
        convert(layer, strategy="fp3-probe")
    with pytest.raises(ValueError, match="takes format 'fp3', which has no record; formats: bf16"):
        convert(dict(layer), strategy="fp3-probe")


def test_convert_of_a_dict_takes_the_format_from_the_record():
    shape = layer_shape("gpt-oss-20b-mxfp4", 1).with_experts(1)
    layer = layer_tensors(shape, "cpu")
    want = convert(layer, strategy="mxfp4-fast", gated=shape.gated)
    got = convert(dict(layer), strategy="mxfp4-fast", gated=shape.gated)
    assert want.keys() == got.keys()
    assert all(torch.equal(want[k].view(torch.uint8), got[k].view(torch.uint8)) for k in want)
    with pytest.raises(
        ValueError, match="unknown strategy 'no-such'; valid strategies: .*nvfp4-fast"
    ):
        convert(dict(layer), strategy="no-such")
