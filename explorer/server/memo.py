"""The server's cache: shared by every session, bounded in bytes and in time, keyed by the real inputs.

Streamlit's ``st.cache_data``/``st.cache_resource`` bound a cache by entry count and age only, and one large
dataset per entry can take the server down for everyone. The store is cachetools' ``TTLCache`` sized in bytes
(``getsizeof``: every entry measured once, as it is stored, by ``deep_size``): the least recently used entries go
until the total fits ``MemoStore.max_bytes``; an entry unused for ``ttl`` seconds goes (a use restarts its time;
expired entries go at the next access, and every minute once ``start`` ran); an entry larger than a third of the
budget is computed but not kept (the largest dataset the page reads, 16,000,000 tokens, takes about 150 MB, within
a third of the default 512 MiB). Keys are the call's hashable arguments (``memoized``), never anything big; values
are shared objects: callers never modify them.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import sys
import threading
import time
from collections.abc import Callable, Hashable
from typing import Any, NamedTuple, ParamSpec, TypeVar

import numpy as np
from cachetools import TTLCache

P = ParamSpec("P")
R = TypeVar("R")

DEFAULT_BUDGET_MB = int(os.environ.get("PACKING_EXPLORER_CACHE_MB", "512"))
DEFAULT_TTL_SECONDS = float(os.environ.get("PACKING_EXPLORER_CACHE_TTL", "1800"))
SLICE = 0.1
"""Seconds between two looks of a waiting caller at its own script run (stopped: it stops waiting)."""


def deep_size(value: Any, _seen: set[int] | None = None) -> int:
    """Bytes held by ``value``: numpy buffers, dataclass fields, containers and their items (each object once).

    >>> deep_size(np.zeros(1000, np.int64)) >= 8000
    True
    >>> a = np.zeros(1000, np.int64)
    >>> deep_size([a, a]) < 2 * 8000
    True
    """
    seen = set() if _seen is None else _seen
    if id(value) in seen:
        return 0
    seen.add(id(value))
    if isinstance(value, np.ndarray):
        if isinstance(value.base, np.ndarray):  # a view: its base's bytes, counted once
            return deep_size(value.base, seen) + sys.getsizeof(value)
        return int(value.nbytes) + 112
    size = sys.getsizeof(value)
    if isinstance(value, str | bytes | int | float | bool) or value is None:
        return size
    if isinstance(value, dict):
        return size + sum(deep_size(k, seen) + deep_size(v, seen) for k, v in value.items())
    if isinstance(value, list | tuple | set | frozenset):
        return size + sum(deep_size(item, seen) for item in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return size + sum(deep_size(getattr(value, f.name), seen) for f in dataclasses.fields(value))
    if hasattr(value, "_data") and hasattr(value, "_layout"):  # a plotly figure: its traces and layout
        return size + deep_size(value._data, seen) + deep_size(value._layout, seen)
    if hasattr(value, "memory_usage"):  # a pandas frame
        try:
            return size + int(value.memory_usage(deep=True).sum())
        except Exception:
            return size + 1_000_000
    if hasattr(value, "__dict__"):
        return size + deep_size(vars(value), seen)
    return size


class _Sized(NamedTuple):
    """A stored value with its size, measured once."""

    value: Any
    size: int


class Cancelled(Exception):
    """A computation given up rather than failed (its caller asked for another instead): not stored, and callers
    waiting for it compute it themselves, as after the stop of its script run."""


class _Flight(threading.Event):
    """One computation in progress, set when it ends; ``error`` is what it raised (an ``Exception``)."""

    error: BaseException | None = None


@dataclasses.dataclass(frozen=True)
class MemoStats:
    entries: int
    bytes: int
    max_bytes: int
    hits: int
    misses: int


class MemoStore:
    """A thread-safe LRU store with a byte budget and an idle time to live, and one computation per missing key."""

    def __init__(self, max_bytes: int, ttl: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._entries: TTLCache[Hashable, _Sized] = TTLCache(max_bytes, ttl, clock, lambda entry: entry.size)
        self._flights: dict[Hashable, _Flight] = {}
        self._hits = self._misses = 0

    def stats(self) -> MemoStats:
        with self._lock:
            entries = self._entries
            return MemoStats(len(entries), int(entries.currsize), self.max_bytes, self._hits, self._misses)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def expire(self) -> int:
        """Drop every entry unused for ``ttl`` seconds; how many there were."""
        with self._lock:
            return len(self._entries.expire())

    def _take(self, key: Hashable) -> tuple[bool, Any, _Flight | None]:
        """Under the lock: (found, value) of ``key``, stored again (its time to live restarts, it becomes the
        most recently used); else the flight to wait for, or None when the caller is to compute it."""
        entry = self._entries.get(key)
        if entry is not None:
            del self._entries[key]
            self._entries[key] = entry
            self._hits += 1
            return True, entry.value, None
        flight = self._flights.get(key)
        if flight is None:
            self._flights[key] = _Flight()
            self._misses += 1
        return False, None, flight

    def get_or_compute(self, key: Hashable, compute: Callable[[], R]) -> R:
        """The stored value of ``key``, else ``compute()`` (once, however many callers ask at the same time).

        An exception is not stored: it reaches every caller waiting for this computation, except the stop of the
        owner's script run (a ``BaseException``, like Streamlit's ``StopException``) or a ``Cancelled``: then a
        waiting caller asks again, and computes the value itself. A waiting caller's own stopped run stops its
        wait (``stop_check``).
        """
        check: Callable[[], None] | None = None
        while True:
            with self._lock:
                found, value, flight = self._take(key)
            if found:
                return value  # type: ignore[no-any-return]
            if flight is None:
                break
            check = check or stop_check()
            while not flight.wait(SLICE):
                check()
            if flight.error is not None:
                raise flight.error
        try:
            value = compute()
        except BaseException as error:
            with self._lock:
                done = self._flights.pop(key)
                done.error = error if isinstance(error, Exception) and not isinstance(error, Cancelled) else None
                done.set()
            raise
        size = deep_size(value)
        with self._lock:
            if size <= self.max_bytes // 3:
                self._entries[key] = _Sized(value, size)
            self._flights.pop(key).set()
        return value


STORE = MemoStore(DEFAULT_BUDGET_MB * 2**20, DEFAULT_TTL_SECONDS)


def memoized(function: Callable[P, R]) -> Callable[P, R]:
    """Cache ``function`` in ``STORE``, keyed by its name and (hashable) arguments."""
    name = f"{function.__module__}.{function.__qualname__}"

    @functools.wraps(function)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        key = (name, tuple(map(_key_of, args)), tuple(sorted((k, _key_of(v)) for k, v in kwargs.items())))
        return STORE.get_or_compute(key, lambda: function(*args, **kwargs))

    return wrapper


def _key_of(value: Any) -> Hashable:
    """What identifies an argument: its ``cache_key`` when it has one (a source holding uploaded bytes is keyed by
    their digest, so the store never keeps the bytes), else the value itself."""
    key = getattr(value, "cache_key", None)
    return value if key is None else key  # type: ignore[no-any-return]


_STOP_CHECK: list[Callable[[], Callable[[], None]]] = [lambda: lambda: None]


def set_stop_check(factory: Callable[[], Callable[[], None]]) -> None:
    """Use ``factory`` for ``stop_check``: the page passes in the check of its framework's script runs."""
    _STOP_CHECK[0] = factory


