"""Bad input is refused with a TypeError or ValueError that says where the problem is and what was expected,
and the caller's data is never modified."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import packing
from packing import lower_bounds, pack, pack_sequences, plan

ENTRY_POINTS: dict[str, Callable[[Any], object]] = {
    "pack": lambda n: pack([[1, 2, 3]], n),
    "plan": lambda n: plan([3], n),
    "pack_sequences": lambda n: pack_sequences([[1, 2, 3]], n),
    "lower_bounds": lambda n: lower_bounds([3], n),
}


# ---------------------------------------------------------------------------------------------------------------
# max_seq_length
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("entry", ENTRY_POINTS)
@pytest.mark.parametrize(
    ("value", "error", "shown"),
    [
        (0, ValueError, "0"),
        (-3, ValueError, "-3"),
        (True, TypeError, r"True \(bool\)"),
        (False, TypeError, r"False \(bool\)"),
        (np.True_, TypeError, r"True_? \(bool\)"),
        (4.0, TypeError, r"4.0 \(float\)"),
        (2.5, TypeError, r"2.5 \(float\)"),
        ("4", TypeError, r"'4' \(str\)"),
        (None, TypeError, r"None \(NoneType\)"),
    ],
)
def test_max_seq_length_must_be_an_integer_of_at_least_one(
    entry: str, value: object, error: type[Exception], shown: str
) -> None:
    with pytest.raises(error, match=rf"max_seq_length must be an integer >= 1, got .*{shown}"):
        ENTRY_POINTS[entry](value)


@pytest.mark.parametrize("value", [np.int64(4), np.int32(4), np.uint8(4), np.uint64(4)])
def test_numpy_integers_are_valid_lengths(value: object) -> None:
    assert pack([[1, 2, 3, 4, 5]], value).to_lists() == ([[1, 2, 3, 4]], [[1, 1, 1, 1]])  # type: ignore[arg-type]
    assert pack_sequences([[1, 2], [3, 4, 5]], value) == ([[1, 2, 3, 4], [5, 0, 0, 0]], [[1, 1, 1, 1], [1, 0, 0, 0]])  # type: ignore[arg-type]
    assert plan([3, 5], value, "optimal").num_blocks == 2  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------------------------
# Strategy and overflow names
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["nope", "FFD", "", None, 3])
def test_unknown_strategy_lists_the_known_ones(name: object) -> None:
    message = rf"unknown strategy {name!r}; expected one of: split, next_fit, first_fit, ffd, bfd, spfhp, optimal, none"
    with pytest.raises(ValueError, match=message):
        plan([1, 2], 4, name)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=message):
        pack([[1, 2]], 4, name)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["truncation", "Drop", None])
def test_unknown_overflow_policy_lists_the_known_ones(name: object) -> None:
    message = rf"unknown overflow policy {name!r}; expected one of: truncate, split, drop"
    with pytest.raises(ValueError, match=message):
        plan([1, 2], 4, "split", name)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=message):
        pack([[1, 2]], 4, "split", name)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=message):
        lower_bounds([1, 2], 4, name)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------------------------
# Token ids
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("samples", "error", "message"),
    [
        ([[1, 2], [3, -1]], ValueError, r"sample 1, position 1: expected a non-negative integer token id, got -1"),
        ([[], [1], [], [2, -3]], ValueError, r"sample 3, position 1: expected a non-negative integer token id, got -3"),
        ([[], [], [-1]], ValueError, r"sample 2, position 0: expected a non-negative integer token id, got -1"),
        ([[1], {"input_ids": [2]}, [], [5, 6, -7]], ValueError, r"sample 3, position 2: .* got -7"),
        ([[4], [2.5]], TypeError, r"sample 1, position 0: expected a non-negative integer token id, got 2.5 \(float\)"),
        ([[1, None]], TypeError, r"sample 0, position 1: expected a non-negative integer token id, got None"),
        ([["a"]], TypeError, r"sample 0, position 0: expected a non-negative integer token id, got 'a' \(str\)"),
        ([[], [True]], TypeError, r"sample 1, position 0: expected a non-negative integer token id, got True \(bool\)"),
        ([np.array([1.0, 2.0])], TypeError, r"sample 0, position 0: .* got 1.0 \(float\)"),
        ([np.array([3, -7])], ValueError, r"sample 0, position 1: .* got -7"),
        ([[[1, 2], [3, 4]]], TypeError, r"sample 0: expected a flat list of token ids"),
        ([[1], [[1, 2], [3]]], TypeError, r"sample 1, position 0: .* got \[1, 2\] \(list\)"),
        ([{"prompt": [1, -2], "completion": [3]}], ValueError, r"sample 0 'prompt', position 1: .* got -2"),
        ([[1], {"prompt": [1], "completion": [3, -1]}], ValueError, r"sample 1 'completion', position 1: .* got -1"),
        (
            [{"prompt": None, "completion": [3]}],
            TypeError,
            r"sample 0 'prompt': expected a list of token ids, got None",
        ),
        ([{"prompt": [1], "completion": "abc"}], TypeError, r"sample 0 'completion': expected a list of token ids"),
        ([{"input_ids": [0, -5]}], ValueError, r"sample 0 'input_ids', position 1: .* got -5"),
        ([{"input_ids": 5}], TypeError, r"sample 0 'input_ids': expected a list of token ids, got 5 \(int\)"),
    ],
)
def test_bad_token_ids_are_reported_with_sample_and_position(
    samples: list[Any], error: type[Exception], message: str
) -> None:
    before = copy.deepcopy(samples)
    with pytest.raises(error, match=message):
        pack(samples, 4)
    assert repr(samples) == repr(before)


def test_huge_token_ids_that_fit_in_uint64_but_not_int64_are_refused() -> None:
    with pytest.raises(ValueError, match=r"sample 0, position 1: .*9223372036854775808.*64"):
        pack([[1, 2**63]], 4)


# ---------------------------------------------------------------------------------------------------------------
# Loss masks
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mask", "error", "message"),
    [
        ([1, 0], ValueError, r"sample 1 'loss_mask': expected 3 values \(one per token\), got 2"),
        ([1, 0, 1, 1], ValueError, r"sample 1 'loss_mask': expected 3 values \(one per token\), got 4"),
        ([], ValueError, r"sample 1 'loss_mask': expected 3 values \(one per token\), got 0"),
        ([1, 2, 0], ValueError, r"sample 1 'loss_mask', position 1: expected 0 or 1, got .*2"),
        ([1, 0, -1], ValueError, r"sample 1 'loss_mask', position 2: expected 0 or 1, got .*-1"),
        ([0.5, 1, 0], ValueError, r"sample 1 'loss_mask', position 0: expected 0 or 1, got 0.5"),
        ([1, None, 0], ValueError, r"sample 1 'loss_mask', position 1: expected 0 or 1, got None"),
        ([1, "1", 0], ValueError, r"sample 1 'loss_mask', position 1: expected 0 or 1, got '1' \(str\)"),
        ("101", TypeError, r"sample 1 'loss_mask': expected a list of 0/1 values, got '101' \(str\)"),
        (1, TypeError, r"sample 1 'loss_mask': expected a list of 0/1 values, got 1 \(int\)"),
        (np.array([1, 0, 3]), ValueError, r"sample 1 'loss_mask', position 2: expected 0 or 1"),
    ],
)
def test_bad_loss_masks_are_reported_with_sample_and_position(mask: Any, error: type[Exception], message: str) -> None:
    samples = [[9], {"input_ids": [1, 2, 3], "loss_mask": mask}]
    before = copy.deepcopy(samples)
    with pytest.raises(error, match=message):
        pack(samples, 4)
    assert repr(samples) == repr(before)


# ---------------------------------------------------------------------------------------------------------------
# Malformed samples and arguments
# ---------------------------------------------------------------------------------------------------------------

FORMS = r"expected a list of token ids, a dict with 'prompt' and 'completion', or a dict with 'input_ids'"


@pytest.mark.parametrize(
    ("sample", "error", "message"),
    [
        ("hello", TypeError, rf"sample 2: {FORMS} \(and optionally 'loss_mask'\), got 'hello' \(str\)"),
        (b"hi", TypeError, rf"sample 2: {FORMS}.*got b'hi' \(bytes\)"),
        (5, TypeError, rf"sample 2: {FORMS}.*got 5 \(int\)"),
        (None, TypeError, rf"sample 2: {FORMS}.*got None \(NoneType\)"),
        ({1, 2}, TypeError, rf"sample 2: {FORMS}.*\(set\)"),
        ({"prompt": [1]}, ValueError, r"sample 2: a prompt/completion sample needs both keys; 'completion' is missing"),
        ({"completion": [1]}, ValueError, r"sample 2: a prompt/completion sample needs both keys; 'prompt' is missing"),
        ({"text": [1]}, ValueError, r"sample 2: a dict sample needs 'prompt' and 'completion', or 'input_ids'"),
        ({}, ValueError, r"sample 2: a dict sample needs .* got keys \[\]"),
    ],
)
def test_malformed_samples_are_reported_by_index(sample: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        pack([[1], [2], sample], 4)


@pytest.mark.parametrize("samples", ["abc", b"abc", {"input_ids": [1]}, 5, None])
def test_samples_must_be_a_list_of_samples(samples: Any) -> None:
    with pytest.raises(TypeError, match=r"samples must be a list of samples"):
        pack(samples, 4)


@pytest.mark.parametrize(
    ("value", "error"), [(-1, ValueError), (True, TypeError), (1.0, TypeError), ("0", TypeError), (None, TypeError)]
)
def test_pad_token_id_must_be_a_non_negative_integer(value: object, error: type[Exception]) -> None:
    with pytest.raises(error, match=r"pad_token_id must be a non-negative integer, got"):
        pack([[1]], 4, pad_token_id=value)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [1, 0, "yes", None])
def test_completion_only_loss_must_be_a_bool(value: object) -> None:
    with pytest.raises(TypeError, match=rf"completion_only_loss must be True or False, got {value!r}"):
        pack([{"prompt": [1], "completion": [2]}], 4, completion_only_loss=value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "error"), [(0, ValueError), (-1, ValueError), (True, TypeError), (2.0, TypeError), ("2", TypeError)]
)
def test_max_sequences_per_block_must_be_an_integer_of_at_least_one(value: object, error: type[Exception]) -> None:
    with pytest.raises(error, match=r"max_sequences_per_block must be an integer >= 1, got"):
        pack([[1]], 4, "spfhp", max_sequences_per_block=value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("lengths", "error", "message"),
    [
        ([3, -1], ValueError, r"lengths\[1\]: expected a non-negative integer, got -1"),
        ([1.5], TypeError, r"lengths\[0\]: expected a non-negative integer, got 1.5 \(float\)"),
        ([True], TypeError, r"lengths\[0\]: expected a non-negative integer, got True \(bool\)"),
        ([3, None], TypeError, r"lengths\[1\]: expected a non-negative integer, got None"),
        (["3"], TypeError, r"lengths\[0\]: expected a non-negative integer, got '3' \(str\)"),
        ([[1, 2], [3, 4]], ValueError, r"lengths must be a flat list of integers, got an array of shape \(2, 2\)"),
    ],
)
def test_bad_lengths_are_reported_by_index(lengths: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        plan(lengths, 4)
    with pytest.raises(error, match=message):
        lower_bounds(lengths, 4)


# ---------------------------------------------------------------------------------------------------------------
# Nothing is mutated
# ---------------------------------------------------------------------------------------------------------------


def mixed_samples() -> list[Any]:
    return [
        [5, 6, 7, 8, 9, 10, 11],
        (1, 2),
        [],
        np.array([3, 4, 5], dtype=np.int32),
        {"prompt": [1, 2, 3], "completion": np.array([4, 5])},
        {"input_ids": [6, 7, 8], "loss_mask": [0, 1, 1]},
        {"input_ids": np.array([9, 9]), "loss_mask": np.array([True, False])},
        packing.chat_sample([("user", [1]), ("assistant", [2, 3])]),
    ]


def same(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    if isinstance(a, dict):
        return type(b) is dict and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(type(a) is type(b) and a == b)


@pytest.mark.parametrize("overflow", list(packing.OVERFLOW_POLICIES))
@pytest.mark.parametrize("strategy", list(packing.STRATEGIES))
def test_pack_never_modifies_the_samples(strategy: str, overflow: str) -> None:
    samples = mixed_samples()
    before = copy.deepcopy(samples)
    batch = pack(samples, 4, strategy, overflow, pad_token_id=3)
    assert same(samples, before)
    # and the batch does not share memory with the caller's arrays
    batch.input_ids[...] = 0
    batch.loss_mask[...] = 0
    assert same(samples, before)


def test_plan_and_lower_bounds_never_modify_the_lengths() -> None:
    as_list = [3, 0, 9, 2]
    as_array = np.array([3, 0, 9, 2])
    for strategy in packing.STRATEGIES:
        for overflow in packing.OVERFLOW_POLICIES:
            for lengths in (as_list, as_array):
                plan(lengths, 4, strategy, overflow)
                lower_bounds(lengths, 4, overflow)
    assert as_list == [3, 0, 9, 2]
    assert as_array.tolist() == [3, 0, 9, 2]


def test_failed_calls_leave_the_samples_alone() -> None:
    samples = [*mixed_samples(), {"input_ids": [1, 2], "loss_mask": [1, 7]}]
    before = copy.deepcopy(samples)
    with pytest.raises(ValueError, match=r"sample 8 'loss_mask', position 1"):
        pack(samples, 4)
    assert same(samples, before)


# ---------------------------------------------------------------------------------------------------------------
# Mixed lists, ids too large for int64, 0-d arrays, numpy max_seq_length in lower_bounds
# ---------------------------------------------------------------------------------------------------------------


def test_bool_token_id_among_integers_is_refused() -> None:
    with pytest.raises(TypeError, match=r"sample 0, position 1: expected a non-negative integer token id, got True"):
        pack([[1, True]], 4)


def test_bool_length_among_integers_is_refused() -> None:
    with pytest.raises(TypeError, match=r"lengths\[1\]: expected a non-negative integer, got True \(bool\)"):
        plan([2, True], 4)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: pack([[1, 2.5]], 4), r"sample 0, position 1: .* got 2.5 \(float\)"),
        (lambda: pack([[1, "a"]], 4), r"sample 0, position 1: .* got 'a' \(str\)"),
        (lambda: pack([{"input_ids": [1, 2], "loss_mask": [1, 0.5]}], 4), r"'loss_mask', position 1: .* got 0.5"),
        (lambda: plan([1, 2.5], 4), r"lengths\[1\]: expected a non-negative integer, got 2.5 \(float\)"),
    ],
    ids=["float token", "str token", "float mask value", "float length"],
)
def test_error_names_the_position_of_the_bad_item_among_integers(call: Callable[[], object], message: str) -> None:
    with pytest.raises((TypeError, ValueError), match=message):
        call()


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: pack([[1, 2**70]], 4),
            r"sample 0, position 1: token id 1180591620717411303424 does not fit in 64 bits",
        ),
        (lambda: pack([[1], [2**64]], 4), r"sample 1, position 0: .*18446744073709551616.*64 bits"),
        (lambda: pack([[2**63, -1]], 4), r"sample 0, position 0: .*9223372036854775808.*64 bits"),
        (lambda: pack([np.array([1, 2**63], dtype=np.uint64)], 4), r"sample 0, position 1: .*64 bits"),
        (lambda: pack([[1]], 4, pad_token_id=2**70), r"pad_token_id must fit in 64 bits, got 1180591620717411303424"),
    ],
    ids=["token 2**70", "token 2**64", "2**63 next to a negative", "uint64 array", "pad 2**70"],
)
def test_token_ids_too_large_for_int64_are_refused_clearly(call: Callable[[], object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()


@pytest.mark.parametrize(
    ("sample", "message"),
    [
        (np.array(5), r"sample 1: expected a flat list of token ids, got an array of shape \(\)"),
        ({"input_ids": np.array(5)}, r"sample 1 'input_ids': expected a flat list of token ids"),
        ({"input_ids": [5], "loss_mask": np.array(1)}, r"sample 1 'loss_mask': expected a flat list of 0/1 values"),
    ],
    ids=["sample", "input_ids", "loss_mask"],
)
def test_zero_dimensional_arrays_are_reported_by_sample_index(sample: Any, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        pack([[1], sample], 4)


@pytest.mark.parametrize("value", [np.uint8(4), np.uint64(4), np.int8(4), np.int16(4)])
def test_lower_bounds_accept_numpy_integer_lengths(value: object) -> None:
    bounds = lower_bounds([3, 5], value)  # type: ignore[arg-type]
    assert bounds == (2, 2)
    assert type(bounds.simple) is int and type(bounds.l2) is int
    assert lower_bounds([100, 100], np.int8(127)) == (2, 2)


# ---------------------------------------------------------------------------------------------------------------
# Regressions: input that once slipped through or raised an unclear error
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: pack([[1, np.True_]], 4), r"sample 0, position 1: expected a non-negative integer token id, got"),
        (
            lambda: pack([{"input_ids": [1, np.False_]}], 4),
            r"sample 0 'input_ids', position 1: expected a non-negative",
        ),
        (lambda: plan([2, np.True_], 4), r"lengths\[1\]: expected a non-negative integer, got"),
    ],
    ids=["token", "input_ids", "length"],
)
def test_numpy_bool_among_integers_is_refused(call: Callable[[], object], message: str) -> None:
    with pytest.raises(TypeError, match=message):
        call()


@pytest.mark.parametrize(
    ("lengths", "message"),
    [([2**63], r"lengths\[0\]"), ([3, 2**64], r"lengths\[1\]")],
    ids=["2**63", "2**64"],
)
def test_lengths_too_large_for_int64_are_refused(lengths: list[int], message: str) -> None:
    with pytest.raises((TypeError, ValueError), match=message):
        plan(lengths, 4)
    with pytest.raises((TypeError, ValueError), match=message):
        lower_bounds(lengths, 4)


def test_sizes_past_the_int32_pieces_are_refused() -> None:
    with pytest.raises(ValueError, match=r"max_seq_length must be at most 16,777,216"):
        plan([3], 2**25)
    with pytest.raises(ValueError, match=r"overflow 'split' handles sequences of up to 2,147,483,647 tokens"):
        plan([2**31 + 10], 2**20, "bfd", "split")
    truncated = plan([3 * 10**9], 2**20, "bfd")  # truncation keeps offsets at 0: no limit needed
    assert truncated.piece_length.tolist() == [2**20]
    assert truncated.stats.tokens_truncated == 3 * 10**9 - 2**20
