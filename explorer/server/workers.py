"""Long work in processes of their own: bounded in time, and stopped when the visitor who asked for it leaves.

The proven optimum's column generation is a thousand short calls that each wait for the GIL next to other
sessions' Python (``benchmarks/gil.py``); a chat template or a tokenizer can run for minutes in one C call that
no thread can interrupt. In a worker process such work has a GIL of its own, and killing the process is the one
reliable way to stop it. ``run`` calls a function in a worker of a lane (``LANES``) and returns its result.

Each worker is a ``concurrent.futures.ProcessPoolExecutor`` of one process (``spawn``, a fresh one after
``TASKS_PER_WORKER`` calls), so that killing one stops one call and nobody else's (one executor for several
processes breaks all their calls when one is killed). Arguments and results cross by pickling. ``spawn`` imports
the server's ``__main__`` in every worker, and under Streamlit that is the page's script: ``app.py`` draws its
page only when run as ``__main__`` (a worker imports it as ``__mp_main__``), and a worker never starts workers.

>>> run(sum, [1, 2, 3])  # in a worker, or here when workers are off
6
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import multiprocessing
import os
import queue
import signal
import threading
import time
from collections.abc import Callable, Hashable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from multiprocessing.connection import Connection
from typing import Any, TypeVar

from explorer.server.memo import SLICE, Cancelled, release_memory, stop_check

_LOG = logging.getLogger("explorer")
R = TypeVar("R")

WORKERS = int(os.environ.get("PACKING_EXPLORER_WORKERS", str(min(2, os.cpu_count() or 1))))
"""Worker processes of the search lane; 0 runs everything in the server's own process."""
START_DELAY = 5.0
"""Seconds after the server's warm-up before the search lane's workers start."""
DEADLINE = 60.0
"""Seconds a call may run in its worker unless it says otherwise."""
PRIORITY = 2
LOW_PRIORITY = 5
"""Niceness of the search lane's workers and of the long and load lanes' (the server runs at 0): below the server,
which keeps three times a load's share of a busy core, but not so low that a busy machine starves them (at 15, next
to a busy process at 0, Linux's scheduler weights give a worker 3 % of a core, and its deadlines run out)."""
LANES = {"search": 0, "long": 1, "load": 2}
"""Workers per lane (0: ``WORKERS``), so that one visitor's long work never holds the workers everyone else's
short work needs: ``search`` (searches within the page's own 5 s limit, the Compare and Sweep tabs), ``long`` (a
search a link asked to run longer) and ``load`` (reading and tokenizing an upload or pasted text rows, where a
chat template runs; its second process starts only when two sessions load at once). A call waits for a free
worker of its lane, a started one rather than an empty slot. The search lane's workers start soon after the
warm-up (``start_soon``), the others at their first call; the long and load lanes' run at ``LOW_PRIORITY``."""
ONE_PER_SESSION = frozenset({"load"})
"""Lanes where a session (what the page names with ``set_session``) has one call at a time: a new call stops the
one it still has (its worker killed, the old call raising ``Superseded``), so that one visitor holds at most one
worker of the lane, whatever they repeat, and another visitor finds the other free."""
START_WAIT = 30.0
"""Most seconds a kill waits for a process that is still starting to say which it is."""
LOAD_MEMORY_MB = int(os.environ.get("PACKING_EXPLORER_LOAD_MEMORY_MB", "4096"))
"""Address space (MiB) a worker of the load lane may map (``RLIMIT_AS``, on systems that have it; 0: no limit):
an upload that decodes to more (a compressed bomb, a footer that lies) fails there with a ``MemoryError``, in one
line, not in the server. The imports of a worker map about 1 GiB."""
TASKS_PER_WORKER = 200
"""Calls a worker process answers before a fresh one takes its place (``max_tasks_per_child``): whatever the
calls left in its heap (compiled solvers, a tokenizer's caches) goes with it."""


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


