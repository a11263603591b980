"""One set of blocks, two renderings: summary.md (markdown) and the front page (HTML)."""

from __future__ import annotations

import pandas as pd

from moe_bench.document import Block, Cell, Image, to_html, to_markdown, without_empty_columns

BLOCKS = [
    Block("Run `box` at **abc**", text=("a <b> & `c`",)),
    Block(
        table=pd.DataFrame(
            {
                "strategy": ["legacy", "x<y"],
                "peak": [Cell("3.00 GiB", benchmark="bench.A", machine="box"), Cell("n/a")],
                "time": [
                    Cell("1.69 GiB", "⚠ +50%", benchmark="bench.B", machine="box"),
                    Cell("2 s", benchmark="bench.B", machine="other"),
                ],
            }
        ),
        items=("`box`: no figure worse",),
        images=(Image("plots/box-history.png", "bench.B", "box"),),
    ),
]


def link(benchmark: str, machine: str) -> str | None:
    """A graph only for machine ``box`` (``other`` ran nothing: never linked)."""
    return f"explore/#bench={benchmark}&m={machine}" if machine == "box" else None


def test_markdown_marks_and_plots():
    text = to_markdown(BLOCKS)
    assert text.startswith("## Run `box` at **abc**\n\na <b> & `c`\n\n| strategy ")
    assert "| legacy     | 3.00 GiB | **1.69 GiB** ⚠ +50% |" in text
    assert "- `box`: no figure worse\n\n![plots/box-history](plots/box-history.png)\n" in text


def test_html_escapes_links_and_marks_the_same_cells():
    page = to_html(BLOCKS, link=link, title="t & u", explore="explore/")
    assert "<title>t &amp; u</title>" in page
    assert "<h2>Run <code>box</code> at <strong>abc</strong></h2>" in page
    assert "<p>a &lt;b&gt; &amp; <code>c</code></p>" in page
    assert '<td><a href="explore/#bench=bench.A&amp;m=box">3.00 GiB</a></td>' in page
    assert (
        '<a href="explore/#bench=bench.B&amp;m=box"><strong class="worse">1.69 GiB</strong> '
        "⚠ +50%</a>"
    ) in page
    assert "<td>2 s</td>" in page and "<td>n/a</td>" in page and "<td>x&lt;y</td>" in page
    assert '<a href="explore/#bench=bench.B&amp;m=box"><img src="plots/box-history.png"' in page
    assert "<li><code>box</code>: no figure worse</li>" in page


def test_a_column_n_a_in_every_row_gives_way_to_a_line():
    table = pd.DataFrame(
        {
            "strategy": ["legacy", "inplace"],
            "load time": [Cell("n/a"), Cell("n/a", benchmark="bench.T", machine="box")],
            "peak": [Cell("3.00 GiB"), Cell("n/a")],  # n/a in one row only: kept
            "note": ["n/a", "n/a"],  # plain strings count too; no fill given
        }
    )
    shown, lines = without_empty_columns(table, {"load time": "a device's costs predict it"})
    assert list(shown.columns) == ["strategy", "peak"]
    assert list(table.columns) == ["strategy", "load time", "peak", "note"]  # not changed
    assert lines == (
        "load time: n/a in every row; a device's costs predict it.",
        "note: n/a in every row.",
    )
    empty = table.iloc[:0]
    assert without_empty_columns(empty, {})[0].columns.equals(empty.columns)
