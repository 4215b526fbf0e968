"""Certificate.verify on hostile certificates: False for anything malformed, never an exception.

Every certificate verify accepts is checked again by brute force on tiny inputs: its bound is at most
the true optimum, and for dual prices the value and the bound are the exact knapsack optimum and
ceiling, worked out by enumeration.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from packing.strategies._certificate import Certificate, knapsack_value

LENGTHS = [6, 6, 6, 4, 4, 4]
Loose: Any = Certificate  # certificates as hostile input builds them, any field any type
GOOD = Certificate(lower_bound=3, kind="dual prices", prices={6: 1, 4: 0}, value=1, num_blocks=3)


def min_blocks(raw: list[int], capacity: int) -> int:
    """The fewest blocks of ``capacity`` holding ``raw`` (each <= capacity), by exhaustive search."""
    best = len(raw)

    def place(index: int, rooms: list[int]) -> None:
        nonlocal best
        if len(rooms) >= best:
            return
        if index == len(raw):
            best = len(rooms)
            return
        for slot, room in enumerate(rooms):
            if raw[index] <= room:
                rooms[slot] -= raw[index]
                place(index + 1, rooms)
                rooms[slot] += raw[index]
        place(index + 1, [*rooms, capacity - raw[index]])

    place(0, [])
    return best if raw else 0


def brute_knapsack(raw: list[int], prices: dict[int, int], capacity: int) -> int:
    """Best total price of a sub-multiset of ``raw`` that fits one block, by enumeration."""
    counts = Counter(raw)
    kinds = sorted(counts)
    best = 0
    for take in itertools.product(*(range(counts[w] + 1) for w in kinds)):
        if sum(t * w for t, w in zip(take, kinds, strict=True)) <= capacity:
            best = max(best, sum(t * prices.get(w, 0) for t, w in zip(take, kinds, strict=True)))
    return best


def is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def assert_sound(certificate: Certificate, raw: list[int], capacity: int) -> None:
    """What verify() == True must mean, checked independently of packing.strategies._certificate."""
    assert certificate.kind in ("L1", "L2", "dual prices")
    assert is_int(certificate.lower_bound) and is_int(certificate.num_blocks)
    assert 0 <= certificate.lower_bound <= min_blocks(raw, capacity) or not raw
    assert certificate.num_blocks >= certificate.lower_bound
    if certificate.kind == "L1":
        assert certificate.prices is None and certificate.value is None
        assert certificate.lower_bound == -(-sum(raw) // capacity)
    if certificate.kind == "dual prices":
        prices = certificate.prices
        assert isinstance(prices, dict)
        assert all(is_int(w) and is_int(p) and w in raw and p >= 0 for w, p in prices.items())
        value = brute_knapsack(raw, prices, capacity)
        assert certificate.value == value
        total = sum(prices.get(w, 0) for w in raw)
        assert certificate.lower_bound == (math.ceil(total / value) if value else 0)


@st.composite
def valid_certificates(draw: st.DrawFn) -> tuple[Certificate, list[int], int]:
    capacity = draw(st.integers(min_value=1, max_value=12))
    raw = draw(st.lists(st.integers(min_value=1, max_value=capacity), min_size=1, max_size=7))
    kind = draw(st.sampled_from(["L1", "L2", "dual prices"]))
    blocks = min_blocks(raw, capacity) + draw(st.integers(min_value=0, max_value=2))
    if kind != "dual prices":
        bound = Loose(0, kind, 0).recompute(raw, capacity)
        return Loose(bound, kind, blocks), raw, capacity
    prices = {w: draw(st.integers(min_value=0, max_value=9)) for w in sorted(set(raw))}
    lengths = np.array(raw, dtype=np.int64)
    value = knapsack_value(lengths, prices, capacity)
    bound = Certificate(0, "dual prices", 0, prices, value).recompute(lengths, capacity)
    return Certificate(bound, "dual prices", blocks, prices, value), raw, capacity


ODD_VALUES = st.one_of(
    st.integers(min_value=-3, max_value=12),
    st.integers(min_value=2**62, max_value=2**80),
    st.integers(max_value=-(2**63)),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
    st.text(max_size=4),
    st.just(np.int64(3)),
    st.just(np.float64(3.0)),
    st.just(np.array([1, 2])),
    st.lists(st.integers(min_value=0, max_value=5), max_size=3),
)


def tamper_prices(draw: Callable[[st.SearchStrategy[Any]], Any], prices: dict[int, int] | None) -> Any:
    table = dict(prices or {})
    how = draw(st.sampled_from(["replace", "set", "drop", "whole"]))
    if how == "whole":
        return draw(st.one_of(ODD_VALUES, st.dictionaries(ODD_VALUES.filter(_hashable), ODD_VALUES, max_size=3)))
    if how == "drop" and table:
        table.pop(draw(st.sampled_from(list(table))))
        return table
    key = draw(st.one_of(st.sampled_from(list(table)) if table else st.integers(1, 12), ODD_VALUES.filter(_hashable)))
    table[key] = draw(ODD_VALUES)
    return table


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


@settings(max_examples=600, deadline=None)
@given(start=valid_certificates(), data=st.data())
@pytest.mark.slow
def test_tampered_certificates_are_rejected_or_still_sound(
    start: tuple[Certificate, list[int], int], data: st.DataObject
) -> None:
    certificate, raw, capacity = start
    assert certificate.verify(np.array(raw), capacity)
    assert_sound(certificate, raw, capacity)
    fields: dict[str, Any] = {
        "lower_bound": certificate.lower_bound,
        "kind": certificate.kind,
        "num_blocks": certificate.num_blocks,
        "prices": certificate.prices,
        "value": certificate.value,
    }
    for name in data.draw(st.lists(st.sampled_from([*fields, "prices"]), min_size=1, max_size=3)):
        if name == "prices":
            fields[name] = tamper_prices(data.draw, fields["prices"] if isinstance(fields["prices"], dict) else None)
        elif name == "kind":
            fields[name] = data.draw(st.one_of(st.sampled_from(["L1", "L2", "dual prices", "L3", ""]), ODD_VALUES))
        else:
            fields[name] = data.draw(ODD_VALUES)
    tampered = Certificate(**fields)
    accepted = tampered.verify(np.array(raw), capacity)  # never raises
    assert accepted is True or accepted is False
    if accepted:
        assert_sound(tampered, raw, capacity)


@settings(max_examples=200, deadline=None)
@given(start=valid_certificates(), lengths=ODD_VALUES, capacity=ODD_VALUES)
def test_hostile_lengths_and_capacity_never_raise(
    start: tuple[Certificate, list[int], int], lengths: Any, capacity: Any
) -> None:
    certificate, raw, _ = start
    assert certificate.verify(lengths, capacity) in (True, False)
    assert certificate.verify(raw, capacity) in (True, False)
    assert certificate.verify(lengths, start[2]) in (True, False)


@pytest.mark.parametrize(
    "certificate",
    [
        Loose(3, "dual prices", 3, {6: 1.0, 4: 0}, 1),  # a float price
        Loose(3, "dual prices", 3, {6: 1.9, 4: 0}, 1),  # truncated to 1 before
        Loose(3, "dual prices", 3, {6: 1, 4: 0, 5: 7}, 1),  # a price on a length that is absent
        Loose(3, "dual prices", 3, {6: 1, 4: 0, 11: 7}, 1),  # ... and longer than a block
        Loose(3, "dual prices", 3, {6: float("nan"), 4: 0}, 1),
        Loose(3, "dual prices", 3, {6: float("inf"), 4: 0}, 1),
        Loose(3, "dual prices", 3, {6: 2**70, 4: 0}, 2**70),  # raised OverflowError before
        Loose(3, "dual prices", 3, {6: 2**61, 4: 2**61}, 2**62),
        Loose(3, "dual prices", 3, {6: 1, 4: -1}, 1),  # a negative price
        Loose(3, "dual prices", 3, {6.0: 1, 4: 0}, 1),  # a float length
        Loose(3, "dual prices", 3, {True: 1, 6: 1}, 1),  # a bool length
        Loose(3, "dual prices", 3, [(6, 1)], 1),  # not a dict
        Loose(3, "dual prices", 3, {6: 1, 4: 0}, 1.0),  # a float value
        Loose(3, "dual prices", 3, {6: 1, 4: 0}, float("nan")),
        Loose(3.0, "dual prices", 3, {6: 1, 4: 0}, 1),  # a float bound
        Loose(3, "dual prices", 3.5, {6: 1, 4: 0}, 1),
        Loose(3, "dual prices", True, {6: 1, 4: 0}, 1),  # a bool count
        Loose(3, "dual prices", -3, {6: 1, 4: 0}, 1),  # negative counts
        Loose(0, "dual prices", -1, {6: 0, 4: 0}, 0),
        Loose(3, "L1 ", 3),  # no such kind (raised ValueError before)
        Loose(3, ["L1"], 3),
        Loose(3, None, 3),
        Loose(2.0, "L1", 3),
        Loose(True, "L2", 3),
    ],
)
def test_malformed_certificates_are_false(certificate: Certificate) -> None:
    assert certificate.verify(np.array(LENGTHS), 10) is False


def test_the_good_certificate_still_verifies() -> None:
    assert GOOD.verify(np.array(LENGTHS), 10) and GOOD.verify(LENGTHS, 10)
    assert Loose(3, "dual prices", 3, {np.int64(6): np.int64(1)}, np.int64(1)).verify(LENGTHS, 10)


@pytest.mark.parametrize(
    ("lengths", "capacity"),
    [
        ([[6, 6, 6], [4, 4, 4]], 10),  # not flat
        ([6.0, 6, 6, 4, 4, 4], 10),  # a float length
        ([6, 6, 6, 4, 4, "4"], 10),
        ("664444", 10),
        ([6, 6, 6, 4, 4, 4], 10.0),  # a float capacity
        ([6, 6, 6, 4, 4, 4], True),
        ([6, 6, 6, 4, 4, 4], 2**40),  # larger than any block
        ([6, 6, 6, 4, 4, 4], float("nan")),
        ([6, 6, 6, 4, 4, 2**64], 10),
        ([[6, 6], [4]], 10),  # ragged
    ],
)
def test_malformed_inputs_are_false(lengths: Any, capacity: Any) -> None:
    assert GOOD.verify(lengths, capacity) is False
