"""Operations on a plan (select, permute, shuffle, materializing some blocks), windows, and shuffled first fit.

Expected values come from outside the operation under test: the blocks of the original plan, plans of each
window made on their own, the plain-Python first fit of ``packing.strategies._reference`` over the seeded order, and
statistics recounted from the pieces.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import packing
import packing.core
import packing.recipe
import packing.strategies
from packing import PackingPlan, Piece, SettingError, materialize, plan, read_rows
from packing.strategies import _reference as reference
from packing.strategies._reference import documents as reference_documents

STRATEGY_NAMES = list(packing.strategies.STRATEGIES)
OVERFLOW_NAMES = [p for p in packing.recipe.OVERFLOW_POLICIES if p != "error"]
IGNORE = packing.core.IGNORE_INDEX
GRIDS = ("input_ids", "labels", "loss_mask", "position_ids", "sequence_ids")
BLOCK_FIELDS = (
    "max_seq_length",
    "num_blocks",
    "lower_bound",
    "packed_tokens",
    "padding_tokens",
    "efficiency",
    "sequences_split",
    "trainable_tokens",
    "target_tokens",
    "samples_without_trainable_tokens",
)
"""Statistics that depend only on the blocks' pieces (not on what the input held beyond them)."""


def pieces_of(layout: PackingPlan) -> list[list[tuple[int, int, int]]]:
    return [[(p.sequence, p.start, p.length) for p in block] for block in layout.blocks()]


def lengths_for(strategy: str, capacity: int) -> st.SearchStrategy[list[int]]:
    if strategy == "optimal":  # exponential: at most 8 sequences of at most three documents each
        return st.lists(st.integers(min_value=0, max_value=3 * capacity), max_size=8)
    return st.lists(st.integers(min_value=0, max_value=2 * capacity + 1), max_size=24)


def options_for(strategy: str, data: st.DataObject) -> dict[str, Any]:
    """Each strategy's own options (the registry's list), drawn at random."""
    accepted = packing.strategies.STRATEGIES[strategy].options
    options: dict[str, Any] = {}
    if "seed" in accepted:
        options["seed"] = data.draw(st.integers(min_value=0, max_value=2**32), label="seed")
    if "max_sequences_per_block" in accepted:
        options["max_sequences_per_block"] = data.draw(st.one_of(st.none(), st.integers(1, 4)), label="cap")
    return options


@st.composite
def plans(draw: st.DrawFn, strategy: str | None = None) -> PackingPlan:
    name = draw(st.sampled_from(STRATEGY_NAMES)) if strategy is None else strategy
    capacity = draw(st.integers(min_value=1, max_value=10))
    lengths = draw(lengths_for(name, capacity))
    overflow = draw(st.sampled_from(OVERFLOW_NAMES))
    return plan(lengths, capacity, strategy=name, overflow=overflow)


def samples_for(lengths: list[int] | np.ndarray, seed: int) -> packing.Samples:
    """Masked samples of these lengths with random tokens and loss masks."""
    rng = np.random.default_rng(seed)
    rows = [
        {
            "input_ids": rng.integers(0, 1000, size=int(n)).tolist(),
            "loss_mask": rng.integers(0, 2, size=int(n)).tolist(),
        }
        for n in lengths
    ]
    return read_rows(rows)


