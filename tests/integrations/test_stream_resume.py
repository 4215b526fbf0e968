"""A resumable ``stream``: stopped after any block and resumed from its ``state_dict``, it yields exactly the blocks
of the uninterrupted stream, so nothing waiting in its buffer (pending blocks, carried documents) is lost or
packed twice; the source resumes from its own state where it has one (a ``datasets.IterableDataset``)."""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import packing
import packing.errors
from packing.streaming import stream


def as_lists(blocks: Any) -> list[dict[str, list[int]]]:
    return [{name: values.tolist() for name, values in block.items()} for block in blocks]


def rows_of(seed: int, count: int, longest: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.lognormal(np.log(longest / 4), 0.9, count).astype(int), 1, 2 * longest)
    return [[1 + (i * 7 + j) % 90 for j in range(n)] for i, n in enumerate(lengths.tolist())]


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    buffer_size=st.integers(2, 40),
    shuffle=st.booleans(),
    strategy=st.sampled_from(["bfd", "ffd", "first_fit_shuffle", "next_fit"]),
    overflow=st.sampled_from(["truncate", "split", "drop"]),
    cut=st.floats(0, 1),
    twice=st.booleans(),
)
def test_a_resumed_stream_yields_the_uninterrupted_blocks(
    seed: int, buffer_size: int, shuffle: bool, strategy: str, overflow: str, cut: float, twice: bool
) -> None:
    rows = rows_of(seed, 90, 32)
    options = {"buffer_size": buffer_size, "shuffle": shuffle, "strategy": strategy, "overflow": overflow, "seed": 3}
    whole = as_lists(stream(rows, 32, **options))
    k = int(cut * len(whole))
    blocks = stream(rows, 32, **options)
    head = as_lists(next(blocks) for _ in range(k))
    state = pickle.loads(pickle.dumps(blocks.state_dict()))
    resumed = stream(rows, 32, state=state, **options)
    if twice and k < len(whole):  # stop again right away: a state of a resumed stream resumes too
        head += as_lists([next(resumed)])
        resumed = stream(rows, 32, state=resumed.state_dict(), **options)
    assert head + as_lists(resumed) == whole
    if overflow == "truncate":  # every sample exactly once
        ids = [i for block in whole for i in dict.fromkeys(block["sequence_ids"]) if i >= 0]
        assert sorted(ids) == list(range(len(rows)))


def test_the_state_holds_the_buffer_waiting_to_be_yielded() -> None:
    rows = rows_of(1, 300, 64)
    blocks = stream(rows, 64, buffer_size=50)
    for _ in range(7):
        next(blocks)
    state = blocks.state_dict()
    assert state["pending"] is not None and len(state["pending"]["block_starts"]) > 1  # blocks of this buffer
    assert len(state["carried"]["ids"]) > 0  # documents carried into the next buffer
    assert state["position"] == 50 and state["source"] is None  # a list cannot say where it is: re-read, skipped
    # the documents waiting (pending or carried) are neither in the blocks yielded nor read again from the rows
    waiting = set(state["pending"]["ids"]) | set(state["carried"]["ids"])
    yielded = {i for block in stream(rows, 64, buffer_size=50) for i in block["sequence_ids"].tolist()}
    assert waiting <= yielded


def test_a_generator_source_is_read_again_and_the_rows_read_skipped() -> None:
    rows = rows_of(2, 120, 32)
    whole = as_lists(stream(iter(rows), 32, buffer_size=16))
    blocks = stream(iter(rows), 32, buffer_size=16)
    head = as_lists(next(blocks) for _ in range(5))
    assert head + as_lists(stream(iter(rows), 32, buffer_size=16, state=blocks.state_dict())) == whole


def test_a_datasets_iterable_resumes_from_its_own_state() -> None:
    datasets = pytest.importorskip("datasets")
    rows = rows_of(3, 200, 48)
    read = {"count": 0}

    def counted(row: dict[str, Any]) -> dict[str, Any]:
        read["count"] += 1
        return row

    def source() -> Any:
        return datasets.Dataset.from_dict({"input_ids": rows}).to_iterable_dataset(num_shards=4).map(counted)

    whole = as_lists(stream(source(), 48, buffer_size=30))
    blocks = stream(source(), 48, buffer_size=30)
    head = as_lists(next(blocks) for _ in range(9))
    state = pickle.loads(pickle.dumps(blocks.state_dict()))
    assert state["source"] is not None and state["position"] > 0
    read["count"] = 0
    assert head + as_lists(stream(source(), 48, buffer_size=30, state=state)) == whole
    # the source was restored from its state, not read from its start: only its rows after the saved position
    assert read["count"] == len(rows) - state["position"]


@pytest.mark.parametrize(
    ("change", "what"), [({"buffer_size": 9}, "buffer_size"), ({"shuffle": False}, "shuffle"), ({"seed": 1}, "recipe")]
)
def test_a_foreign_state_is_refused(change: dict[str, Any], what: str) -> None:
    rows = rows_of(4, 40, 16)
    blocks = stream(rows, 16, buffer_size=8)
    next(blocks)
    with pytest.raises(packing.errors.StateMismatch, match=rf"^state: expected the same {what} \(") as caught:
        stream(rows, 16, **{"buffer_size": 8, **change}, state=blocks.state_dict())
    assert caught.value.what == what
    with pytest.raises(packing.errors.StateMismatch, match=r"^state: expected the same format \(packing.stream/1\)"):
        stream(rows, 16, buffer_size=8, state={"format": "x"})
