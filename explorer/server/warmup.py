"""The server's start: ``streamlit run app.py`` finds ``app``, an ``st.App`` (Streamlit's ASGI server) whose lifespan
(``warming(work)``) warms the page as the server starts; the page itself is still ``app.py``, run once per visit.

The warm-up (``work``, passed in by ``app.py``: the page's ``preload``) runs in a thread: the server answers at
once, and a visitor who comes before it is done sees the one progress message and waits for the same warm-up
(``prepare``: every kernel compiled or loaded from numba's cache once per process, ``explorer.core.warming``; the
cache's sweeper and the search workers started), never a second one. Without it the first visit waited about a
second (after a restart; about 10 s on a fresh install). ``offline`` is set by ``app.py`` before anything else.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import sys
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from explorer.core import runs as compute
from explorer.core.warming import compile_everything
from explorer.server import memo, workers

_LOG = logging.getLogger("explorer")
SWITCH_INTERVAL = float(os.environ.get("PACKING_EXPLORER_SWITCH_INTERVAL", "0.001"))
"""Seconds a thread holds the GIL before another waiting one gets it (Python's default: 0.005)."""
_WARM = threading.Event()
_WARM_LOCK = threading.Lock()


def is_warm() -> bool:
    """True once ``prepare`` has run in this process."""
    return _WARM.is_set()


def prepare() -> None:
    """Compile (or load) every kernel once per process; callers at the same time wait for the one compilation."""
    with _WARM_LOCK:
        if _WARM.is_set():
            return
        seconds = compile_everything()
        _LOG.info("packing kernels ready in %.1f s", seconds)
        # What is loaded by now (Streamlit, Plotly, numba and the compiled kernels: most of the heap) lives as
        # long as the server; frozen, the garbage collector's full passes no longer walk it on every session's
        # behalf (with `runner.postScriptGC = false` in .streamlit/config.toml, see there).
        gc.collect()
        gc.freeze()
        # A session's kernels and LP solves release the GIL; each return waits for it, up to the switch interval,
        # while other sessions run Python. The proven optimum returns about a thousand times: 8.6 s instead of
        # 0.44 s next to a busy thread at the default 5 ms, 2.2 s at 1 ms (benchmarks/gil.py).
        sys.setswitchinterval(SWITCH_INTERVAL)
        memo.start()  # the cache's sweeper and the allocator's threshold
        workers.configure(compute.warm_searches)  # every worker loads the searches' kernels first
        workers.start_soon()  # the searches' processes, a few seconds from now
        _WARM.set()


def offline() -> None:
    """Turn the Hugging Face hub off for this process and the workers it starts: a tokenizer name never
    downloads anything (called before any import of transformers or huggingface_hub, which read these once)."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"


def _logged(work: Callable[[], None]) -> None:
    try:
        work()
    except Exception:  # the first visit tries again, and shows what fails in one line
        _LOG.exception("warming the explorer at start failed")


def warming(work: Callable[[], None]) -> Callable[[Any], AbstractAsyncContextManager[None]]:
    """A server lifespan that starts ``work`` in a thread as the server starts, and stops the idle worker
    processes as it stops (a busy one ends with its call, and every one exits with the server anyway)."""

    @asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        asyncio.get_running_loop().run_in_executor(None, _logged, work)
        yield
        workers.shutdown()

    return lifespan
