"""The optimal strategy and the lower bounds: brute force on tiny inputs, and the chain of inequalities."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import packing
import packing.optimal
from packing import LowerBounds, lower_bounds, plan
from packing.optimal import MAX_OPTIMAL_DOCUMENTS

NO_SPLIT = [name for name, strategy in packing.STRATEGIES.items() if not strategy.splits_sequences]


def set_partitions(n: int) -> Iterator[list[int]]:
    """Every partition of ``range(n)`` as a restricted growth string: item i goes to part ``labels[i]``."""

    def grow(labels: list[int], parts: int) -> Iterator[list[int]]:
        if len(labels) == n:
            yield labels
            return
        for part in range(parts + 1):
            yield from grow([*labels, part], max(parts, part + 1))

    yield from grow([], 0)


def brute_force_min_blocks(lengths: list[int], capacity: int) -> int:
    """Fewest blocks of ``capacity`` that hold every document whole, trying every set partition."""
    best = len(lengths)
    for labels in set_partitions(len(lengths)):
        parts = max(labels, default=-1) + 1
        fill = [0] * parts
        for length, part in zip(lengths, labels, strict=True):
            fill[part] += length
        if max(fill, default=0) <= capacity:
            best = min(best, parts)
    return best


def test_set_partitions_counts_are_bell_numbers() -> None:
    assert [sum(1 for _ in set_partitions(n)) for n in range(8)] == [1, 1, 2, 5, 15, 52, 203, 877]


def test_brute_force_on_a_hand_example() -> None:
    assert brute_force_min_blocks([6, 6, 6], 10) == 3
    assert brute_force_min_blocks([5, 4, 11, 4, 5, 2, 2], 11) == 3
    assert brute_force_min_blocks([], 3) == 0


def documents(lengths: list[int], capacity: int, overflow: str) -> list[int]:
    """Document lengths an overflow policy makes, written out from its definition."""
    if overflow == "truncate":
        return [min(n, capacity) for n in lengths if n]
    if overflow == "drop":
        return [n for n in lengths if 0 < n <= capacity]
    return [min(capacity, n - start) for n in lengths for start in range(0, n, capacity)]


def assert_valid_packing(layout: packing.PackingPlan, docs: list[int]) -> None:
    pieces = [piece for block in layout.blocks() for piece in block]
    assert sorted(piece.length for piece in pieces) == sorted(docs)
    assert len({(p.sequence, p.start) for p in pieces}) == len(pieces)
    assert all(0 < sum(p.length for p in block) <= layout.max_seq_length for block in layout.blocks())


@settings(max_examples=200, deadline=None)
@given(data=st.data(), capacity=st.integers(min_value=1, max_value=15))
def test_optimal_equals_brute_force(capacity: int, data: st.DataObject) -> None:
    lengths = data.draw(st.lists(st.integers(min_value=1, max_value=capacity), max_size=7))
    layout = plan(lengths, capacity, "optimal")
    assert_valid_packing(layout, lengths)
    assert layout.num_blocks == brute_force_min_blocks(lengths, capacity)


@pytest.mark.parametrize("overflow", list(packing.OVERFLOW_POLICIES))
@settings(max_examples=100, deadline=None)
@given(data=st.data(), capacity=st.integers(min_value=1, max_value=12))
def test_optimal_equals_brute_force_after_overflow(overflow: str, capacity: int, data: st.DataObject) -> None:
    size = 3 if overflow == "split" else 7  # split makes up to 3 documents of each of these sequences
    lengths = data.draw(st.lists(st.integers(min_value=0, max_value=2 * capacity + 1), max_size=size))
    docs = documents(lengths, capacity, overflow)
    layout = plan(lengths, capacity, "optimal", overflow)
    assert_valid_packing(layout, docs)
    assert layout.num_blocks == brute_force_min_blocks(docs, capacity)


@pytest.mark.parametrize("overflow", list(packing.OVERFLOW_POLICIES))
@settings(max_examples=150, deadline=None)
@given(data=st.data(), capacity=st.integers(min_value=1, max_value=20))
def test_bounds_optimal_and_heuristics_are_ordered(overflow: str, capacity: int, data: st.DataObject) -> None:
    lengths = data.draw(st.lists(st.integers(min_value=0, max_value=2 * capacity), max_size=8))
    bounds = lower_bounds(lengths, capacity, overflow)
    best = plan(lengths, capacity, "optimal", overflow).num_blocks
    assert bounds.simple <= bounds.l2 <= best
    for strategy in NO_SPLIT:
        assert best <= plan(lengths, capacity, strategy, overflow).num_blocks, strategy
    # the simple bound is exact for the splitting strategy
    docs = documents(lengths, capacity, overflow)
    assert bounds.simple == -(-sum(docs) // capacity) == plan(lengths, capacity, "split", overflow).num_blocks


@pytest.mark.parametrize(
    ("lengths", "capacity", "expected"),
    [
        ([], 10, LowerBounds(0, 0)),
        ([6, 6, 6], 10, LowerBounds(2, 3)),  # 18 tokens fit 2 blocks, but no two of the 6s share a block
        ([6, 6, 6, 4, 4, 4], 10, LowerBounds(3, 3)),
        ([3, 3, 3, 3, 3, 3], 10, LowerBounds(2, 2)),
        ([10, 10], 10, LowerBounds(2, 2)),
        ([1], 1, LowerBounds(1, 1)),
    ],
)
def test_lower_bounds_by_hand(lengths: list[int], capacity: int, expected: LowerBounds) -> None:
    assert lower_bounds(lengths, capacity) == expected


@pytest.mark.parametrize(
    ("overflow", "expected"),
    [
        ("truncate", LowerBounds(3, 3)),  # documents 10, 6, 6: 22 tokens; each is over half a block
        ("drop", LowerBounds(2, 2)),  # documents 6, 6
        # documents 10, 5, 6, 6: 27 tokens need 3; but 10 and the 6s each need their own block and the 5
        # fits none of them, so 4 (L2 with k = 5)
        ("split", LowerBounds(3, 4)),
    ],
)
def test_lower_bounds_apply_the_overflow_policy_first(overflow: str, expected: LowerBounds) -> None:
    assert lower_bounds([15, 6, 6], 10, overflow) == expected
    assert plan([15, 6, 6], 10, "optimal", overflow).num_blocks == expected.l2


def test_optimal_beats_best_fit_decreasing() -> None:
    # [5, 4, 11, 4, 5, 2, 2] into 11 fits exactly into [11], [5, 4, 2], [5, 4, 2].
    # bfd: 11 | 5, 5 (1 left) | 4, 4, 2 (1 left) | the last 2 fits nowhere -> 4 blocks.
    lengths = [5, 4, 11, 4, 5, 2, 2]
    assert plan(lengths, 11, "bfd").num_blocks == 4
    layout = plan(lengths, 11, "optimal")
    assert layout.num_blocks == 3
    assert sorted(sorted(p.length for p in block) for block in layout.blocks()) == [[2, 4, 5], [2, 4, 5], [11]]


def test_optimal_on_its_documented_example() -> None:
    assert plan([4, 3, 3, 2, 2, 2], 8, "optimal").num_blocks == 2


def test_optimal_accepts_exactly_the_maximum_number_of_documents() -> None:
    layout = plan([1] * MAX_OPTIMAL_DOCUMENTS + [0, 0], 4, "optimal")
    assert layout.num_blocks == -(-MAX_OPTIMAL_DOCUMENTS // 4)


@pytest.mark.parametrize(
    ("lengths", "capacity", "overflow"),
    [
        ([1] * (MAX_OPTIMAL_DOCUMENTS + 1), 4, "truncate"),
        ([MAX_OPTIMAL_DOCUMENTS + 1], 1, "split"),  # one sequence, cut into too many documents
    ],
    ids=["too many sequences", "too many pieces"],
)
def test_optimal_refuses_too_many_documents(lengths: list[int], capacity: int, overflow: str) -> None:
    message = (
        rf"strategy 'optimal' proves the minimum only for up to {MAX_OPTIMAL_DOCUMENTS} sequences "
        rf"\(counted after the overflow policy\); this input has {MAX_OPTIMAL_DOCUMENTS + 1}\. Use 'bfd'"
    )
    with pytest.raises(ValueError, match=message):
        plan(lengths, capacity, "optimal", overflow)
    with pytest.raises(ValueError, match=message):
        packing.pack([[7] * n for n in lengths], capacity, "optimal", overflow)


def test_optimal_gives_up_with_a_clear_error_when_the_search_is_too_long(monkeypatch: pytest.MonkeyPatch) -> None:
    # bfd needs 4 blocks here but the bound says 3, so a search is needed; allow it a single step
    monkeypatch.setattr(packing.optimal, "MAX_OPTIMAL_NODES", 1)
    with pytest.raises(ValueError, match=r"could not prove the minimum within 1 search steps .* use 'bfd' instead"):
        plan([5, 4, 11, 4, 5, 2, 2], 11, "optimal")
