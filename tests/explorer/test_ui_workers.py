"""The worker processes (``explorer.server.workers``): real processes, the same answers as in the server, stopped at
their deadline and when the script run that waits for them stops."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import packing
from explorer.core import runs as compute
from explorer.server import workers
from tests.helpers.processes import alive, busy_pids

APP = str(Path(__file__).resolve().parents[2] / "app.py")


@pytest.fixture
def one_worker(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A pool of one real worker process for the test, shut down after it."""
    monkeypatch.setattr(workers, "WORKERS", 1)
    workers.shutdown()
    yield
    workers.shutdown()


def die_in_a_worker(server: int) -> str:
    """Kill the process it runs in, unless that is the server (then say so)."""
    if os.getpid() != server:
        os._exit(3)
    return "ran in the server"


def die_once(marker: str) -> int:
    """Kill the process it runs in the first time (leaving ``marker``); afterwards, its process id."""
    if not os.path.exists(marker):
        Path(marker).touch()
        os._exit(3)
    return os.getpid()


@pytest.mark.slow
def test_a_search_runs_in_another_process_and_answers_as_the_server_would(one_worker: None) -> None:
    hard = np.array([26, 26, 26, 25, 25, 24, 24, 23, 23] * 8 + [49, 50, 51] * 5, dtype=np.int64)
    assert workers.run(os.getpid) != os.getpid()
    far, costs = workers.run(compute.compare, hard, packing.Recipe(100))
    here, here_costs = compute.compare(hard, packing.Recipe(100))
    assert [(r.label, r.stats, r.bound, r.refusal) for r in far] == [
        (r.label, r.stats, r.bound, r.refusal) for r in here
    ]
    assert costs == here_costs
    assert all(row.plan is None for row in far)
    run = workers.run(compute.run_strategy, hard, packing.Recipe(100, strategy="optimal", time_limit=5))
    assert run.plan is not None and run.plan.num_blocks == 26
    assert np.array_equal(run.plan.piece_block(), packing.plan(hard, 100, strategy="optimal").piece_block())


@pytest.mark.slow
def test_an_error_in_a_worker_is_raised_here_with_its_fields(one_worker: None) -> None:
    with pytest.raises(packing.SettingError) as raised:
        workers.run(packing.plan, np.array([3, 4], dtype=np.int64), 0)
    assert raised.value.name == "max_seq_length"


@pytest.mark.slow
def test_a_worker_that_dies_once_costs_the_call_nothing(one_worker: None, tmp_path: Path) -> None:
    assert workers.run(die_once, str(tmp_path / "died")) not in (os.getpid(), None)


@pytest.mark.slow
def test_a_search_whose_workers_keep_dying_fails_in_one_line_and_never_runs_in_the_server(one_worker: None) -> None:
    with pytest.raises(workers.WorkerDied, match="die_in_a_worker"):
        workers.run(die_in_a_worker, os.getpid())
    assert workers.run(os.getpid) != os.getpid()  # and the next search gets a new worker


def test_with_workers_off_everything_runs_here(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workers, "WORKERS", 0)
    assert workers.lane("search") is None
    assert workers.run(os.getpid) == os.getpid()


def worker_imports() -> tuple[bool, bool]:
    """Whether this process has imported Streamlit, and whether its ``__mp_main__`` drew a page (its ``main``)."""
    main = sys.modules.get("__mp_main__")
    return "streamlit" in sys.modules, main is not None and "st" in vars(main)


