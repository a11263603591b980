"""What the summary and the front page say, written once as blocks; rendered as markdown or HTML.

``moe_bench.report.summary_blocks`` builds the summary as a list of ``Block``s (a heading, a few
paragraphs, a table, list items, images); ``to_markdown`` writes them as ``summary.md``,
``to_html`` as the dashboard's front page (``html/index.html``: the jinja2 template
``templates/index.html.jinja``, each table by pandas' ``DataFrame.to_html``). A table's cells
are ``Cell``s: the text, the gate's mark (bold, ``⚠`` and the change) and the benchmark whose
graph holds the figure, which the front page links to asv-tachyon's explorer. A column that is
n/a in every row gives way to one line saying what would fill it (``without_empty_columns``).

Paragraphs and items carry the little inline markdown the summary uses, ```code``` and
``**bold**``; ``to_html`` turns those two into HTML itself (a markdown library for two patterns
would not earn its place).
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import jinja2
import pandas as pd
from markupsafe import Markup

__all__ = [
    "NA",
    "Block",
    "Cell",
    "Image",
    "Link",
    "to_html",
    "to_markdown",
    "without_empty_columns",
]

#: ``(benchmark, machine) -> URL`` of the figure's graph, or None where it has none.
Link = Callable[[str, str], "str | None"]

_CODE = re.compile(r"`([^`]+)`")
_BOLD = re.compile(r"\*\*(.+?)\*\*")


@dataclass(frozen=True)
class Cell:
    """One figure of a table: ``text`` in human units, ``mark`` the gate's (``"⚠ +50%"``, empty
    where unmarked), ``benchmark`` and ``machine`` its graph (None: a figure without one, e.g. a
    predicted load time)."""

    text: str
    mark: str = ""
    benchmark: str | None = None
    machine: str | None = None


#: A cell's text where its figure is missing.
NA = "n/a"


def without_empty_columns(
    table: pd.DataFrame, fills: dict[str, str]
) -> tuple[pd.DataFrame, tuple[str, ...]]:
    """``table`` less every column whose every cell reads ``NA`` (a copy), and for each one line
    saying so and what would fill it (``fills[header]``; nothing more for a header not in it):
    a column of n/a only widens a table and tells nothing (the front page's first screen is
    1280 pixels wide). A table of no rows is returned whole, with no line."""
    empty = [
        header
        for header in table.columns
        if len(table) and all(_text(cell) == NA for cell in table[header])
    ]
    lines = tuple(
        f"{header}: n/a in every row" + (f"; {fills[header]}." if header in fills else ".")
        for header in empty
    )
    return table.drop(columns=empty), lines


def _text(cell) -> str:
    return cell.text if isinstance(cell, Cell) else str(cell)


@dataclass(frozen=True)
class Image:
    """A plot: ``path`` relative to the document, linked like a figure to ``benchmark``'s graph."""

    path: str
    benchmark: str | None = None
    machine: str | None = None


@dataclass(frozen=True, eq=False)
class Block:
    """A heading (``level`` 1-4; none where empty), then ``text`` (paragraphs), ``table`` (cells
    are ``Cell``s or plain strings), ``items`` (a list) and ``images``, in that order."""

    heading: str = ""
    level: int = 2
    text: tuple[str, ...] = ()
    table: pd.DataFrame | None = None
    items: tuple[str, ...] = ()
    images: tuple[Image, ...] = field(default=())


def to_markdown(blocks: Sequence[Block]) -> str:
    """The blocks as markdown (GitHub's tables: ``tabulate``'s pipe format)."""
    parts = []
    for block in blocks:
        if block.heading:
            parts.append(f"{'#' * block.level} {block.heading}")
        parts += block.text
        if block.table is not None:
            shown = block.table.map(_markdown_cell)
            parts.append(shown.to_markdown(index=False, disable_numparse=True))
        if block.items:
            parts.append("\n".join(f"- {item}" for item in block.items))
        parts += [f"![{image.path.rsplit('.', 1)[0]}]({image.path})" for image in block.images]
    return "\n\n".join(parts) + "\n"


def _markdown_cell(cell) -> str:
    if not isinstance(cell, Cell):
        return str(cell)
    return f"**{cell.text}** {cell.mark}" if cell.mark else cell.text


def to_html(blocks: Sequence[Block], *, link: Link, title: str, explore: str) -> str:
    """The blocks as one self-contained HTML page (its styles inline, no script but the one
    line that says the explorer needs a server), every ``Cell`` and ``Image`` with a graph
    linked through ``link``; ``explore`` the explorer's URL, named at the top. The same blocks
    give the same bytes (no clock in the page): a publish killed and rerun compares equal."""
    environment = jinja2.Environment(
        loader=jinja2.PackageLoader("moe_bench", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    environment.filters["inline"] = _inline
    rendered = [
        {
            "heading": block.heading,
            "level": block.level,
            "text": block.text,
            "table": None
            if block.table is None
            else Markup(
                block.table.map(lambda cell: _html_cell(cell, link)).to_html(
                    index=False, escape=False, border=0, classes="figures"
                )
            ),
            "listed": block.items,
            "images": [(image.path, _href(image, link)) for image in block.images],
        }
        for block in blocks
    ]
    return environment.get_template("index.html.jinja").render(
        title=title,
        blocks=rendered,
        explore=explore,
    )


def _inline(text: str) -> Markup:
    """``code`` and **bold** of the summary's markdown as HTML, everything else escaped."""
    escaped = html.escape(text, quote=False)
    return Markup(_BOLD.sub(r"<strong>\1</strong>", _CODE.sub(r"<code>\1</code>", escaped)))


def _href(figure: Cell | Image, link: Link) -> str | None:
    if figure.benchmark is None or figure.machine is None:
        return None
    return link(figure.benchmark, figure.machine)


def _html_cell(cell, link: Link) -> str:
    if not isinstance(cell, Cell):
        return html.escape(str(cell))
    text = html.escape(cell.text)
    if cell.mark:
        text = f'<strong class="worse">{text}</strong> {html.escape(cell.mark)}'
    href = _href(cell, link)
    return f'<a href="{html.escape(href)}">{text}</a>' if href else text
