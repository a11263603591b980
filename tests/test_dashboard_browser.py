"""The published dashboard, made offline, in headless Debian Chromium over 127.0.0.1.

The fabricated results (``fixtures/asv_results``: 4 commits, 2 shapes x 4 strategies, a step up
of ``strided_copy`` on ``qwen3-235b-a22b/tp4`` in the latest commit) are published with asv's
own ``asv publish``, made offline with ``make_offline`` and served with ``serve``. Every page is
loaded with every non-loopback request blocked and recorded, and must show no JavaScript error,
no console error and no failed request. Screenshots: ``artifacts/dashboard/`` (git-ignored).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from conftest import requires_chromium
from fixtures.asv_fixture import publish

from moe_bench import dashboard
from moe_bench.dashboard import (
    TACHYON_BYTES,
    OfflineError,
    external_references,
    make_offline,
    serve,
)

CHROMIUM = shutil.which("chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = Path(__file__).resolve().parents[1] / "artifacts" / "dashboard"
COMMITS = ["14ad08f8", "9562b6c0", "7128b89f", "c2fb4ee0"]  # the fixture's, oldest first
BENCHMARKS = [
    "bench_convert.LayerTime.track_layer_seconds",
    "bench_convert.PeakMemory.track_peak_transient_bytes",
    "bench_convert.LayerTime.track_copy_ratio",
    "bench_convert.LayerTime.track_whole_model_seconds",
]

#: Pixels of the first uPlot canvas with a saturated colour (max - min channel > 80).
COLOURED_PIXELS = """() => {
  const canvas = document.querySelector('.uplot canvas');
  const rgba = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
  let coloured = 0;
  for (let i = 0; i < rgba.length; i += 4) {
    const hi = Math.max(rgba[i], rgba[i + 1], rgba[i + 2]);
    const lo = Math.min(rgba[i], rgba[i + 1], rgba[i + 2]);
    if (rgba[i + 3] > 0 && hi - lo > 80) coloured++;
  }
  return coloured;
}"""


@pytest.fixture(scope="module")
def published(tmp_path_factory) -> tuple[Path, list[str]]:
    """The fixture's dashboard made offline, and the external references asv published."""
    html = publish(tmp_path_factory.mktemp("dashboard"))
    as_published = external_references(html)
    make_offline(html)
    return html, as_published


@pytest.fixture(scope="module")
def html_dir(published) -> Path:
    return published[0]


@pytest.fixture(scope="module")
def url(html_dir):
    server, address = serve(html_dir)
    yield address
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@dataclass
class Visit:
    """One page load: the page, what went wrong, and the graph JSON files it fetched."""

    page: object
    problems: list[str] = field(default_factory=list)
    graphs: dict[str, object] = field(default_factory=dict)