@pytest.mark.slow
def test_a_worker_under_streamlit_does_not_run_the_page(one_worker: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Streamlit runs ``app.py`` as a module named ``__main__``; ``spawn`` imports that file in every worker. The
    page must not run there (it would start workers of its own, and so on)."""
    page = types.ModuleType("__main__")
    page.__file__ = APP
    monkeypatch.setitem(sys.modules, "__main__", page)
    assert workers.run(worker_imports) == (False, False)


SERVER_THAT_DIES = """
import os, sys
sys.path.insert(0, os.getcwd())
from explorer.server import workers
workers.WORKERS = 1
print(workers.run(os.getpid), flush=True)
os._exit(9)  # the server is killed: no clean shutdown of its pool
"""


def test_no_worker_outlives_a_killed_server() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SERVER_THAT_DIES], cwd=Path(APP).parent, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 9 and done.stdout.strip().isdigit(), done.stderr[-2000:]
    worker = int(done.stdout)
    deadline = time.monotonic() + 30
    while alive(worker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(worker)


def spin(marker: str) -> None:
    """Leave this process's id in ``marker``, then run Python forever (as a chat template of nested loops does)."""
    Path(marker).write_text(str(os.getpid()))
    while True:
        pass


def wait_for(predicate: Callable[[], bool], seconds: float = 60) -> bool:
    deadline = time.monotonic() + seconds
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.05)
    return predicate()


@pytest.mark.slow
def test_a_call_past_its_deadline_is_stopped_and_its_worker_replaced(one_worker: None, tmp_path: Path) -> None:
    marker = tmp_path / "pid"
    with pytest.raises(workers.TimedOut, match="took longer than the 1 s the explorer gives it"):
        workers.run(spin, str(marker), seconds=1)
    assert marker.exists() and not alive(int(marker.read_text()))  # killed, and reaped
    assert workers.run(os.getpid) not in (os.getpid(), int(marker.read_text()))  # a new worker answers


def run_in_a_script(function, marker, lane_name):  # type: ignore[no-untyped-def]
    """An app's script (AppTest runs its source, without this module's imports): a long call in a worker."""
    from explorer.server import workers

    workers.run(function, marker, lane_name=lane_name, seconds=600)


