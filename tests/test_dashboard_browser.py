"""The published dashboard, made offline, in headless Debian Chromium over 127.0.0.1.

The explorer: the fabricated results (``fixtures/asv_results``: 4 commits, 2 shapes x 4
strategies, a step up of ``strided_copy`` on ``qwen3-235b-a22b/tp4`` in the latest commit) are
published with asv's own ``asv publish``, made offline with ``make_offline`` and served with
``serve``. The front page: the committed results (``results/``) published by ``moe-bench
publish`` as scripts/bench does, its first screen (1280x1000) checked against the summary and
for its width.
Every page is loaded with every non-loopback request blocked and recorded, and must show no
JavaScript error, no console error and no failed request. Screenshots: ``artifacts/dashboard/``
(git-ignored).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import pytest
from asv.graph import Graph
from conftest import COMMITTED_RESULTS, requires_chromium
from fixtures.asv_fixture import publish
from fixtures.engine_results import make_engine_results

from moe_bench import dashboard
from moe_bench.dashboard import (
    TACHYON_BYTES,
    OfflineError,
    explorer_link,
    external_references,
    make_offline,
    serve,
)
from moe_bench.publish import publish as publish_dashboard
from moe_bench.results import load_results

# One pytest-xdist worker for the module (scripts/test: --dist loadgroup): one publish of each
# dashboard and one Chromium, as without xdist; the committed results' with test_without_torch.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(COMMITTED_RESULTS)]

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


def visit(
    browser,
    url: str,
    fragment: str,
    screenshot: str,
    ready: str,
    viewport: tuple[int, int] = (1280, 900),
    full_page: bool = True,
) -> Visit:
    """Open ``url + fragment`` in a fresh page, wait for the selector ``ready``, screenshot it
    (the whole page, or the first screen of ``viewport``)."""
    page = browser.new_page(viewport={"width": viewport[0], "height": viewport[1]})
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
    page.screenshot(path=SCREENSHOTS / screenshot, full_page=full_page)
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


# The front page, on the committed results.

ROOT = Path(__file__).resolve().parents[1]
FIRST_SCREEN = (1280, 1000)
QWEN = "qwen3-235b-a22b/tp4"
#: The headline's columns the first screen must show as the summary has them.
DRIVER_CALLS_AND_PEAKS = [
    "cudaMalloc",
    "cudaFree",
    "refused",
    "retries",
    "peak transient (1 layer)",
    "peak reserved (rank)",
]

#: Every table cell of the page: its column header, its text, its link (or None), its box.
CELLS = """() => [...document.querySelectorAll('table.figures')].flatMap((table, t) => {
  const headers = [...table.querySelectorAll('thead th')].map(th => th.innerText.trim());
  return [...table.querySelectorAll('tbody tr')].flatMap((tr, r) =>
    [...tr.children].map((td, c) => {
      const box = td.getBoundingClientRect();
      return {table: t, row: r, header: headers[c], text: td.innerText.trim(),
              href: td.querySelector('a')?.getAttribute('href') ?? null, bottom: box.bottom,
              right: box.right, top: box.top};
    }));
})"""


@pytest.fixture(scope="module")
def committed(committed_results) -> tuple[Path, Path]:
    """``(html_dir, summary.md)`` of the committed results (conftest's ``committed_results``),
    where the explorer can graph them."""
    df = load_results(ROOT / "results")
    newest = df.loc[df["date"].idxmax(), "commit"]
    history = subprocess.run(
        ["git", "-C", str(ROOT), "rev-list", "--first-parent", "HEAD"],
        capture_output=True,
        text=True,
    ).stdout.split()
    if newest not in history:  # asv graphs only commits of the branch
        pytest.skip(
            f"commit {newest[:8]} of the newest committed results is not in this checkout's "
            "first-parent history (a shallow clone, or no git): the explorer would graph nothing"
        )
    return committed_results


@pytest.fixture(scope="module")
def committed_url(committed):
    server, address = serve(committed[0])
    yield address
    server.shutdown()
    server.server_close()


def newest_machine() -> str:
    df = load_results(ROOT / "results")
    return df.loc[df["date"].idxmax(), "machine"]


def summary_headline(summary: Path, machine: str) -> dict[str, dict[str, str]]:
    """The summary's headline rows of ``QWEN`` on ``machine``: strategy -> header -> cell."""
    text = summary.read_text()
    start = text.index(f"### `{machine}` at ", text.index("## Whole-rank load ("))
    # The heading, a line per column n/a in every row, then the table.
    lines = next(p for p in text[start:].split("\n\n") if p.startswith("|")).splitlines()
    headers = [cell.strip() for cell in lines[0].strip("|").split("|")]
    rows = [
        dict(zip(headers, (c.strip() for c in line.strip("|").split("|")), strict=True))
        for line in lines
    ]
    # A strategy's cell names it, then "(best strategy)" where it was this run's best: a measured
    # fact, so rows are keyed by the name alone.
    return {row["strategy"].split(" (")[0]: row for row in rows if row.get("shape") == QWEN}


@requires_chromium
def test_front_page_first_screen_answers_as_the_summary(browser, committed, committed_url):
    html_dir, summary = committed
    machine = newest_machine()
    seen = visit(
        browser,
        committed_url,
        "",
        "front-page.png",
        ready="table.figures",
        viewport=FIRST_SCREEN,
        full_page=False,
    )
    expected = summary_headline(summary, machine)
    assert set(expected) >= {"legacy", "preallocated"}
    # The first heading of a run is the newest machine's, its table the first on the page.
    assert f"{machine} at " in seen.page.locator("h3").first.inner_text()
    cells = seen.page.evaluate(CELLS)
    headline = [c for c in cells if c["table"] == 0]
    for strategy in ("legacy", "preallocated"):
        (row,) = {
            c["row"]
            for c in headline
            if c["header"] == "strategy"
            and c["text"].split(" (")[0] == strategy
            and any(o["row"] == c["row"] and o["text"] == QWEN for o in headline)
        }
        shown = {c["header"]: c for c in headline if c["row"] == row}
        for header in DRIVER_CALLS_AND_PEAKS:
            assert shown[header]["text"] == expected[strategy][header], (strategy, header)
            assert shown[header]["bottom"] <= FIRST_SCREEN[1], "below the first screen"
            assert shown[header]["href"].startswith("explore/#view=explore&bench=")
    # Every replayed figure of the headline links to its graph (a load time only where measured).
    assert all(c["href"] for c in headline if c["header"] not in ("shape", "strategy", "load time"))
    # Nothing of the first screen's tables lies beyond a 1280-pixel window's right edge, and a
    # column n/a in every row is one line instead (here load time: no device's costs committed).
    first_screen = [c for c in cells if c["top"] < FIRST_SCREEN[1]]
    assert first_screen and max(c["right"] for c in first_screen) <= FIRST_SCREEN[0]
    headers = {c["header"] for c in headline}
    assert all(any(c["text"] != "n/a" for c in headline if c["header"] == h) for h in headers)
    if "load time" not in headers:
        assert "load time: n/a in every row; a run on CUDA" in seen.page.inner_text("body")
    assert "—" not in seen.page.locator("body").inner_text()  # no empty card, no missing figure
    assert seen.problems == []
    seen.page.close()


@requires_chromium
def test_every_link_and_plot_of_the_front_page_resolves(browser, committed, committed_url):
    html_dir, _ = committed
    seen = visit(browser, committed_url, "", "front-page-full.png", ready="table.figures")
    hrefs = set(seen.page.eval_on_selector_all("a[href]", "as => as.map(a => a.href)"))
    sources = seen.page.eval_on_selector_all("img", "is => is.map(i => [i.src, i.naturalWidth])")
    assert sources and all(width > 0 for _, width in sources)  # every plot drawn
    for url in {href.split("#")[0] for href in hrefs} | {src for src, _ in sources}:
        assert seen.page.request.get(url).status == 200, url
    graphs = 0
    for href in hrefs:
        fragment = urlsplit(href).fragment
        if not fragment:
            continue
        query = dict(parse_qsl(fragment, keep_blank_values=True))
        params = {key[2:]: value for key, value in query.items() if key.startswith("f-")}
        graph = html_dir / "explore" / f"{Graph.get_file_path(params, query['bench'])}.json"
        assert graph.is_file(), href  # the graph the explorer fetches for the link
        graphs += 1
    assert graphs >= len(DRIVER_CALLS_AND_PEAKS)  # distinct graphs, each linked from many cells
    assert seen.problems == []
    seen.page.close()


@requires_chromium
def test_the_explorer_opens_on_the_newest_machine(browser, committed_url):
    machine = newest_machine()
    seen = visit(browser, committed_url, "explore/", "explorer.png", ready=".tile")
    selected = dict(parse_qsl(urlsplit(seen.page.url).fragment))
    assert selected["machine"] == machine
    assert seen.problems == []
    seen.page.close()
    # A figure's link opens its graph on its machine, drawn.
    seen = visit(
        browser, committed_url, "", "front-page-link.png", ready="table.figures a", full_page=False
    )
    seen.page.locator("table.figures a").first.click()
    seen.page.wait_for_selector(".uplot canvas")
    seen.page.wait_for_load_state("networkidle")
    assert dict(parse_qsl(urlsplit(seen.page.url).fragment))["machine"] == machine
    assert seen.page.evaluate(COLOURED_PIXELS) > 500
    assert seen.problems == []
    seen.page.close()


@requires_chromium
def test_the_front_page_works_as_a_file(browser, committed):
    html_dir, _ = committed
    page = browser.new_page(viewport={"width": FIRST_SCREEN[0], "height": FIRST_SCREEN[1]})
    problems = []
    page.on("pageerror", lambda error: problems.append(f"JavaScript error: {error}"))
    page.on("requestfailed", lambda r: problems.append(f"failed: {r.url} ({r.failure})"))
    page.goto((html_dir / "index.html").as_uri(), wait_until="load")
    assert page.get_by_text(QWEN).first.is_visible()
    widths = page.eval_on_selector_all("img", "is => is.map(i => i.naturalWidth)")
    assert widths and all(widths)
    # The one thing a file cannot do, said where it applies: the explorer needs a server.
    assert page.locator("#served").is_visible()
    assert problems == []
    page.close()


def test_figures_link_only_to_a_machine_with_data(committed):
    """A machine that never ran a benchmark (the older one predates the rank load) is not
    linked to for it; the newest machine is, with every parameter of its newest run."""
    link = explorer_link(committed[0] / "explore")
    replayed = "bench_allocator.RankLoadReplay.track_num_device_alloc"
    df = load_results(ROOT / "results")
    ran = set(df.loc[(df["benchmark"] == replayed) & df["value"].notna(), "machine"])
    without = set(df["machine"]) - ran
    assert without, "the committed results have a machine without the rank load"
    assert all(link(replayed, machine) is None for machine in without)
    href = link(replayed, newest_machine())
    assert href.startswith(f"explore/#view=explore&bench={replayed}&")
    assert f"f-machine={newest_machine()}" in href
    assert link("bench_misc.Widgets.track_widgets", newest_machine()) is None


# The engine dashboard, on a small vLLM history's results (fixtures/engine_results.py: made with
# asv's Results API, not measured; building and measuring a history is tests/test_engine_asv.py's).

ENGINE_FORMATS = [
    "BF16 (qwen3-235b-a22b/tp4)",
    "NVFP4 (qwen3-235b-a22b-nvfp4/tp4)",
    "MXFP4 (gpt-oss-120b-mxfp4/tp2)",
    "FP8 per-tensor (llama-4-maverick-fp8/tp8)",
    "DeepSeek block-FP8 (deepseek-r1-fp8block/tp8)",
    "MXFP8 (minimax-m3-mxfp8/tp4)",
    "MXINT4 (kimi-k2-thinking-mxint4/tp8)",
]


@pytest.fixture(scope="module")
def engine_published(tmp_path_factory) -> tuple[Path, list[str]]:
    """The engine history's dashboard, published by ``moe-bench publish`` as the nightly does."""
    config, hashes = make_engine_results(tmp_path_factory.mktemp("engine"))
    return publish_dashboard(config), hashes


@pytest.fixture(scope="module")
def engine_url(engine_published):
    server, address = serve(engine_published[0])
    yield address
    server.shutdown()
    server.server_close()


def engine_tables(cells: list[dict]) -> dict[int, list[dict[str, dict]]]:
    """``CELLS`` by table, each a list of rows (header -> cell)."""
    tables: dict[int, dict[int, dict]] = {}
    for cell in cells:
        tables.setdefault(cell["table"], {}).setdefault(cell["row"], {})[cell["header"]] = cell
    return {t: list(rows.values()) for t, rows in tables.items()}


@requires_chromium
def test_engine_front_page_answers_a_vllm_maintainer(browser, engine_published, engine_url):
    html_dir, hashes = engine_published
    seen = visit(
        browser,
        engine_url,
        "",
        "engine-front-page.png",
        ready="table.figures",
        viewport=FIRST_SCREEN,
        full_page=False,
    )
    # The engine and the measured range; the run's date (asv's started_at), not the newest
    # commit's (2026-11-16).
    assert seen.page.locator("h1").inner_text() == "vLLM main: v0.29.0 .. v0.34.0, 6 commits"
    body = seen.page.inner_text("body")
    assert "engine-box ran last on 2026-12-03 08:25 UTC" in body
    # The measured environments' versions (engine_env.MEASURED), not this suite's.
    assert (
        "Beside the engine: FlashInfer 0.7.2.post1, torch 2.13.0+cpu (v0.29.0 .. v0.31.0); "
        "FlashInfer 0.7.4, torch 2.13.0+cpu (v0.33.0 .. v0.34.0)." in body
    )
    assert seen.page.locator("h3").all_inner_texts() == ENGINE_FORMATS  # every grid
    tables = engine_tables(seen.page.evaluate(CELLS))
    own = [rows for rows in tables.values() if "subject" in rows[0]]
    references = [rows for rows in tables.values() if "strategy" in rows[0]]
    assert len(own) == len(references) == len(ENGINE_FORMATS)
    # BF16: vLLM's step at 0.31.0 (peak down, traffic 2x, launches 1.5x) with its subject, on
    # the first screen; the unchanged commits in between left out.
    bf16 = own[0]
    assert [row["commit"]["text"] for row in bf16] == [
        f"v0.29.0 ({hashes[0][:8]})",
        f"v0.31.0 ({hashes[2][:8]})",
        f"v0.34.0 ({hashes[5][:8]})",
    ]
    step = bf16[1]
    assert step["subject"]["text"] == "vLLM 0.31.0: the sdist vllm-0.31.0.tar.gz"
    assert step["peak transient"]["text"] == "6.01 MiB (-99%)"
    assert step["traffic"]["text"] == "4.51 GiB ⚠ +100%"
    assert step["launches"]["text"] == "768 launches ⚠ +50%"
    assert step["launches"]["bottom"] <= FIRST_SCREEN[1]
    # FP8 per-tensor: 0.34.0's copy-back; MXINT4: the commit whose cell failed, then measured.
    fp8 = own[ENGINE_FORMATS.index("FP8 per-tensor (llama-4-maverick-fp8/tp8)")]
    assert fp8[-1]["commit"]["text"].startswith("v0.34.0")
    assert fp8[-1]["traffic"]["text"] == "18.9 GiB ⚠ +25%"
    assert fp8[-1]["launches"]["text"] == "2,823 launches ⚠ +0.07%"
    mxint4 = own[-1]
    assert [row["commit"]["text"][:7] for row in mxint4] == [
        "v0.29.0",
        "v0.30.0",
        "v0.31.0",
        "v0.34.0",
    ]
    assert mxint4[1]["launches"]["text"] == "failed ⚠"
    # The reference lines: never marked, though preallocated's time rose 2.79x at the newest.
    bf16_references = {row["strategy"]["text"]: row for row in references[0]}
    assert list(bf16_references) == ["flashinfer", "legacy", "preallocated", "inplace"]
    assert bf16_references["preallocated"]["copy ratio"]["text"] == "12.3"
    assert not any(
        "⚠" in cell["text"] for rows in references for row in rows for cell in row.values()
    )
    # Every figure links to its graph on the machine, a file the explorer fetches.
    figures = [
        cell
        for rows in tables.values()
        for row in rows
        for header, cell in row.items()
        if header not in ("commit", "subject", "strategy")
    ]
    assert figures and all(cell["href"] for cell in figures)
    for href in {cell["href"] for cell in figures}:
        query = dict(parse_qsl(urlsplit(href).fragment))
        params = {key[2:]: value for key, value in query.items() if key.startswith("f-")}
        graph = html_dir / "explore" / f"{Graph.get_file_path(params, query['bench'])}.json"
        assert graph.is_file(), href
    assert seen.problems == []
    seen.page.close()


def test_engine_regressions_are_the_engines_own(engine_published):
    """asv's regressions view: vLLM's steps (BF16 at 0.31.0, FP8 at 0.34.0), no reference
    line's (``preallocated``'s 2.79x copy ratio is a loaded machine's)."""
    html_dir, _ = engine_published
    listed = json.loads((html_dir / "explore" / "regressions.json").read_text())["regressions"]
    names = {entry[0] for entry in listed}
    assert names and all(name.endswith(", 'vllm')") for name in names), names
    assert "bench_engine.Traffic.track_launches('qwen3-235b-a22b/tp4', 'vllm')" in names
    assert "bench_fp8.Traffic.track_traffic_bytes('llama-4-maverick-fp8/tp8', 'vllm')" in names


def test_engine_explorer_selectors_show_the_measured_versions(engine_published):
    """The explorer's selectors: the FlashInfer and torch the commits were measured with
    (``measured-by.jsonl``), not the environment's torch requirement nor this suite's own; each
    entry's graphs where the UI builds their path from them, and the regressions there too."""
    explore = engine_published[0] / "explore"
    published = json.loads((explore / "index.json").read_text())
    assert published["params"]["flashinfer"] == ["0.7.2.post1, 0.7.4"]
    assert published["params"]["torch"] == ["2.13.0+cpu"]
    assert "vllm" not in published["params"]
    for entry in published["graph_param_list"]:
        assert entry["flashinfer"] == "0.7.2.post1, 0.7.4" and entry["torch"] == "2.13.0+cpu"
        for name in published["benchmarks"]:
            assert (explore / f"{Graph.get_file_path(entry, name)}.json").is_file(), name
    listed = json.loads((explore / "regressions.json").read_text())["regressions"]
    assert listed and all((explore / path).is_file() for _, path, *_ in listed)
    assert all(params["flashinfer"] == "0.7.2.post1, 0.7.4" for _, _, params, *_ in listed)


@requires_chromium
def test_engine_figure_link_opens_its_graph_with_the_subjects(
    browser, engine_published, engine_url
):
    hashes = engine_published[1]
    seen = visit(
        browser,
        engine_url,
        "",
        "engine-front-page-link.png",
        ready="table.figures a",
        full_page=False,
    )
    seen.page.get_by_role("link", name="768 launches ⚠ +50%").click()
    seen.page.wait_for_selector(".uplot canvas")
    seen.page.wait_for_load_state("networkidle")
    selected = dict(parse_qsl(urlsplit(seen.page.url).fragment))
    assert selected["bench"] == "bench_engine.Traffic.track_launches"
    assert selected["machine"] == "engine-box"
    assert seen.page.evaluate(COLOURED_PIXELS) > 500
    # The engine's line and the reference lines drawn; an engine not installed (n/a) not.
    legend = seen.page.locator(".chart-legend").inner_text()
    for strategy in ("vllm", "flashinfer", "legacy", "preallocated", "inplace"):
        assert f"strategy='{strategy}'" in legend, strategy
    assert "sglang-installed" not in legend
    # The explorer names the engine's commits by release, environment and subject
    # (commits.json): each of its recent points' titles, newest first.
    titles = seen.page.locator(".point-row").evaluate_all("rows => rows.map(r => r.title)")
    held = "FlashInfer 0.7.4, torch 2.13.0+cpu"
    assert titles[:2] == [
        f"v0.34.0 ({held}): vLLM 0.34.0: the sdist vllm-0.34.0.tar.gz",
        f"v0.33.0-1-g{hashes[4][:7]} ({held}): README: a line",
    ]
    # Its selectors: the machine's facts and the versions the commits were measured with; no
    # version of this suite's own environment (engine-nightly records the machine without them).
    selectors = seen.page.locator("body").inner_text()
    assert "FLASHINFER\n0.7.2.post1, 0.7.4" in selectors, selectors
    assert "TORCH\n2.13.0+cpu" in selectors and "VLLM" not in selectors
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    seen.page.screenshot(path=SCREENSHOTS / "engine-explorer.png", full_page=True)
    assert seen.problems == []
    seen.page.close()
