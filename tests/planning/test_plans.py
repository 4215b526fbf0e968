"""Planning from lengths: the CSR layout, every strategy and overflow policy, and the statistics.

Expected layouts are worked out by hand in the comments next to them.
"""

from __future__ import annotations

import types

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import packing
import packing.planning
import packing.strategies
from packing import Piece, SettingError, plan


def sequences_per_block(layout: packing.PackingPlan) -> list[list[int]]:
    return [[piece.sequence for piece in pieces] for pieces in layout.blocks()]


# ---------------------------------------------------------------------------------------------------------------
# The layout of one plan
# ---------------------------------------------------------------------------------------------------------------


def test_split_plan_layout_in_csr_form() -> None:
    # [2, 3, 1] into blocks of 4: sequence 1 gets 2 slots in block 0, its last token starts block 1.
    layout = plan([2, 3, 1], 4, strategy="split")
    assert (layout.strategy, layout.overflow, layout.max_seq_length) == ("split", "truncate", 4)
    assert layout.num_blocks == 2
    assert layout.block_starts.tolist() == [0, 2, 4]
    assert layout.piece_sequence.tolist() == [0, 1, 1, 2]
    assert layout.piece_start.tolist() == [0, 0, 2, 0]
    assert layout.piece_length.tolist() == [2, 2, 1, 1]
    assert layout.lengths.tolist() == [2, 3, 1]
    assert layout.blocks() == [
        [Piece(0, 0, 2), Piece(1, 0, 2)],
        [Piece(1, 2, 1), Piece(2, 0, 1)],
    ]
    assert layout.piece_block().tolist() == [0, 0, 1, 1]
    assert layout.piece_position().tolist() == [0, 2, 0, 1]


def test_block_helpers_and_negative_indices() -> None:
    layout = plan([2, 3, 1], 4, strategy="split")
    assert layout.block(0) == [Piece(0, 0, 2), Piece(1, 0, 2)]
    assert layout.block(-1) == layout.block(1) == [Piece(1, 2, 1), Piece(2, 0, 1)]
    assert layout.seq_lengths(0).tolist() == [2, 2]
    assert layout.seq_lengths(1).tolist() == [1, 1]
    assert layout.cu_seqlens(0).tolist() == [0, 2, 4]
    assert layout.cu_seqlens(1).tolist() == [0, 1, 2]


@pytest.mark.parametrize("index", [2, 5, -3])
def test_block_index_out_of_range_is_an_index_error(index: int) -> None:
    layout = plan([2, 3, 1], 4, strategy="split")
    with pytest.raises(IndexError, match=rf"block {index} does not exist; the plan has 2 blocks"):
        layout.block(index)
    with pytest.raises(IndexError):
        layout.seq_lengths(index)


@pytest.mark.parametrize("strategy", list(packing.strategies.STRATEGIES))
@pytest.mark.parametrize("lengths", [[], [0], [0, 0, 0]])
def test_no_tokens_gives_an_empty_plan(strategy: str, lengths: list[int]) -> None:
    layout = plan(lengths, 4, strategy=strategy)
    assert layout.num_blocks == 0
    assert layout.blocks() == []
    assert layout.block_starts.tolist() == [0]
    assert layout.stats.num_blocks == layout.stats.lower_bound == layout.stats.padding_tokens == 0
    assert layout.stats.empty_sequences == len(lengths)


def test_plan_keeps_its_own_copy_of_the_lengths() -> None:
    lengths = np.array([3, 1, 2], dtype=np.int64)
    layout = plan(lengths, 4, strategy="ffd")
    lengths[0] = 99
    assert layout.lengths.tolist() == [3, 1, 2]


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint16, np.uint64])
def test_lengths_may_be_any_integer_array(dtype: type) -> None:
    assert sequences_per_block(plan(np.array([3, 1, 2], dtype=dtype), 4, strategy="first_fit")) == [[0, 1], [2]]


# ---------------------------------------------------------------------------------------------------------------
# Each strategy on a small input, by hand
# ---------------------------------------------------------------------------------------------------------------

