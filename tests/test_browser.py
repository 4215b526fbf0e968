"""The explorer in a real browser: start `streamlit run app.py`, open the classic link in headless Chromium."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"
CLASSIC_QUERY = "/?sequences=[[1,2],[3,4,5],[6]]&max_seq_length=4&strategy=split"
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


@pytest.mark.timeout(90)
def test_classic_link_in_a_real_browser() -> None:
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
                page = browser.new_page(viewport={"width": 1400, "height": 1600})
                page.goto(f"http://127.0.0.1:{port}{CLASSIC_QUERY}", timeout=30_000)
                page.get_by_text("Block 1: [1, 2, 3, 4] -> mask: [1, 1, 1, 1]").wait_for(timeout=30_000)
                page.get_by_text("Block 2: [5, 6, 0, 0] -> mask: [1, 1, 0, 0]").wait_for(timeout=5_000)
                page.locator(".js-plotly-plot").first.wait_for(timeout=15_000)
                assert page.locator('[data-testid="stException"]').count() == 0
                assert "max_seq_length=4" in page.url and "strategy=split" in page.url
                ARTIFACTS.mkdir(exist_ok=True)
                page.screenshot(path=str(ARTIFACTS / "classic.png"))
            finally:
                browser.close()
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
