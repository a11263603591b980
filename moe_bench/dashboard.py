"""The asv dashboard (the explorer under the front page), made to work offline; served on loopback.

``asv publish`` writes an ``index.html`` that loads jQuery, Flot and Bootstrap from public CDNs,
so on an air-gapped GPU node it shows nothing. ``make_offline`` replaces that page shell with
asv-tachyon's (PyPI ``asv-tachyon``, MIT): a self-contained UI over the same published data
(``index.json``, ``graphs/``, ``regressions.json``), with its scripts, styles and fonts in
``assets/``, opening on the newest machine. ``moe-bench publish`` (``moe_bench.publish``) puts
it in ``html/explore/`` under the front page and links each figure there (``explorer_link``).
``serve`` serves the published folder on 127.0.0.1 only.

    moe-bench dashboard offline DIR                    # a folder `asv publish` wrote
    moe-bench dashboard serve [HTML_DIR] [--port N]   # scripts/preview
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import io
import json
import re
import shutil
import sys
import threading
from importlib import metadata
from pathlib import Path
from urllib.parse import quote, urlencode, urlsplit

import asv
from asv.graph import Graph
from asv.util import load_json
from asv_tachyon import cli as tachyon_cli

from moe_suite.metrics import METRICS

from .units import SCALES

__all__ = [
    "OfflineError",
    "check_published",
    "configured_dir",
    "explorer_link",
    "external_references",
    "make_offline",
    "serve",
]

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")

#: URLs in the bundled UI that no browser fetches: XML namespace names (SVG, MathML) and links
#: quoted inside error and warning messages of the bundled React and highlight.js.
NOT_FETCHED = (
    "http://www.w3.org/",
    "https://react.dev/errors/",
    "https://github.com/highlightjs/highlight.js/",
)

#: Files the UI asks for besides asv's output (commit subjects, profile links, muted
#: regressions) with their empty contents; written so that no request of the page fails.
SIDECARS = {
    "commits.json": {},
    "profiles.json": {"paths": {}},
    "regressions-ignore.json": [],
}

#: asv-tachyon's (0.5.8, pinned) formatting of a ``bytes`` value: decimal units (3.22GB for
#: 3 GiB). ``make_offline`` replaces it with binary units built from ``units.SCALES``, so the
#: dashboard prints what the CLI and the reports print (3.00GiB).
TACHYON_BYTES = (
    'if(r==="bytes"){const f=[["B",1],["kB",1e3],["MB",1e6],["GB",1e9]];'
    "for(let p=0;p<f.length-1;p++)if(Math.abs(a)<f[p+1][1])return p===0?`${Math.round(a)}B`"
    ':(a/f[p][1]).toFixed(2)+f[p][0];return(a/1e9).toFixed(2)+"GB"}'
)
#: The regressions view's initial "factor threshold" (it hides rows of ``regressions.json`` below
#: 1.05x). ``regressions.json`` already holds what the metrics table calls a regression (an exact
#: figure's single byte more included), so the view starts at 1: it shows every row.
TACHYON_REGRESSIONS_FACTOR = "[de,De]=te.useState(1.05)"

_URL = re.compile(r"https?://[^\s\"'`()<>]+")
_PAGE_FILES = (".html", ".js", ".css")


class OfflineError(RuntimeError):
    """The published dashboard still references an external host, or is not a published one."""


def make_offline(html_dir) -> None:
    """Make the dashboard ``asv publish`` wrote in ``html_dir`` work without internet.

    Installs asv-tachyon's page shell and assets (``index.html``, ``assets/``) and its licence
    (``assets/LICENSE.asv-tachyon.txt``), removes asv's own page files (the CDN-loading shell
    and its scripts, which nothing loads any more), writes the empty sidecar files the UI asks
    for (``SIDECARS``, and ``samples/`` beside ``graphs/``), marks each benchmark's
    ``less_is_better`` in ``index.json`` from the metrics table (``moe_suite.metrics``;
    asv-tachyon would otherwise colour a rise of a ``track_`` benchmark, e.g. peak bytes, as an
    improvement), makes the UI print bytes in binary units and its regressions view list every
    published regression (``_patch_ui``). Idempotent.

    Raises
    ------
    OfflineError
        If ``html_dir`` has no ``index.json`` (not published), if it holds a benchmark the
        metrics table does not know, if the UI's script is not the one ``_patch_ui`` expects
        (another asv-tachyon), or if a page file still references an external host afterwards.
    """
    html_dir = Path(html_dir)
    index = html_dir / "index.json"
    if not index.is_file():
        raise OfflineError(
            f"html_dir {str(html_dir)!r} has no index.json: "
            "run `asv publish` first, then make_offline"
        )
    for name in _stock_page_files():
        target = html_dir / name
        if target.is_file():
            target.unlink()
    said = io.StringIO()  # its hints name its own server; ours is serve()
    with contextlib.redirect_stdout(said):
        status = tachyon_cli.main(["install", str(html_dir), "--no-backup"])
    if status:
        raise OfflineError(
            f"`asv-tachyon install {html_dir}` exited with {status}: {said.getvalue()}"
        )
    shutil.copyfile(_tachyon_licence(), html_dir / "assets" / "LICENSE.asv-tachyon.txt")
    for name, content in SIDECARS.items():
        if not (html_dir / name).exists():
            (html_dir / name).write_text(json.dumps(content))
    # The UI asks for each graph's raw samples at the same path under samples/; asv's graphs
    # carry none: an empty {revision: samples} object says so without a 404.
    for graph in (html_dir / "graphs").rglob("*.json"):
        samples = html_dir / "samples" / graph.relative_to(html_dir / "graphs")
        if not samples.exists():
            samples.parent.mkdir(parents=True, exist_ok=True)
            samples.write_text("{}")
    published = json.loads(index.read_text())
    unknown = sorted(name for name in published["benchmarks"] if name not in METRICS)
    if unknown:
        raise OfflineError(
            f"{index}: benchmark(s) not in the metrics table (moe_suite/metrics.py): "
            + ", ".join(unknown)
        )
    for name, benchmark in published["benchmarks"].items():
        benchmark["less_is_better"] = METRICS[name].lower_is_better is not False
    _open_on_newest(published, html_dir)
    index.write_text(json.dumps(published))
    _patch_ui(html_dir / "assets")
    remaining = external_references(html_dir)
    if remaining:
        raise OfflineError(
            f"{len(remaining)} external reference(s) remain in {html_dir}: "
            + "; ".join(remaining[:5])
        )


def _open_on_newest(published: dict, html_dir: Path) -> None:
    """Make the UI open on the newest machine: sort ``index.json``'s ``graph_param_list`` (the
    UI selects its first entry) and the machine filter's values by ``_newest``, and write each
    unset parameter (None) as the string ``"null"``, which names the same graph folder
    (``sglang-null``) but, unlike None, can be given in a link's ``f-KEY=VALUE``."""
    entries = [
        {key: "null" if value is None else value for key, value in entry.items()}
        for entry in published["graph_param_list"]
    ]
    entries.sort(key=lambda entry: _newest(html_dir, entry), reverse=True)
    published["graph_param_list"] = entries
    published["params"] = {
        key: ["null" if value is None else value for value in values]
        for key, values in published["params"].items()
    }
    order = list(dict.fromkeys(entry["machine"] for entry in entries))
    published["params"]["machine"] = order + [
        m for m in published["params"].get("machine", []) if m not in order
    ]


