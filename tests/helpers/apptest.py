"""The explorer's page run headless by Streamlit's AppTest, opened through a link's query parameters."""

from __future__ import annotations

import re
from pathlib import Path

from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parents[2] / "app.py")
TIMEOUT = 120


def open_link(params: dict[str, str | list[str]]) -> AppTest:
    """The page after its first run with ``params`` in its address (a list: the parameter repeated)."""
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    for name, value in params.items():
        at.query_params[name] = value
    return at.run()


ROOT = Path(__file__).resolve().parents[2]
SHOWN = ("markdown", "caption", "warning", "error", "info", "success", "code", "text", "exception")
"""The kinds of element whose text a visitor reads."""
SERVER_PATHS = ("/work", "/usr", "/tmp", "/home", "site-packages", "Traceback", 'File "', str(ROOT))
"""What the page must never show: the server's paths and a traceback's marks."""


def plain(value: object) -> str:
    """An element's text as the reader sees it (markdown escapes and word joiners taken out)."""
    return re.sub(r"\\(.)", r"\1", str(value)).replace("\u2060", "")


def page_of(at: AppTest) -> str:
    """Every message, code and text body on the page, as the reader sees it."""
    return "\n".join(plain(e.value) for kind in SHOWN for e in at.get(kind))


def errors_of(at: AppTest) -> list[str]:
    return [plain(e.value) for e in at.error]


def no_leak(at: AppTest, typed: str = "") -> None:
    """No exception element, no traceback, no server path the visitor did not type; every error one line."""
    assert not at.exception, [e.value for e in at.exception]
    page = page_of(at)
    for path in (*SERVER_PATHS, "/root"):
        if path not in typed:
            assert path not in page, (path, page[:2000])
    assert all("\n" not in e and len(e) < 500 for e in errors_of(at)), errors_of(at)