@pytest.mark.slow
@pytest.mark.parametrize("lane_name", ["search", "load"])
def test_a_stopped_script_run_kills_the_worker_it_waits_for(
    one_worker: None, tmp_path: Path, lane_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Streamlit stops a run (the visitor closed the tab, or the page reruns) by raising its ``StopException`` in
    the script's thread at its next check: here AppTest's run timeout asks for that stop."""
    from streamlit.testing.v1 import AppTest

    from explorer.server import memo
    from explorer.ui.page import streamlit_stop_check

    monkeypatch.setattr(memo, "_STOP_CHECK", [streamlit_stop_check])  # as the page's warm-up sets it
    marker = tmp_path / "pid"
    # its worker started here, from a main module without a file: spawn would import AppTest's script
    monkeypatch.setitem(sys.modules, "__main__", types.ModuleType("__main__"))
    workers.run(os.getpid, lane_name=lane_name)
    for seconds in (2, 8, 32, 128):  # on a busy machine the call may not reach its worker in 2 s: again, longer
        app = AppTest.from_function(run_in_a_script, args=(spin, str(marker), lane_name))
        with pytest.raises(RuntimeError, match="timed out"):
            app.run(timeout=seconds)
        if wait_for(marker.exists, 10):
            break
    assert marker.exists()
    pid = int(marker.read_text())
    assert wait_for(lambda: not alive(pid)), "the worker kept running after its script run stopped"
    assert busy_pids() == []


def slow_square(value: int) -> int:
    time.sleep(0.5)
    return value * value


@pytest.mark.slow
def test_a_lane_waits_for_its_worker_and_a_stopped_wait_leaves_the_queue(one_worker: None) -> None:
    with ThreadPoolExecutor(3) as threads:
        squares = list(threads.map(lambda v: workers.run(slow_square, v), range(3)))
    assert squares == [0, 1, 4]


def _chat_upload(rows: int) -> bytes:
    lines = [
        json.dumps({"messages": [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}]})
        for i in range(rows)
    ]
    return "\n".join(lines).encode()


@pytest.mark.slow
@pytest.mark.parametrize("in_a_worker", [True, False], ids=["worker", "server"])
def test_an_upload_reports_its_progress_to_the_page_that_waits(
    in_a_worker: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reading chats reports the rows done of all, from the worker process (or in the server with workers off),
    to the waiting thread's listener: rising, ending at every row."""
    from explorer.core.sources import Upload
    from explorer.server import cache

    monkeypatch.setattr(workers, "WORKERS", 1 if in_a_worker else 0)
    workers.shutdown()
    heard: list[tuple[int, int]] = []
    source = Upload.of(f"chats-{in_a_worker}.jsonl", _chat_upload(5_000), "bytes")
    try:
        with workers.listening(lambda done, total: heard.append((done, total))):
            data = cache.dataset(source, packing.Recipe.for_reading())
    finally:
        workers.shutdown()
    assert len(data.lengths) == 5_000
    assert len(heard) >= 2, heard  # more than the end alone: the rows are read in chunks
    assert [done for done, _ in heard] == sorted(done for done, _ in heard)
    assert heard[-1] == (5_000, 5_000)


@pytest.mark.slow
def test_a_worker_replaced_after_its_calls_answers_the_next_ones(
    one_worker: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker process answers ``TASKS_PER_WORKER`` calls, then a fresh one takes its place, after a warm-up call
    of its own as ``start_soon`` makes it (python/cpython#115634 left such an executor without a process)."""
    monkeypatch.setattr(workers, "TASKS_PER_WORKER", 2)
    search = workers.lane("search")
    assert search is not None
    search.take()
    search.put(workers._Worker(search.niceness, warm=True))
    pids = [workers.run(os.getpid, seconds=60) for _ in range(5)]
    assert os.getpid() not in pids and len(set(pids)) >= 2
    with pytest.raises(workers.TimedOut):  # and a kill finds the process of the call, a replaced one too
        workers.run(spin, str(Path(os.devnull)), seconds=1)


def hold(marker: str, release: str) -> int:
    """A long load: leave this process's id in ``marker``, then wait until ``release`` exists (at most 10 minutes);
    its process id."""
    Path(marker).write_text(str(os.getpid()))
    deadline = time.monotonic() + 600
    while not os.path.exists(release) and time.monotonic() < deadline:
        time.sleep(0.01)
    return os.getpid()


@pytest.mark.slow
def test_a_second_sessions_short_load_is_not_stuck_behind_a_long_one(
    one_worker: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One visitor's long load (a chat template that runs for a minute) holds one of the load lane's workers, never
    the other: another visitor's load runs at once, while the first still runs."""
    monkeypatch.setattr(workers, "_SESSION", [lambda: threading.current_thread().name])  # a session a thread
    marker, release = tmp_path / "pid", tmp_path / "release"
    with ThreadPoolExecutor(1, "first") as first, ThreadPoolExecutor(1, "second") as second:
        long = first.submit(workers.run, hold, str(marker), str(release), lane_name="load", seconds=600)
        try:
            assert wait_for(marker.exists)
            short = second.submit(workers.run, os.getpid, lane_name="load")
            assert wait_for(short.done), "the second session's load waited for the first's"
            assert not long.done()  # the first load still runs, in its own worker
            assert short.result() not in (os.getpid(), int(marker.read_text()))
        finally:
            release.touch()
        assert long.result() == int(marker.read_text())


@pytest.mark.slow
def test_a_sessions_new_load_stops_its_previous_one(
    one_worker: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session has one load at a time: a new one stops the one it still has (its worker killed), so a visitor
    who repeats loads never holds both of the lane's workers."""
    monkeypatch.setattr(workers, "_SESSION", [lambda: "one visitor"])
    marker = tmp_path / "pid"
    with ThreadPoolExecutor(1) as older:
        previous = older.submit(workers.run, spin, str(marker), lane_name="load", seconds=600)
        assert wait_for(marker.exists)
        assert workers.run(os.getpid, lane_name="load") not in (os.getpid(), int(marker.read_text()))
        with pytest.raises(workers.Superseded, match=r"^spin was stopped: the page asked for another in its place$"):
            previous.result(timeout=60)
    assert wait_for(lambda: not alive(int(marker.read_text())))
    assert busy_pids() == []
