"""The explorer in a real browser: start `streamlit run app.py` and drive it with headless Chromium at phone,
laptop and wide-screen widths. Every chart's axes and the absence of overlaps are read from Plotly's own layout
(``_fullLayout``, ``calcdata``, the drawn text); hostile links must leave no exception and no foreign markup.

Screenshots of every tab at every width are written to ``docs/screenshots/`` when ``PACKING_SCREENSHOTS=1``.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

pytestmark = pytest.mark.slow  # a real Chromium against a real server: the full suite only

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "docs" / "screenshots"
CLASSIC_QUERY = "/?sequences=[[1,2],[3,4,5],[6]]&max_seq_length=4&strategy=split"
PATIENCE_MS = 240_000
"""How long a wait for a condition of the page may last: within the test's timeout, never a fixed pause."""
MASKING = "5 6 7 | 8 9\n10 11 | 12 13 14\n15 16 17 18 | 19"
MASKING_QUERY = f"/?sequences={quote(MASKING)}&max_seq_length=8&strategy=split&pad_token_id=2"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
START_TIMEOUT = 90.0
WIDTHS = (400, 1000, 1400)
PAGES = {  # (tab, screenshot name): link
    ("Result", "result"): "/?",  # the first screen: the classic question, its answer and the follow-ups
    ("Result", "text"): "/?source=text",  # a chat through the byte tokenizer: decoded cells and the turns
    ("Compare", "compare"): (
        "/?sequences="
        + quote("[[1, 2, 3, 4], [5, 6, 7], [8, 9, 10], [11, 12], [13, 14], [15, 16]]")
        + "&max_seq_length=8&strategy=bfd"
    ),
    ("Sweep", "sweep"): "/?source=workload&workload=squad_1_1_bert_384&sample=20000",
    ("Attention & positions", "attention_positions"): (
        "/?sequences=" + quote("[[1, 2, 3], [4, 5], [6, 7, 8]]") + "&max_seq_length=8&strategy=bfd"
    ),
    ("Images", "images"): "/?",  # the bundled multimodal example: image tiles and the four position rows
    ("Loss weights", "loss_weights"): "/?source=workload&workload=squad_1_1_bert_384&sample=2000",
    ("Step through", "step_through"): (
        "/?sequences=" + quote("[[1, 2, 3], [4, 5], [6, 7, 8], [9]]") + "&max_seq_length=8&strategy=bfd"
    ),
    ("Practice", "practice"): "/?problem=3",
    ("Inspect", "inspect"): "/?sequences=1",
    ("Export", "export"): MASKING_QUERY,
}
HOSTILE = [
    "/?strategy=" + quote("[Click here](https://example.com/x)"),
    "/?sequences=" + quote("![x](https://example.com/x.png)"),
    "/?sequences=" + quote("<img src=https://example.com/y.png>"),
    "/?sequences=" + "%5B" * 3000,
    "/?max_seq_length=" + "9" * 3000,
    "/?max_seq_length=1e400&count=" + "9" * 400 + "&source=synthetic",
    "/?source=" + quote("<b>bold</b>") + "&tab=" + quote("[t](https://example.com)"),
]


def _port() -> int:
    """A free port in 8600-8699."""
    for port in range(8600 + os.getpid() % 50, 8700):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 8600-8699")


def _wait_until_healthy(port: int, server: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"streamlit exited with code {server.returncode} before serving the page")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=1) as reply:
                if reply.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    pytest.fail(f"streamlit did not answer on port {port} within {START_TIMEOUT:.0f} s")


