"""The first start compiles everything the page uses, once: after ``warming.compile_everything`` no tab, strategy or
source makes numba compile anything more (the first version compiled in pieces, at the first use of each)."""

from __future__ import annotations

import importlib
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script: the repository root

from numba.core.registry import CPUDispatcher
from streamlit.testing.v1 import AppTest

import packing
from explorer.core import warming
from explorer.ui.tabs import TITLES

APP = str(Path(__file__).resolve().parents[2] / "app.py")


def _signatures() -> dict[str, int]:
    counts = {}
    for info in pkgutil.iter_modules(packing.__path__):
        try:
            module = importlib.import_module(f"packing.{info.name}")
        except ImportError:  # an optional peer (torch, ...) that is not installed
            continue
        for name, value in vars(module).items():
            if isinstance(value, CPUDispatcher):
                counts[f"{info.name}.{name}"] = len(value.signatures)
    return counts


def check_in_this_process() -> dict[str, tuple[int, int]]:
    """Compile at start, then open every tab for several sources; the kernels whose signatures grew."""
    warming.compile_everything()
    before = _signatures()
    assert before and any(before.values())
    links = [
        {},
        {"source": "synthetic", "count": "3000", "max_length": "512", "strategy": "first_fit_shuffle"},
        {"sequences": "5 6 7 | 8 9\n10 | 11 12", "max_seq_length": "4", "overflow": "split", "strategy": "spfhp"},
        {"source": "workload", "workload": "squad_1_1_bert_384", "sample": "2000", "overflow": "drop"},
    ]
    for params in links:
        at = AppTest.from_file(APP, default_timeout=120)
        at.query_params.update(params)
        at.run()
        for tab in TITLES:
            at.session_state["tab"] = tab
            at.run()
            assert not at.exception
    after = _signatures()
    return {name: (before.get(name, 0), count) for name, count in after.items() if count != before.get(name, 0)}


@pytest.mark.slow
def test_no_page_compiles_anything_after_the_first_start() -> None:
    """In a fresh interpreter, so that nothing another test ran counts as compiled at start."""
    done = subprocess.run(
        [sys.executable, __file__], cwd=Path(APP).parent, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {}


if __name__ == "__main__":
    print(json.dumps(check_in_this_process()))


WARM_AT_START = """
import asyncio, json, sys, time
import streamlit as st
import app  # as `streamlit run app.py` imports it, to find the server
from explorer.server import warmup
from explorer.core import warming

async def start() -> float:
    global at_enter
    async with app.LIFESPAN(app.app):
        at_enter = warmup.is_warm()  # the server listens at once: the warm-up runs beside it
        started = time.monotonic()
        while not warmup.is_warm() and time.monotonic() - started < 300:
            await asyncio.sleep(0.05)
    return time.monotonic() - started

waited = asyncio.run(start())
print(json.dumps({"server": isinstance(app.app, st.App), "warm": warmup.is_warm(), "warm at enter": at_enter,
                  "tabs loaded": "explorer.ui.tabs.result" in sys.modules, "waited": waited}))
"""


@pytest.mark.slow
def test_streamlit_run_finds_a_server_that_warms_the_page_before_the_first_visit() -> None:
    """``streamlit run app.py`` serves ``app.app`` (an ``st.App``); its lifespan loads the page's modules and every
    kernel with no visitor at all (Streamlit's own server ran nothing of the page's before the first visit)."""
    from streamlit.web.server.app_discovery import discover_asgi_app

    found = discover_asgi_app(Path(APP))
    assert found.is_asgi_app and found.import_string == "app:app"
    done = subprocess.run(
        [sys.executable, "-c", WARM_AT_START], cwd=Path(APP).parent, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert {k: result[k] for k in ("server", "warm", "tabs loaded")} == {
        "server": True,
        "warm": True,
        "tabs loaded": True,
    }
