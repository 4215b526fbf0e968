"""Searches in processes of their own, so that one session's proven optimum does not slow every other session.

The page's library calls release the GIL while their compiled kernels run, and most are one call. The proven
optimum's column generation is a thousand short calls (a knapsack, an LP re-solve), and each return waits for
the GIL while other sessions run Python: next to one busy thread its 0.44 s search took 2.2 s, and the sessions
it waits behind wait in turn (``benchmarks/gil.py``). In a worker process it has a GIL of its own.

- ``run(function, *args)`` calls ``function`` in a worker and returns its result; calls wait their turn when
  every worker is busy, so callers send only searches bounded by the page's own time limit (a link may ask
  ``optimal`` to search for minutes: that search runs in the server, ``explorer.compute.in_worker``). When
  workers are off (``PACKING_EXPLORER_WORKERS=0``) or cannot start, the call runs here, in the server.
- A worker that dies (killed by the system, say out of memory) takes no page with it: the call is tried once
  more in a new worker, and if that one dies too the call fails with a ``WorkerDied`` (one line on the page),
  never run in the server, whose memory every session shares.
- Workers are started with ``spawn`` (a server's threads make ``fork`` unsafe), ``WORKERS`` of them (default:
  the machine's cores, at most 2), ``START_DELAY`` seconds after the server has warmed up (``start_soon``; a
  search that comes sooner starts them itself), and load the compiled kernels once. Each watches the server and
  exits with it, however the server is stopped.
- Arguments and results cross by pickling: lengths and statistics, never a session's tokens.
- ``spawn`` imports the server's ``__main__`` in every worker, and under Streamlit that is the page's script:
  ``app.py`` draws its page only when run as ``__main__`` (a worker imports it as ``__mp_main__``), and a worker
  never starts workers of its own.

>>> run(sum, [1, 2, 3])  # in a worker, or here when workers are off
6
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import threading
from collections.abc import Callable
from concurrent.futures import Executor, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

_LOG = logging.getLogger("explorer")
R = TypeVar("R")

WORKERS = int(os.environ.get("PACKING_EXPLORER_WORKERS", str(min(2, os.cpu_count() or 1))))
"""Worker processes for searches; 0 runs them in the server's own process."""
START_DELAY = 5.0
"""Seconds after the server's warm-up before the workers start (a search that comes sooner starts them itself)."""

_POOL: Executor | None = None
_LOCK = threading.Lock()


class WorkerDied(RuntimeError):
    """A search's worker process died twice in a row (killed by the system, most likely for want of memory)."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"the worker process running {name} stopped (out of memory?); try a smaller input")


def _exit_with_the_server() -> None:
    """In a worker: exit as soon as the server's process is gone (stopped by any means, even killed), so that no
    worker outlives it."""
    from multiprocessing.connection import wait

    server = multiprocessing.parent_process()
    if server is not None:
        wait([server.sentinel])
        os._exit(0)


def _prepare_worker() -> None:
    """In each new worker: watch the server, and load the kernels the searches use (from numba's on-disk cache)."""
    threading.Thread(target=_exit_with_the_server, name="server-watch", daemon=True).start()
    from explorer import compute

    compute.warm_searches()


def _noop() -> None:
    return None


def _call(function: Callable[..., R], *args: Any) -> R:
    """In a worker: ``function(*args)``, then what it freed goes back to the system (a search on a million
    sequences allocates hundreds of MB for a moment)."""
    from explorer.memo import release_memory

    try:
        return function(*args)
    finally:
        release_memory()


def pool() -> Executor | None:
    """The shared pool, created at the first call (None when workers are off or cannot start). O(1)."""
    global _POOL
    if WORKERS <= 0 or multiprocessing.parent_process() is not None:  # a worker never starts workers of its own
        return None
    with _LOCK:
        if _POOL is None:
            try:
                context = multiprocessing.get_context("spawn")
                _POOL = ProcessPoolExecutor(WORKERS, mp_context=context, initializer=_prepare_worker)
            except (OSError, ValueError) as error:  # no processes allowed here: searches run in the server
                _LOG.warning("search workers unavailable (%s); searching in the server's process", error)
                return None
        return _POOL


def start_soon(delay: float = START_DELAY) -> None:
    """Start the workers ``delay`` seconds from now, in the background (each loads its kernels once)."""

    def start() -> None:
        executor = pool()
        if executor is not None:
            for _ in range(WORKERS):
                executor.submit(_noop)

    timer = threading.Timer(delay, start)
    timer.daemon = True
    timer.start()


def _discard(broken: Executor) -> None:
    global _POOL
    with _LOCK:
        if _POOL is broken:
            _POOL = None
    broken.shutdown(wait=False, cancel_futures=True)


def run(function: Callable[..., R], *args: Any) -> R:
    """``function(*args)`` in a worker process (``function`` importable by name, arguments and result picklable;
    waits for a free worker), or here when there is none. Exceptions the function raises are raised here, as they
    are; a worker that dies twice raises ``WorkerDied``. O(the function + pickling its arguments and result)."""
    for attempt in range(2):
        executor = pool()
        if executor is None:
            return function(*args)
        try:
            return executor.submit(_call, function, *args).result()
        except BrokenProcessPool:  # a worker died: a new pool, and this call once more in it
            _LOG.warning("a search worker died running %s (attempt %d)", function.__name__, attempt + 1)
            _discard(executor)
        except OSError as error:  # no process can start here (limits, a sandbox): this call in the server
            _LOG.warning("search workers cannot start (%s); running %s here", error, function.__name__)
            _discard(executor)
            return function(*args)
    raise WorkerDied(function.__name__)
