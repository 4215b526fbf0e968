"""Bad input is refused with a typed error that says where the problem is and what was expected (a
``SampleError`` with the sample, field and position for a bad sample, a ``SettingError`` naming the argument
for a bad argument; both are ``ValueError``s), and the caller's data is never modified."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import packing
import packing.core
import packing.reading
import packing.recipe
import packing.strategies
from packing import PackingError, SampleError, SettingError, lower_bounds, pack, pack_sequences, plan
from packing.errors import PeerName

ENTRY_POINTS: dict[str, Callable[[Any], object]] = {
    "pack": lambda n: pack([[1, 2, 3]], n, strategy="split"),
    "plan": lambda n: plan([3], n),
    "pack_sequences": lambda n: pack_sequences([[1, 2, 3]], n),
    "lower_bounds": lambda n: lower_bounds([3], n),
}


# ---------------------------------------------------------------------------------------------------------------
# max_seq_length
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("entry", ENTRY_POINTS)
@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (0, "0"),
        (-3, "-3"),
        (True, r"True \(bool\)"),
        (False, r"False \(bool\)"),
        (np.True_, r"(np\.)?True_? \(bool\)"),
        (4.0, r"4.0 \(float\)"),
        (2.5, r"2.5 \(float\)"),
        ("4", r"'4' \(str\)"),
        (None, r"None \(NoneType\)"),
    ],
)
def test_max_seq_length_must_be_an_integer_of_at_least_one(entry: str, value: object, shown: str) -> None:
    # None: no length and no recipe (the options' own default)
    expected = r"an integer >= 1( \(or a recipe\))?"
    with pytest.raises(SettingError, match=rf"^max_seq_length: expected {expected}, got {shown}$") as error:
        ENTRY_POINTS[entry](value)
    assert error.value.name == "max_seq_length"
    assert isinstance(error.value, ValueError) and isinstance(error.value, PackingError)


@pytest.mark.parametrize("value", [np.int64(4), np.int32(4), np.uint8(4), np.uint64(4)])
def test_numpy_integers_are_valid_lengths(value: object) -> None:
    assert pack([[1, 2, 3, 4, 5]], value, strategy="split").to_lists() == ([[1, 2, 3, 4]], [[1, 1, 1, 1]])  # type: ignore[arg-type]
    assert pack_sequences([[1, 2], [3, 4, 5]], value) == ([[1, 2, 3, 4], [5, 0, 0, 0]], [[1, 1, 1, 1], [1, 0, 0, 0]])  # type: ignore[arg-type]
    assert plan([3, 5], value, strategy="optimal").num_blocks == 2  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------------------------
# Strategy and overflow names
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["nope", "FFD", "", 3])  # None: the default
def test_unknown_strategy_lists_the_known_ones(name: object) -> None:
    known = "split, wrapped, next_fit, first_fit, first_fit_shuffle, ffd, bfd, spfhp, optimal, none"
    message = rf"^strategy: expected one of {known}, got {re.escape(repr(name))}"
    with pytest.raises(SettingError, match=message) as error:
        plan([1, 2], 4, strategy=name)  # type: ignore[arg-type]
    assert error.value.name == "strategy"
    with pytest.raises(SettingError, match=message):
        pack([[1, 2]], 4, strategy=name)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["truncation", "Drop"])  # None: the default
def test_unknown_overflow_policy_lists_the_known_ones(name: object) -> None:
    message = rf"^overflow: expected one of truncate, split, drop, error, got {re.escape(repr(name))}"
    with pytest.raises(SettingError, match=message):
        plan([1, 2], 4, strategy="split", overflow=name)  # type: ignore[arg-type]
    with pytest.raises(SettingError, match=message):
        pack([[1, 2]], 4, strategy="split", overflow=name)  # type: ignore[arg-type]
    with pytest.raises(SettingError, match=message):
        lower_bounds([1, 2], 4, overflow=name)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------------------------
# Token ids
# ---------------------------------------------------------------------------------------------------------------


TOKEN = "expected a non-negative integer token id"


@pytest.mark.parametrize(
    ("samples", "where", "message"),
    [
        ([[1, 2], [3, -1]], (1, None, 1), rf"^sample 1, position 1: {TOKEN}, got -1$"),
        ([[], [1], [], [2, -3]], (3, None, 1), rf"^sample 3, position 1: {TOKEN}, got -3$"),
        ([[], [], [-1]], (2, None, 0), rf"^sample 2, position 0: {TOKEN}, got -1$"),
        ([[1], {"input_ids": [2]}, [], [5, 6, -7]], (3, None, 2), r"^sample 3, position 2: .* got -7$"),
        ([[4], [2.5]], (1, None, 0), rf"^sample 1, position 0: {TOKEN}, got 2.5 \(float\)$"),
        ([[1, None]], (0, None, 1), rf"^sample 0, position 1: {TOKEN}, got None \(NoneType\)$"),
        ([["a"]], (0, None, 0), rf"^sample 0, position 0: {TOKEN}, got 'a' \(str\)$"),
        ([[], [True]], (1, None, 0), rf"^sample 1, position 0: {TOKEN}, got True \(bool\)$"),
        ([np.array([1.0, 2.0])], (0, None, 0), r"^sample 0, position 0: .* got 1.0 \(float\)$"),
        ([np.array([3, -7])], (0, None, 1), r"^sample 0, position 1: .* got -7$"),
        ([[[1, 2], [3, 4]]], (0, None, 0), rf"^sample 0, position 0: {TOKEN}, got \[1, 2\] \(list\)$"),
        ([np.array([[1, 2], [3, 4]])], (0, None, None), r"^sample 0: expected a flat list of token ids"),
        ([[1], [[1, 2], [3]]], (1, None, 0), r"^sample 1, position 0: .* got \[1, 2\] \(list\)$"),
        ([{"prompt": [1, -2], "completion": [3]}], (0, "prompt", 1), r"^sample 0, 'prompt', position 1: .* got -2$"),
        (
            [[1], {"prompt": [1], "completion": [3, -1]}],
            (1, "completion", 1),
            r"^sample 1, 'completion', position 1: .* got -1$",
        ),
        (
            [{"prompt": None, "completion": [3]}],
            (0, "prompt", None),
            r"^sample 0, 'prompt': expected a list of token ids .*, got None \(NoneType\)$",
        ),
        (
            [{"prompt": [1], "completion": "abc"}],
            (0, "completion", None),
            r"^sample 0, 'completion': expected token ids \(a text row needs a tokenizer: tokenizer=\.\.\.\), got 'abc' \(str\)$",
        ),
        ([{"input_ids": [0, -5]}], (0, "input_ids", 1), r"^sample 0, 'input_ids', position 1: .* got -5$"),
        ([{"input_ids": 5}], (0, "input_ids", None), r"^sample 0, 'input_ids': expected a list of token ids, got 5$"),
    ],
)
def test_bad_token_ids_are_reported_with_sample_and_position(
    samples: list[Any], where: tuple[int, str | None, int | None], message: str
) -> None:
    before = copy.deepcopy(samples)
    with pytest.raises(SampleError, match=message) as error:
        pack(samples, 4)
    assert (error.value.sample, error.value.field, error.value.position) == where
    assert repr(samples) == repr(before)


def test_huge_token_ids_that_fit_in_uint64_but_not_int64_are_refused() -> None:
    with pytest.raises(SampleError, match=r"^sample 0, position 1: .*64 bits, got 9223372036854775808$") as error:
        pack([[1, 2**63]], 4)
    assert (error.value.sample, error.value.position) == (0, 1)


# ---------------------------------------------------------------------------------------------------------------
# Loss masks
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mask", "position", "message"),
    [
        ([1, 0], None, r"^sample 1, 'loss_mask': expected 3 values \(one per token\), got <2 values>$"),
        ([1, 0, 1, 1], None, r"^sample 1, 'loss_mask': expected 3 values \(one per token\), got <4 values>$"),
        ([], None, r"^sample 1, 'loss_mask': expected 3 values \(one per token\), got <0 values>$"),
        ([1, 2, 0], 1, r"^sample 1, 'loss_mask', position 1: expected 0 or 1, got 2$"),
        ([1, 0, -1], 2, r"^sample 1, 'loss_mask', position 2: expected 0 or 1, got -1$"),
        ([0.5, 1, 0], 0, r"^sample 1, 'loss_mask', position 0: expected 0 or 1, got 0.5 \(float\)$"),
        ([1, None, 0], 1, r"^sample 1, 'loss_mask', position 1: expected 0 or 1, got None \(NoneType\)$"),
        ([1, "1", 0], 1, r"^sample 1, 'loss_mask', position 1: expected 0 or 1, got '1' \(str\)$"),
        ("101", None, r"^sample 1, 'loss_mask': expected a list of 0/1 values, got '101' \(str\)$"),
        (1, None, r"^sample 1, 'loss_mask': expected a list of 0/1 values, got 1$"),
        (np.array([1, 0, 3]), 2, r"^sample 1, 'loss_mask', position 2: expected 0 or 1, got 3$"),
    ],
)
def test_bad_loss_masks_are_reported_with_sample_and_position(mask: Any, position: int | None, message: str) -> None:
    samples = [[9], {"input_ids": [1, 2, 3], "loss_mask": mask}]
    before = copy.deepcopy(samples)
    with pytest.raises(SampleError, match=message) as error:
        pack(samples, 4)
    assert (error.value.sample, error.value.field, error.value.position) == (1, "loss_mask", position)
    assert repr(samples) == repr(before)


# ---------------------------------------------------------------------------------------------------------------
# Malformed samples and arguments
# ---------------------------------------------------------------------------------------------------------------

FORMS = re.escape(
    "expected a list of token ids, or a dict with 'input_ids' (and a 'loss_mask'), 'prompt' and 'completion', "
    "or 'length', or a pair ('prompt', 'chosen', 'rejected') or group ('prompt', 'completions')"
)
NEEDS_BOTH = re.escape("expected a list of token ids (a prompt needs a completion), got None (NoneType)")


@pytest.mark.parametrize(
    ("sample", "field", "message"),
    [
        ("hello", None, rf"^sample 2: {FORMS}, got 'hello' \(str\)$"),
        (b"hi", None, rf"^sample 2: {FORMS}, got b'hi' \(bytes\)$"),
        (5, None, rf"^sample 2: {FORMS}, got 5$"),
        (None, None, rf"^sample 2: {FORMS}, got None \(NoneType\)$"),
        ({1, 2}, None, rf"^sample 2: {FORMS}, got {{1, 2}} \(set\)$"),
        ({"prompt": [1]}, "completion", rf"^sample 2, 'completion': {NEEDS_BOTH}$"),
        ({"completion": [1]}, "prompt", rf"^sample 2, 'prompt': {NEEDS_BOTH}$"),
        ({"note": [1]}, None, rf"^sample 2: {FORMS}, got <keys note>$"),
        ({}, None, rf"^sample 2: {FORMS}, got <keys none>$"),
    ],
)
def test_malformed_samples_are_reported_by_index(sample: Any, field: str | None, message: str) -> None:
    with pytest.raises(SampleError, match=message) as error:
        pack([[1], [2], sample], 4)
    assert (error.value.sample, error.value.field, error.value.position) == (2, field, None)


@pytest.mark.parametrize("samples", ["abc", b"abc", {"input_ids": [1]}, 5, None])
def test_samples_must_be_a_list_of_samples(samples: Any) -> None:
    with pytest.raises(SettingError, match=r"^samples: expected a list of samples") as error:
        pack(samples, 4)
    assert error.value.name == "samples"


@pytest.mark.parametrize(
    ("value", "shown"),
    [(-1, "-1"), (True, r"True \(bool\)"), (1.0, r"1.0 \(float\)"), ("0", r"'0' \(str\)")],  # None: the default
)
def test_pad_token_id_must_be_a_non_negative_integer(value: object, shown: str) -> None:
    with pytest.raises(SettingError, match=rf"^pad_token_id: expected a non-negative integer, got {shown}") as error:
        pack([[1]], 4, pad_token_id=value)  # type: ignore[arg-type]
    assert error.value.name == "pad_token_id"


@pytest.mark.parametrize("value", [True, False, 1, "yes"])
def test_completion_only_loss_is_answered_with_loss(value: object) -> None:
    """TRL's name is not an alias: whatever its value, the error names this library's option."""
    message = r"^completion_only_loss: expected loss: 'completion' for True, 'all' for False \(TRL's completion_only"
    with pytest.raises(PeerName, match=message):
        pack([{"prompt": [1], "completion": [2]}], 4, completion_only_loss=value)  # type: ignore[call-arg]


@pytest.mark.parametrize("value", [0, -1, True, 2.0, "2"])
def test_max_sequences_per_block_must_be_an_integer_of_at_least_one(value: object) -> None:
    message = rf"^max_sequences_per_block: expected an integer >= 1, got {re.escape(repr(value))}"
    with pytest.raises(SettingError, match=message) as error:
        pack([[1]], 4, strategy="spfhp", max_sequences_per_block=value)  # type: ignore[arg-type]
    assert error.value.name == "max_sequences_per_block"


@pytest.mark.parametrize(
    ("lengths", "name", "message"),
    [
        ([3, -1], "lengths[1]", r"^lengths\[1\]: expected a non-negative integer, got -1$"),
        ([1.5], "lengths[0]", r"^lengths\[0\]: expected a non-negative integer, got 1.5 \(float\)$"),
        ([True], "lengths[0]", r"^lengths\[0\]: expected a non-negative integer, got True \(bool\)$"),
        ([3, None], "lengths[1]", r"^lengths\[1\]: expected a non-negative integer, got None \(NoneType\)$"),
        (["3"], "lengths[0]", r"^lengths\[0\]: expected a non-negative integer, got '3' \(str\)$"),
        (
            [[1, 2], [3, 4]],
            "lengths",
            r"^lengths: expected a flat list of integers \(one length per sample\), got <an array of shape \(2, 2\)>$",
        ),
        ([[1, 2], [3]], "lengths", r"^lengths: expected a flat list of integers \(one length per sample\), got \[\[1"),
    ],
)
def test_bad_lengths_are_reported_by_index(lengths: Any, name: str, message: str) -> None:
    with pytest.raises(SettingError, match=message) as error:
        plan(lengths, 4)
    assert error.value.name == name
    with pytest.raises(SettingError, match=message):
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
        packing.reading.chat_sample([("user", [1]), ("assistant", [2, 3])]),
    ]


def same(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    if isinstance(a, dict):
        return type(b) is dict and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(type(a) is type(b) and a == b)


@pytest.mark.parametrize("overflow", [p for p in packing.recipe.OVERFLOW_POLICIES if p != "error"])
@pytest.mark.parametrize("strategy", list(packing.strategies.STRATEGIES))
def test_pack_never_modifies_the_samples(strategy: str, overflow: str) -> None:
    samples = mixed_samples()
    before = copy.deepcopy(samples)
    batch = pack(samples, 4, strategy=strategy, overflow=overflow, pad_token_id=3)
    assert same(samples, before)
    # and the batch does not share memory with the caller's arrays
    batch.input_ids[...] = 0
    batch.loss_mask[...] = 0
    assert same(samples, before)


def test_plan_and_lower_bounds_never_modify_the_lengths() -> None:
    as_list = [3, 0, 9, 2]
    as_array = np.array([3, 0, 9, 2])
    for strategy in packing.strategies.STRATEGIES:
        for overflow in [p for p in packing.recipe.OVERFLOW_POLICIES if p != "error"]:
            for lengths in (as_list, as_array):
                plan(lengths, 4, strategy=strategy, overflow=overflow)
                lower_bounds(lengths, 4, overflow=overflow)
    assert as_list == [3, 0, 9, 2]
    assert as_array.tolist() == [3, 0, 9, 2]


def test_failed_calls_leave_the_samples_alone() -> None:
    samples = [*mixed_samples(), {"input_ids": [1, 2], "loss_mask": [1, 7]}]
    before = copy.deepcopy(samples)
    with pytest.raises(SampleError, match=r"^sample 8, 'loss_mask', position 1: expected 0 or 1, got 7$") as error:
        pack(samples, 4)
    assert (error.value.sample, error.value.field, error.value.position) == (8, "loss_mask", 1)
    assert same(samples, before)


# ---------------------------------------------------------------------------------------------------------------
# Mixed lists, ids too large for int64, 0-d arrays, numpy max_seq_length in lower_bounds
# ---------------------------------------------------------------------------------------------------------------


def test_bool_token_id_among_integers_is_refused() -> None:
    with pytest.raises(SampleError, match=rf"^sample 0, position 1: {TOKEN}, got True \(bool\)$") as error:
        pack([[1, True]], 4)
    assert (error.value.sample, error.value.field, error.value.position) == (0, None, 1)


def test_bool_length_among_integers_is_refused() -> None:
    with pytest.raises(SettingError, match=r"^lengths\[1\]: expected a non-negative integer, got True \(bool\)$"):
        plan([2, True], 4)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: pack([[1, 2.5]], 4), r"^sample 0, position 1: .* got 2.5 \(float\)$"),
        (lambda: pack([[1, "a"]], 4), r"^sample 0, position 1: .* got 'a' \(str\)$"),
        (
            lambda: pack([{"input_ids": [1, 2], "loss_mask": [1, 0.5]}], 4),
            r"^sample 0, 'loss_mask', position 1: .* got 0.5 \(float\)$",
        ),
        (lambda: plan([1, 2.5], 4), r"^lengths\[1\]: expected a non-negative integer, got 2.5 \(float\)$"),
    ],
    ids=["float token", "str token", "float mask value", "float length"],
)
def test_error_names_the_position_of_the_bad_item_among_integers(call: Callable[[], object], message: str) -> None:
    with pytest.raises((SampleError, SettingError), match=message) as error:
        call()
    if isinstance(error.value, SampleError):
        assert (error.value.sample, error.value.position) == (0, 1)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: pack([[1, 2**70]], 4),
            r"^sample 0, position 1: expected a token id that fits in 64 bits, got 1180591620717411303424$",
        ),
        (lambda: pack([[1], [2**64]], 4), r"^sample 1, position 0: .*64 bits, got 18446744073709551616$"),
        (lambda: pack([[2**63, -1]], 4), r"^sample 0, position 0: .*64 bits, got 9223372036854775808$"),
        (lambda: pack([np.array([1, 2**63], dtype=np.uint64)], 4), r"^sample 0, position 1: .*64 bits"),
        (
            lambda: pack([[1]], 4, pad_token_id=2**70),
            r"^pad_token_id: expected an integer that fits in 64 bits, got 1180591620717411303424$",
        ),
    ],
    ids=["token 2**70", "token 2**64", "2**63 next to a negative", "uint64 array", "pad 2**70"],
)
def test_token_ids_too_large_for_int64_are_refused_clearly(call: Callable[[], object], message: str) -> None:
    with pytest.raises((SampleError, SettingError), match=message):
        call()


@pytest.mark.parametrize(
    ("sample", "message"),
    [
        (np.array(5), r"^sample 1: expected a flat list of token ids, got <an array of shape \(\)>$"),
        ({"input_ids": np.array(5)}, r"^sample 1, 'input_ids': expected a flat list of token ids, got <an array"),
        (
            {"input_ids": [5], "loss_mask": np.array(1)},
            r"^sample 1, 'loss_mask': expected a flat list of 0/1 values, got <an array of shape \(\)>$",
        ),
    ],
    ids=["sample", "input_ids", "loss_mask"],
)
def test_zero_dimensional_arrays_are_reported_by_sample_index(sample: Any, message: str) -> None:
    with pytest.raises(SampleError, match=message) as error:
        pack([[1], sample], 4)
    assert (error.value.sample, error.value.position) == (1, None)


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
        (lambda: pack([[1, np.True_]], 4), rf"^sample 0, position 1: {TOKEN}, got (np\.)?True_? \(bool\)$"),
        (
            lambda: pack([{"input_ids": [1, np.False_]}], 4),
            rf"^sample 0, 'input_ids', position 1: {TOKEN}, got (np\.)?False_? \(bool\)$",
        ),
        (
            lambda: plan([2, np.True_], 4),
            r"^lengths\[1\]: expected a non-negative integer, got (np\.)?True_? \(bool\)$",
        ),
    ],
    ids=["token", "input_ids", "length"],
)
def test_numpy_bool_among_integers_is_refused(call: Callable[[], object], message: str) -> None:
    with pytest.raises((SampleError, SettingError), match=message):
        call()


@pytest.mark.parametrize(
    ("lengths", "message"),
    [([2**63], r"lengths\[0\]"), ([3, 2**64], r"lengths\[1\]")],
    ids=["2**63", "2**64"],
)
def test_lengths_too_large_for_int64_are_refused(lengths: list[int], message: str) -> None:
    with pytest.raises(
        SettingError, match=rf"^{message}: expected an integer that fits in 64 bits, got {lengths[-1]}$"
    ):
        plan(lengths, 4)
    with pytest.raises(SettingError, match=rf"^{message}: expected an integer that fits in 64 bits"):
        lower_bounds(lengths, 4)


def test_sizes_past_the_int32_pieces_are_refused() -> None:
    with pytest.raises(SettingError, match=r"^max_seq_length: expected at most 16,777,216, got 33554432$"):
        plan([3], 2**25)
    with pytest.raises(SettingError, match=r"^overflow: expected 'split' of sequences of at most 2,147,483,647 tokens"):
        plan([2**31 + 10], 2**20, strategy="bfd", overflow="split")
    truncated = plan([3 * 10**9], 2**20, strategy="bfd")  # truncation keeps offsets at 0: no limit needed
    assert truncated.piece_length.tolist() == [2**20]
    assert truncated.stats.tokens_truncated == 3 * 10**9 - 2**20


def test_every_flag_has_one_meaning_a_boolean_numpys_too() -> None:
    """One check for flags (``packing.core._validation.check_flag``): ``numpy.bool_`` is a boolean at every door,
    and 1 is not."""
    import numpy as np

    import packing
    from packing.core._validation import check_flag

    assert check_flag(np.True_, "x") is True and check_flag(False, "x") is False
    rows = [[1, 2], [3]]
    assert packing.read_rows(rows, completion_only_loss=np.False_).tokens.tolist() == [1, 2, 3]
    assert packing.Recipe(4, int64=np.True_).int64 is True
    assert len(list(packing.stream(rows, 4, shuffle=np.False_))) == 1
    for call in (
        lambda: packing.read_rows(rows, completion_only_loss=1),
        lambda: packing.Recipe(4, int64=1),
        lambda: list(packing.stream(rows, 4, shuffle=1)),
    ):
        with pytest.raises(packing.SettingError, match="expected True or False"):
            call()
