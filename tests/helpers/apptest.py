"""The explorer's page run headless by Streamlit's AppTest, opened through a link's query parameters."""

from __future__ import annotations

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