def recount(layout: PackingPlan, rows: list[int]) -> dict[str, Any]:
    """The statistics of blocks ``rows`` of ``layout``, recounted from their pieces as if they were the input."""
    capacity = layout.max_seq_length
    chosen = [layout.blocks()[b] for b in rows]
    fill = [sum(p.length for p in block) for block in chosen]
    packed = sum(fill)
    per_sequence: dict[int, list[int]] = {}
    for block in chosen:
        for p in block:
            per_sequence.setdefault(p.sequence, []).append(p.length)
    slots = len(rows) * capacity
    return {
        "num_blocks": len(rows),
        "packed_tokens": packed,
        "input_tokens": packed,
        "tokens_lost": 0,
        "empty_sequences": 0,
        "padding_tokens": slots - packed,
        "efficiency": packed / slots if slots else 0.0,
        "lower_bound": -(-packed // capacity),
        "num_sequences": len(per_sequence),
        "sequences_split": sum(1 for parts in per_sequence.values() if len(parts) > 1),
        # a document's first token is no target; wrapped keeps no boundaries: one document per block
        "target_tokens": packed
        - sum(len(block) if packing.strategies.STRATEGIES[layout.strategy].keeps_boundaries else 1 for block in chosen),
        "block_utilization": [f / capacity for f in fill],
    }


# ---------------------------------------------------------------------------------------------------------------
# select
# ---------------------------------------------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(layout=plans())
def test_selecting_every_block_in_order_keeps_the_plan_and_its_block_statistics(layout: PackingPlan) -> None:
    everything = layout.select(np.arange(layout.num_blocks))
    assert pieces_of(everything) == pieces_of(layout)
    for name in ("block_starts", "piece_sequence", "piece_start", "piece_length", "lengths"):
        assert np.array_equal(getattr(everything, name), getattr(layout, name)), name
    for name in BLOCK_FIELDS:
        assert getattr(everything.stats, name) == getattr(layout.stats, name), name
    assert np.array_equal(everything.stats.block_utilization, layout.stats.block_utilization)
    assert (everything.strategy, everything.overflow) == (layout.strategy, layout.overflow)


@settings(max_examples=150, deadline=None)
@given(data=st.data(), layout=plans())
def test_a_selection_holds_those_blocks_and_its_statistics_describe_exactly_them(
    data: st.DataObject, layout: PackingPlan
) -> None:
    rows = data.draw(st.lists(st.integers(0, max(layout.num_blocks - 1, 0)), unique=True), label="rows")
    rows = rows if layout.num_blocks else []
    chosen = layout.select(rows)
    assert chosen.num_blocks == chosen.stats.num_blocks == len(rows)
    assert pieces_of(chosen) == [pieces_of(layout)[b] for b in rows]
    expected = recount(layout, rows)
    for name, value in expected.items():
        got = getattr(chosen.stats, name)
        assert (got.tolist() if isinstance(got, np.ndarray) else got) == pytest.approx(value), name
    assert chosen.lengths.tolist() == layout.lengths.tolist()  # still a plan for the same samples


def test_select_by_hand() -> None:
    # ffd of [4, 4, 2, 3] into 4: blocks [0], [1], [3], [2]; blocks 1 and 2 hold 4 + 3 = 7 tokens in 8 slots
    layout = plan([4, 4, 2, 3], 4, strategy="ffd")
    assert pieces_of(layout) == [[(0, 0, 4)], [(1, 0, 4)], [(3, 0, 3)], [(2, 0, 2)]]
    window = layout.select([1, 2])
    assert pieces_of(window) == [[(1, 0, 4)], [(3, 0, 3)]]
    stats = window.stats
    assert (stats.num_blocks, stats.packed_tokens, stats.padding_tokens, stats.efficiency) == (2, 7, 1, 7 / 8)
    assert stats.block_utilization.tolist() == [1.0, 0.75]


@pytest.mark.parametrize(
    ("blocks", "message"),
    [
        ([4], r"^blocks: expected block indexes in 0\.\.3"),
        ([-1], r"^blocks: expected block indexes in 0\.\.3"),
        ([[0, 1]], r"^blocks: expected a flat list of block indexes"),
        ([0.5], r"^blocks: expected a flat list"),
    ],
)
def test_select_refuses_blocks_the_plan_does_not_have(blocks: Any, message: str) -> None:
    with pytest.raises(SettingError, match=message):
        plan([4, 4, 2, 3], 4, strategy="ffd").select(blocks)


# ---------------------------------------------------------------------------------------------------------------
# permute and shuffle
# ---------------------------------------------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(data=st.data(), layout=plans())
def test_permute_reorders_the_same_blocks_and_keeps_the_totals(data: st.DataObject, layout: PackingPlan) -> None:
    order = data.draw(st.permutations(list(range(layout.num_blocks))), label="order")
    moved = layout.permute(order)
    before, after = pieces_of(layout), pieces_of(moved)
    assert after == [before[b] for b in order]
    assert sorted(after) == sorted(before)
    assert moved.stats.block_utilization.tolist() == layout.stats.block_utilization[order].tolist()
    assert moved.stats.summary() == layout.stats.summary()  # every total is the same
    assert moved.lengths.tolist() == layout.lengths.tolist()


@pytest.mark.parametrize("order", [[0, 1], [0, 1, 2, 2], [0, 1, 2, 3, 0], [3, 2, 1]])
def test_permute_refuses_anything_but_a_permutation(order: list[int]) -> None:
    with pytest.raises(SettingError, match=r"^order: expected a permutation of the 4 block indexes"):
        plan([4, 4, 2, 3], 4, strategy="ffd").permute(order)


@settings(max_examples=100, deadline=None)
@given(layout=plans(), seed=st.integers(min_value=0, max_value=2**63))
def test_shuffle_is_the_permutation_drawn_from_the_seed(layout: PackingPlan, seed: int) -> None:
    shuffled = layout.shuffle(seed)
    assert pieces_of(shuffled) == pieces_of(layout.shuffle(seed))  # deterministic
    expected = layout.permute(np.random.default_rng(seed).permutation(layout.num_blocks))
    assert pieces_of(shuffled) == pieces_of(expected)
    assert shuffled.stats.block_utilization.tolist() == expected.stats.block_utilization.tolist()
    assert shuffled.stats.summary() == layout.stats.summary()


def test_shuffle_by_hand_and_its_seed_is_checked() -> None:
    layout = plan([1, 2, 3, 4, 5], 5, strategy="none")
    order = np.random.default_rng(11).permutation(5).tolist()
    assert [block[0].sequence for block in layout.shuffle(11).blocks()] == order
    assert pieces_of(layout.shuffle()) == pieces_of(layout.shuffle(0))
    for seed in (-1, 1.5, True, "1"):
        with pytest.raises(SettingError, match=r"^seed: expected a non-negative integer"):
            layout.shuffle(seed)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------------------------
# materialize(blocks=...)
# ---------------------------------------------------------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(data=st.data(), layout=plans())
def test_materializing_some_blocks_equals_taking_those_rows(data: st.DataObject, layout: PackingPlan) -> None:
    samples = samples_for(layout.lengths, data.draw(st.integers(0, 2**32), label="tokens"))
    full = materialize(layout, samples, pad_token_id=7)
    top = max(layout.num_blocks - 1, 0)
    rows = data.draw(st.lists(st.integers(0, top), max_size=6), label="rows") if layout.num_blocks else []
    part = materialize(layout, samples, pad_token_id=7, blocks=rows)
    for name in GRIDS:
        assert np.array_equal(getattr(part, name), getattr(full, name)[rows]), name
    assert part.num_blocks == part.stats.num_blocks == len(rows)
    assert [part.seq_lengths(i).tolist() for i in range(len(rows))] == [full.seq_lengths(b).tolist() for b in rows]
    if len(set(rows)) == len(rows):
        # the statistics describe exactly the blocks built, with their real loss masks
        assert part.stats.trainable_tokens == int(full.loss_mask[rows].sum())
        assert part.stats.target_tokens == int((full.labels[rows] != IGNORE).sum())
        assert part.stats.packed_tokens == int((full.sequence_ids[rows] >= 0).sum())


def test_materializing_a_shuffled_plan_reorders_the_rows() -> None:
    samples = samples_for([3, 5, 1, 4, 2, 6], seed=3)
    layout = plan(samples.lengths, 6, strategy="bfd")
    order = np.random.default_rng(5).permutation(layout.num_blocks)
    full = materialize(layout, samples)
    moved = materialize(layout.shuffle(5), samples)
    for name in GRIDS:
        assert np.array_equal(getattr(moved, name), getattr(full, name)[order]), name


# ---------------------------------------------------------------------------------------------------------------
# Plans built by hand are checked when they are made
# ---------------------------------------------------------------------------------------------------------------


def hand_built(**change: Any) -> PackingPlan:
    """``plan([3, 2, 4], 4, strategy="ffd")`` (blocks [2], [0], [1]) built field by field, with ``change`` applied."""
    base = plan([3, 2, 4], 4, strategy="ffd")
    fields: dict[str, Any] = {
        "max_seq_length": base.max_seq_length,
        "strategy": base.strategy,
        "overflow": base.overflow,
        "lengths": base.lengths,
        "block_starts": base.block_starts,
        "piece_sequence": base.piece_sequence,
        "piece_start": base.piece_start,
        "piece_length": base.piece_length,
        "stats": base.stats,
    }
    fields.update(change)
    return PackingPlan(**fields)


def int32(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int32)


def test_a_good_plan_built_by_hand_is_accepted() -> None:
    assert plan([3, 2, 4], 4, strategy="ffd").blocks() == [[Piece(2, 0, 4)], [Piece(0, 0, 3)], [Piece(1, 0, 2)]]
    assert hand_built().blocks() == plan([3, 2, 4], 4, strategy="ffd").blocks()
    # two pieces in one block, each within its sequence
    assert (
        hand_built(
            block_starts=np.array([0, 1, 3]),
            piece_sequence=int32(2, 0, 1),
            piece_start=int32(0, 0, 1),
            piece_length=int32(4, 3, 1),
        ).num_blocks
        == 2
    )


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"block_starts": np.array([1, 2, 3])}, "block_starts rising from 0"),
        ({"block_starts": np.array([0, 1, 2])}, "block_starts rising from 0 to the number of pieces"),
        ({"block_starts": np.array([0, 1, 1, 3])}, "every block holding a piece"),
        ({"block_starts": np.array([], dtype=np.int64)}, "block_starts rising from 0"),
        ({"piece_start": int32(0, 0)}, "piece arrays of one length"),
        ({"piece_length": int32(4, 0, 2)}, "a length >= 1"),
        ({"piece_start": int32(0, -1, 0)}, "a start >= 0"),
        ({"piece_sequence": int32(2, 0, 3)}, "pieces naming sequences the plan has"),
        ({"piece_sequence": int32(2, -1, 1)}, "pieces naming sequences the plan has"),
        ({"piece_length": int32(4, 3, 3)}, "pieces within their sequences"),
        ({"piece_start": int32(0, 1, 0)}, "pieces within their sequences"),
        ({"block_starts": np.array([0, 2, 3])}, "blocks of at most max_seq_length=4 tokens"),
        ({"max_seq_length": 3}, "blocks of at most max_seq_length=3 tokens"),
    ],
    ids=[
        "not from 0",
        "not to the end",
        "empty block",
        "no block_starts",
        "ragged pieces",
        "empty piece",
        "negative start",
        "unknown sequence",
        "negative sequence",
        "past the end",
        "shifted past the end",
        "overfull block",
        "smaller blocks",
    ],
)
def test_a_bad_plan_built_by_hand_is_refused_when_it_is_made(change: dict[str, Any], problem: str) -> None:
    with pytest.raises(SettingError, match=r"^plan: expected .*" + problem.replace("(", r"\(")) as error:
        hand_built(**change)
    assert error.value.name == "plan"