def stop_check() -> Callable[[], None]:
    """What raises the page's stop in the calling thread once its script run should end (the visitor left, or
    the page reruns), to be called now and then while waiting; a no-op until the page passes one in
    (``set_stop_check``), and in a worker, a test or the command line. O(1)."""
    return _STOP_CHECK[0]()


@functools.cache
def _libc() -> Any:
    """glibc, to give freed memory back to the system (None elsewhere)."""
    try:
        import ctypes

        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


def release_memory() -> None:
    """Hand the heap's free pages back to the system (after evictions)."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)


def _sweep_forever(store: MemoStore, every: float) -> None:
    while True:
        time.sleep(every)
        if store.expire():
            release_memory()


_STARTED = threading.Event()


def start(store: MemoStore | None = None, every: float = 60.0) -> None:
    """Start what the store needs in a long-lived server, once per process: large arrays get pages of their own
    (glibc's ``M_MMAP_THRESHOLD`` fixed at 256 KiB; without it glibc raises the threshold after the first frees,
    and the arrays of evicted datasets stay in the heap for good), and a sweeper thread drops idle entries every
    ``every`` seconds. Importing this module does neither."""
    if _STARTED.is_set():
        return
    _STARTED.set()
    libc = _libc()
    if libc is not None:
        libc.mallopt(-3, 256 * 1024)  # M_MMAP_THRESHOLD
    target = STORE if store is None else store
    threading.Thread(target=_sweep_forever, args=(target, every), name="memo-sweeper", daemon=True).start()