def _newest(html_dir: Path, entry: dict) -> tuple[int, int]:
    """``(newest revision, series)`` with a value in ``entry``'s graphs (from asv's
    ``summary.json`` of the entry: each series' ``last_rev`` and ``last_value``): the entry whose
    results reach the newest commit, then the one with more figures, is the newest."""
    summary = html_dir / Path(Graph.get_file_path(entry, "summary")).with_suffix(".json")
    series = json.loads(summary.read_text()) if summary.is_file() else []
    measured = [s["last_rev"] for s in series if s["last_value"] is not None]
    return max(measured, default=-1), len(measured)


def _measured(points: list) -> bool:
    """Whether a graph's ``[revision, value]`` points hold a value (a parameterized benchmark's
    value is a list, one per series)."""
    return any(
        any(v is not None for v in value) if isinstance(value, list) else value is not None
        for _, value, *_ in points
    )


def _measured_series(points: list) -> list[int]:
    """The indices of a parameterized graph's series that hold a value at some point (none for
    a graph of one series)."""
    rows = [value for _, value, *_ in points if isinstance(value, list)]
    width = max(map(len, rows), default=0)
    return [i for i in range(width) if any(row[i] is not None for row in rows)]


def explorer_link(explore_dir, url: str = "explore/", *, every_series: bool = False):
    """``(benchmark, machine) -> URL`` of the benchmark's graph of the machine's newest results
    in the explorer published in ``explore_dir`` (served at ``url``), or None where that graph
    holds no value (a machine that did not run it is never linked to).

    The URL gives the UI every parameter of the machine's first ``graph_param_list`` entry (the
    newest, ``make_offline``) as ``f-KEY=VALUE``: the UI otherwise fills a parameter the link
    leaves out from its first entry, another machine's. With ``every_series`` it also selects
    every series of the graph that holds a value (``params=I,J``: their indices in the product
    of the benchmark's parameters; the UI otherwise draws the first three, measured or not):
    an engine's history, whose graphs are its own line and the reference lines.
    """
    explore_dir = Path(explore_dir)
    published = json.loads((explore_dir / "index.json").read_text())
    entries = {}
    for entry in published["graph_param_list"]:
        entries.setdefault(entry["machine"], entry)

    def link(benchmark: str, machine: str) -> str | None:
        entry = entries.get(machine)
        if entry is None or benchmark not in published["benchmarks"]:
            return None
        graph = explore_dir / f"{Graph.get_file_path(entry, benchmark)}.json"
        points = json.loads(graph.read_text()) if graph.is_file() else []
        if not _measured(points):
            return None
        query = {"view": "explore", "bench": benchmark}
        series = _measured_series(points) if every_series else []
        if series:
            query["params"] = ",".join(map(str, series))
        query |= {f"f-{key}": value for key, value in entry.items()}
        return f"{url}#{urlencode(query, quote_via=quote)}"

    return link