# ---------------------------------------------------------------------------------------------------------------
# window=
# ---------------------------------------------------------------------------------------------------------------

ADDITIVE = (
    "num_sequences",
    "empty_sequences",
    "num_blocks",
    "input_tokens",
    "packed_tokens",
    "padding_tokens",
    "tokens_truncated",
    "tokens_dropped",
    "sequences_truncated",
    "sequences_dropped",
    "sequences_split",
    "trainable_tokens",
    "target_tokens",
    "samples_without_trainable_tokens",
)


@pytest.mark.parametrize("overflow", OVERFLOW_NAMES)
@pytest.mark.parametrize("strategy", STRATEGY_NAMES)
@settings(max_examples=50, deadline=None)
@given(data=st.data(), capacity=st.integers(min_value=1, max_value=10), window=st.integers(min_value=1, max_value=9))
def test_a_windowed_plan_is_the_plans_of_its_windows_one_after_another(
    strategy: str, overflow: str, capacity: int, window: int, data: st.DataObject
) -> None:
    if strategy == "optimal":
        lengths = data.draw(st.lists(st.integers(0, 3 * capacity), max_size=20), label="lengths")
        window = min(window, 8)
    else:
        lengths = data.draw(lengths_for(strategy, capacity), label="lengths")
    options = options_for(strategy, data)
    windowed = plan(lengths, capacity, strategy=strategy, overflow=overflow, window=window, **options)
    parts = [
        plan(lengths[lo : lo + window], capacity, strategy=strategy, overflow=overflow, **options)
        for lo in range(0, len(lengths), window)
    ]
    block_starts, sequence, start, length = [0], [], [], []
    for lo, part in zip(range(0, len(lengths), window), parts, strict=True):
        block_starts += [len(sequence) + s for s in part.block_starts[1:].tolist()]
        sequence += [lo + s for s in part.piece_sequence.tolist()]
        start += part.piece_start.tolist()
        length += part.piece_length.tolist()
    assert windowed.block_starts.tolist() == block_starts
    assert windowed.piece_sequence.tolist() == sequence
    assert windowed.piece_start.tolist() == start
    assert windowed.piece_length.tolist() == length
    for name in ADDITIVE:
        assert getattr(windowed.stats, name) == sum(getattr(part.stats, name) for part in parts), name
    utilization = [u for part in parts for u in part.stats.block_utilization.tolist()]
    assert windowed.stats.block_utilization.tolist() == utilization
    assert windowed.lengths.tolist() == lengths