@pytest.fixture(scope="module")
def browser_and_base() -> Iterator[tuple[Any, str]]:
    """A running ``streamlit run app.py`` and a headless Chromium, shared by this module's tests."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("no chromium executable on PATH (install Debian's chromium to run this test)")
    port = _port()
    command = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true"]
    command += ["--server.address", "127.0.0.1", "--server.port", str(port)]
    server = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_until_healthy(port, server)
        with sync_api.sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
            try:
                yield browser, f"http://127.0.0.1:{port}"
            finally:
                browser.close()
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def _settle(page: Any, timeout: float = 60.0) -> None:
    """Wait until the app has finished running (no 'Running…' status) and the charts have been drawn."""
    deadline = time.monotonic() + timeout
    page.wait_for_selector('[data-testid="stApp"]', timeout=30_000)
    quiet = 0
    while time.monotonic() < deadline:
        running = page.locator('[data-testid="stStatusWidget"]').count() > 0
        spinner = page.locator('[data-testid="stSpinner"]').count() > 0
        quiet = 0 if running or spinner else quiet + 1
        if quiet >= 4:
            return
        page.wait_for_timeout(250)


# Every chart: for each heatmap, the axes' ranges against the bricks Plotly computed; the boxes of the titles,
# axis titles, subplot titles and legend as drawn; and the chart's right edge against the window.
_CHART_FACTS = """
(gd) => {
  const fl = gd._fullLayout;
  const heatmaps = [];
  (gd.calcdata || []).forEach((cd, i) => {
    const trace = gd._fullData[i];
    if (!trace || trace.type !== 'heatmap' || !cd[0] || !cd[0].x) return;
    const xa = fl[trace.xaxis.replace('x', 'xaxis')], ya = fl[trace.yaxis.replace('y', 'yaxis')];
    const xs = Array.from(cd[0].x), ys = Array.from(cd[0].y);
    heatmaps.push({x: [xs[0], xs[xs.length - 1]], y: [ys[0], ys[ys.length - 1]],
                   xrange: xa.range.slice(), yrange: ya.range.slice(), xtype: xa.type, ytype: ya.type});
  });
  const boxes = [];
  const add = (el, name) => {
    const r = el.getBoundingClientRect();
    if (r.width > 0 && r.height > 0 && (el.textContent || '').trim() !== '' || name === 'legend')
      if (r.width > 0 && r.height > 0) boxes.push({name, x: r.x, y: r.y, w: r.width, h: r.height});
  };
  gd.querySelectorAll('.infolayer text').forEach((el) => {
    const cls = el.getAttribute('class') || '';
    if (/(^|\\s)(gtitle|[xy]\\d*title)(\\s|$)/.test(cls)) add(el, cls);
  });
  gd.querySelectorAll('.annotation').forEach((el) => {
    const index = Number(el.getAttribute('data-index'));
    const a = fl.annotations[index];
    if (a && a.xref === 'paper' && a.yref === 'paper') add(el.querySelector('text') || el, 'subplot title ' + index);
  });
  const legend = gd.querySelector('.legend .bg');
  if (legend) add(legend, 'legend');
  const rect = gd.getBoundingClientRect();
  return {heatmaps, boxes, right: rect.right, width: window.innerWidth,
          chart: {x: rect.x, y: rect.y, w: rect.width, h: rect.height}};
}
"""


def _overlap(a: dict[str, float], b: dict[str, float]) -> bool:
    slack = 1.0
    return not (
        a["x"] + a["w"] <= b["x"] + slack
        or b["x"] + b["w"] <= a["x"] + slack
        or a["y"] + a["h"] <= b["y"] + slack
        or b["y"] + b["h"] <= a["y"] + slack
    )


def _check_charts(page: Any, where: str) -> int:
    """Assert, for every chart on the page, axes exactly the heatmap cells and no overlapping titles or legend."""
    charts = page.locator(".js-plotly-plot")
    for i in range(charts.count()):
        facts = charts.nth(i).evaluate(_CHART_FACTS)
        for heat in facts["heatmaps"]:
            low, high = sorted(heat["x"])
            assert sorted(heat["xrange"]) == pytest.approx([low, high], abs=1e-6), (where, i, heat)
            low, high = sorted(heat["y"])
            assert sorted(heat["yrange"]) == pytest.approx([low, high], abs=1e-6), (where, i, heat)
        boxes = facts["boxes"]
        chart = facts["chart"]
        for box in boxes:  # nothing cut off at the chart's edges
            inside = box["x"] >= chart["x"] - 1 and box["x"] + box["w"] <= chart["x"] + chart["w"] + 1
            assert inside, (where, i, box, chart)
        for a in range(len(boxes)):
            for b in range(a + 1, len(boxes)):
                assert not _overlap(boxes[a], boxes[b]), (where, i, boxes[a], boxes[b])
        assert facts["right"] <= facts["width"] + 1, (where, i, "chart wider than the window")
    return int(charts.count())


# The page's layout at this width: labels cut with an ellipsis (buttons, metric labels, tabs), repeated tick labels
# on an axis ("0 1 1"), text printed in a heatmap cell wider than the cell, and tables whose columns do not fit.
_LAYOUT_FACTS = """
() => {
  const cut = [];
  const visible = (el) => { const r = el.getBoundingClientRect(); return r.width > 0 && r.height > 0; };
  const labels = document.querySelectorAll(
    '[data-testid="stMain"] button *, [data-testid="stMain"] button, [data-testid="stMetricLabel"] *,'
    + ' [data-testid="stMetricValue"] *, [data-testid="stMain"] [role="tab"] *');
  labels.forEach((el) => {
    if (!visible(el) || el.children.length > 0 && el.tagName !== 'BUTTON') return;
    if (el.scrollWidth > el.clientWidth + 1) cut.push((el.textContent || '').trim().slice(0, 60));
  });
  const tabs = document.querySelector('[data-testid="stMain"] [role="tablist"]');
  const hiddenTabs = [];
  if (tabs) {
    const box = tabs.getBoundingClientRect();
    tabs.querySelectorAll('[role="tab"]').forEach((tab) => {
      const r = tab.getBoundingClientRect();
      if (r.right > box.right + 1 || r.left < box.left - 1) hiddenTabs.push(tab.textContent.trim());
    });
  }
  const ticks = [];
  const cells = [];
  document.querySelectorAll('.js-plotly-plot').forEach((gd, chart) => {
    gd.querySelectorAll('.xaxislayer-above, .yaxislayer-above').forEach((axis) => {
      const texts = [...axis.querySelectorAll('.xtick text, .ytick text')].map((el) => el.textContent.trim())
        .filter((text) => text !== '');
      if (new Set(texts).size !== texts.length) ticks.push({chart, texts});
    });
    const fl = gd._fullLayout;
    (gd._fullData || []).forEach((trace, i) => {
      if (trace.type !== 'heatmap' || !trace.text || !trace.visible) return;
      const xa = fl[trace.xaxis.replace('x', 'xaxis')];
      const width = Math.abs(xa.l2p(1) - xa.l2p(0));
      const layer = gd.querySelectorAll('.heatmaplayer > g')[i] || null;
      const texts = layer ? layer.querySelectorAll('text') : gd.querySelectorAll('.heatmaplayer text');
      texts.forEach((el) => {
        const w = el.getBBox().width;
        if (w > width + 0.5) cells.push({chart, text: el.textContent.slice(0, 20), w, width});
      });
    });
  });
  const tables = [];
  document.querySelectorAll('[data-testid="stDataFrame"]').forEach((frame, index) => {
    const scroller = frame.querySelector('.dvn-scroller');
    if (scroller && scroller.scrollWidth > scroller.clientWidth + 1)
      tables.push({index, scroll: scroller.scrollWidth, client: scroller.clientWidth});
  });
  return {cut, hiddenTabs, ticks, cells: cells.slice(0, 5), tables, window: window.innerWidth};
}
"""


_TAB_STYLE_APPLIED = """() => {
  const tabs = document.querySelector('[data-testid="stMain"] [role="tablist"]');
  return !tabs || getComputedStyle(tabs).flexWrap === 'wrap';
}"""
"""The tab bar's wrapping style is in force (a slow browser draws the tabs before it loads the style)."""
WIDE_FRAME = 900
"""A table frame at least this wide (the main column at 1,400 px) shows every column without scrolling; narrower
frames (a phone, a laptop beside the sidebar) scroll their tables inside themselves, the first column pinned."""


