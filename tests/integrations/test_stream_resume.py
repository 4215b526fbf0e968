"""A resumable ``stream``: stopped after any block and resumed from its ``state_dict``, it yields exactly the blocks
of the uninterrupted stream, so nothing waiting in its buffer (pending blocks, carried documents) is lost or
packed twice; the source resumes from its own state where it has one (a ``datasets.IterableDataset``)."""

from __future__ import annotations

import copy
import io
import itertools
import json
import pickle
import re
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import packing
import packing.errors
from packing.strategies._stats import SUMMED
from packing.streaming import STATE_FORMAT, STATE_KEYS, stream, stream_dataset
from tests.helpers.units import completions_of, random_units


def as_lists(blocks: Any) -> list[dict[str, Any]]:
    """Every column of every block: its dtype and values (equal lists: equal arrays)."""
    return [{name: (values.dtype.str, values.tolist()) for name, values in block.items()} for block in blocks]


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
        ids = [i for block in whole for i in dict.fromkeys(block["sequence_ids"][1]) if i >= 0]
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
    for fmt in ("x", "packing.stream/1"):  # the first format numbered completions per buffer and held no stats
        with pytest.raises(packing.errors.StateMismatch, match=rf"^state: expected the same format \({STATE_FORMAT}\)"):
            stream(rows, 16, buffer_size=8, state={**blocks.state_dict(), "format": fmt})


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
        assert head + as_lists(stream(make(), length, state=loaded, **options)) == whole  # every column


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
    st.tuples(st.just("stats"), st.sampled_from([*SUMMED, "units"])),
    st.tuples(st.just("carried"), st.sampled_from(["tokens", "loss_mask", "lengths", "ids", "units"])),
    st.tuples(
        st.just("pending"),
        st.sampled_from(
            ["tokens", "loss_mask", "lengths", "ids", "block_starts", "piece_sequence", "piece_start", "piece_length"]
        ),
    ),
    st.tuples(
        st.just("units"),
        st.sampled_from(
            ["kind", "prompt_lengths", "completion_offsets", "completion_lengths", "share_prompt", "first_completion"]
        ),
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


def _without_units(part: dict[str, Any], pick: int) -> None:
    part["units"] = None


def _other_kinds(part: dict[str, Any], pick: int) -> None:  # a group marked as a pair, a pair as plain, ...
    kinds = (part.get("units") or {}).get("kind") or [0]
    part.setdefault("units", {})["kind"] = [(kind + pick // 3**i) % 3 for i, kind in enumerate(kinds)]


def _empty_completion(
    part: dict[str, Any], pick: int
) -> None:  # a completion of no tokens, the lengths still adding up
    units = part.get("units")
    if not units or not units["kind"]:
        return
    sample = pick % len(units["kind"])
    units["completion_lengths"].insert(units["completion_offsets"][sample], 0)
    units["completion_offsets"][sample + 1 :] = [o + 1 for o in units["completion_offsets"][sample + 1 :]]


def _trained_prompts(part: dict[str, Any], pick: int) -> None:  # no mask (all trained), or a prompt token trained
    if pick % 2 or part["loss_mask"] is None:
        part["loss_mask"] = None
    else:
        part["loss_mask"] = [1] * len(part["loss_mask"])


def _other_layout(part: dict[str, Any], pick: int) -> None:
    if part.get("units"):
        part["units"]["share_prompt"] = not part["units"]["share_prompt"]


def _renumbered(part: dict[str, Any], pick: int) -> None:  # a unit's completions numbered as another's
    units = part.get("units")
    if units and units["first_completion"]:
        firsts = units["first_completion"]
        firsts[pick % len(firsts)] = firsts[pick // len(firsts) % len(firsts)]


PART_TAMPERS = [_without_units, _other_kinds, _empty_completion, _trained_prompts, _other_layout, _renumbered]
NUMPY_VALUES = [np.int64(3), np.uint64(2**63), np.array([1, 2]), np.array(5), np.float64(1.0)]


def family_tampered(state: dict[str, Any], family: int, pick: int) -> dict[str, Any]:
    """``state`` changed by one of the families of tampering a review found (``family``, ``pick`` choosing
    where and how): the units of the pending or carried samples taken away, other kinds, an empty completion,
    prompts trained, the other layout, or numpy values in the random state."""
    state = copy.deepcopy(state)
    if family == len(PART_TAMPERS):
        value = NUMPY_VALUES[pick % len(NUMPY_VALUES)]
        if pick // len(NUMPY_VALUES) % 2:
            state["rng"]["state"] = value
        else:
            key = ["state", "inc"][pick // 10 % 2]
            state["rng"]["state"][key] = value
        return state
    parts = [name for name in ("pending", "carried") if state[name] is not None]
    PART_TAMPERS[family](state[parts[pick % len(parts)]], pick // len(parts))
    return state


def assert_valid_training_data(blocks: list[dict[str, Any]], units: bool) -> None:
    """What every block of a stream gives a trainer: the unit columns in every block of a stream of pairs and
    groups (none in a stream of plain rows), prompts untrained, each completion one run of tokens in one of the
    ``blocks``, and each unit's kind matching its completions (a pair 2, a group at least 1, a plain sample
    none)."""
    seen: set[int] = set()
    for block in blocks:
        assert ("completion_ids" in block) == units
        if not units:
            continue
        unit, completion, kind = block["unit_ids"], block["completion_ids"], block["unit_kinds"]
        prompt = (completion < 0) & (kind > 0)
        assert not block["loss_mask"][prompt].any() and (block["labels"][prompt] == -100).all()
        numbers = set(np.unique(completion[completion >= 0]).tolist())
        assert not numbers & seen  # a completion's number is its own, over the whole stream
        seen |= numbers
        for number in numbers:
            where = np.flatnonzero(completion == number)
            assert where[-1] - where[0] + 1 == len(where)  # one run
            assert len(np.unique(unit[where])) == 1
        for u in np.unique(unit[unit >= 0]).tolist():
            kinds = np.unique(kind[unit == u])
            answers = len(np.unique(completion[(unit == u) & (completion >= 0)]))
            assert len(kinds) == 1 and kinds[0] in (0, 1, 2)
            assert answers == {0: 0, 1: 2}.get(int(kinds[0]), max(answers, 1))


@settings(max_examples=300, deadline=None)
@given(
    change=st.one_of(
        st.tuples(st.just("field"), FIELDS, HOSTILE),
        st.tuples(st.just("family"), st.integers(0, len(PART_TAMPERS)), st.integers(0, 10**6)),
    ),
    units=st.booleans(),
    share_prompt=st.booleans(),
    cut=st.integers(0, 6),
)
def test_a_tampered_state_resumes_or_is_refused_in_one_typed_line(
    change: tuple[str, Any, Any], units: bool, share_prompt: bool, cut: int
) -> None:
    rows = random_units(8, count=40) if units else masked_rows()[:60]
    length = 64 if units else 32
    options: dict[str, Any] = {"buffer_size": 10, "share_prompt": share_prompt}
    blocks = stream(rows, length, **options)
    for _ in range(cut):
        next(blocks)
    how, field, value = change
    state = (tampered if how == "field" else family_tampered)(blocks.state_dict(), field, value)
    try:
        resumed = list(stream(rows, length, state=state, **options))
    except packing.PackingError as error:  # one line saying which field and what it should be
        message = str(error)
        assert message.startswith("state: expected ") and "\n" not in message and len(message) < 320, message
    else:  # taken as it is: blocks of at most max_seq_length tokens, no sample waiting twice, valid training data
        assert all(len(block["input_ids"]) == length for block in resumed)
        assert_valid_training_data(resumed, units)  # (numbers of completions yielded before: not in the state)


# ---------------------------------------------------------------- pairs and groups, and the stream's statistics

LENGTH = 48


def unit_rows(seed: int, count: int) -> list[Any]:
    """Pairs and groups (``random_units``) with plain rows among them, and rows too long for a block at random
    places: a plain row longer than a block, a pair with an over-long completion (cut to fit under ``truncate``),
    a group whose prompt alone fills a block (left out whole under every policy)."""
    rng = np.random.default_rng(seed)
    rows: list[Any] = list(random_units(seed, count=count))
    extra = [
        [1 + i % 50 for i in range(LENGTH + 9)],
        {"prompt": [4, 5], "chosen": [6] * (2 * LENGTH), "rejected": [7, 8]},
        {"prompt": [9] * LENGTH, "completions": [[3], [4]]},
        *([[10 + j for j in range(int(rng.integers(1, 12)))] for _ in range(3)]),
    ]
    for row in extra:
        rows.insert(int(rng.integers(0, len(rows) + 1)), row)
    return rows


def first_completions(rows: list[Any]) -> dict[int, int]:
    """Per pair or group (its row), the number of its first completion: the completions of the pairs and groups
    before it, in input order (what ``pack`` numbers over its whole input)."""
    firsts, seen = {}, 0
    for index, row in enumerate(rows):
        if isinstance(row, dict) and "prompt" in row:
            firsts[index] = seen
            seen += len(completions_of(row))
    return firsts


def numbers_by_unit(units: Any, completions: Any) -> dict[int, list[int]]:
    """Per unit, the completion numbers its tokens carry, in order of first appearance."""
    found: dict[int, list[int]] = {}
    for unit, number in zip(np.ravel(units).tolist(), np.ravel(completions).tolist(), strict=True):
        if number >= 0 and number not in found.setdefault(unit, []):
            found[unit].append(number)
    return found


UNIT_OPTIONS = {
    "buffer_size": st.integers(2, 12),
    "shuffle": st.booleans(),
    "share_prompt": st.booleans(),
    "overflow": st.sampled_from(["truncate", "drop"]),
    "strategy": st.sampled_from(["bfd", "first_fit_shuffle"]),
}


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), options=st.fixed_dictionaries(UNIT_OPTIONS))
def test_a_stream_of_units_resumed_after_any_block_yields_every_column_of_the_uninterrupted_one(
    seed: int, options: dict[str, Any]
) -> None:
    rows = unit_rows(seed, 20)
    whole = as_lists(stream(rows, LENGTH, **options))
    for k in range(len(whole) + 1):  # every block boundary, the start and the end too
        blocks = stream(rows, LENGTH, **options)
        head = as_lists(itertools.islice(blocks, k))
        state = json.loads(json.dumps(blocks.state_dict()))
        assert head + as_lists(stream(rows, LENGTH, state=state, **options)) == whole, k


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), options=st.fixed_dictionaries(UNIT_OPTIONS))
def test_a_streams_completions_are_numbered_over_the_whole_stream_as_pack_numbers_them(
    seed: int, options: dict[str, Any]
) -> None:
    rows = unit_rows(seed, 20)
    blocks = list(stream(rows, LENGTH, **options))
    numbered = ["completion_ids" in b for b in blocks]  # plain rows read before any pair or group: no unit columns
    assert numbered == sorted(numbered)  # but once one is read, every block after has them
    ours = numbers_by_unit(
        [b["unit_ids"] for b in blocks if "unit_ids" in b],
        [b["completion_ids"] for b in blocks if "completion_ids" in b],
    )
    recipe = {name: options[name] for name in ("share_prompt", "overflow")}
    packed = packing.pack(rows, LENGTH, **recipe)
    assert ours == numbers_by_unit(packed.unit_ids, packed.completion_ids)
    firsts = first_completions(rows)  # by brute force: each unit's completions, numbered on from those before it
    assert ours == {u: list(range(firsts[u], firsts[u] + len(completions_of(rows[u])))) for u in ours}
    assert len(ours) < len(firsts)  # the group whose prompt fills a block was left out: its numbers too


def lossy_rows(seed: int) -> list[Any]:
    """Plain rows, some longer than a block (``LENGTH``), one at least."""
    rows: list[Any] = rows_of(seed, 50, LENGTH)
    rows.insert(seed % len(rows), [5] * (LENGTH + 3))
    return rows


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    units=st.booleans(),
    options=st.fixed_dictionaries({**UNIT_OPTIONS, "share_prompt": st.booleans()}),
    twice=st.booleans(),
)
def test_a_resumed_streams_stats_count_from_the_streams_start(
    seed: int, units: bool, options: dict[str, Any], twice: bool
) -> None:
    rows = unit_rows(seed, 16) if units else lossy_rows(seed)
    if not units:
        options = {**options, "share_prompt": False}
    whole = stream(rows, LENGTH, **options)
    count = len(list(whole))
    final = whole.stats
    assert final.tokens_lost > 0 and final.sequences_truncated + final.sequences_dropped > 0  # cuts are counted
    if units:
        assert final.units is not None and final.units.units_dropped > 0  # the prompt that fills a block
    for k in range(count + 1):
        blocks = stream(rows, LENGTH, **options)
        list(itertools.islice(blocks, k))
        resumed = stream(rows, LENGTH, state=json.loads(json.dumps(blocks.state_dict())), **options)
        assert resumed.stats == blocks.stats and resumed.stats.units == blocks.stats.units  # where it stopped
        if twice and k < count:  # a state of a resumed stream holds the counts too
            next(resumed)
            resumed = stream(rows, LENGTH, state=resumed.state_dict(), **options)
        list(resumed)
        assert resumed.stats == final and resumed.stats.units == final.units, k


def test_a_resumed_stream_dataset_yields_the_same_rows_and_warns_of_the_whole_streams_losses() -> None:
    """``stream_dataset`` is resumed by ``datasets`` (its ``state_dict``): it packs the stream again from its start
    and skips the blocks already given, so its rows (completion ids too) and its warning are the whole stream's."""
    datasets = pytest.importorskip("datasets")
    rows = [row for row in unit_rows(5, 30) if isinstance(row, dict)]  # a table's rows: pairs and groups
    parts = ("prompt", "chosen", "rejected", "completions")
    source = datasets.Dataset.from_dict({k: [row.get(k) for row in rows] for k in parts}).to_iterable_dataset()
    options: dict[str, Any] = {"buffer_size": 6, "share_prompt": True}
    expected = stream(rows, LENGTH, **options)
    wanted = [{k: v[: int(b["seq_lengths"].sum())].tolist() if k != "seq_lengths" else v.tolist()
               for k, v in b.items()} for b in expected]  # fmt: skip
    packed = stream_dataset(source, LENGTH, **options)
    head = list(itertools.islice(iter(packed), 3))
    resumed = stream_dataset(source, LENGTH, **options)
    resumed.load_state_dict(packed.state_dict())
    with pytest.warns(packing.errors.TokensLost) as caught:
        rest = list(resumed)
    assert head + rest == wanted
    assert caught[0].message.stats == expected.stats and caught[0].message.stats.units == expected.stats.units


def saved_unit_state() -> tuple[list[Any], dict[str, Any]]:
    rows = unit_rows(1, 30)
    blocks = stream(rows, LENGTH, buffer_size=6, shuffle=False)
    next(blocks)
    state = blocks.state_dict()
    assert state["position"] == 6 and state["stats"]["units"]["pairs"] > 0
    assert state["pending"]["units"]["first_completion"]
    return rows, state


def _with_stats(state: dict[str, Any], **change: Any) -> dict[str, Any]:
    state = copy.deepcopy(state)
    for name, value in change.items():
        part = state["stats"]["units"] if name in state["stats"]["units"] else state["stats"]
        if value is None:
            del part[name]
        else:
            part[name] = value(part) if callable(value) else value
    return state


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"packed_tokens": lambda s: s["input_tokens"] + 1},
         r"'s stats \(tokens packed and lost at most input_tokens\), got \d+$"),
        ({"num_sequences": 10**6}, r"\(num_sequences at most the 6 rows read\), got 1000000$"),
        ({"target_tokens": lambda s: s["trainable_tokens"] + 1}, r"\(target_tokens at most trainable_tokens\)"),
        ({"num_blocks": 0}, r"\(packed_tokens at most the 0 slots of num_blocks\), got \d+$"),
        ({"tokens_dropped": -1}, r"\('tokens_dropped': a non-negative integer\), got -1$"),
        ({"sequences_split": True}, r"\('sequences_split': a non-negative integer\), got True"),
        ({"trainable_tokens": 2**64}, r"\('trainable_tokens': a non-negative integer\), got 18446744073709551616$"),
        ({"empty_sequences": None}, r"\('empty_sequences': a non-negative integer\), got None \(NoneType\)$"),
        ({"units_dropped": 10**3}, r"'s stats \(units cut and dropped at most pairs and groups\), got 100\d$"),
        ({"completions": 1}, r"\(the completions of pairs and groups at most completions\), got \d+$"),
    ],
)  # fmt: skip
def test_inconsistent_stats_are_refused_in_one_line(change: dict[str, Any], message: str) -> None:
    rows, state = saved_unit_state()
    with pytest.raises(
        packing.SettingError, match=r"^state: expected a PackingStream.state_dict\(\)'s stats"
    ) as caught:
        stream(rows, LENGTH, buffer_size=6, shuffle=False, state=_with_stats(state, **change))
    assert re.search(message, str(caught.value)) and "\n" not in str(caught.value), str(caught.value)