class Superseded(Cancelled):
    """A call stopped because its session made another in the same lane (``ONE_PER_SESSION``)."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"{name} was stopped: the page asked for another in its place")


Progress = Callable[[int, int], None]
_SERVED: list[Connection] = []
"""In a worker: its connection to the server (where ``report`` and ``_call`` send)."""
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


def _nothing() -> None:
    return None


_INITIALIZER: list[Callable[[], None]] = [_nothing]


def configure(initializer: Callable[[], None]) -> None:
    """What every worker started from now on runs before its first call (the page passes in the loading of its
    compiled kernels); a function importable by name."""
    _INITIALIZER[0] = initializer


def _exit_with_the_server() -> None:
    """In a worker: exit as soon as the server's process is gone (stopped by any means, even killed)."""
    from multiprocessing.connection import wait

    server = multiprocessing.parent_process()
    if server is not None:
        wait([server.sentinel])
        os._exit(0)


def limit_memory(megabytes: int) -> bool:
    """Bound this process's address space to ``megabytes`` MiB (``RLIMIT_AS``); False where the system has no
    such limit (no ``resource`` module, as on Windows) or refuses it. O(1).

    >>> limit_memory(0)
    False
    """
    try:
        import resource
    except ImportError:  # pragma: no cover - not on POSIX
        return False
    if megabytes <= 0:
        return False
    try:
        _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        wanted = megabytes * 2**20 if hard == resource.RLIM_INFINITY else min(megabytes * 2**20, hard)
        resource.setrlimit(resource.RLIMIT_AS, (wanted, hard))
    except (OSError, ValueError):  # pragma: no cover - a sandbox that forbids it
        return False
    return True


def _start(connection: Connection, niceness: int, initializer: Callable[[], None], memory: int = 0) -> None:
    """A worker's start (the executor's ``initializer``): a lower priority, its memory bounded (``memory`` MiB; 0:
    not), the server watched, the kernels loaded, and the connection ``report`` sends on."""
    connection.send(("ready", os.getpid()))  # first: the server can kill it from now on
    with contextlib.suppress(OSError):
        os.nice(niceness)
    limit_memory(memory)
    threading.Thread(target=_exit_with_the_server, name="server-watch", daemon=True).start()
    initializer()
    _SERVED[:] = [connection]


def _call(function: Callable[..., R], args: tuple[Any, ...]) -> R:
    """In a worker: say which process runs the call (its deadline starts now), run it, free its memory."""
    _SERVED[0].send(("started", os.getpid()))
    try:
        return function(*args)
    finally:
        release_memory()  # a search on a million sequences allocates hundreds of MB for a moment


class _Worker:
    """One worker process: an executor of one process (a fresh one after ``TASKS_PER_WORKER`` calls), and the
    connection its processes report on. A call is submitted only when the one before has answered (the lane hands
    a worker to one call at a time): CPython 3.11 to 3.14 can leave an executor that replaces its process without
    one when calls wait in its queue (python/cpython#115634)."""

    def __init__(self, niceness: int, warm: bool = False, memory: int = 0) -> None:
        spawn = multiprocessing.get_context("spawn")
        self.inbox, self.outbox = spawn.Pipe(duplex=False)
        initargs = (self.outbox, niceness, _INITIALIZER[0], memory)
        self.pool = ProcessPoolExecutor(
            1, spawn, initializer=_start, initargs=initargs, max_tasks_per_child=TASKS_PER_WORKER
        )
        self.pid: int | None = None
        """The process, once it said it is ready (``_start``)."""
        self.spawned = self.killed = False
        self.last: Future[Any] | None = None
        if warm:  # its process started now (the executor starts it at its first call)
            self.submit(_nothing)

    def submit(self, function: Callable[..., R], *args: Any, check: Callable[[], None] = _nothing) -> Future[R]:
        """``function(*args)`` in the process once its previous call (a warm-up) is done, ``check`` called while
        waiting."""
        while self.last is not None and not wait([self.last], timeout=SLICE).done:
            check()
        self.spawned = True
        self.last = self.pool.submit(function, *args)
        return self.last

    def read(self, timeout: float = 0.0) -> tuple[int | None, list[tuple[int, int]]]:
        """What the process said since the last read: the process id of a call that started, and the progress
        it reported; waits up to ``timeout`` seconds for a first message."""
        started, progress = None, []
        while not self.inbox.closed and self.inbox.poll(timeout):
            timeout = 0.0
            kind, sent = self.inbox.recv()
            if kind == "progress":
                progress.append(sent)
                continue
            self.pid = sent  # "ready" (a process started) or "started" (it runs a call)
            if kind == "started":
                started = sent
        return started, progress

    def kill(self) -> None:
        """Stop the process at once, whatever it runs (SIGKILL: a Jinja render or a HiGHS solve ignores anything
        gentler; a process still starting is waited for, up to ``START_WAIT`` seconds); the executor notices and
        reaps it."""
        self.killed = True
        self.read()  # the last process it heard from: the one running the call, or a new one starting
        if self.spawned and self.pid is None:
            self.read(START_WAIT)
        if self.pid is not None:
            with contextlib.suppress(OSError):
                os.kill(self.pid, signal.SIGKILL)
        self.pool.shutdown(wait=self.spawned, cancel_futures=True)
        self.inbox.close()
        self.outbox.close()


