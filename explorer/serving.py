"""The server's start: the page's modules and kernels load as the server starts, before the first visitor.

``streamlit run app.py`` finds ``app``, an ``st.App`` (Streamlit's ASGI server) with this ``lifespan``, and runs
it; the page itself is still ``app.py``, run once per visit. Without a lifespan, Streamlit runs nothing of the
page's before the first visit, and that visit waited about a second for the imports and the kernels (loaded
from numba's cache after a restart; compiled, about 10 s, on a fresh install).

The warm-up runs in a thread: the server answers at once, and a visitor who comes before it is done sees the one
progress message (``explorer.page.warm_up``) and waits for the same warm-up, never a second one.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

_LOG = logging.getLogger("explorer")
PAGE_MODULES = ("explorer.sidebar", "explorer.tabs", "plotly.graph_objects")


def warm() -> None:
    """Import the page's modules and compile (or load) every kernel, once per process."""
    try:
        for module in PAGE_MODULES:  # imported now, not at the first visit
            importlib.import_module(module)
        from explorer import page

        page.prepare()
    except Exception:  # the first visit tries again, and shows what fails in one line
        _LOG.exception("warming the explorer at start failed")


@asynccontextmanager
async def lifespan(app: Any) -> AsyncIterator[None]:
    """Start ``warm`` in a thread as the server starts; nothing to undo when it stops."""
    asyncio.get_running_loop().run_in_executor(None, warm)
    yield