def _check_layout(page: Any, where: str) -> None:
    """No cut label, no tab out of sight, no repeated tick, no text past its cell, every table's columns shown
    (on a wide screen; inside its own frame on a narrow one)."""
    page.wait_for_function(_TAB_STYLE_APPLIED, timeout=30_000)  # the page's style loads with its own script
    facts = page.evaluate(_LAYOUT_FACTS)
    if os.environ.get("PACKING_LAYOUT_SURVEY"):  # list every defect instead of stopping at the first
        print("LAYOUT", where, json.dumps({k: v for k, v in facts.items() if v and k != "window"}), flush=True)
        return
    assert facts["cut"] == [], (where, "cut labels", facts["cut"])
    assert facts["hiddenTabs"] == [], (where, "tabs out of sight", facts["hiddenTabs"])
    assert facts["ticks"] == [], (where, "repeated tick labels", facts["ticks"])
    assert facts["cells"] == [], (where, "text wider than its cell", facts["cells"])
    wide = [table for table in facts["tables"] if table["client"] >= WIDE_FRAME]
    assert wide == [], (where, "tables wider than their frame on a wide screen", wide)
    assert all(table["client"] <= facts["window"] for table in facts["tables"]), (where, "a table past the window")


def _no_exception(page: Any) -> None:
    assert page.locator('[data-testid="stException"]').count() == 0
    body = page.locator("body").inner_text()
    assert "Traceback" not in body and "site-packages" not in body


