"""The optimal strategy and the lower bounds: brute force on tiny inputs, and the chain of inequalities."""

from __future__ import annotations

import importlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import packing
import packing.core
import packing.recipe
import packing.strategies
from packing import LowerBounds, lower_bounds, plan
from packing._workloads import load_workload
from packing.optimal import MAX_OPTIMAL_DOCUMENTS, OptimalResult, optimal_blocks, solve
from packing.strategies._certificate import Certificate, knapsack_value
from packing.strategies._kernels import (
    best_fit_decreasing_blocks,
    blocks_of_items,
    first_fit_blocks,
    longest_first_order,
    next_fit_blocks,
)

solver_module = importlib.import_module("packing.strategies._optimal.solver")
search_module = importlib.import_module("packing.strategies._optimal.search")
patterns_module = importlib.import_module("packing.strategies._optimal.patterns")

NO_SPLIT = [
    cast("packing.StrategyName", strategy.name)
    for strategy in packing.strategies.STRATEGIES.values()
    if not strategy.splits_sequences
]


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
    layout = plan(lengths, capacity, strategy="optimal")
    assert_valid_packing(layout, lengths)
    assert layout.num_blocks == brute_force_min_blocks(lengths, capacity)


@pytest.mark.parametrize("overflow", [p for p in packing.recipe.OVERFLOW_POLICIES if p != "error"])
@settings(max_examples=100, deadline=None)
@given(data=st.data(), capacity=st.integers(min_value=1, max_value=12))
def test_optimal_equals_brute_force_after_overflow(
    overflow: packing.OverflowPolicy, capacity: int, data: st.DataObject
) -> None:
    size = 3 if overflow == "split" else 7  # split makes up to 3 documents of each of these sequences
    lengths = data.draw(st.lists(st.integers(min_value=0, max_value=2 * capacity + 1), max_size=size))
    docs = documents(lengths, capacity, overflow)
    layout = plan(lengths, capacity, strategy="optimal", overflow=overflow)
    assert_valid_packing(layout, docs)
    assert layout.num_blocks == brute_force_min_blocks(docs, capacity)


