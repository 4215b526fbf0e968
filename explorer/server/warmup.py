"""The server's warm-up: every kernel the page uses compiled (or loaded from numba's cache) once per process
(``explorer.core.warming``), before the first visitor, and what a long-lived server starts (the cache's sweeper,
the search workers)."""

from __future__ import annotations

import gc
import logging
import os
import sys
import threading

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