@pytest.mark.timeout(300)
def test_classic_link_in_a_real_browser(browser_and_base: tuple[Any, str]) -> None:
    """Each wait is for a condition (the text shown, the run ended, the chart drawn), as long as the test's own
    timeout allows: on two cores kept busy by other processes, the page takes longer, not a different path."""
    browser, base = browser_and_base
    page = browser.new_page(viewport={"width": 1400, "height": 1600})
    page.goto(f"{base}{CLASSIC_QUERY}", timeout=PATIENCE_MS)
    page.get_by_text("Block 1: [1, 2, 3, 4] -> mask: [1, 1, 1, 1]").wait_for(timeout=PATIENCE_MS)
    _settle(page, PATIENCE_MS / 1000)
    page.get_by_text("Block 2: [5, 6, 0, 0] -> mask: [1, 1, 0, 0]").wait_for(timeout=PATIENCE_MS)
    page.locator(".js-plotly-plot").first.wait_for(timeout=PATIENCE_MS)
    _no_exception(page)
    page.close()


FIRST_SCREEN_WIDTHS = (390, 1280, 1920)
"""A phone, a laptop and a wide screen: where a learner meets the first screen."""


@pytest.mark.timeout(300)
@pytest.mark.parametrize("width", FIRST_SCREEN_WIDTHS)
def test_the_first_screen_answers_within_the_first_viewport_and_a_follow_up_is_one_click(
    browser_and_base: tuple[Any, str], width: int
) -> None:
    """At every width: the classic answer inside the first screenful, the three follow-ups named, no console
    error; clicking one opens its example on its tab."""
    browser, base = browser_and_base
    page = browser.new_page(viewport={"width": width, "height": 900})
    errors: list[str] = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.goto(f"{base}/", timeout=PATIENCE_MS)
    answer = page.get_by_text("Block 1: [1, 2, 3, 4] -> mask: [1, 1, 1, 1]")
    answer.wait_for(timeout=PATIENCE_MS)
    _settle(page, PATIENCE_MS / 1000)
    box = answer.bounding_box()
    assert box is not None and box["y"] + box["height"] <= 900, box  # no scrolling to reach the answer
    for name in ("No-split bin packing", "Cross-document attention and positions", "Response-only loss"):
        page.get_by_role("button", name=name).wait_for(state="visible", timeout=PATIENCE_MS)  # drawn after the answer
    _no_exception(page)
    if os.environ.get("PACKING_SCREENSHOTS") == "1":
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / f"first_screen_{width}.png"))
    page.get_by_role("button", name="Response-only loss").click()
    page.get_by_text("Block 2: [10, 11, 12, 13, 14, 0, 0, 0]").wait_for(timeout=PATIENCE_MS)
    page.get_by_text("would train in block 2 without their prompt").wait_for(timeout=PATIENCE_MS)
    _settle(page, PATIENCE_MS / 1000)
    _no_exception(page)
    assert errors == [], errors
    page.close()


@pytest.mark.timeout(900)
@pytest.mark.parametrize("width", WIDTHS)
def test_every_tab_at_every_width_has_exact_axes_and_no_overlaps(browser_and_base: tuple[Any, str], width: int) -> None:
    browser, base = browser_and_base
    shoot = os.environ.get("PACKING_SCREENSHOTS") == "1"
    page = browser.new_page(viewport={"width": width, "height": 1100})
    drawn = 0
    for (tab, name), query in PAGES.items():
        page.goto(f"{base}{query}&tab={quote(tab)}", timeout=60_000)
        page.get_by_role("tab", name=tab, exact=True).wait_for(timeout=60_000)
        _settle(page)
        _no_exception(page)
        drawn += _check_charts(page, f"{tab} at {width} px")
        _check_layout(page, f"{tab} ({name}) at {width} px")
        if shoot:  # the page scrolls inside Streamlit's main block: grow the window to the content first
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            height = page.evaluate(
                "() => Math.max(800, ...[...document.querySelectorAll('[data-testid=\"stMain\"], section')]"
                ".map((e) => e.scrollHeight))"
            )
            page.set_viewport_size({"width": width, "height": min(int(height) + 40, 6000)})
            _settle(page)
            page.screenshot(path=str(SCREENSHOTS / f"{name}_{width}.png"))
            page.set_viewport_size({"width": width, "height": 1100})
    assert drawn >= 10
    page.close()


