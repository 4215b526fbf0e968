"""Argument checks shared by every entry point.

Each check raises :class:`packing.errors.SettingError` with the argument's name,
what was expected and what was found, so a caller never has to read a traceback
to fix their input.

Internal: the public names are in ``packing`` and ``packing.core``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from numbers import Integral, Real
from typing import Any, Literal, TypeGuard

import numpy as np
import numpy.typing as npt

from packing.core._arrays import offsets_of, row_at
from packing.errors import DatasetError, SettingError, StateMismatch, quote

Int64Array = npt.NDArray[np.int64]


OverflowPolicy = Literal["truncate", "split", "drop", "error"]
"""What happens to a sequence longer than ``max_seq_length``."""
OVERFLOW_POLICIES: dict[str, str] = {
    "truncate": "keep the first max_seq_length tokens of an over-long sequence",
    "split": "cut an over-long sequence into pieces of at most max_seq_length, each its own document",
    "drop": "leave an over-long sequence out",
    "error": "refuse an over-long sequence: an error naming the sample and its length (torchtune's rule)",
}


INT64_MAX = int(np.iinfo(np.int64).max)
INT64_MIN = -INT64_MAX - 1
INT32_MAX = int(np.iinfo(np.int32).max)
"""The largest int32 (2**31 - 1): the largest token id and sequence index of the compact schema."""


def has_bools(values: Iterable[Any]) -> bool:
    """True if a list holds Python or numpy booleans (numpy would read them as 0 and 1). O(n), in C."""
    return not {bool, np.bool_}.isdisjoint(map(type, values))


def is_integer(value: object) -> TypeGuard[int | np.integer[Any]]:
    """An integer, Python's or numpy's, and not a bool (numpy's neither): the one test of an integer. O(1).

    >>> is_integer(3), is_integer(np.int8(3)), is_integer(True), is_integer(3.0)
    (True, True, False, False)
    """
    return isinstance(value, Integral) and not isinstance(value, (bool, np.bool_))


def is_number(value: object) -> TypeGuard[float | int | np.number[Any]]:
    """A real number, Python's or numpy's, and not a bool. O(1).

    >>> is_number(0.5), is_number(np.float32(2)), is_number(np.True_), is_number("1")
    (True, True, False, False)
    """
    return isinstance(value, Real) and not isinstance(value, (bool, np.bool_))


def integer_words(least: int = 1, optional: bool = False) -> str:
    """What an integer of at least ``least`` is called in messages (``optional``: None is taken too). O(1).

    >>> integer_words(), integer_words(0), integer_words(INT64_MIN), integer_words(1, optional=True)
    ('an integer >= 1', 'a non-negative integer', 'an integer', 'None or an integer >= 1')
    """
    words = "a non-negative integer" if least == 0 else "an integer" if least <= INT64_MIN else f"an integer >= {least}"
    return f"None or {words}" if optional else words


def check_integer(
    value: Any, name: str, least: int = 1, most: int | None = None, optional: bool = False, context: str = ""
) -> int:
    """Return ``value`` as an ``int`` if it is an integer (bools and floats refused) in ``[least, most]``: the one
    check of an integer option. Else a ``SettingError`` naming ``name`` that expects :func:`integer_words`
    (then ``context``) or, above ``most``, ``at most {most}`` (an integer that fits in 64 bits, outside int64's
    range). ``optional`` words it as taking None (the caller lets None by). O(1).

    >>> check_integer(4, "max_sequences_per_block")
    4
    >>> check_integer(4.0, "max_sequences_per_block")
    Traceback (most recent call last):
    ...
    packing.errors.SettingError: max_sequences_per_block: expected an integer >= 1, got 4.0 (float)
    >>> check_integer(-1, "seed", least=0)
    Traceback (most recent call last):
    ...
    packing.errors.SettingError: seed: expected a non-negative integer, got -1
    """
    if not is_integer(value) or (value < least and least > INT64_MIN):
        raise SettingError(name, integer_words(least, optional) + context, value)
    number = int(value)
    if number < least or (most is not None and number > most):
        bound = "an integer that fits in 64 bits" if most is None or most >= INT64_MAX else f"at most {most:,}"
        raise SettingError(name, bound, value)
    return number


MAX_SEQ_LENGTH = 2**24
"""The longest block supported (16,777,216 tokens): strategies keep a few arrays indexed by room left."""


def check_state_form(state: Any, form: str, keys: Iterable[str], what: str) -> None:
    """Refuse a saved state that is not a mapping of format ``form`` holding every key of ``keys``: another format
    is a ``StateMismatch``, a missing key a ``SettingError`` expecting ``what`` with it. The one check of a state's
    form (the sampler's and the stream's). O(keys).

    >>> check_state_form({"format": "x/1"}, "x/1", ["format", "step"], "a saved x")
    Traceback (most recent call last):
    ...
    packing.errors.SettingError: state: expected a saved x (with 'step'), got <a dict without it>
    """
    found = state.get("format") if isinstance(state, Mapping) else None
    if not isinstance(found, str) or found != form:
        raise StateMismatch("format", form, quote(found if isinstance(state, Mapping) else type(state).__name__))
    missing = [key for key in keys if key not in state]
    if missing:
        raise SettingError("state", f"{what} (with '{missing[0]}')", "<a dict without it>")


def integer_list(value: Any, name: str, what: str, least: int = 0, most: int = INT64_MAX) -> npt.NDArray[np.int64]:
    """``value`` (a list, tuple or 1-D array of integers, each in ``[least, most]``) as an int64 array: the one
    check of the integer lists a saved state holds. Else a ``SettingError`` naming ``name`` that expects
    ``what`` (a list of integers from ``least`` up to ``most``) and shows the first value out of range. O(len(value)).

    >>> integer_list([3, 0, 2], "state", "the lengths").tolist()
    [3, 0, 2]
    >>> integer_list([3, -1], "state", "the lengths")
    Traceback (most recent call last):
    ...
    packing.errors.SettingError: state: expected the lengths (a list of non-negative integers), got -1
    >>> integer_list([3, True], "state", "the lengths")
    Traceback (most recent call last):
    ...
    packing.errors.SettingError: state: expected the lengths (a list of non-negative integers), got True (bool)
    """
    words = "non-negative integers" if least == 0 else f"integers >= {least:,}"
    expected = f"{what} (a list of {words}{f' up to {most:,}' if most < INT64_MAX else ''})"
    array = None
    if isinstance(value, (list, tuple, np.ndarray)):
        try:
            array = np.asarray(value)
        except (TypeError, ValueError, OverflowError):  # ragged or unconvertible: not a list of integers
            array = None
    if array is None or array.ndim != 1 or (array.size and array.dtype.kind not in "iu"):
        got = value if array is None or array.ndim != 1 else f"<a list of {str(array.dtype)[:12]}>"
        raise SettingError(name, expected, got)
    if not isinstance(value, np.ndarray) and any(type(item) is bool for item in value):  # numpy reads True as 1
        raise SettingError(name, expected, next(item for item in value if type(item) is bool))
    if array.size:
        outside = np.flatnonzero((array < least) | (array > most))
        if outside.size:
            raise SettingError(name, expected, int(array[outside[0]]))
    return array.astype(np.int64)


def check_max_seq_length(value: Any) -> int:
    """Return ``max_seq_length`` as an ``int`` if it is an integer in [1, MAX_SEQ_LENGTH].

    >>> check_max_seq_length(4096)
    4096
    >>> check_max_seq_length(True)
    Traceback (most recent call last):
    ...
    packing.errors.SettingError: max_seq_length: expected an integer >= 1, got True (bool)
    >>> check_max_seq_length(2**40)
    Traceback (most recent call last):
    ...
    packing.errors.SettingError: max_seq_length: expected at most 16,777,216, got 1099511627776
    """
    return check_integer(value, "max_seq_length", most=MAX_SEQ_LENGTH)


def check_time_limit(value: Any) -> float:
    """Return ``time_limit`` as a ``float`` if it is a finite number of seconds > 0 (bools refused).

    The one rule for every entry point that takes a time limit (``plan``, ``packing.strategies._optimal.solve``).

    >>> check_time_limit(2)
    2.0
    >>> check_time_limit(float("nan"))
    Traceback (most recent call last):
    ...
    packing.errors.SettingError: time_limit: expected a finite number of seconds > 0, got nan (float)
    """
    if not is_number(value) or not math.isfinite(value) or value <= 0:
        raise SettingError("time_limit", "a finite number of seconds > 0", value)
    return float(value)


def check_token_id(value: Any, name: str) -> int:
    """Return ``value`` as an ``int`` if it is a non-negative integer that fits in 64 bits (bools refused). O(1)."""
    return check_integer(value, name, least=0, most=INT64_MAX)


def check_choice(value: Any, name: str, choices: Iterable[str]) -> str:
    """Return ``value`` if it is one of ``choices``; otherwise say which names exist."""
    options = list(choices)
    if not isinstance(value, str) or value not in options:
        raise SettingError(name, f"one of {', '.join(options)}", value)
    return value


_FLAT_LENGTHS = "a flat list of integers (one length per sample)"


def as_lengths(lengths: Sequence[int] | npt.ArrayLike) -> npt.NDArray[np.int64]:
    """Return sequence lengths as a new 1-D ``int64`` array, refusing anything but integers >= 0.

    >>> as_lengths([3, 0, 5]).tolist()
    [3, 0, 5]
    >>> as_lengths([3, -1])
    Traceback (most recent call last):
    ...
    packing.errors.SettingError: lengths[1]: expected a non-negative integer, got -1
    >>> as_lengths([[1, 2], [3]])  # rows where lengths were meant
    Traceback (most recent call last):
    ...
    packing.errors.SettingError: lengths: expected a flat list of integers (one length per sample), got [[1, 2], [3]] (list)
    """
    try:
        array = np.asarray(lengths) if not isinstance(lengths, np.ndarray) else lengths
    except (ValueError, TypeError):  # ragged rows, or objects numpy cannot hold
        raise SettingError("lengths", _FLAT_LENGTHS, lengths) from None
    if array.ndim != 1:
        if array.size == 0:
            return np.zeros(0, dtype=np.int64)
        raise SettingError("lengths", _FLAT_LENGTHS, f"<an array of shape {array.shape}>")
    if array.size == 0:
        return np.zeros(0, dtype=np.int64)
    # numpy converts a mixed list as a whole ([2, True] to ints, [1, 2.5] to floats): find the bad item
    given: Any = lengths
    too_big = array.dtype == np.uint64 and int(array.max()) > INT64_MAX
    if array.dtype.kind not in "iu" or too_big or (not isinstance(given, np.ndarray) and has_bools(given)):
        items = given.tolist() if isinstance(given, np.ndarray) else list(given)
        for index, value in enumerate(items):
            check_integer(value, f"lengths[{index}]", least=0, most=INT64_MAX)
        array = np.asarray(items, dtype=np.int64)
    if array.min() < 0:
        index = int(np.flatnonzero(array < 0)[0])
        raise SettingError(f"lengths[{index}]", integer_words(0), int(array[index]))
    return np.array(array, dtype=np.int64, copy=True)


def flag_values(values: npt.NDArray[Any], name: str, source: str, lengths: Int64Array) -> Int64Array:
    """Floating-point mask values as 0/1 integers; anything but 0 or 1 is refused, naming its row. O(values)."""
    bad = np.flatnonzero((values != 0) & (values != 1))
    if bad.size:
        row = row_at(offsets_of(lengths), int(bad[0]))
        raise DatasetError(source, f"row {row + 1}", f"column '{name}': expected 0 or 1, got {values[bad[0]]!r}")
    flags: Int64Array = (values != 0).astype(np.int64)
    return flags


def check_flag(value: Any, name: str) -> bool:
    """``value`` if it is True or False (``numpy.bool_`` too). O(1)."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise SettingError(name, "True or False", value)
