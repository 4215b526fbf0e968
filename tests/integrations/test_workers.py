"""Packing keeps working in forked worker processes and in threads (data loaders, Dataset.map, the app)."""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

import packing

SAMPLES = [[1, 2], [3, 4, 5], [6], [7, 8, 9, 10, 11]]


def _pack_once(strategy: str) -> list[list[int]]:
    return packing.pack(SAMPLES, 4, strategy=strategy).input_ids.tolist()


FORKED = """
import multiprocessing, packing
SAMPLES = [[1, 2], [3, 4, 5], [6], [7, 8, 9, 10, 11]]
def once(strategy):
    return packing.pack(SAMPLES, 4, strategy=strategy).input_ids.tolist()
if __name__ == "__main__":
    expected = [once(s) for s in ("split", "bfd", "ffd")]  # compiled kernels already loaded in the parent
    with multiprocessing.get_context("fork").Pool(2) as pool:
        assert pool.map_async(once, ["split", "bfd", "ffd"]).get(timeout=120) == expected
    print("ok")
"""


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="fork start method is Linux-only here")
def test_packing_in_forked_workers_after_packing_in_the_parent() -> None:
    # a fresh interpreter, as a trainer that forks its data-loader workers: this test process has loaded Ray,
    # torch and tokenizers in other tests, and a fork of a process running their threads can hang in them
    done = subprocess.run([sys.executable, "-c", FORKED], capture_output=True, text=True, timeout=240)
    assert done.stdout.strip() == "ok", done.stderr[-2000:]


def test_packing_from_several_threads() -> None:
    expected = _pack_once("bfd")
    with ThreadPoolExecutor(max_workers=4) as workers:
        results = list(workers.map(lambda _: _pack_once("bfd"), range(16)))
    assert results == [expected] * 16
