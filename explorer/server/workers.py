"""Long work in processes of their own: bounded in time, and stopped when the visitor who asked for it leaves.

The proven optimum's column generation is a thousand short calls that each wait for the GIL next to other
sessions' Python (``benchmarks/gil.py``); a chat template or a tokenizer can run for minutes in one C call that
no thread can interrupt. In a worker process such work has a GIL of its own, and killing the process is the one
reliable way to stop it.

- ``run(function, *args, lane=..., seconds=...)`` calls ``function`` in a worker of ``lane`` and returns its
  result. The waiting thread polls in ``SLICE``-second steps, and at each step asks ``memo.stop_check()``
  whether its Streamlit script run was stopped (the visitor closed the tab, or the page reran): then the worker
  is killed and the stop raised on, so that Streamlit ends the run. After ``seconds`` the worker is killed too,
  and the call raises ``TimedOut`` (one line on the page). A killed worker is replaced by a new one.
- Lanes keep one visitor's long work from holding the workers everyone else's short work needs: ``"search"``
  (searches bounded by the page's own 5 s limit, the Compare and Sweep tabs: ``WORKERS`` processes), ``"long"``
  (a search a link asked to run longer, capped at ``compute.MAX_TIME_LIMIT``: one process) and ``"load"``
  (reading and tokenizing an upload or pasted text rows, where a chat template runs: one process). A call waits
  for a free worker of its lane (and that wait is stopped as above). The long and load lanes' processes run at
  a lower priority (``LOW_PRIORITY``), the search lane's at ``PRIORITY``, both below the server's.
- A worker that dies (killed by the system, say out of memory, or a parser's crash) takes no page with it: the
  call is tried once more in a new worker, and if that one dies too it fails with a ``WorkerDied``, never run in
  the server, whose memory every session shares. When workers are off (``PACKING_EXPLORER_WORKERS=0``) or
  cannot start, the call runs here, in the server, without a deadline.
- Workers are started with ``spawn`` (a server's threads make ``fork`` unsafe); the search lane's start
  ``START_DELAY`` seconds after the server has warmed up (``start_soon``), the others at their first call. Each
  loads the compiled kernels once and watches the server, exiting with it however the server is stopped.
- Work can say how far it is: ``report(done, total)`` (passed to the work as its ``progress`` callback) reaches
  the listener of the thread that waits for it (``listening``), from a worker or in this process alike.
- Arguments and results cross by pickling. ``spawn`` imports the server's ``__main__`` in every worker, and
  under Streamlit that is the page's script: ``app.py`` draws its page only when run as ``__main__`` (a worker
  imports it as ``__mp_main__``), and a worker never starts workers of its own.

>>> run(sum, [1, 2, 3])  # in a worker, or here when workers are off
6
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any, TypeVar

from explorer.server.memo import release_memory, stop_check

_LOG = logging.getLogger("explorer")
R = TypeVar("R")
Check = Callable[[], None]

WORKERS = int(os.environ.get("PACKING_EXPLORER_WORKERS", str(min(2, os.cpu_count() or 1))))
"""Worker processes of the search lane; 0 runs everything in the server's own process."""
START_DELAY = 5.0
"""Seconds after the server's warm-up before the search lane's workers start."""
SLICE = 0.1
"""Seconds between two looks at a waiting call's worker, deadline and script run."""
DEADLINE = 60.0
"""Seconds a call may run in its worker unless it says otherwise."""
PRIORITY = 5
LOW_PRIORITY = 15
"""Niceness of the search lane's workers and of the long and load lanes' (the server runs at 0)."""
LANES = {"search": 0, "long": 1, "load": 1}
"""Workers per lane (0: ``WORKERS``)."""


class WorkerDied(RuntimeError):
    """A call's worker process died twice in a row (killed by the system, most likely for want of memory)."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(
            f"the worker process running {name} stopped (out of memory, or it crashed on the input); "
            "try a smaller or simpler input"
        )


class TimedOut(RuntimeError):
    """A call ran past its deadline; its worker was stopped."""

    def __init__(self, name: str, seconds: float) -> None:
        self.name, self.seconds = name, seconds
        super().__init__(f"it took longer than the {seconds:g} s the explorer gives it, and was stopped")


def _exit_with_the_server() -> None:
    """In a worker: exit as soon as the server's process is gone (stopped by any means, even killed)."""
    from multiprocessing.connection import wait

    server = multiprocessing.parent_process()
    if server is not None:
        wait([server.sentinel])
        os._exit(0)


