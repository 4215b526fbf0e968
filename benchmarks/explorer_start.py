"""How long the explorer takes to show the classic example in a browser: after a restart, or on a running server.

Each run opens the page in a new browser context (no cache, no cookies: a first visit) and times, from the
moment the page is requested:

- ``title``: the page's title is drawn (the first script run has reached it);
- ``classic``: the classic example's text form, ``Block 1: [1, 2, 3, 4] -> mask: [1, 1, 1, 1]``, is shown;
- ``charts``: the Result tab's three Plotly charts are drawn (Plotly has laid them out: ``_fullLayout``).

With ``--restart`` every run starts a new server (kernels already compiled and cached next to the code, as
after any restart), waits until it answers its health check and ``--settle`` seconds more, then opens the
page: the server's first script run is part of the time. Without it, the runs meet one running server.

    python -P benchmarks/explorer_start.py --runs 5 [--restart] [--port 8660]

Prints the median and range of each time, and every run. Needs Debian's chromium and Playwright.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

from playwright.sync_api import Browser, sync_playwright

sys.path.insert(0, str(Path(__file__).resolve().parent))
from servers import start_server, stop_server

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
CLASSIC = "Block 1: [1, 2, 3, 4] -> mask: [1, 1, 1, 1]"
CHARTS_DRAWN = "() => [...document.querySelectorAll('.js-plotly-plot')].filter(p => p._fullLayout).length >= 3"


def one_visit(browser: Browser, port: int, width: int) -> dict[str, float]:
    """Seconds from requesting the page to the title, the classic text and the drawn charts."""
    context = browser.new_context(viewport={"width": width, "height": 1600})
    page = context.new_page()
    started = time.perf_counter()
    page.goto(f"http://127.0.0.1:{port}/", wait_until="commit")
    page.get_by_text("Sample packing explorer").first.wait_for(timeout=60_000)
    title = time.perf_counter() - started
    page.get_by_text(CLASSIC).first.wait_for(timeout=60_000)
    classic = time.perf_counter() - started
    page.wait_for_function(CHARTS_DRAWN, timeout=60_000)
    charts = time.perf_counter() - started
    context.close()
    return {"title": title, "classic": classic, "charts": charts}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--restart", action="store_true", help="a new server for every run")
    parser.add_argument("--settle", type=float, default=2.0, help="seconds between the health check and the visit")
    parser.add_argument("--port", type=int, default=8660)
    parser.add_argument("--width", type=int, default=1400)
    args = parser.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("needs Debian's chromium on PATH")
    runs: list[dict[str, float]] = []
    server = None if args.restart else start_server(args.port)
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
            if server is not None:  # the first visit of a running server is a restart's: not counted
                one_visit(browser, args.port, args.width)
            for run in range(args.runs):
                if args.restart:
                    server = start_server(args.port)
                    time.sleep(args.settle)
                runs.append(one_visit(browser, args.port, args.width))
                print(f"run {run + 1}: " + ", ".join(f"{k} {v:.2f} s" for k, v in runs[-1].items()), file=sys.stderr)
                if args.restart and server is not None:
                    stop_server(server)
                    server = None
            browser.close()
    finally:
        if server is not None:
            stop_server(server)
    kind = "after a restart" if args.restart else "on a running server"
    print(f"{args.runs} visits {kind}, new browser context each, {args.width} px, pid {os.getpid()}")
    print("| time to | median (s) | range (s) |\n|---|---|---|")
    for key in ("title", "classic", "charts"):
        values = [r[key] for r in runs]
        print(f"| {key} | {statistics.median(values):.2f} | {min(values):.2f}–{max(values):.2f} |")


if __name__ == "__main__":
    main()