# Lengths [1, 3, 5, 3] into blocks of 7:
#   next_fit:  1 -> b0 (6 left), 3 -> b0 (3 left), 5 -> b1 (2 left), 3 -> does not fit b1 -> b2
#   first_fit: 1 -> b0, 3 -> b0 (3 left), 5 -> b1 (2 left), 3 -> first block with room: b0
#   ffd:       order 5, 3, 3, 1 (sequences 2, 1, 3, 0): 5 -> b0 (2 left), 3 -> b1 (4 left), 3 -> b1 (1 left),
#              1 -> first block with room: b0
#   bfd:       same order; the 1 goes to the block with the least room that fits: b1 (1 left)
#   none:      one block per sequence
#   optimal:   two blocks are needed (14 tokens > 7) and enough
HAND_PACKED = {
    "next_fit": [[0, 1], [2], [3]],
    "first_fit": [[0, 1, 3], [2]],
    "ffd": [[2, 0], [1, 3]],
    "bfd": [[2], [1, 3, 0]],
    "none": [[0], [1], [2], [3]],
}


@pytest.mark.parametrize(("strategy", "expected"), HAND_PACKED.items())
def test_strategy_on_a_small_input(strategy: str, expected: list[list[int]]) -> None:
    layout = plan([1, 3, 5, 3], 7, strategy=strategy)
    assert sequences_per_block(layout) == expected
    assert all(piece.start == 0 for pieces in layout.blocks() for piece in pieces)


def test_optimal_on_the_same_input_uses_two_blocks() -> None:
    layout = plan([1, 3, 5, 3], 7, strategy="optimal")
    assert layout.num_blocks == 2
    assert sorted(seq for seqs in sequences_per_block(layout) for seq in seqs) == [0, 1, 2, 3]
    assert all(sum(piece.length for piece in pieces) <= 7 for pieces in layout.blocks())


def test_split_on_the_same_input_cuts_across_blocks() -> None:
    # stream of 12 tokens: seq0 [0,1), seq1 [1,4), seq2 [4,9) cut at 7, seq3 [9,12)
    assert plan([1, 3, 5, 3], 7, strategy="split").blocks() == [
        [Piece(0, 0, 1), Piece(1, 0, 3), Piece(2, 0, 3)],
        [Piece(2, 3, 2), Piece(3, 0, 3)],
    ]


def test_best_fit_breaks_ties_by_the_block_that_reached_that_room_last() -> None:
    # [5, 5, 1] into 8: both blocks have 3 left; best fit takes the most recent one (b1), first fit takes b0.
    assert sequences_per_block(plan([5, 5, 1], 8, strategy="bfd")) == [[0], [1, 2]]
    assert sequences_per_block(plan([5, 5, 1], 8, strategy="ffd")) == [[0, 2], [1]]


def test_decreasing_strategies_keep_input_order_among_equal_lengths() -> None:
    # [2, 4, 2, 4] into 6: order 4 (seq 1), 4 (seq 3), 2 (seq 0), 2 (seq 2); both 4s leave 2 slots.
    # ffd: each 2 goes to the first block with room; bfd: to the block that reached 2 left most recently.
    assert sequences_per_block(plan([2, 4, 2, 4], 6, strategy="ffd")) == [[1, 0], [3, 2]]
    assert sequences_per_block(plan([2, 4, 2, 4], 6, strategy="bfd")) == [[1, 2], [3, 0]]


def test_spfhp_on_a_small_input() -> None:
    # Histogram, longest length first: the 3 opens a pack with 2 left; the first 2 (sequence 0) joins it,
    # the second 2 (sequence 2) fits nowhere and opens a new pack.
    assert sequences_per_block(plan([2, 3, 2], 5, strategy="spfhp")) == [[1, 0], [2]]


@pytest.mark.parametrize(
    ("cap", "expected"),
    [
        # [3, 1, 1, 1] into 6: without a cap the 1s go one after another into the pack with most room.
        (None, [[0, 1, 2, 3]]),
        (3, [[0, 1, 2], [3]]),
        # with at most 2 per block, the pack (3, 1) is closed; the two 1s left open packs of their own
        (2, [[0, 1], [2], [3]]),
        (1, [[0], [1], [2], [3]]),
    ],
)
def test_spfhp_max_sequences_per_block(cap: int | None, expected: list[list[int]]) -> None:
    assert sequences_per_block(plan([3, 1, 1, 1], 6, strategy="spfhp", max_sequences_per_block=cap)) == expected