@pytest.mark.parametrize("overflow", [p for p in packing.recipe.OVERFLOW_POLICIES if p != "error"])
@settings(max_examples=150, deadline=None)
@given(data=st.data(), capacity=st.integers(min_value=1, max_value=20))
def test_bounds_optimal_and_heuristics_are_ordered(
    overflow: packing.OverflowPolicy, capacity: int, data: st.DataObject
) -> None:
    lengths = data.draw(st.lists(st.integers(min_value=0, max_value=2 * capacity), max_size=8))
    bounds = lower_bounds(lengths, capacity, overflow=overflow)
    best = plan(lengths, capacity, strategy="optimal", overflow=overflow).num_blocks
    assert bounds.simple <= bounds.l2 <= best
    for strategy in NO_SPLIT:
        assert best <= plan(lengths, capacity, strategy=strategy, overflow=overflow).num_blocks, strategy
    # the simple bound is exact for the splitting strategy
    docs = documents(lengths, capacity, overflow)
    assert (
        bounds.simple
        == -(-sum(docs) // capacity)
        == plan(lengths, capacity, strategy="split", overflow=overflow).num_blocks
    )


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
def test_lower_bounds_apply_the_overflow_policy_first(overflow: packing.OverflowPolicy, expected: LowerBounds) -> None:
    assert lower_bounds([15, 6, 6], 10, overflow=overflow) == expected
    assert plan([15, 6, 6], 10, strategy="optimal", overflow=overflow).num_blocks == expected.l2


def test_optimal_beats_best_fit_decreasing() -> None:
    # [5, 4, 11, 4, 5, 2, 2] into 11 fits exactly into [11], [5, 4, 2], [5, 4, 2].
    # bfd: 11 | 5, 5 (1 left) | 4, 4, 2 (1 left) | the last 2 fits nowhere -> 4 blocks.
    lengths = [5, 4, 11, 4, 5, 2, 2]
    assert plan(lengths, 11, strategy="bfd").num_blocks == 4
    layout = plan(lengths, 11, strategy="optimal")
    assert layout.num_blocks == 3
    assert sorted(sorted(p.length for p in block) for block in layout.blocks()) == [[2, 4, 5], [2, 4, 5], [11]]


def test_optimal_on_its_documented_example() -> None:
    assert plan([4, 3, 3, 2, 2, 2], 8, strategy="optimal").num_blocks == 2


def test_solve_takes_any_number_of_documents() -> None:
    # 2,000 documents of 3 and 5 into blocks of 8: a 3 and a 5 fill a block exactly, 1,000 blocks
    lengths = np.array([3, 5] * 1000, dtype=np.int64)
    result = solve(lengths, 8)
    check_result(lengths, 8, result)
    assert result.certificate.num_blocks == 1000 and result.proven


# ----------------------------------------------------------------------------------------------------------
# solve(): plans, certificates and their independent recheck


def brute_force_knapsack(lengths: list[int], prices: dict[int, int], capacity: int) -> int:
    """Best total price of a subset of the documents that fits one block: a 0/1 table over every document
    (at most capacity // length of each length can fit), in plain Python integers."""
    best = [0] * (capacity + 1)
    by_length: dict[int, int] = {}
    for length in lengths:
        by_length[length] = by_length.get(length, 0) + 1
    for length, count in by_length.items():
        price = prices.get(length, 0)
        if price <= 0:
            continue
        for _ in range(min(count, capacity // length)):
            for room in range(capacity, length - 1, -1):
                best[room] = max(best[room], best[room - length] + price)
    return best[capacity]


def recheck_certificate(lengths: list[int], capacity: int, certificate: Certificate) -> None:
    """The bound of ``certificate`` worked out from its definition, apart from ``Certificate.verify``."""
    if certificate.kind == "L1":
        assert certificate.lower_bound == -(-sum(lengths) // capacity)
    elif certificate.kind == "L2":
        assert certificate.lower_bound == lower_bounds(lengths, capacity).l2
    else:
        assert certificate.prices is not None and certificate.value is not None
        assert all(isinstance(p, int) and p >= 0 for p in certificate.prices.values())
        value = brute_force_knapsack(lengths, certificate.prices, capacity)
        assert value == certificate.value > 0
        total = sum(certificate.prices.get(length, 0) for length in lengths)
        assert certificate.lower_bound == -(-total // value)
    assert certificate.gap == certificate.num_blocks - certificate.lower_bound >= 0


def check_result(lengths: npt.NDArray[np.int64], capacity: int, result: OptimalResult) -> None:
    """Every document in exactly one block, no block over capacity, blocks 0..k-1 all used, k as certified."""
    blocks = result.blocks
    assert blocks.shape == lengths.shape and blocks.dtype == np.int64
    k = result.certificate.num_blocks
    if len(lengths) == 0:
        assert k == 0
        return
    assert blocks.min() == 0 and blocks.max() == k - 1
    fill = np.bincount(blocks, weights=lengths, minlength=k)
    assert np.all(fill > 0) and np.all(fill <= capacity)
    assert result.certificate.verify(lengths, capacity)
    assert result.proven == (result.certificate.gap == 0) or (result.proven and len(lengths) <= MAX_OPTIMAL_DOCUMENTS)


def heuristic_counts(lengths: npt.NDArray[np.int64], capacity: int) -> dict[str, int]:
    order = longest_first_order(lengths, capacity)
    return {
        "bfd": int(blocks_of_items(*best_fit_decreasing_blocks(lengths, capacity)).max()) + 1,
        "ffd": int(first_fit_blocks(lengths, order, capacity).max()) + 1,
        "first_fit": int(first_fit_blocks(lengths, np.arange(len(lengths), dtype=np.int64), capacity).max()) + 1,
        "next_fit": int(next_fit_blocks(lengths, capacity).max()) + 1,
    }


def check_against_heuristics(raw: list[int], capacity: int) -> None:
    lengths = np.array(raw, dtype=np.int64)
    result = solve(lengths, capacity)
    check_result(lengths, capacity, result)
    recheck_certificate(raw, capacity, result.certificate)
    for name, count in heuristic_counts(lengths, capacity).items():
        assert result.certificate.num_blocks <= count, name
    assert result.certificate.lower_bound >= max(lower_bounds(raw, capacity))
    if result.certificate.proven:
        assert result.certificate.num_blocks == result.certificate.lower_bound


@settings(max_examples=100, deadline=None)
@given(data=st.data(), capacity=st.integers(min_value=2, max_value=40))
def test_solve_beats_heuristics_and_meets_its_bound_when_proven(capacity: int, data: st.DataObject) -> None:
    low = data.draw(st.integers(min_value=1, max_value=capacity))
    raw = data.draw(st.lists(st.integers(min_value=low, max_value=capacity), min_size=1, max_size=150))
    check_against_heuristics(raw, capacity)


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(data=st.data(), capacity=st.integers(min_value=10, max_value=60))
def test_solve_on_few_mid_sized_lengths(capacity: int, data: st.DataObject) -> None:
    # a few distinct lengths between a sixth and three fifths of a block, up to 150 documents: here best-fit
    # decreasing is seldom optimal, and column generation, rounding and the leftover packers all do work
    sizes = data.draw(st.lists(st.integers(capacity // 6, 3 * capacity // 5), min_size=1, max_size=6))
    raw = data.draw(st.lists(st.sampled_from(sizes), min_size=1, max_size=150))
    check_against_heuristics(raw, capacity)


@settings(max_examples=100, deadline=None)
@given(data=st.data(), capacity=st.integers(min_value=1, max_value=12))
def test_solve_equals_brute_force(capacity: int, data: st.DataObject) -> None:
    raw = data.draw(st.lists(st.integers(min_value=1, max_value=capacity), max_size=7))
    result = solve(np.array(raw, dtype=np.int64), capacity)
    check_result(np.array(raw, dtype=np.int64), capacity, result)
    assert result.certificate.num_blocks == brute_force_min_blocks(raw, capacity)
    assert result.proven


HARD = [6, 3, 3, 3, 3, 2]
"""Into blocks of 7: L1 = L2 = 3, but prices 2 per 6 and 1 per 3 or 2 (a block holds value at most 2: a 6
alone, or two of the others) total 7, so 4 blocks are needed: [6], [3, 3], [3, 3], [2]."""


def test_dual_prices_prove_what_l1_and_l2_cannot() -> None:
    assert max(lower_bounds(HARD, 7)) == 3 and brute_force_min_blocks(HARD, 7) == 4
    result = solve(np.array(HARD, dtype=np.int64), 7)
    assert result.certificate == Certificate(4, "dual prices", 4, {6: 2, 3: 1, 2: 1}, 2)
    # eight copies: 48 documents, past the exhaustive search. Now [3, 2, 2] fits too: prices 4 per 6, 2 per 3,
    # 1 per 2 (a block holds value at most 4: [6], [3, 3], [3, 2, 2]) total 104, so 26 blocks are needed,
    # and [6] x 8, [3, 2, 2] x 4, [3, 3] x 14 uses 26
    raw = HARD * 8
    lengths = np.array(raw, dtype=np.int64)
    assert max(lower_bounds(raw, 7)) < 26
    result = solve(lengths, 7)
    check_result(lengths, 7, result)
    recheck_certificate(raw, 7, result.certificate)
    assert result.certificate.kind == "dual prices"
    assert result.certificate.lower_bound == result.certificate.num_blocks == 26
    assert result.proven


def test_squad_is_proven_at_40195_blocks() -> None:
    workload = load_workload("squad_1_1_bert_384")
    lengths = np.asarray(workload.lengths, dtype=np.int64)
    result = solve(lengths, workload.max_seq_length)
    check_result(lengths, workload.max_seq_length, result)
    certificate = result.certificate
    assert (certificate.num_blocks, certificate.lower_bound, certificate.kind) == (40195, 40195, "dual prices")
    assert result.proven
    recheck_certificate(lengths.tolist(), workload.max_seq_length, certificate)
    bfd = heuristic_counts(lengths, workload.max_seq_length)["bfd"]
    assert bfd - certificate.num_blocks == 436  # the 40,631 for best-fit decreasing


def test_a_hard_instance_under_a_small_time_limit_returns_its_best_plan_and_gap() -> None:
    workload = load_workload("openchat_v1_2048")  # takes seconds to prove; here only a fraction of one
    lengths = np.asarray(workload.lengths, dtype=np.int64)
    result = solve(lengths, workload.max_seq_length, time_limit=0.05)
    check_result(lengths, workload.max_seq_length, result)
    recheck_certificate(lengths.tolist(), workload.max_seq_length, result.certificate)
    assert result.certificate.lower_bound <= 4664 <= result.certificate.num_blocks  # the proven optimum
    assert result.certificate.num_blocks <= heuristic_counts(lengths, workload.max_seq_length)["bfd"]
    assert result.proven == (result.certificate.gap == 0)


def test_almost_no_time_still_gives_a_valid_plan() -> None:
    raw = HARD * 8
    lengths = np.array(raw, dtype=np.int64)
    result = solve(lengths, 7, time_limit=1e-9)
    check_result(lengths, 7, result)
    recheck_certificate(raw, 7, result.certificate)
    assert result.certificate.num_blocks <= heuristic_counts(lengths, 7)["bfd"]


def test_optimal_blocks_is_solve_blocks() -> None:
    lengths = np.array([5, 4, 11, 4, 5, 2, 2], dtype=np.int64)
    assert optimal_blocks(lengths, 11).tolist() == solve(lengths, 11).blocks.tolist()
    assert optimal_blocks(np.zeros(0, dtype=np.int64), 11).tolist() == []


@pytest.mark.parametrize("time_limit", [0, 0.0, -1, float("nan"), float("inf"), -float("inf"), True, "5", None, [5]])
def test_solve_checks_time_limit_as_plan_does(time_limit: object) -> None:
    # one rule (packing.core._validation.check_time_limit): the same message from solve and from plan
    with pytest.raises(packing.SettingError, match=r"^time_limit: expected a finite number of seconds > 0, got ") as e:
        solve(np.array([4, 5], dtype=np.int64), 10, time_limit=time_limit)  # type: ignore[arg-type]
    if time_limit is not None:  # plan takes None as its default
        with pytest.raises(packing.SettingError) as from_plan:
            plan([4, 5], 10, strategy="optimal", time_limit=time_limit)  # type: ignore[arg-type]
        assert str(e.value) == str(from_plan.value)


@pytest.mark.parametrize(
    ("lengths", "capacity", "name"),
    [([4.5, 5], 10, "lengths[0]"), ([4, 5], 10.0, "max_seq_length"), ([4, 5], 2**40, "max_seq_length")],
)
def test_solve_checks_lengths_and_capacity_as_plan_does(lengths: object, capacity: object, name: str) -> None:
    with pytest.raises(packing.SettingError) as error:
        solve(lengths, capacity)  # type: ignore[arg-type]
    assert error.value.name == name


def test_solve_rejects_lengths_outside_one_to_capacity() -> None:
    with pytest.raises(packing.SettingError, match=r"^lengths: expected document lengths in 1\.\.10, got 0$"):
        solve(np.array([4, 0], dtype=np.int64), 10)
    with pytest.raises(packing.SettingError, match=r"^lengths: expected document lengths in 1\.\.10, got 11$"):
        solve(np.array([3, 11], dtype=np.int64), 10)


def test_the_exhaustive_search_hands_over_when_it_runs_too_long(monkeypatch: pytest.MonkeyPatch) -> None:
    # bfd needs 4 blocks here but the bounds say 3; with one search step allowed, column generation finds 3
    monkeypatch.setattr(search_module, "MAX_OPTIMAL_NODES", 1)
    lengths = np.array([5, 4, 11, 4, 5, 2, 2], dtype=np.int64)
    result = solve(lengths, 11)
    check_result(lengths, 11, result)
    assert result.certificate.num_blocks == 3 and result.proven


# ----------------------------------------------------------------------------------------------------------
# Certificate.verify on its own


@settings(max_examples=150, deadline=None)
@given(data=st.data(), capacity=st.integers(min_value=1, max_value=30))
def test_knapsack_value_equals_brute_force(capacity: int, data: st.DataObject) -> None:
    raw = data.draw(st.lists(st.integers(min_value=1, max_value=capacity), max_size=25))
    prices = {length: data.draw(st.integers(min_value=-3, max_value=50)) for length in set(raw)}
    assert knapsack_value(np.array(raw, dtype=np.int64), prices, capacity) == brute_force_knapsack(
        raw, prices, capacity
    )


@settings(max_examples=100, deadline=None)
@given(data=st.data(), capacity=st.integers(min_value=1, max_value=20))
def test_any_prices_give_a_valid_bound(capacity: int, data: st.DataObject) -> None:
    # the dual-price bound holds for any non-negative integer prices: never above the brute-force optimum
    raw = data.draw(st.lists(st.integers(min_value=1, max_value=capacity), min_size=1, max_size=7))
    prices = {length: data.draw(st.integers(min_value=0, max_value=20)) for length in set(raw)}
    if not any(prices.values()):
        prices[raw[0]] = 1
    lengths = np.array(raw, dtype=np.int64)
    value = knapsack_value(lengths, prices, capacity)
    bound = Certificate(0, "dual prices", 0, prices, value).recompute(lengths, capacity)
    assert bound <= brute_force_min_blocks(raw, capacity)
    certificate = Certificate(bound, "dual prices", brute_force_min_blocks(raw, capacity), prices, value)
    assert certificate.verify(lengths, capacity)


def test_verify_rejects_tampered_certificates() -> None:
    raw = HARD * 8
    lengths = np.array(raw, dtype=np.int64)
    good = solve(lengths, 7).certificate
    assert good.verify(lengths, 7) and good.prices is not None and good.value is not None
    bound, blocks, prices, value = good.lower_bound, good.num_blocks, good.prices, good.value
    assert not Certificate(bound + 1, "dual prices", blocks + 1, prices, value).verify(lengths, 7)
    assert not Certificate(bound, "dual prices", blocks, prices, value - 1).verify(lengths, 7)
    doubled = {length: 2 * price for length, price in prices.items()}
    assert not Certificate(bound, "dual prices", blocks, doubled, value).verify(lengths, 7)
    assert not Certificate(bound, "dual prices", bound - 1, prices, value).verify(lengths, 7)
    assert not Certificate(bound, "dual prices", blocks, None, None).verify(lengths, 7)
    assert not good.verify(lengths[:-6], 7)  # other documents: the total price no longer matches
    l1, l2 = lower_bounds(raw, 7)
    assert Certificate(l1, "L1", blocks).verify(lengths, 7)
    assert Certificate(l2, "L2", blocks).verify(lengths, 7)
    assert not Certificate(l1 + 1, "L1", blocks).verify(lengths, 7)
    assert not Certificate(l2, "L2", blocks, prices, value).verify(lengths, 7)  # prices belong to dual prices
    assert not Certificate(l1, "L1", blocks).verify(lengths, 5)  # documents of 6 do not fit blocks of 5


def test_too_large_a_pricing_table_falls_back_to_greedy_plans_with_their_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(solver_module, "MAX_KNAPSACK_CELLS", 0)
    raw = HARD * 8
    lengths = np.array(raw, dtype=np.int64)
    result = solve(lengths, 7)
    check_result(lengths, 7, result)
    recheck_certificate(raw, 7, result.certificate)
    assert result.certificate.kind in ("L1", "L2")
    assert result.certificate.num_blocks == min(heuristic_counts(lengths, 7).values())


@settings(max_examples=60, deadline=None)
@given(
    data=st.data(),
    capacity=st.integers(min_value=10, max_value=60),
    time_limit=st.sampled_from([1e-9, 0.001, 0.01]),
)
def test_any_time_limit_gives_a_valid_plan_and_a_true_gap(
    capacity: int, time_limit: float, data: st.DataObject
) -> None:
    # cut short anywhere (in the search, the LP, the rounding), the plan still holds every document once
    # and its gap is measured against a bound that holds
    sizes = data.draw(st.lists(st.integers(capacity // 6, 3 * capacity // 5), min_size=1, max_size=6))
    raw = data.draw(st.lists(st.sampled_from(sizes), min_size=1, max_size=150))
    lengths = np.array(raw, dtype=np.int64)
    result = solve(lengths, capacity, time_limit=time_limit)
    check_result(lengths, capacity, result)
    recheck_certificate(raw, capacity, result.certificate)
    assert result.certificate.num_blocks <= heuristic_counts(lengths, capacity)["bfd"]
    if len(raw) <= 7:
        assert result.certificate.lower_bound <= brute_force_min_blocks(raw, capacity)


@pytest.mark.slow
def test_the_benchmark_runs_in_quick_mode() -> None:
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "optimal.py"
    done = subprocess.run(
        [sys.executable, str(script), "--quick", "--only", "squad"], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| SQuAD")]
    assert len(rows) == 1
    cells = [cell.strip() for cell in rows[0].strip("|").split("|")]
    assert cells[5].startswith("40,195 ") and cells[6] == "40,195" and cells[7] == "0"
    assert cells[8] == "dual prices ✓"


def test_block_contents_stay_exact_even_if_their_hashes_collide(monkeypatch: pytest.MonkeyPatch) -> None:
    # blocks of a packing are grouped by a hash of their contents; with every hash equal (all salts 0),
    # the grouping must notice that the documents no longer add up and keep every block apart
    class ZeroSalts:
        def integers(self, low: int, high: int, size: tuple[int, int], dtype: type) -> npt.NDArray[np.int64]:
            return np.zeros(size, dtype=np.int64)

    blocks = np.array([0, 0, 1, 1, 2], dtype=np.int64)
    items = np.array([0, 1, 0, 0, 2], dtype=np.int64)
    exact = patterns_module.patterns_of_blocks(blocks, items, 3)
    monkeypatch.setattr(patterns_module.np.random, "default_rng", lambda seed: ZeroSalts())
    collided = patterns_module.patterns_of_blocks(blocks, items, 3)
    for patterns, times in (exact, collided):
        cover = np.zeros(3, dtype=np.int64)
        for pattern, k in zip(patterns, times.tolist(), strict=True):
            cover[pattern.items] += pattern.counts * k
        assert cover.tolist() == [3, 1, 1]
    assert len(exact[0]) == 3 and len(collided[0]) == 3
