"""The PNG plots on the fabricated asv results: files, sizes and what their labels say."""

from __future__ import annotations

from pathlib import Path

import pytest
from matplotlib.figure import Figure
from matplotlib.image import imread

from moe_bench.plots import write_plots
from moe_bench.results import load_results

RESULTS = Path(__file__).parent / "fixtures" / "asv_results"
STRATEGIES = ["legacy", "preallocated", "strided_copy", "flashinfer"]
NAMES = [
    "fixture-box-qwen3-235b-a22b-tp4.png",
    "fixture-box-deepseek-v3-tp8.png",
    "fixture-box-time-vs-memory.png",
    "fixture-box-history.png",
]


@pytest.fixture(scope="module")
def results():
    return load_results(RESULTS)


@pytest.fixture(scope="module")
def plotted(results, tmp_path_factory):
    """``(paths, {file name: Figure}, folder)`` of one ``write_plots`` call, made once for the
    module (seconds a call): each test reads its own figure, none changes one."""
    figures = {}
    savefig = Figure.savefig

    def keep(figure, path, **kwargs):
        figures[Path(path).name] = figure
        return savefig(figure, path, **kwargs)

    folder = tmp_path_factory.mktemp("plots")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Figure, "savefig", keep)
        return write_plots(results, folder), figures, folder


def texts(figure: Figure) -> list[str]:
    """Every piece of text drawn in ``figure``: titles, axis and tick labels, annotations."""
    figure.canvas.draw()
    return [t.get_text() for t in figure.findobj(lambda a: hasattr(a, "get_text")) if t.get_text()]


def test_writes_one_png_per_shape_and_two_overviews(plotted):
    paths, _, folder = plotted
    assert [p.name for p in paths] == NAMES
    for path in paths:
        assert path.parent == folder and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    height, width, _ = imread(paths[0]).shape
    assert (width, height) == (1056, 396)  # 2 panels of 4.8 x 3.6 in at 110 dpi


def test_shape_plot_has_time_and_memory_per_strategy_in_human_units(plotted):
    figure = plotted[1][NAMES[0]]
    time_axes, memory_axes = figure.axes
    assert time_axes.get_ylabel() == "time of one layer (ms)"
    assert memory_axes.get_ylabel() == "peak transient memory (GiB)"
    assert [t.get_text() for t in time_axes.get_xticklabels()] == STRATEGIES
    assert [b.get_height() for b in time_axes.patches] == pytest.approx([120, 60, 48, 0])
    assert [b.get_height() for b in memory_axes.patches][2] == pytest.approx(
        1.6875
    )  # 1.5 x 1.125 GiB
    drawn = texts(figure)
    assert "qwen3-235b-a22b/tp4 on fixture-box at c2fb4ee0" in drawn
    assert drawn.count("n/a") == 2  # flashinfer skipped: labelled, not silently missing


def test_time_vs_memory_names_every_measured_strategy(plotted):
    figure = plotted[1][NAMES[2]]
    panels = [a for a in figure.axes if a.get_visible()]
    assert [a.get_title() for a in panels] == ["qwen3-235b-a22b/tp4", "deepseek-v3/tp8"]
    assert panels[0].get_xlabel() == "peak transient memory (GiB)"
    assert panels[0].get_ylabel() == "time of one layer (ms)"
    assert [c.get_label() for c in panels[0].collections] == [
        "legacy",
        "preallocated",
        "strided_copy",
    ]
    (legend,) = figure.legends
    assert [t.get_text() for t in legend.get_texts()] == ["legacy", "preallocated", "strided_copy"]


def test_history_has_a_line_per_strategy_over_the_commits(plotted):
    figure = plotted[1][NAMES[3]]
    qwen = figure.axes[0]
    assert [t.get_text() for t in qwen.get_xticklabels()] == [
        "14ad08f8",
        "9562b6c0",
        "7128b89f",
        "c2fb4ee0",
    ]
    lines = {line.get_label(): list(line.get_ydata()) for line in qwen.get_lines()}
    assert lines["strided_copy"] == pytest.approx([30, 30, 30, 48])  # the injected step, in ms
    assert lines["legacy"] == pytest.approx([120] * 4)
    assert "flashinfer" not in lines


def test_no_plots_without_time_or_memory_results(results, tmp_path):
    ratios = results[results["benchmark"].str.contains("LayerTime.track_copy_ratio")]
    assert write_plots(ratios, tmp_path) == []