@pytest.mark.parametrize("strategy", [name for name in packing.strategies.STRATEGIES if name != "spfhp"])
def test_max_sequences_per_block_is_refused_by_other_strategies(strategy: str) -> None:
    message = rf"^max_sequences_per_block: expected no value with strategy '{strategy}' \(it applies to spfhp\), got 2$"
    with pytest.raises(SettingError, match=message) as error:
        plan([1, 2], 4, strategy=strategy, max_sequences_per_block=2)
    assert error.value.name == "max_sequences_per_block"


OPTION_VALUES = {"max_sequences_per_block": 2, "time_limit": 5.0, "seed": 3}


@pytest.mark.parametrize("option", list(OPTION_VALUES))
@pytest.mark.parametrize("strategy", list(packing.strategies.STRATEGIES))
def test_each_option_is_accepted_exactly_by_the_strategies_whose_entry_lists_it(strategy: str, option: str) -> None:
    # The registry is the one place that says which strategy takes which option: plan() follows it. A seed is
    # accepted with any strategy (entry points that shuffle their output draw from it); only some read it.
    accepts = option in packing.strategies.STRATEGIES[strategy].options
    assert accepts == (
        (strategy, option)
        in {("spfhp", "max_sequences_per_block"), ("optimal", "time_limit"), ("first_fit_shuffle", "seed")}
    )
    value = OPTION_VALUES[option]
    if accepts or option == "seed":
        layout = plan([1, 2, 3], 4, strategy=strategy, **{option: value})  # type: ignore[arg-type]
        assert sorted({piece.sequence for block in layout.blocks() for piece in block}) == [0, 1, 2]
    else:
        with pytest.raises(SettingError, match=rf"^{option}: expected no value with strategy '{strategy}'"):
            plan([1, 2, 3], 4, strategy=strategy, **{option: value})  # type: ignore[arg-type]


def test_options_are_keyword_only() -> None:
    """The strategy too: every recipe option is keyword-only at every door."""
    with pytest.raises(TypeError):
        plan([1, 2], 4, "spfhp")  # type: ignore[misc]


@pytest.mark.parametrize(
    ("strategy", "option", "value", "message"),
    [
        ("optimal", "time_limit", 0, r"^time_limit: expected a finite number of seconds > 0, got 0$"),
        ("optimal", "time_limit", True, r"^time_limit: expected a finite number of seconds > 0, got True \(bool\)$"),
        ("optimal", "time_limit", float("inf"), r"^time_limit: expected a finite number of seconds > 0, got inf"),
        ("first_fit_shuffle", "seed", -1, r"^seed: expected a non-negative integer, got -1$"),
        ("first_fit_shuffle", "seed", 1.5, r"^seed: expected a non-negative integer, got 1.5 \(float\)$"),
        ("ffd", "window", 0, r"^window: expected an integer >= 1, got 0$"),
        ("bfd", "window", True, r"^window: expected an integer >= 1, got True \(bool\)$"),
    ],
)
def test_bad_option_values_are_setting_errors(strategy: str, option: str, value: object, message: str) -> None:
    with pytest.raises(SettingError, match=message) as error:
        plan([1, 2], 4, strategy=strategy, **{option: value})  # type: ignore[arg-type]
    assert error.value.name == option


def test_the_default_strategy_is_best_fit_decreasing() -> None:
    assert packing.strategies.DEFAULT_STRATEGY == "bfd"
    lengths = [1, 3, 5, 3, 2, 6]
    assert plan(lengths, 7).strategy == "bfd"
    assert plan(lengths, 7).blocks() == plan(lengths, 7, strategy="bfd").blocks()


