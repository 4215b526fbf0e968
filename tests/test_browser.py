"""The explorer in a real browser: start `streamlit run app.py` and drive it with headless Chromium."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"
CLASSIC_QUERY = "/?sequences=[[1,2],[3,4,5],[6]]&max_seq_length=4&strategy=split"
MASKING_QUERY = (
    "/?sequences=5+6+7+%7C+8+9%0A10+11+%7C+12+13+14%0A15+16+17+18+%7C+19&max_seq_length=8&strategy=split&pad_token_id=2"
)
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
START_TIMEOUT = 30.0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


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
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true", "--server.port", str(port)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
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


@pytest.mark.timeout(90)
def test_classic_link_in_a_real_browser(browser_and_base: tuple[Any, str]) -> None:
    browser, base = browser_and_base
    page = browser.new_page(viewport={"width": 1400, "height": 1600})
    page.goto(f"{base}{CLASSIC_QUERY}", timeout=30_000)
    page.get_by_text("Block 1: [1, 2, 3, 4] -> mask: [1, 1, 1, 1]").wait_for(timeout=30_000)
    page.get_by_text("Block 2: [5, 6, 0, 0] -> mask: [1, 1, 0, 0]").wait_for(timeout=5_000)
    page.locator(".js-plotly-plot").first.wait_for(timeout=15_000)
    assert page.locator('[data-testid="stException"]').count() == 0
    assert "max_seq_length=4" in page.url and "strategy=split" in page.url
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "classic.png"))
    page.close()


def _boxes_overlap(a: dict[str, float], b: dict[str, float]) -> bool:
    return not (
        a["x"] + a["width"] <= b["x"]
        or b["x"] + b["width"] <= a["x"]
        or a["y"] + a["height"] <= b["y"]
        or b["y"] + b["height"] <= a["y"]
    )


@pytest.mark.timeout(90)
def test_layout_download_and_share_link_in_a_real_browser(browser_and_base: tuple[Any, str]) -> None:
    """At a narrow width the legend stays clear of the axis title; the JSON lines download holds the
    Result tab's blocks; the share link opens the same result in a new page."""
    browser, base = browser_and_base
    page = browser.new_page(viewport={"width": 1000, "height": 1400})
    page.goto(f"{base}{MASKING_QUERY}", timeout=30_000)
    first_block = "Block 1: [5, 6, 7, 8, 9, 10, 11, 12] -> mask: [0, 0, 0, 1, 1, 0, 0, 1]"
    page.get_by_text("Block 1: [5, 6, 7, 8, 9, 10, 11, 12]").wait_for(timeout=30_000)
    classic = page.locator('[data-testid="stCode"]').first.inner_text()
    assert classic.replace("\n", " ").startswith(first_block)
    assert "[13, 14, 15, 16, 17, 18, 19, 2]" in classic  # padding is the chosen pad id
    blocks = page.locator(".js-plotly-plot").first
    legend = blocks.locator(".legend").bounding_box()
    axis_title = blocks.locator("text.x2title").bounding_box()
    assert legend is not None and axis_title is not None and not _boxes_overlap(legend, axis_title)

    page.get_by_role("tab", name="Export").click()
    with page.expect_download(timeout=30_000) as download:
        page.get_by_role("button", name="Download JSON lines").click()
    rows = [json.loads(line) for line in Path(download.value.path()).read_text().splitlines()]
    lines = [f"Block {i + 1}: {row['input_ids']} -> mask: {row['loss_mask']}" for i, row in enumerate(rows)]
    assert lines == classic.splitlines()

    link = page.locator('[data-testid="stCode"]').last.inner_text().strip()
    assert link.startswith(base) and "pad_token_id=2" in link
    shared = browser.new_page(viewport={"width": 1400, "height": 1400})
    shared.goto(link, timeout=30_000)
    shared.get_by_text("Block 1: [5, 6, 7, 8, 9, 10, 11, 12]").wait_for(timeout=30_000)
    assert shared.locator('[data-testid="stCode"]').first.inner_text() == classic
    assert (
        shared.locator('[data-testid="stException"]').count() + page.locator('[data-testid="stException"]').count() == 0
    )
    shared.close()
    page.close()
