"""What one visitor may ask of the server: a link's search time is capped, and said so on the page."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

import packing
from explorer.core import runs as compute
from explorer.core.sources import Synthetic
from explorer.server import cache
from tests.helpers.processes import alive, busy_pids

APP = str(Path(__file__).resolve().parents[2] / "app.py")


def test_a_link_asking_for_a_ten_minute_search_gets_the_capped_one_and_is_told(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    asked = []
    real = compute.run_strategy

    def recording(lengths, recipe):  # type: ignore[no-untyped-def]
        asked.append(recipe.time_limit)
        return real(lengths, recipe)

    monkeypatch.setattr(compute, "run_strategy", recording)
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params.update(
        source="synthetic", count="200", max_length="64", max_seq_length="64", strategy="optimal", time_limit="600"
    )
    at.run()
    assert not at.exception
    notes = [str(e.value) for e in at.info]
    assert any("600 s" in n and f"at most {compute.MAX_TIME_LIMIT} s" in n for n in notes), notes
    assert asked and set(asked) == {compute.MAX_TIME_LIMIT}


def test_the_page_plans_a_long_search_in_the_long_lane_within_its_deadline() -> None:
    asked = packing.Recipe(32, strategy="optimal", time_limit=600)
    assert compute.search_lane(compute.capped(asked)) == "long"
    assert compute.search_deadline(compute.capped(asked)) <= compute.MAX_TIME_LIMIT + 30
    run = cache.plan(Synthetic(50, "uniform", 1, 32), asked)
    assert run.plan is not None


HOSTILE = {
    "source": "synthetic",
    "count": "50000",
    "max_length": "2048",
    "distribution": "uniform",
    "seed": "5",
    "max_seq_length": "2500",
    "strategy": "optimal",
    "time_limit": "600",
}
"""The recipe's link: the proven optimum asked for ten minutes, on lengths that keep it searching to its limit."""


@pytest.mark.slow
def test_closing_the_tab_of_a_long_search_stops_its_worker(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The visitor leaves while the page waits for its search: the run is stopped (here by AppTest's timeout, as
    Streamlit stops a run whose session closed), and the worker searching for it is killed, not left to run. A run
    stopped before its search started (a loaded machine) is tried again with a longer timeout."""
    import threading
    import time

    from explorer.server import warmup, workers

    warmup.prepare()  # the kernels loaded first: the run's time goes to the search
    monkeypatch.setattr(workers, "WORKERS", 1)
    workers.shutdown()
    seen: set[int] = set()
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            seen.update(busy_pids())
            time.sleep(0.02)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        for seconds in (6, 12, 24, 48, 96):  # on a busy machine the page may not reach its search in 6 s: again
            at = AppTest.from_file(APP, default_timeout=120)
            at.query_params.update(HOSTILE)
            deadline = time.monotonic() + 60
            with pytest.raises(RuntimeError, match="timed out"):
                at.run(timeout=seconds)
            assert wait_until(lambda: not busy_pids(), deadline)
            if seen:
                break
    finally:
        done.set()
        watcher.join()
        workers.shutdown()
    assert seen, "the search did not run in a worker"
    assert wait_until(lambda: not any(alive(pid) for pid in seen), time.monotonic() + 60)


def wait_until(predicate, deadline: float) -> bool:  # type: ignore[no-untyped-def]
    import time

    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.05)
    return bool(predicate())


def chat_upload(turns: int) -> bytes:
    """One JSONL row of a chat with ``turns`` messages (the recipe's upload had 100,000)."""
    import json

    messages = [{"role": ("user", "assistant")[i % 2], "content": f"turn {i}"} for i in range(turns)]
    return (json.dumps({"messages": messages}) + "\n").encode()


@pytest.mark.slow
def test_an_upload_is_read_in_a_worker_as_the_server_reads_it(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import numpy as np

    from explorer.core.sources import Upload
    from explorer.server import workers

    monkeypatch.setattr(workers, "WORKERS", 1)
    workers.shutdown()
    upload = Upload.of("chat.jsonl", chat_upload(40))
    try:
        far = cache.dataset(upload, packing.Recipe.for_reading())
    finally:
        workers.shutdown()
    here = upload.load()
    assert far.label == here.label and np.array_equal(far.lengths, here.lengths)
    assert far.samples is not None and here.samples is not None
    assert np.array_equal(np.asarray(far.samples.loss_mask), np.asarray(here.samples.loss_mask))


@pytest.mark.slow
def test_an_upload_that_takes_too_long_is_stopped_in_one_line(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The recipe's 100,000-turn chat: reading it past the deadline stops its worker, and the page says so in
    one line (the deadline is tiny here, so that the test stays fast whatever the tokenizer's speed)."""
    from explorer.core.parsing import InputError
    from explorer.core.sources import Upload
    from explorer.server import workers

    monkeypatch.setattr(workers, "WORKERS", 1)
    monkeypatch.setattr(cache, "LOAD_SECONDS", 0.01)
    workers.shutdown()
    try:
        with pytest.raises(
            InputError, match=r"^it took longer than the 0.01 s the explorer gives it, and was stopped$"
        ):
            cache.dataset(Upload.of("long chat.jsonl", chat_upload(100_000)), packing.Recipe.for_reading())
        assert busy_pids() == []
    finally:
        workers.shutdown()


CRASHING_AUDIT = """
import os, sys
sys.path.insert(0, os.getcwd())
from explorer.server import cache, workers
from explorer.core.parsing import InputError
from explorer.core.sources import Upload
workers.WORKERS = 1
deep = b'{"input_ids": ' + b"[" * 20_000 + b"1" + b"]" * 20_000 + b"}\\n"
try:
    cache.audit(Upload.of("deep.jsonl", deep))
    print("read")
except InputError as error:
    print("refused:", error)
"""


@pytest.mark.slow
def test_a_file_that_crashes_its_reader_on_the_inspect_tab_leaves_the_server_running() -> None:
    """The recipe's 40 KB file nested 20,000 deep made ``pyarrow.json.read_json`` crash the whole server: read
    in a worker, at most the worker goes down (in a subprocess here, as it is the server that could crash)."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", CRASHING_AUDIT], cwd=Path(APP).parent, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith(("refused:", "read")) and "Traceback" not in done.stdout
