"""Step-by-step explanations replay exactly what the planner does."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import packing
import packing.errors
import packing.recipe
import packing.strategies
from packing.strategies._registry import Reasons

SMALL = st.lists(st.integers(min_value=0, max_value=12), max_size=8)


@settings(max_examples=60, deadline=None)
@given(lengths=SMALL, capacity=st.integers(min_value=1, max_value=10))
@pytest.mark.parametrize("strategy", list(packing.strategies.STRATEGIES))
@pytest.mark.parametrize("overflow", [p for p in packing.recipe.OVERFLOW_POLICIES if p != "error"])
def test_steps_rebuild_the_plan(strategy: str, overflow: str, lengths: list[int], capacity: int) -> None:
    plan = packing.plan(lengths, capacity, strategy=strategy, overflow=overflow)
    steps = packing.explain(lengths, capacity, strategy=strategy, overflow=overflow)
    blocks: dict[int, list[tuple[int, int, int, int]]] = {}
    opened = 0
    for step in steps:
        opened = max(opened, 1 + max(p.block for p in step.placements))
        assert len(step.fill) == opened  # blocks open in number order; none is shown before it opens
        consumed = 0
        for placement in step.placements:
            blocks.setdefault(placement.block, []).append(
                (placement.position, step.sequence, step.start + consumed, placement.length)
            )
            consumed += placement.length
        assert consumed == step.length
        assert step.reason and "{" not in step.reason and "}" not in step.reason  # every placeholder filled
    rebuilt = [
        [packing.Piece(seq, start, length) for _, seq, start, length in sorted(blocks[b])] for b in sorted(blocks)
    ]
    assert rebuilt == plan.blocks()
    if steps:
        assert list(steps[-1].fill) == [sum(p.length for p in block) for block in plan.blocks()]


def test_split_step_says_where_the_cut_is() -> None:
    step = packing.explain([2, 3, 1], 4, strategy="split")[1]
    assert step.placements == (packing.strategies.Placement(0, 2, 2), packing.strategies.Placement(1, 0, 1))
    assert "cut" in step.reason


def test_best_fit_reason_names_the_room() -> None:
    steps = packing.explain([5, 3, 2], 6, strategy="bfd")
    assert steps[-1].placements == (packing.strategies.Placement(1, 3, 2),)
    assert "least room" in steps[-1].reason and "3 left" in steps[-1].reason


def test_explain_refuses_large_inputs() -> None:
    assert packing.strategies.MAX_EXPLAIN_DOCUMENTS == 500
    with pytest.raises(
        packing.errors.TooManyDocuments, match=r"^explain: expected at most 500 documents, got 501$"
    ) as error:
        packing.explain([1] * 501, 4)
    assert (error.value.strategy, error.value.limit, error.value.count) == ("explain", 500, 501)
    assert isinstance(error.value, packing.SettingError)
    # the limit counts documents, after the overflow policy: 250 sequences split in two are 500 documents
    assert len(packing.explain([8] * 250, 4, strategy="split", overflow="split")) == 500
    with pytest.raises(packing.errors.TooManyDocuments):
        packing.explain([8] * 251, 4, strategy="split", overflow="split")


def test_the_default_strategy_is_explained_by_default() -> None:
    assert packing.explain([5, 3, 2], 6) == packing.explain([5, 3, 2], 6, strategy=packing.strategies.DEFAULT_STRATEGY)


@settings(max_examples=60, deadline=None)
@given(lengths=SMALL, capacity=st.integers(min_value=1, max_value=10), seed=st.integers(0, 2**32))
def test_shuffled_first_fit_steps_rebuild_the_plan_of_the_same_seed(
    lengths: list[int], capacity: int, seed: int
) -> None:
    plan = packing.plan(lengths, capacity, strategy="first_fit_shuffle", seed=seed)
    steps = packing.explain(lengths, capacity, strategy="first_fit_shuffle", seed=seed)
    blocks: dict[int, list[tuple[int, int, int, int]]] = {}
    for step in steps:
        (placement,) = step.placements
        blocks.setdefault(placement.block, []).append((placement.position, step.sequence, step.start, step.length))
    rebuilt = [[packing.Piece(*piece[1:]) for piece in sorted(blocks[b])] for b in sorted(blocks)]
    assert rebuilt == plan.blocks()


@settings(max_examples=80, deadline=None)
@given(lengths=st.lists(st.integers(min_value=1, max_value=10), max_size=9), capacity=st.integers(1, 10))
@pytest.mark.parametrize("strategy", ["next_fit", "first_fit", "first_fit_shuffle", "ffd", "bfd", "spfhp"])
def test_every_step_follows_the_stated_rule(strategy: str, lengths: list[int], capacity: int) -> None:
    """Replaying the steps, each placement obeys the strategy's rule given the rooms at that moment."""
    rooms: dict[int, int] = {}
    opened_by: dict[int, int] = {}  # block -> length of the document that opened it
    for step in packing.explain(lengths, capacity, strategy=strategy):
        block, size = step.placements[0].block, step.length
        fits = {b: r for b, r in rooms.items() if r >= size}
        if step.opened:
            if strategy == "next_fit":
                assert not rooms or rooms[max(rooms)] < size
            elif strategy == "spfhp":  # only packs opened by this same length may still fit
                assert all(opened_by[b] == size for b in fits)
            else:
                assert not fits
            rooms[block], opened_by[block] = capacity, size
        elif strategy == "next_fit":
            assert block == max(rooms)
        elif strategy in ("first_fit", "first_fit_shuffle", "ffd"):
            assert block == min(fits)
        elif strategy == "bfd":
            assert rooms[block] == min(fits.values())
        else:
            assert rooms[block] == max(fits.values())
        assert rooms[block] >= size
        rooms[block] -= size


def test_the_words_are_the_strategy_entrys(monkeypatch: pytest.MonkeyPatch) -> None:
    entry = packing.strategies.STRATEGIES["ffd"]
    reasons = Reasons(
        placed="{where} had {room} for {size}.", full="{where} opened ({most} at most).", first="{where}."
    )
    monkeypatch.setitem(packing.strategies.STRATEGIES, "ffd", dataclasses.replace(entry, reasons=reasons))
    steps = packing.explain([4, 3, 1], 4, strategy="ffd")
    assert [step.reason for step in steps] == ["block 1.", "block 2 opened (0 at most).", "block 2 had 1 for 1 token."]