@pytest.mark.timeout(300)
def test_hostile_links_leave_no_exception_and_no_foreign_markup(browser_and_base: tuple[Any, str]) -> None:
    browser, base = browser_and_base
    page = browser.new_page(viewport={"width": 1000, "height": 1000})
    for query in HOSTILE:
        page.goto(f"{base}{query}", timeout=60_000)
        page.locator('[data-testid="stApp"]').wait_for(timeout=60_000)
        _settle(page)
        _no_exception(page)
        assert page.locator('a[href*="example.com"]').count() == 0, query[:60]
        assert page.locator('img[src*="example.com"]').count() == 0, query[:60]
        assert page.locator("b:text('bold')").count() == 0, query[:60]
    page.close()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("width", FIRST_SCREEN_WIDTHS)
def test_a_headline_number_of_hundreds_of_millions_is_shown_whole(
    browser_and_base: tuple[Any, str], width: int
) -> None:
    """A million synthetic lengths train some 800 million tokens: '803,780,476' ended in an ellipsis in its 150 px
    tile at every width (found by the hostile browser pass); a value longer than a tile holds widens its tile."""
    browser, base = browser_and_base
    page = browser.new_page(viewport={"width": width, "height": 1000})
    page.goto(f"{base}/?source=synthetic&count=1000000&max_length=4096", timeout=PATIENCE_MS)
    page.get_by_text("Tokens with mask 1").first.wait_for(timeout=PATIENCE_MS)
    _settle(page, PATIENCE_MS / 1000)
    values = page.locator('[data-testid="stMetricValue"]')
    cut = [
        size
        for index in range(values.count())
        if (
            size := values.nth(index).evaluate(
                "e => [(e.querySelector('div') || e).scrollWidth, "
                "(e.querySelector('div') || e).clientWidth, e.innerText]"
            )
        )[0]
        > size[1]
    ]
    assert values.count() >= 8 and not cut, cut
    _no_exception(page)
    page.close()


@pytest.mark.timeout(180)
def test_download_and_share_link_in_a_real_browser(browser_and_base: tuple[Any, str]) -> None:
    """The JSON lines download holds the Result tab's blocks; the share link opens the same result."""
    browser, base = browser_and_base
    page = browser.new_page(viewport={"width": 1000, "height": 1400})
    page.goto(f"{base}{MASKING_QUERY}", timeout=60_000)
    first_block = "Block 1: [5, 6, 7, 8, 9, 10, 11, 12] -> mask: [0, 0, 0, 1, 1, 0, 0, 1]"
    page.get_by_text("Block 1: [5, 6, 7, 8, 9, 10, 11, 12]").wait_for(timeout=60_000)
    classic = page.locator("[data-testid='stMarkdownContainer']", has_text="Block 1: [").first.inner_text()
    assert classic.replace("\n", " ").startswith(first_block)
    assert "[13, 14, 15, 16, 17, 18, 19, 2]" in classic  # padding is the chosen pad id

    page.get_by_role("tab", name="Export").click()
    with page.expect_download(timeout=60_000) as download:
        page.get_by_role("button", name="Download JSON lines").click()
    rows = [json.loads(line) for line in Path(download.value.path()).read_text().splitlines()]
    lines = [f"Block {i + 1}: {row['input_ids']} -> mask: {row['loss_mask']}" for i, row in enumerate(rows)]
    assert lines == classic.splitlines()

    link = page.locator('[data-testid="stCode"]').last.inner_text().strip()
    assert link.startswith(base) and "pad_token_id=2" in link
    shared = browser.new_page(viewport={"width": 1400, "height": 1400})
    shared.goto(link, timeout=60_000)
    shared.get_by_text("Block 1: [5, 6, 7, 8, 9, 10, 11, 12]").wait_for(timeout=60_000)
    assert shared.locator("[data-testid='stMarkdownContainer']", has_text="Block 1: [").first.inner_text() == classic
    _no_exception(shared)
    _no_exception(page)
    shared.close()
    page.close()