class _Lane:
    """The workers of one lane: the idle ones a call takes one from (``idle``, started ones first; None: a slot
    whose worker starts at its call), ``busy`` the process ids of those running a call now, and in a
    ``ONE_PER_SESSION`` lane, each session's call in flight (an event set to stop it)."""

    def __init__(self, name: str, size: int, niceness: int) -> None:
        self.name, self.size, self.niceness = name, size, niceness
        self.memory = LOAD_MEMORY_MB if name == "load" else 0
        """MiB of address space each worker may map (0: no bound)."""
        self.idle: queue.PriorityQueue[tuple[bool, int, _Worker | None]] = queue.PriorityQueue()
        for _ in range(size):
            self.put(None)
        self.busy: set[int] = set()
        self.calls: dict[Hashable, threading.Event] = {}

    def put(self, worker: _Worker | None) -> None:
        """``worker`` idle again (None: an empty slot). O(log of the lane's workers)."""
        self.idle.put((worker is None, next(_ORDER), worker))

    def take(self, timeout: float | None = None) -> _Worker | None:
        """An idle worker, a started one first, waiting up to ``timeout`` seconds: else ``queue.Empty``."""
        return self.idle.get(timeout=timeout)[2]

    def drain(self) -> list[_Worker | None]:
        """Every idle worker and slot, taken out of the lane."""
        taken = []
        with contextlib.suppress(queue.Empty):
            while True:
                taken.append(self.idle.get_nowait()[2])
        return taken

    @contextlib.contextmanager
    def call(self, session: Hashable | None) -> Iterator[threading.Event]:
        """A call of ``session`` (None: one under no rule): the event that stops it, the session's previous call
        (if it still runs) told to stop. O(1)."""
        stop = threading.Event()
        if session is None:
            yield stop
            return
        with _LOCK:
            previous, self.calls[session] = self.calls.get(session), stop
        if previous is not None:
            previous.set()
        try:
            yield stop
        finally:
            with _LOCK:
                if self.calls.get(session) is stop:
                    del self.calls[session]

    def stop(self) -> None:
        """Let every idle worker's process end (a busy one ends with its call; all end with the server)."""
        for worker in self.drain():
            if worker is not None:
                worker.pool.shutdown(wait=False, cancel_futures=True)


_LANES: dict[str, _Lane] = {}
_LOCK = threading.Lock()
_ORDER = itertools.count()
"""Ties between idle workers go to the first put back."""


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
        for worker in search.drain():
            try:
                worker = worker or _Worker(search.niceness, warm=True)
            except OSError as error:
                _LOG.warning("search workers unavailable (%s)", error)
            except RuntimeError:  # the interpreter is shutting down: no executor takes work any more
                return
            search.put(worker)

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


