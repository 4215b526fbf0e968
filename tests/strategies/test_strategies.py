"""The registry holds every fact about a strategy, and the planner follows it."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from packing import SettingError, lower_bounds, plan
from packing.strategies import STRATEGIES
from packing.strategies._registry import DEFAULT_STRATEGY, placement_order

OPTION_VALUES = {"max_sequences_per_block": 2, "time_limit": 5.0, "seed": 3}


@pytest.mark.parametrize("name", list(STRATEGIES))
def test_each_strategy_accepts_exactly_its_options(name: str) -> None:
    for option, value in OPTION_VALUES.items():
        if option in STRATEGIES[name].options or option == "seed":  # a seed is accepted everywhere (Recipe)
            assert plan([3, 2, 2], 4, strategy=name, **{option: value}).num_blocks >= 2
        else:
            with pytest.raises(SettingError) as caught:
                plan([3, 2, 2], 4, strategy=name, **{option: value})
            assert caught.value.name == option


def test_the_default_is_bfd_everywhere() -> None:
    assert DEFAULT_STRATEGY == "bfd"
    assert plan([5, 3, 2, 4], 6).blocks() == plan([5, 3, 2, 4], 6, strategy="bfd").blocks()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 12), max_size=30), st.sampled_from([n for n in STRATEGIES if n != "optimal"]))
def test_the_bound_a_strategy_names_holds_for_it(lengths: list[int], name: str) -> None:
    bounds = lower_bounds(lengths, 12)
    bound = bounds.simple if STRATEGIES[name].bound == "simple" else bounds.l2
    assert plan(lengths, 12, strategy=name).num_blocks >= bound


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 12), min_size=1, max_size=30), st.sampled_from([n for n in STRATEGIES if n != "split"]))
def test_blocks_hold_documents_in_the_registry_placement_order(lengths: list[int], name: str) -> None:
    layout = plan(lengths, 12, strategy=name)
    order = placement_order(STRATEGIES[name], np.asarray(lengths), 12).tolist()
    rank = {sequence: position for position, sequence in enumerate(order)}
    for block in layout.blocks():
        if name == "optimal":
            continue  # optimal lays out each block longest first, not in a placement order
        ranks = [rank[piece.sequence] for piece in block]
        assert ranks == sorted(ranks)
