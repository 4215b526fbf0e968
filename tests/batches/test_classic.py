"""The classic function ``pack_sequences``.

Every expected value in the example tests is worked out by hand from the rules:
sequences in order, each first truncated to ``max_seq_length`` tokens, then
concatenated and cut into blocks of exactly ``max_seq_length`` tokens; the last
block is padded with 0; the mask is 1 for a real token and 0 for padding.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from packing import SettingError, pack_sequences


def test_classic_example() -> None:
    assert pack_sequences([[1, 2], [3, 4, 5], [6]], 4) == (
        [[1, 2, 3, 4], [5, 6, 0, 0]],
        [[1, 1, 1, 1], [1, 1, 0, 0]],
    )


def test_result_is_two_lists_of_lists_of_plain_ints() -> None:
    blocks, masks = pack_sequences([[7, 8], [9]], 2)
    assert (blocks, masks) == ([[7, 8], [9, 0]], [[1, 1], [1, 0]])
    for rows in (blocks, masks):
        assert type(rows) is list
        assert all(type(row) is list for row in rows)
        assert all(type(value) is int for row in rows for value in row)


def test_over_long_sequence_keeps_its_first_max_seq_length_tokens() -> None:
    assert pack_sequences([[1, 2, 3, 4, 5, 6]], 4) == ([[1, 2, 3, 4]], [[1, 1, 1, 1]])


def test_each_over_long_sequence_is_truncated_on_its_own() -> None:
    # [4, 5, 6, 7] keeps [4, 5, 6]; the 7 is lost, it does not spill into the next block.
    assert pack_sequences([[1, 2, 3], [4, 5, 6, 7], [8]], 3) == (
        [[1, 2, 3], [4, 5, 6], [8, 0, 0]],
        [[1, 1, 1], [1, 1, 1], [1, 0, 0]],
    )


def test_truncated_sequence_can_still_be_cut_across_a_block_boundary() -> None:
    # [3, ..., 9] is truncated to [3, 4, 5, 6]; after [1, 2] only two slots are left in the first block.
    assert pack_sequences([[1, 2], [3, 4, 5, 6, 7, 8, 9]], 4) == (
        [[1, 2, 3, 4], [5, 6, 0, 0]],
        [[1, 1, 1, 1], [1, 1, 0, 0]],
    )


def test_sequence_that_does_not_fit_is_cut_and_continues_at_the_start_of_the_next_block() -> None:
    assert pack_sequences([[1, 2, 3], [4, 5, 6]], 4) == (
        [[1, 2, 3, 4], [5, 6, 0, 0]],
        [[1, 1, 1, 1], [1, 1, 0, 0]],
    )


def test_cut_sequences_across_several_blocks() -> None:
    assert pack_sequences([[1, 2, 3], [4, 5, 6], [7, 8, 9], [10]], 4) == (
        [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 0, 0]],
        [[1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 0, 0]],
    )


def test_max_seq_length_one() -> None:
    # Every sequence keeps only its first token, and every block is one token.
    assert pack_sequences([[1, 2], [3], [], [4, 5, 6]], 1) == ([[1], [3], [4]], [[1], [1], [1]])


def test_empty_sequences_are_ignored() -> None:
    assert pack_sequences([[], [1], [], [2, 3], []], 2) == ([[1, 2], [3, 0]], [[1, 1], [1, 0]])


@pytest.mark.parametrize("sequences", [[], [[]], [[], [], []]], ids=["no sequences", "one empty", "three empty"])
def test_no_input_tokens_gives_no_blocks(sequences: list[list[int]]) -> None:
    assert pack_sequences(sequences, 4) == ([], [])


@pytest.mark.parametrize(
    ("sequences", "max_seq_length", "expected_blocks"),
    [
        ([[1, 2], [3, 4]], 2, [[1, 2], [3, 4]]),
        ([[1], [2, 3, 4], [5, 6, 7, 8]], 4, [[1, 2, 3, 4], [5, 6, 7, 8]]),
        ([[1, 2, 3], [4, 5, 6, 7, 8]], 3, [[1, 2, 3], [4, 5, 6]]),  # the second sequence is truncated to fill exactly
        ([[5, 6, 7]], 3, [[5, 6, 7]]),
    ],
)
def test_last_block_exactly_full_gets_no_padding_and_no_extra_block(
    sequences: list[list[int]], max_seq_length: int, expected_blocks: list[list[int]]
) -> None:
    blocks, masks = pack_sequences(sequences, max_seq_length)
    assert blocks == expected_blocks
    assert masks == [[1] * max_seq_length for _ in expected_blocks]


def test_token_id_zero_is_a_real_token_only_the_mask_tells_it_from_padding() -> None:
    assert pack_sequences([[0, 0], [0]], 2) == ([[0, 0], [0, 0]], [[1, 1], [1, 0]])


def test_accepts_tuples_and_numpy_arrays() -> None:
    assert pack_sequences(((1, 2), np.array([3, 4, 5])), 4) == (
        [[1, 2, 3, 4], [5, 0, 0, 0]],
        [[1, 1, 1, 1], [1, 0, 0, 0]],
    )


def test_input_is_not_modified() -> None:
    sequences = [[1, 2], [], [3, 4, 5, 6, 7], [8]]
    before = copy.deepcopy(sequences)
    pack_sequences(sequences, 3)
    assert sequences == before


@pytest.mark.parametrize(
    ("max_seq_length", "shown"),
    [(0, "0"), (-4, "-4"), (True, r"True \(bool\)"), (4.0, r"4.0 \(float\)"), ("4", r"'4' \(str\)"), (None, "None")],
)
def test_max_seq_length_must_be_an_integer_of_at_least_one(max_seq_length: object, shown: str) -> None:
    with pytest.raises(SettingError, match=rf"^max_seq_length: expected an integer >= 1, got {shown}") as error:
        pack_sequences([[1, 2, 3]], max_seq_length)  # type: ignore[arg-type]
    assert error.value.name == "max_seq_length"


def spec_pack(sequences: list[list[int]], max_seq_length: int) -> tuple[list[list[int]], list[list[int]]]:
    """The classic rules, written out directly: truncate each, concatenate, cut, pad the last block."""
    stream = [token for sequence in sequences for token in sequence[:max_seq_length]]
    blocks, masks = [], []
    for start in range(0, len(stream), max_seq_length):
        chunk = stream[start : start + max_seq_length]
        padding = max_seq_length - len(chunk)
        blocks.append(chunk + [0] * padding)
        masks.append([1] * len(chunk) + [0] * padding)
    return blocks, masks


@settings(max_examples=200, deadline=None)
@given(
    sequences=st.lists(st.lists(st.integers(min_value=0, max_value=50_000), max_size=12), max_size=10),
    max_seq_length=st.integers(min_value=1, max_value=9),
)
def test_matches_the_rules_on_random_input(sequences: list[list[int]], max_seq_length: int) -> None:
    before = copy.deepcopy(sequences)
    blocks, masks = pack_sequences(sequences, max_seq_length)
    assert (blocks, masks) == spec_pack(sequences, max_seq_length)
    assert all(len(block) == max_seq_length for block in blocks)
    assert all(len(mask) == max_seq_length for mask in masks)
    assert sequences == before
