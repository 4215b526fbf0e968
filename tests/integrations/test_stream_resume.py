"""A resumable ``stream``: stopped after any block and resumed from its ``state_dict``, it yields exactly the blocks
of the uninterrupted stream, so nothing waiting in its buffer (pending blocks, carried documents) is lost or
packed twice; the source resumes from its own state where it has one (a ``datasets.IterableDataset``)."""

from __future__ import annotations

import copy
import io
import itertools
import json
import pickle
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import packing
import packing.errors
from packing.streaming import STATE_KEYS, stream
from tests.helpers.units import random_units


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
    for junk in ({"junk": 1}, {**state["source"], "examples_iterable": 5}):  # a state the source refuses
        with pytest.raises(packing.SettingError, match=r"'source': the source's own state_dict\(\)\), got <\w+"):
            list(stream(source(), 48, buffer_size=30, state={**state, "source": junk}))


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


# ---------------------------------------------------------------- a state is plain data


def plain(value: Any) -> bool:
    """Whether ``value`` holds only dicts of strings, lists, ints, strings, flags and None."""
    if isinstance(value, dict):
        return all(isinstance(k, str) and plain(v) for k, v in value.items())
    if isinstance(value, list):
        return all(plain(v) for v in value)
    return value is None or isinstance(value, (bool, int, str))


def masked_rows() -> list[dict[str, list[int]]]:
    rows = rows_of(6, 120, 32)
    return [{"input_ids": r, "loss_mask": [int(j % 3 > 0) for j in range(len(r))]} for r in rows]


