"""The searches' worker processes (``explorer.workers``): real processes, the same answers as in the server."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import types
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import packing
from explorer import compute, workers

APP = str(Path(__file__).resolve().parents[2] / "app.py")


@pytest.fixture
def one_worker(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A pool of one real worker process for the test, shut down after it."""
    monkeypatch.setattr(workers, "WORKERS", 1)
    monkeypatch.setattr(workers, "_POOL", None)
    yield
    executor = workers._POOL
    if executor is not None:
        executor.shutdown(wait=True, cancel_futures=True)
    workers._POOL = None


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


def test_a_search_runs_in_another_process_and_answers_as_the_server_would(one_worker: None) -> None:
    hard = np.array([26, 26, 26, 25, 25, 24, 24, 23, 23] * 8 + [49, 50, 51] * 5, dtype=np.int64)
    assert workers.run(os.getpid) != os.getpid()
    far, costs = workers.run(compute.compare, hard, 100, "truncate")
    here, here_costs = compute.compare(hard, 100, "truncate")
    assert [(r.label, r.stats, r.bound, r.refusal) for r in far] == [
        (r.label, r.stats, r.bound, r.refusal) for r in here
    ]
    assert costs == here_costs
    assert all(row.layout is None for row in far)
    run = workers.run(compute.run_strategy, hard, 100, "optimal", "truncate", (("time_limit", 5),))
    assert run.layout is not None and run.layout.num_blocks == 26
    assert np.array_equal(run.layout.piece_block(), packing.plan(hard, 100, "optimal").piece_block())


def test_an_error_in_a_worker_is_raised_here_with_its_fields(one_worker: None) -> None:
    with pytest.raises(packing.SettingError) as raised:
        workers.run(compute.compare, np.array([3, 4], dtype=np.int64), 0, "truncate")
    assert raised.value.name == "max_seq_length"


def test_a_worker_that_dies_once_costs_the_call_nothing(one_worker: None, tmp_path: Path) -> None:
    assert workers.run(die_once, str(tmp_path / "died")) not in (os.getpid(), None)


def test_a_search_whose_workers_keep_dying_fails_in_one_line_and_never_runs_in_the_server(one_worker: None) -> None:
    with pytest.raises(workers.WorkerDied, match="die_in_a_worker"):
        workers.run(die_in_a_worker, os.getpid())
    assert workers.run(os.getpid) != os.getpid()  # and the next search gets a new worker


def test_with_workers_off_everything_runs_here(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workers, "WORKERS", 0)
    assert workers.pool() is None
    assert workers.run(os.getpid) == os.getpid()


def worker_imports() -> tuple[bool, bool]:
    """Whether this process has imported Streamlit, and whether its ``__mp_main__`` drew a page (its ``main``)."""
    main = sys.modules.get("__mp_main__")
    return "streamlit" in sys.modules, main is not None and "st" in vars(main)


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
from explorer import workers
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


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (an exited one no parent has reaped yet, a zombie, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
