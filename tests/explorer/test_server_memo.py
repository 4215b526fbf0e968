"""The shared cache: byte budget, time to live, one computation for concurrent callers, keys without bytes."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from explorer.core.sources import Upload
from explorer.server.memo import Cancelled, MemoStore, deep_size


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_store_never_holds_more_than_its_budget_and_evicts_the_least_recently_used() -> None:
    store = MemoStore(max_bytes=10_000_000, ttl=1e9)
    for i in range(10):
        store.get_or_compute(i, lambda: np.zeros(250_000, np.int64))  # 2 MB each
        assert store.stats().bytes <= 10_000_000
    assert store.stats().entries == 4  # 4 × 2 MB fit in 10 MB, 5 do not
    store.get_or_compute(6, lambda: pytest.fail("6 is kept"))  # a hit: 6 is now the most recently used
    store.get_or_compute(10, lambda: np.zeros(250_000, np.int64))
    assert list(store._entries) == [8, 9, 6, 10]  # least recently used first; 7 was evicted


def test_an_entry_larger_than_a_third_of_the_budget_is_computed_but_not_kept() -> None:
    store = MemoStore(max_bytes=4_000_000, ttl=1e9)
    value = store.get_or_compute("big", lambda: np.zeros(200_000, np.int64))  # 1.6 MB > 1.33 MB
    assert len(value) == 200_000 and store.stats().entries == 0


def test_entries_unused_for_the_time_to_live_are_dropped() -> None:
    clock = Clock()
    store = MemoStore(max_bytes=10**9, ttl=60, clock=clock)
    store.get_or_compute("a", lambda: 1)
    clock.now = 30
    store.get_or_compute("b", lambda: 2)
    clock.now = 50
    store.get_or_compute("a", lambda: pytest.fail("a is kept"))  # used again at 50: lives on
    clock.now = 100
    store.expire()
    assert list(store._entries) == ["a"]  # b was last used 70 s ago, a 50 s ago
    clock.now = 200
    store.expire()
    assert store.stats().entries == 0 and store.stats().bytes == 0


def test_concurrent_callers_of_a_missing_entry_wait_for_one_computation() -> None:
    store = MemoStore(max_bytes=10**9, ttl=1e9)
    calls = []

    def slow() -> int:
        calls.append(1)
        time.sleep(0.2)
        return 42

    results: list[int] = []
    threads = [threading.Thread(target=lambda: results.append(store.get_or_compute("k", slow))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [42] * 8 and len(calls) == 1


def test_errors_are_not_stored_and_reach_the_caller() -> None:
    store = MemoStore(max_bytes=10**9, ttl=1e9)

    def bad() -> int:
        raise ValueError("no")

    with pytest.raises(ValueError):
        store.get_or_compute("k", bad)
    assert store.get_or_compute("k", lambda: 5) == 5


def test_sizes_count_shared_arrays_once_and_uploads_are_keyed_without_their_bytes() -> None:
    a = np.zeros(100_000, np.int64)
    assert 800_000 <= deep_size({"x": a, "y": [a, a[:10]]}) < 900_000
    upload = Upload.of("f.jsonl", b"x" * 1_000_000)
    assert deep_size(upload.cache_key) < 1_000


class Stopped(BaseException):
    """What Streamlit raises in a script run that should end (its ``StopException`` is a ``BaseException``)."""


@pytest.mark.parametrize("stop", [Stopped, Cancelled], ids=["stopped run", "cancelled call"])
def test_a_caller_waiting_on_a_stopped_run_computes_the_value_itself(stop: type[BaseException]) -> None:
    """One session's run stopped (its visitor left), or its call cancelled (the session asked for another), while
    another waited for the same entry: the other gets the value, not the first one's stop (which would end its own
    run silently) or cancellation."""
    store = MemoStore(max_bytes=10**9, ttl=1e9)
    started, results = threading.Event(), []

    def stopped() -> int:
        started.set()
        time.sleep(0.3)
        raise stop

    def owner() -> None:
        with pytest.raises(stop):
            store.get_or_compute("k", stopped)

    first = threading.Thread(target=owner)
    first.start()
    started.wait()
    waiter = threading.Thread(target=lambda: results.append(store.get_or_compute("k", lambda: 7)))
    waiter.start()
    first.join()
    waiter.join()
    assert results == [7]