@pytest.mark.parametrize("source", ["list", "masked", "units", "datasets"])
def test_a_state_round_trips_torch_weights_only_and_json_and_resumes_exactly(source: str) -> None:
    torch = pytest.importorskip("torch")
    options: dict[str, Any] = {"buffer_size": 12, "seed": 2}
    rows: Any = {"list": lambda: rows_of(5, 150, 32), "masked": masked_rows}.get(source, lambda: None)()
    if source == "units":
        rows, options = random_units(4, count=60), {**options, "share_prompt": True}
    make = lambda: rows  # noqa: E731
    if source == "datasets":
        datasets = pytest.importorskip("datasets")
        table = datasets.Dataset.from_dict({"input_ids": rows_of(5, 150, 32)})
        make = lambda: table.to_iterable_dataset(num_shards=3)  # noqa: E731
    length = 64 if source == "units" else 32
    whole = as_lists(stream(make(), length, **options))
    blocks = stream(make(), length, **options)
    head = as_lists(next(blocks) for _ in range(len(whole) // 3))
    while blocks.state_dict()["pending"] is None:  # stopped inside a buffer: blocks waiting in the state
        head += as_lists([next(blocks)])
    state = blocks.state_dict()
    assert plain(state) and state["carried"]["ids"]
    saved = io.BytesIO()
    torch.save(state, saved)
    saved.seek(0)
    for loaded in (torch.load(saved, weights_only=True), json.loads(json.dumps(state))):
        assert loaded == state
        resumed = head + as_lists(stream(make(), length, state=loaded, **options))
        if source == "units":  # see test_a_resumed_stream_of_units_keeps_each_blocks_completions_apart
            resumed, whole = (
                [{k: v for k, v in b.items() if k != "completion_ids"} for b in bs] for bs in (resumed, whole)
            )
        assert resumed == whole


def test_a_resumed_stream_of_units_keeps_each_blocks_completions_apart() -> None:
    """``completion_ids`` number the completions of the samples a buffer holds (from 0 in each buffer); a resumed
    buffer holds its pending samples only and numbers them from 0: each block's completions are the same, told
    apart the same way, under other numbers."""
    rows, options = random_units(4, count=60), {"buffer_size": 12, "seed": 2, "share_prompt": True}
    whole = as_lists(stream(rows, 64, **options))
    blocks = stream(rows, 64, **options)
    head = as_lists(next(blocks) for _ in range(5))
    assert blocks.state_dict()["pending"] is not None
    resumed = head + as_lists(stream(rows, 64, state=blocks.state_dict(), **options))
    assert len(resumed) == len(whole)
    for ours, theirs in zip(resumed, whole, strict=True):
        assert {k: v for k, v in ours.items() if k != "completion_ids"} == {
            k: v for k, v in theirs.items() if k != "completion_ids"
        }
        pairs = set(zip(ours["completion_ids"], theirs["completion_ids"], strict=True))
        assert len({a for a, _ in pairs}) == len({b for _, b in pairs}) == len(pairs)  # one number for the other
        assert all((a == -1) == (b == -1) for a, b in pairs)


def test_a_source_shorter_than_the_saved_position_is_refused() -> None:
    rows = rows_of(7, 100, 32)
    blocks = stream(rows, 32, buffer_size=20)
    next(blocks)
    state = blocks.state_dict()
    message = r"^state: expected the same source \(15 rows\), got other source \(20 rows read when saved\)$"
    with pytest.raises(packing.errors.StateMismatch, match=message):
        stream(rows[:15], 32, buffer_size=20, state=state)  # a list says its length: refused at once
    resumed = stream(iter(rows[:15]), 32, buffer_size=20, state=state)  # a generator: once its rows are skipped
    with pytest.raises(packing.errors.StateMismatch, match=message):
        list(resumed)
    assert len(list(stream(iter(rows[:20]), 32, buffer_size=20, state=state))) > 0  # as many rows: no more to read
    endless = itertools.cycle(rows)  # a position no stream reaches is refused before a row is skipped
    with pytest.raises(
        packing.SettingError, match=r"\('position': rows read, 0\.\.2,147,483,648\), got 1099511627776$"
    ):
        stream(endless, 32, buffer_size=20, state={**state, "position": 2**40})


HUGE = [10**12, 2**63, 2**64 + 1, 10**5000]
HOSTILE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from([*HUGE, *(-v for v in HUGE), np.array([1, 2]), np.int64(3), 2.5, "x", (1, 2), {"a": 1}]),
    st.lists(st.one_of(st.integers(-3, 200), st.sampled_from(HUGE)), max_size=6),
    st.lists(st.lists(st.integers(0, 3), max_size=2), max_size=3),
)
FIELDS = st.one_of(
    st.tuples(st.sampled_from(STATE_KEYS)),
    st.tuples(st.just("carried"), st.sampled_from(["tokens", "loss_mask", "lengths", "ids", "units"])),
    st.tuples(
        st.just("pending"),
        st.sampled_from(
            ["tokens", "loss_mask", "lengths", "ids", "block_starts", "piece_sequence", "piece_start", "piece_length"]
        ),
    ),
    st.tuples(
        st.just("units"),
        st.sampled_from(["kind", "prompt_lengths", "completion_offsets", "completion_lengths", "share_prompt"]),
    ),
)


def tampered(state: dict[str, Any], field: tuple[str, ...], value: Any) -> dict[str, Any]:
    """``state`` with ``field`` (a key, or a key of its pending or carried samples or of their units) set to
    ``value``."""
    state = copy.deepcopy(state)
    if field[0] == "units":
        part = state["pending"] if state["pending"] is not None else state["carried"]
        part.setdefault("units", {})[field[1]] = value  # units where there were none, too
    elif len(field) == 2 and state[field[0]] is not None:
        state[field[0]][field[1]] = value
    else:
        state[field[0]] = value
    return state


@settings(max_examples=300, deadline=None)
@given(field=FIELDS, value=HOSTILE, units=st.booleans(), cut=st.integers(0, 6))
def test_a_tampered_state_resumes_or_is_refused_in_one_typed_line(
    field: tuple[str, ...], value: Any, units: bool, cut: int
) -> None:
    rows = random_units(8, count=40) if units else masked_rows()[:60]
    length = 64 if units else 32
    blocks = stream(rows, length, buffer_size=10)
    for _ in range(cut):
        next(blocks)
    state = tampered(blocks.state_dict(), field, value)
    try:
        resumed = as_lists(stream(rows, length, buffer_size=10, state=state))
    except packing.PackingError as error:  # one line saying which field and what it should be
        message = str(error)
        assert message.startswith("state: expected ") and "\n" not in message and len(message) < 320, message
    else:  # taken as it is: blocks of at most max_seq_length tokens, no sample waiting twice
        assert all(len(block["input_ids"]) == length for block in resumed)