# ---------------------------------------------------------------------------------------------------------------
# Overflow policies
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overflow", "expected"),
    [
        ("truncate", [[Piece(0, 0, 3)], [Piece(2, 0, 4)]]),
        ("split", [[Piece(0, 0, 3)], [Piece(2, 0, 4)], [Piece(2, 4, 4)], [Piece(2, 8, 1)]]),
        ("drop", [[Piece(0, 0, 3)]]),
    ],
)
def test_overflow_policy_makes_the_documents(overflow: str, expected: list[list[Piece]]) -> None:
    # [3, 0, 9] into 4 with one block per document; the empty sequence gives nothing
    assert plan([3, 0, 9], 4, strategy="none", overflow=overflow).blocks() == expected


def test_split_strategy_with_split_overflow_restarts_each_piece_as_a_document() -> None:
    # [1, 9] into 4: documents 1, 4 (tokens 0-3 of seq 1), 4 (tokens 4-7), 1 (token 8); the stream cuts each
    # 4-token document across a block boundary.
    assert plan([1, 9], 4, strategy="split", overflow="split").blocks() == [
        [Piece(0, 0, 1), Piece(1, 0, 3)],
        [Piece(1, 3, 1), Piece(1, 4, 3)],
        [Piece(1, 7, 1), Piece(1, 8, 1)],
    ]


# ---------------------------------------------------------------------------------------------------------------
# Statistics
# ---------------------------------------------------------------------------------------------------------------


def test_stats_of_split_with_truncation() -> None:
    # [3, 0, 9, 2] into 4, truncate: documents 3, 4, 2 = 9 tokens.
    # b0: seq0 (3) + 1 token of seq2; b1: 3 tokens of seq2 + 1 of seq3; b2: 1 token of seq3.
    stats = plan([3, 0, 9, 2], 4, strategy="split").stats
    assert stats.max_seq_length == 4
    assert stats.num_sequences == 4
    assert stats.empty_sequences == 1
    assert stats.num_blocks == 3
    assert stats.lower_bound == 3
    assert stats.input_tokens == 14
    assert stats.packed_tokens == 9
    assert stats.padding_tokens == 3
    assert stats.efficiency == 0.75
    assert stats.tokens_truncated == 5
    assert stats.tokens_dropped == 0
    assert stats.tokens_lost == 5
    assert stats.sequences_truncated == 1
    assert stats.sequences_dropped == 0
    assert stats.sequences_split == 2
    assert stats.block_utilization.tolist() == [1.0, 1.0, 0.25]
    assert stats.trainable_tokens == 9  # a plan knows no masks: every packed token counts
    assert stats.target_tokens == 4  # 9 tokens in 5 pieces: no piece's first token is a target
    assert stats.samples_without_trainable_tokens == 1  # seq3 is two one-token pieces, each a block start


def test_stats_count_sequences_cut_across_blocks_when_every_sequence_fits() -> None:
    # [2, 3, 1] into 4: nothing is empty, truncated or dropped, but sequence 1 is cut across the two blocks
    stats = plan([2, 3, 1], 4, strategy="split").stats
    assert stats.sequences_split == 1
    assert stats.sequences_truncated == stats.sequences_dropped == stats.empty_sequences == 0
    assert stats.tokens_lost == 0
    assert stats.packed_tokens == stats.input_tokens == 6
    assert stats.block_utilization.tolist() == [1.0, 0.5]
    # the same lengths under a no-split strategy cut nothing
    assert plan([2, 3, 1], 4, strategy="next_fit").stats.sequences_split == 0


def test_stats_of_split_with_dropping() -> None:
    # [3, 0, 9, 2] into 4, drop: documents 3 and 2; b0: seq0 + 1 token of seq3, b1: 1 token of seq3.
    stats = plan([3, 0, 9, 2], 4, strategy="split", overflow="drop").stats
    assert stats.num_blocks == 2
    assert stats.lower_bound == 2
    assert stats.packed_tokens == 5
    assert stats.padding_tokens == 3
    assert stats.efficiency == 0.625
    assert stats.tokens_truncated == 0
    assert stats.tokens_dropped == 9
    assert stats.tokens_lost == 9
    assert stats.sequences_truncated == 0
    assert stats.sequences_dropped == 1
    assert stats.sequences_split == 1
    assert stats.block_utilization.tolist() == [1.0, 0.25]