_SESSION: list[Callable[[], Hashable | None]] = [lambda: None]


def set_session(factory: Callable[[], Hashable | None]) -> None:
    """Use ``factory`` to name the calling thread's session (the page passes in its framework's); None: none."""
    _SESSION[0] = factory


def run(function: Callable[..., R], *args: Any, lane_name: str = "search", seconds: float = DEADLINE) -> R:
    """``function(*args)`` in a worker of lane ``lane_name`` (``function`` importable by name, arguments and
    result picklable), stopped after ``seconds`` in it (``TimedOut``), as soon as the calling script run stops,
    or, in a ``ONE_PER_SESSION`` lane, when its session makes another call there (``Superseded``); here when
    workers are off. Exceptions the function raises are raised here, as they are; a worker that dies twice
    raises ``WorkerDied``. O(the function + pickling its arguments and result)."""
    where = lane(lane_name)
    if where is None:
        return function(*args)
    with where.call(_SESSION[0]() if where.name in ONE_PER_SESSION else None) as stop:
        return _run_in(where, stop, function, args, seconds)


def _run_in(
    where: _Lane, stop: threading.Event, function: Callable[..., R], args: tuple[Any, ...], seconds: float
) -> R:
    """``run`` in lane ``where``, stopped also when ``stop`` is set (``Superseded``)."""
    stopped = stop_check()

    def check() -> None:
        stopped()
        if stop.is_set():
            raise Superseded(function.__name__)

    while True:  # waiting for a free worker of the lane
        try:
            worker = where.take(timeout=SLICE)
            break
        except queue.Empty:
            check()
    try:
        for attempt in range(2):
            try:
                worker = (
                    worker if worker is not None and not worker.killed else _Worker(where.niceness, memory=where.memory)
                )
                future: Future[R] = worker.submit(_call, function, args, check=check)
            except OSError as error:  # no process can start here (limits, a sandbox): this call in the server
                _LOG.warning("workers cannot start (%s); running %s here", error, function.__name__)
                return function(*args)
            if _answered(where, worker, future, seconds, check, function.__name__):
                return future.result()  # the function's own error, if it raised one, as it is
            _LOG.warning("a worker died running %s (attempt %d)", function.__name__, attempt + 1)
        raise WorkerDied(function.__name__)
    finally:
        if worker is not None and worker.killed and where.name == "search":
            with contextlib.suppress(OSError):  # replaced now, so that the next search finds it warm
                worker = _Worker(where.niceness, warm=True)
        where.put(worker if worker is None or not worker.killed else None)


def _answered(
    where: _Lane, worker: _Worker, future: Future[Any], seconds: float, check: Callable[[], None], name: str
) -> bool:
    """Wait for the call ``future`` in ``worker``, passing on its progress: True once it answered (a result or
    the function's own error), False when its process died; past ``seconds`` or when the calling script run stops,
    the worker is killed and ``TimedOut`` or the stop raised."""
    pid: int | None = None
    started = 0.0
    try:
        while True:
            done = bool(wait([future], timeout=SLICE).done)
            began, progress = worker.read()
            if began is not None:  # its warm-up is done: the call's own time starts now
                pid, started = began, time.monotonic()
                with _LOCK:
                    where.busy.add(pid)
            for done_units, total in progress:
                report(done_units, total)  # to this thread's listener
            if done:
                break
            if pid is not None and time.monotonic() - started > seconds:
                raise TimedOut(name, seconds)
            check()  # raises Streamlit's stop when the visitor's run ends
    except BaseException:
        worker.kill()
        _LOG.info("stopped the worker %s running %s", pid, name)
        raise
    finally:
        with _LOCK:
            where.busy.discard(pid or 0)
    if isinstance(future.exception(), BrokenProcessPool):
        worker.kill()
        return False
    return True