def test_window_by_hand() -> None:
    # [3, 3, 3, 3] into 6: bfd pairs them into 2 blocks; windows of 3 pack [3, 3, 3] into 2 and [3] into 1
    assert pieces_of(plan([3, 3, 3, 3], 6, strategy="bfd", window=3)) == [
        [(0, 0, 3), (1, 0, 3)],
        [(2, 0, 3)],
        [(3, 0, 3)],
    ]
    # a window at least as long as the input changes nothing
    assert pieces_of(plan([3, 3, 3, 3], 6, strategy="bfd", window=4)) == pieces_of(
        plan([3, 3, 3, 3], 6, strategy="bfd")
    )


# ---------------------------------------------------------------------------------------------------------------
# first_fit_shuffle
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("overflow", OVERFLOW_NAMES)
@settings(max_examples=150, deadline=None)
@given(
    lengths=st.lists(st.integers(min_value=0, max_value=25), max_size=30),
    capacity=st.integers(min_value=1, max_value=12),
    seed=st.integers(min_value=0, max_value=2**32),
)
def test_shuffled_first_fit_is_first_fit_over_the_seeded_order(
    overflow: str, lengths: list[int], capacity: int, seed: int
) -> None:
    docs = reference_documents(lengths, capacity, overflow)
    order = np.random.default_rng(seed).permutation(len(docs)).tolist()
    assigned = reference.first_fit([n for _, _, n in docs], capacity, order)
    expected: list[list[tuple[int, int, int]]] = [[] for _ in range(max(assigned, default=-1) + 1)]
    for item in order:  # blocks numbered as they open, documents in the order they were placed
        expected[assigned[item]].append(docs[item])
    layout = plan(lengths, capacity, strategy="first_fit_shuffle", overflow=overflow, seed=seed)
    assert pieces_of(layout) == expected
    # every document exactly once
    assert sorted(piece for block in pieces_of(layout) for piece in block) == sorted(docs)
    steps = packing.explain(lengths, capacity, strategy="first_fit_shuffle", overflow=overflow, seed=seed)
    assert [(s.sequence, s.start, s.length) for s in steps] == [docs[i] for i in order]


def test_shuffled_first_fit_defaults_to_seed_zero_and_other_seeds_give_other_orders() -> None:
    lengths = list(range(1, 21))
    default = plan(lengths, 21, strategy="first_fit_shuffle")
    assert pieces_of(default) == pieces_of(plan(lengths, 21, strategy="first_fit_shuffle", seed=0))
    layouts = {str(pieces_of(plan(lengths, 21, strategy="first_fit_shuffle", seed=s))) for s in range(5)}
    assert len(layouts) > 1
    assert packing.strategies.STRATEGIES["first_fit_shuffle"].order == "random"