def _nothing() -> None:
    return None


Progress = Callable[[int, int], None]
_SERVED: list[Connection] = []
"""In a worker: its connection to the server (where ``report`` sends)."""
_LISTENERS = threading.local()


def report(done: int, total: int) -> None:
    """How far the running call is (``done`` of ``total`` units), for the thread waiting for it: sent to the
    server from a worker, handed to this thread's listener in the server; nothing when nobody listens. O(1).

    >>> with listening(lambda done, total: print(f"{done} of {total}")):
    ...     report(3, 10)
    3 of 10
    """
    if _SERVED:
        _SERVED[0].send(("progress", (int(done), int(total))))
        return
    listener = getattr(_LISTENERS, "listener", None)
    if listener is not None:
        listener(done, total)


@contextlib.contextmanager
def listening(listener: Progress) -> Iterator[None]:
    """Within the block, the progress that calls made by this thread report (``report``) reaches ``listener``,
    in this thread."""
    previous = getattr(_LISTENERS, "listener", None)
    _LISTENERS.listener = listener
    try:
        yield
    finally:
        _LISTENERS.listener = previous


_INITIALIZER: list[Callable[[], None]] = [_nothing]


def configure(initializer: Callable[[], None]) -> None:
    """What every worker started from now on runs before its first call (the page passes in the loading of its
    compiled kernels); a function importable by name."""
    _INITIALIZER[0] = initializer


def _serve(connection: Connection, niceness: int, initializer: Callable[[], None] = _nothing) -> None:
    """A worker's life: lower its priority, watch the server, run ``initializer`` (load the kernels), say so,
    then answer calls one at a time until the server closes the connection."""
    with contextlib.suppress(OSError):
        os.nice(niceness)
    threading.Thread(target=_exit_with_the_server, name="server-watch", daemon=True).start()
    initializer()
    _SERVED.append(connection)
    connection.send(("ready", None))
    while True:
        try:
            function, args = connection.recv()
        except (EOFError, OSError):
            return
        try:
            reply: tuple[str, Any] = ("ok", function(*args))
        except Exception as error:  # raised in the server as it is
            reply = ("error", error)
        finally:
            release_memory()  # a search on a million sequences allocates hundreds of MB for a moment
        try:
            connection.send(reply)
        except Exception as error:  # an unpicklable result or error: its first line
            connection.send(("error", RuntimeError(str(error).splitlines()[0] if str(error) else type(error).__name__)))


@dataclass
class _Worker:
    process: Any
    connection: Connection
    ready: bool = False

    def kill(self) -> None:
        """Stop the process at once (SIGKILL: a Jinja render or a HiGHS solve ignores anything gentler), reap it."""
        self.process.kill()
        self.process.join(10)
        self.connection.close()


class _Died(Exception):
    """The worker's process ended while a call was running in it."""


@dataclass
class _Lane:
    name: str
    size: int
    niceness: int
    idle: list[_Worker] = field(default_factory=list)
    busy: set[int] = field(default_factory=set)
    """Process ids of the workers running a call now."""
    slots: threading.Semaphore = field(init=False)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.slots = threading.Semaphore(self.size)

    def start(self) -> _Worker:
        """A new worker process (it loads its kernels in the background)."""
        context = multiprocessing.get_context("spawn")
        mine, theirs = context.Pipe()
        args = (theirs, self.niceness, _INITIALIZER[0])
        process = context.Process(target=_serve, args=args, name=f"packing-{self.name}", daemon=True)
        process.start()
        theirs.close()
        return _Worker(process, mine)

    def take(self) -> _Worker:
        with self.lock:
            while self.idle:
                worker = self.idle.pop()
                if worker.process.is_alive():
                    return worker
                worker.kill()
        return self.start()

    def give_back(self, worker: _Worker) -> None:
        with self.lock:
            self.idle.append(worker)

    def stop(self) -> None:
        with self.lock:
            for worker in self.idle:
                worker.kill()
            self.idle.clear()