def _patch_ui(assets: Path) -> None:
    """Make asv-tachyon's script print bytes in binary units and list every published regression.

    Replaces ``TACHYON_BYTES`` and ``TACHYON_REGRESSIONS_FACTOR``, each found exactly once in
    the pinned asv-tachyon's script; another script (another version) is refused, not ignored.
    """
    steps = sorted(SCALES["bytes"])  # smallest first
    table = ",".join(f'["{label}",{divisor:.0f}]' for divisor, label in steps)
    patches = {
        TACHYON_BYTES: (
            f'if(r==="bytes"){{const f=[{table}];for(let p=f.length-1;p>0;p--)'
            "if(Math.abs(a)>=f[p][1])return(a/f[p][1]).toFixed(2)+f[p][0];"
            "return`${Math.round(a)}B`}"
        ),
        TACHYON_REGRESSIONS_FACTOR: TACHYON_REGRESSIONS_FACTOR.replace("1.05", "1"),
    }
    texts = {path: path.read_text() for path in sorted(assets.glob("*.js"))}
    for stock, ours in patches.items():
        holders = [path for path, text in texts.items() if stock in text]
        if len(holders) == 1 and texts[holders[0]].count(stock) == 1:
            texts[holders[0]] = texts[holders[0]].replace(stock, ours)
        elif holders or not any(ours in text for text in texts.values()):
            raise OfflineError(
                f"{assets}: asv-tachyon's script is not the one moe_bench.dashboard patches "
                f"({stock!r} "
                f"found in {len(holders)} file(s), expected 1): reinstall asv-tachyon==0.5.8 or "
                "update the TACHYON_ snippets there"
            )
    for path, text in texts.items():
        path.write_text(text)


def external_references(html_dir) -> list[str]:
    """Every ``http(s)://`` URL to a non-loopback host in the page files of ``html_dir``.

    Page files are the ``.html``, ``.js`` and ``.css`` files (what a browser loads); URLs listed
    in ``NOT_FETCHED`` are ignored. Returns ``"relative/path: url"`` strings, sorted.
    """
    html_dir = Path(html_dir)
    found = []
    for path in sorted(html_dir.rglob("*")):
        if path.suffix not in _PAGE_FILES or not path.is_file():
            continue
        for url in _URL.findall(path.read_text(errors="replace")):
            if _host(url) not in LOOPBACK_HOSTS and not url.startswith(NOT_FETCHED):
                found.append(f"{path.relative_to(html_dir)}: {url}")
    return found


def _host(url: str) -> str | None:
    try:
        return urlsplit(url).hostname
    except ValueError:  # e.g. an unclosed "[" of an IPv6 host: not loopback as far as we know
        return None


def check_published(html_dir) -> Path:
    """``html_dir`` as a ``Path``; ``FileNotFoundError`` saying how to publish it where it has no
    front page (``index.html``)."""
    html_dir = Path(html_dir)
    if not (html_dir / "index.html").is_file():
        raise FileNotFoundError(
            f"html_dir {str(html_dir)!r} has no index.html: run scripts/bench (or "
            "`moe-bench publish`) first"
        )
    return html_dir


def serve(html_dir, port: int = 0) -> tuple[http.server.ThreadingHTTPServer, str]:
    """Serve ``html_dir`` on 127.0.0.1 (never another interface) from a daemon thread.

    ``port=0`` picks a free port. Returns ``(server, url)``; stop with ``server.shutdown()``.
    """
    html_dir = check_published(html_dir)
    handler = functools.partial(_QuietHandler, directory=str(html_dir))
    server = _LoopbackServer(("127.0.0.1", port), handler)
    threading.Thread(target=server.serve_forever, name="dashboard", daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


class _LoopbackServer(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        # A browser that navigates away closes connections mid-file; that is not a server fault.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 (the base class's name)
        pass  # one line per graph file would drown the URL that preview prints


def _stock_page_files() -> list[str]:
    """Names of the page files asv copies into every html_dir (its ``www`` folder)."""
    return [p.name for p in (Path(asv.__file__).parent / "www").iterdir() if p.is_file()]


def _tachyon_licence() -> Path:
    dist = metadata.distribution("asv-tachyon")
    licence = next((f for f in dist.files or () if f.name == "LICENSE"), None)
    if licence is None:
        raise OfflineError("the installed asv-tachyon has no LICENSE file; reinstall it with pip")
    return Path(dist.locate_file(licence))


def configured_dir(config: Path, key: str) -> Path:
    """The folder ``key`` (``html_dir``, ``results_dir``) of asv config ``config``, relative to
    the config's folder (asv's defaults: ``html``, ``results``)."""
    conf = load_json(str(config), js_comments=True)
    return config.parent / conf.get(key, key.removesuffix("_dir"))