def test_completions_waiting_are_numbered_below_those_read_or_refused() -> None:
    rows, state = saved_unit_state()
    read = state["stats"]["units"]["completions"]
    for value, got in ((None, "<none>"), ([read] * len(state["pending"]["lengths"]), r"\d+")):
        tampered = copy.deepcopy(state)
        tampered["pending"]["units"]["first_completion"] = value
        with pytest.raises(packing.SettingError, match=rf"'s pending units \(.*\), got {got}$"):
            stream(rows, LENGTH, buffer_size=6, shuffle=False, state=tampered)
    smaller = _with_stats(
        state, completions=lambda u: u["completions"] - 1, pairs=0, groups=0, units_dropped=0, units_truncated=0
    )
    with pytest.raises(packing.SettingError, match=rf"completions numbered below the {read - 1} read\), got"):
        stream(rows, LENGTH, buffer_size=6, shuffle=False, state=smaller)


@pytest.mark.parametrize("field", ["tokens", "lengths", "ids"])
def test_a_flag_inside_a_saved_integer_list_is_refused(field: str) -> None:
    """numpy reads ``True`` as 1 among integers: a state list holding a flag was not written by a stream."""
    rows = [[1, 2, 3], [4, 5], [6]] * 3
    saved = packing.stream(rows, 4, buffer_size=4, shuffle=False)
    next(iter(saved))
    state = saved.state_dict()
    values = list(state["carried"][field])
    values[-1] = True
    with pytest.raises(packing.SettingError, match=r"got True \(bool\)$"):
        packing.stream(
            rows, 4, buffer_size=4, shuffle=False, state={**state, "carried": {**state["carried"], field: values}}
        )
