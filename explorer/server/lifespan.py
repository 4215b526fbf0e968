"""The server's start: the page's modules and kernels load as the server starts, before the first visitor.

``streamlit run app.py`` finds ``app``, an ``st.App`` (Streamlit's ASGI server) with a lifespan from
``warming(work)``, and runs it; the page itself is still ``app.py``, run once per visit. Without a lifespan,
Streamlit runs nothing of the page's before the first visit, and that visit waited about a second for the imports
and the kernels (loaded from numba's cache after a restart; compiled, about 10 s, on a fresh install).

The warm-up (``work``, passed in by ``app.py``: the page's ``preload``) runs in a thread: the server answers at
once, and a visitor who comes before it is done sees the one progress message and waits for the same warm-up,
never a second one. The offline switch (``offline``) is set by ``app.py`` before anything else loads.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

_LOG = logging.getLogger("explorer")


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
        from explorer.server import workers

        asyncio.get_running_loop().run_in_executor(None, _logged, work)
        yield
        workers.shutdown()

    return lifespan