_LANES: dict[str, _Lane] = {}
_LOCK = threading.Lock()


def lane(name: str) -> _Lane | None:
    """The lane ``name`` (None when workers are off, or in a worker: a worker never starts workers). O(1)."""
    if WORKERS <= 0 or multiprocessing.parent_process() is not None:
        return None
    with _LOCK:
        if name not in _LANES:
            size = LANES[name] or WORKERS
            _LANES[name] = _Lane(name, size, PRIORITY if name == "search" else LOW_PRIORITY)
        return _LANES[name]


def start_soon(delay: float = START_DELAY) -> None:
    """Start the search lane's workers ``delay`` seconds from now, in the background."""

    def start() -> None:
        search = lane("search")
        if search is None:
            return
        try:
            for _ in range(search.size):
                search.give_back(search.start())
        except OSError as error:
            _LOG.warning("search workers unavailable (%s)", error)

    timer = threading.Timer(delay, start)
    timer.daemon = True
    timer.start()


def shutdown() -> None:
    """Stop every idle worker (the server's lifespan, as it stops; the workers also exit with the server)."""
    with _LOCK:
        lanes = list(_LANES.values())
        _LANES.clear()
    for each in lanes:
        each.stop()


def run(function: Callable[..., R], *args: Any, lane_name: str = "search", seconds: float = DEADLINE) -> R:
    """``function(*args)`` in a worker of lane ``lane_name`` (``function`` importable by name, arguments and
    result picklable), stopped after ``seconds`` in it (``TimedOut``) or as soon as the calling script run stops;
    here when workers are off. Exceptions the function raises are raised here, as they are; a worker that dies
    twice raises ``WorkerDied``. O(the function + pickling its arguments and result)."""
    where = lane(lane_name)
    if where is None:
        return function(*args)
    check = stop_check()
    while not where.slots.acquire(timeout=SLICE):  # waiting for a free worker of the lane
        check()
    try:
        for attempt in range(2):
            try:
                worker = where.take()
            except OSError as error:  # no process can start here (limits, a sandbox): this call in the server
                _LOG.warning("workers cannot start (%s); running %s here", error, function.__name__)
                return function(*args)
            try:
                return _call(where, worker, function, args, seconds, check)
            except _Died:
                _LOG.warning("a worker died running %s (attempt %d)", function.__name__, attempt + 1)
        raise WorkerDied(function.__name__)
    finally:
        where.slots.release()


def _call(
    where: _Lane, worker: _Worker, function: Callable[..., R], args: tuple[Any, ...], seconds: float, check: Check
) -> R:
    """One call in ``worker``: its answer, or the worker killed (deadline, a stopped run, a death)."""
    pid = worker.process.pid
    with where.lock:
        where.busy.add(pid)
    kept = False
    try:
        worker.connection.send((function, args))
        started = time.monotonic()
        while True:
            if worker.connection.poll(SLICE):
                kind, value = worker.connection.recv()
                if kind == "ready":  # its warm-up is done: the call's own time starts now
                    worker.ready, started = True, time.monotonic()
                    continue
                if kind == "progress":
                    report(*value)  # to this thread's listener
                    continue
                kept = True
                if kind == "error":
                    raise value
                return value  # type: ignore[no-any-return]
            if not worker.process.is_alive():
                raise _Died
            if worker.ready and time.monotonic() - started > seconds:
                raise TimedOut(function.__name__, seconds)
            check()  # raises Streamlit's stop when the visitor's run ends
    except (EOFError, OSError):
        raise _Died from None
    finally:
        with where.lock:
            where.busy.discard(pid)
        if kept:
            where.give_back(worker)
        else:
            worker.kill()
            _LOG.info("stopped the worker %s running %s", pid, function.__name__)
            if where.name == "search":  # replaced now, so that the next search finds it warm
                with contextlib.suppress(OSError):
                    where.give_back(where.start())