def visit(browser, url: str, fragment: str, screenshot: str, ready: str) -> Visit:
    """Open ``url + fragment`` in a fresh page, wait for the selector ``ready``, screenshot it."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    seen = Visit(page)

    def route(request_route):
        if urlsplit(request_route.request.url).hostname != "127.0.0.1":
            seen.problems.append(f"request to an external host: {request_route.request.url}")
            return request_route.abort()
        return request_route.continue_()

    def response(resp):
        if resp.status >= 400:
            seen.problems.append(f"HTTP {resp.status}: {resp.url}")
        elif "/graphs/" in resp.url:
            seen.graphs[resp.url] = resp.json()

    page.route("**/*", route)
    page.on("pageerror", lambda error: seen.problems.append(f"JavaScript error: {error}"))
    page.on("console", lambda m: m.type == "error" and seen.problems.append(f"console: {m.text}"))
    page.on("requestfailed", lambda r: seen.problems.append(f"failed: {r.url} ({r.failure})"))
    page.on("response", response)
    page.goto(url + fragment, wait_until="networkidle")
    page.wait_for_selector(ready)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=SCREENSHOTS / screenshot, full_page=True)
    return seen


def test_published_pages_reference_no_external_host(published):
    html_dir, as_published = published
    assert any("https://code.jquery.com/" in ref for ref in as_published)  # asv's CDN page
    assert external_references(html_dir) == []
    assert "cdn" not in (html_dir / "index.html").read_text()
    assert (html_dir / "assets" / "LICENSE.asv-tachyon.txt").read_text().startswith("MIT License")
    index = json.loads((html_dir / "index.json").read_text())
    assert all(b["less_is_better"] for b in index["benchmarks"].values())
    # The UI's bytes formatting replaced by binary units, once.
    (script,) = (html_dir / "assets").glob("index-*.js")
    assert (
        TACHYON_BYTES not in script.read_text()
        and script.read_text().count('["GiB",1073741824]') == 1
    )


def test_make_offline_refuses_unknown_benchmarks_and_another_ui(tmp_path, html_dir, monkeypatch):
    copy = tmp_path / "html"
    shutil.copytree(html_dir, copy)
    index = json.loads((copy / "index.json").read_text())
    index["benchmarks"]["bench_misc.Widgets.track_widgets"] = {"unit": "widgets"}
    (copy / "index.json").write_text(json.dumps(index))
    with pytest.raises(
        OfflineError, match="not in the metrics table.*bench_misc.Widgets.track_widgets"
    ):
        make_offline(copy)
    del index["benchmarks"]["bench_misc.Widgets.track_widgets"]
    (copy / "index.json").write_text(json.dumps(index))
    make_offline(copy)  # idempotent
    # An asv-tachyon whose bytes formatting differs from the pinned one's: refused, not ignored.
    monkeypatch.setattr(dashboard, "TACHYON_BYTES", TACHYON_BYTES.replace("1e9", "1e12"))
    with pytest.raises(OfflineError, match="script is not the one moe_bench.dashboard patches"):
        make_offline(copy)


def test_external_references_finds_cdn_links_only(tmp_path):
    (tmp_path / "index.html").write_text(
        '<script src="https://code.jquery.com/jquery-3.3.1.min.js"></script>'
        '<a href="http://127.0.0.1:8080/">local</a><svg xmlns="http://www.w3.org/2000/svg"/>'
    )
    (tmp_path / "index.json").write_text(
        '{"project_url": "https://example.org/"}'
    )  # data, not loaded
    assert external_references(tmp_path) == [
        "index.html: https://code.jquery.com/jquery-3.3.1.min.js"
    ]
    with pytest.raises(OfflineError, match="has no index.json: run `asv publish` first"):
        make_offline(tmp_path / "not-published")


def test_serves_on_loopback_only(html_dir):
    server, address = serve(html_dir)
    try:
        assert server.server_address[0] == "127.0.0.1" and address.startswith("http://127.0.0.1:")
    finally:
        server.shutdown()
        server.server_close()


@requires_chromium
def test_index_lists_the_benchmarks(browser, url):
    seen = visit(browser, url, "", "index.png", ready=".tile")
    for name in BENCHMARKS:
        assert seen.page.get_by_text(name, exact=True).is_visible(), name
    assert seen.problems == []
    seen.page.close()


@requires_chromium
@pytest.mark.parametrize(
    ("name", "unit_text", "legacy_qwen"),
    [
        ("bench_convert.LayerTime.track_layer_seconds", "ms", "120.000ms"),
        # 3 x 805306368 + 2 x 402653184 = 3 GiB: binary units, as the CLI and the reports print it
        ("bench_convert.PeakMemory.track_peak_transient_bytes", "GiB", "3.00GiB"),
    ],
    ids=["time", "bytes"],
)
def test_graph_renders_with_data_points(browser, url, name, unit_text, legacy_qwen):
    seen = visit(
        browser,
        url,
        f"#view=explore&bench={name}",
        f"graph-{name.rsplit('.', 1)[1]}.png",
        ready=".uplot canvas",
    )
    # The graph file it fetched: 4 commits x 8 parameter series (flashinfer's null: n/a).
    (graph,) = [g for u, g in seen.graphs.items() if u.endswith(f"/{name}.json")]
    points = [p for p in graph if p[1][2] is not None]  # strided_copy of qwen3 (3rd column)
    assert len(graph) == 4 and len(points) == 4
    # Drawn: uPlot's canvas holds coloured series lines (its axes and grid are grey only).
    assert seen.page.evaluate(COLOURED_PIXELS) > 500
    legend = seen.page.locator(".chart-legend").inner_text()
    assert "strategy='strided_copy'" in legend and "strategy='legacy'" in legend
    # The side panel lists the latest points, newest first, with a human unit.
    rows = seen.page.locator(".point-row").all_inner_texts()
    assert [row.split()[0] for row in rows] == COMMITS[::-1]
    assert all(row.endswith(unit_text) for row in rows), rows
    # ... of the first series (legacy on qwen3, the same at every commit), in the CLI's units.
    assert all(row.endswith(legacy_qwen) for row in rows), rows
    assert f"LATEST\n{legacy_qwen}" in seen.page.locator("body").inner_text()
    assert seen.problems == []
    seen.page.close()


@requires_chromium
def test_regressions_view_follows_the_gate_rules(browser, url):
    """The injected step, by the metrics table's rules (asv.conf.json's thresholds): the peak
    bytes (x1.5, exact) regressed; the time figures (x1.6) are within NOISE_FACTOR."""
    seen = visit(browser, url, "#view=regressions", "regressions.png", ready="table tbody tr")
    rows = seen.page.locator("table tbody tr").all_inner_texts()
    assert "factor ≥ 1\n" in seen.page.locator("body").inner_text() + "\n"  # hides none of them
    assert len(rows) == 1, rows
    assert "('qwen3-235b-a22b/tp4', 'strided_copy')" in rows[0]
    assert "PeakMemory.track_peak_transient_bytes" in rows[0]
    assert seen.problems == []
    seen.page.close()