def test_stats_of_a_no_split_strategy() -> None:
    # [3, 0, 9, 2] into 4 with ffd, truncate: documents 4 (seq2), 3 (seq0), 2 (seq3), none fits another
    stats = plan([3, 0, 9, 2], 4, strategy="ffd").stats
    assert stats.num_blocks == 3
    assert stats.lower_bound == 3
    assert stats.efficiency == 0.75
    assert stats.block_utilization.tolist() == [1.0, 0.75, 0.5]
    assert stats.sequences_split == 0
    assert stats.sequences_truncated == 1
    assert stats.tokens_truncated == 5


def test_stats_of_split_overflow() -> None:
    # [3, 0, 9, 2] into 4 with bfd, split: documents 4, 4 (seq2), 3, 2, 1; nothing is lost, seq2 is in 3 pieces.
    # bfd: 4 -> b0, 4 -> b1, 3 -> b2 (1 left), 2 -> b3 (2 left), 1 -> least room that fits: b2
    stats = plan([3, 0, 9, 2], 4, strategy="bfd", overflow="split").stats
    assert stats.num_blocks == 4
    assert stats.lower_bound == 4  # ceil(14 / 4)
    assert stats.packed_tokens == stats.input_tokens == 14
    assert stats.tokens_lost == 0
    assert stats.sequences_split == 1
    assert stats.block_utilization.tolist() == [1.0, 1.0, 1.0, 0.5]


def test_stats_summary_is_a_plain_dict_with_tokens_lost() -> None:
    stats = plan([3, 0, 9, 2], 4, strategy="split").stats
    summary = stats.summary()
    assert "block_utilization" not in summary
    assert summary["tokens_lost"] == 5
    assert summary["num_blocks"] == 3
    assert summary["efficiency"] == 0.75


def test_the_modules_are_not_shadowed_by_the_functions() -> None:
    import packing.planning._plans
    import packing.strategies._explanation

    assert isinstance(packing.planning._plans, types.ModuleType) and isinstance(
        packing.strategies._explanation, types.ModuleType
    )
    assert packing.plan is packing.planning._plans.plan and callable(packing.plan)
    assert packing.explain is packing.strategies._explanation.explain and callable(packing.explain)


def _split_by_hand(lengths: list[int], capacity: int, overflow: str) -> list[list[tuple[int, int, int]]]:
    """Every kept token of every sequence, in order, cut into blocks of ``capacity``; a block's pieces as
    ``(sequence, offset, length)``, a sequence longer than ``capacity`` restarting as a new document at each
    multiple of ``capacity`` (overflow ``split``), cut (``truncate``) or left out (``drop``). Brute force."""
    tokens = []
    for sequence, length in enumerate(lengths):
        if overflow == "drop" and length > capacity:
            continue
        kept = min(length, capacity) if overflow == "truncate" else length
        tokens += [(sequence, offset, offset // capacity) for offset in range(kept)]
    blocks: list[list[tuple[int, int, int]]] = []
    for lo in range(0, len(tokens), capacity):
        pieces: list[tuple[int, int, int]] = []
        for sequence, offset, document in tokens[lo : lo + capacity]:
            last = pieces[-1] if pieces else None
            if last and last[0] == sequence and last[1] // capacity == document and last[1] + last[2] == offset:
                pieces[-1] = (sequence, last[1], last[2] + 1)
            else:
                pieces.append((sequence, offset, 1))
        blocks.append(pieces)
    return blocks


@given(
    lengths=st.lists(st.integers(0, 12), max_size=30),
    capacity=st.integers(1, 8),
    overflow=st.sampled_from(["split", "truncate", "drop"]),
)
@settings(max_examples=300, deadline=None)
def test_split_plan_equals_cutting_tokens_by_hand(lengths: list[int], capacity: int, overflow: str) -> None:
    layout = plan(lengths, capacity, strategy="split", overflow=overflow)  # type: ignore[arg-type]
    got = [[(p.sequence, p.start, p.length) for p in layout.block(b)] for b in range(layout.num_blocks)]
    assert got == _split_by_hand(lengths, capacity, overflow)
