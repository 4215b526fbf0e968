"""Packing keeps working in forked worker processes and in threads (data loaders, Dataset.map, the app)."""

from __future__ import annotations

import multiprocessing
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

import packing

SAMPLES = [[1, 2], [3, 4, 5], [6], [7, 8, 9, 10, 11]]


def _pack_once(strategy: str) -> list[list[int]]:
    return packing.pack(SAMPLES, 4, strategy=strategy).input_ids.tolist()


@pytest.mark.skipif(sys.platform != "linux", reason="fork start method is Linux-only here")
def test_packing_in_forked_workers_after_packing_in_the_parent() -> None:
    expected = {s: _pack_once(s) for s in ("split", "bfd", "ffd")}  # compiled kernels already loaded
    with multiprocessing.get_context("fork").Pool(2) as pool:
        result = pool.map_async(_pack_once, list(expected))
        assert result.get(timeout=120) == list(expected.values())


def test_packing_from_several_threads() -> None:
    expected = _pack_once("bfd")
    with ThreadPoolExecutor(max_workers=4) as workers:
        results = list(workers.map(lambda _: _pack_once("bfd"), range(16)))
    assert results == [expected] * 16
