"""Argument checks shared by every entry point.

Each check raises ``TypeError`` (wrong kind of value) or ``ValueError`` (right
kind, wrong value) with a message that says where the problem is and what was
expected, so a caller never has to read a traceback to fix their input.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from numbers import Integral
from typing import Any

import numpy as np
import numpy.typing as npt

OVERFLOW_POLICIES: dict[str, str] = {
    "truncate": "keep the first max_seq_length tokens of an over-long sequence",
    "split": "cut an over-long sequence into pieces of at most max_seq_length, each its own document",
    "drop": "leave an over-long sequence out",
}


INT64_MAX = int(np.iinfo(np.int64).max)


def has_bools(values: Iterable[Any]) -> bool:
    """True if a list holds Python or numpy booleans (numpy would read them as 0 and 1). O(n), in C."""
    return not {bool, np.bool_}.isdisjoint(map(type, values))


def _type_name(value: object) -> str:
    return type(value).__name__


def check_positive_int(value: Any, name: str) -> int:
    """Return ``value`` as an ``int`` if it is an integer >= 1 (bools and floats refused).

    >>> check_positive_int(4, "max_sequences_per_block")
    4
    >>> check_positive_int(4.0, "max_sequences_per_block")
    Traceback (most recent call last):
    ...
    TypeError: max_sequences_per_block must be an integer >= 1, got 4.0 (float)
    """
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(f"{name} must be an integer >= 1, got {value!r} ({_type_name(value)})")
    if value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value}")
    return int(value)


MAX_SEQ_LENGTH = 2**24
"""The longest block supported (16,777,216 tokens): strategies keep a few arrays indexed by room left."""


def check_max_seq_length(value: Any) -> int:
    """Return ``max_seq_length`` as an ``int`` if it is an integer in [1, MAX_SEQ_LENGTH].

    >>> check_max_seq_length(4096)
    4096
    >>> check_max_seq_length(True)
    Traceback (most recent call last):
    ...
    TypeError: max_seq_length must be an integer >= 1, got True (bool)
    >>> check_max_seq_length(2**40)
    Traceback (most recent call last):
    ...
    ValueError: max_seq_length must be at most 16,777,216, got 1,099,511,627,776
    """
    capacity = check_positive_int(value, "max_seq_length")
    if capacity > MAX_SEQ_LENGTH:
        raise ValueError(f"max_seq_length must be at most {MAX_SEQ_LENGTH:,}, got {capacity:,}")
    return capacity


def check_token_id(value: Any, name: str) -> int:
    """Return ``value`` as an ``int`` if it is a non-negative integer (bools refused)."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(f"{name} must be a non-negative integer, got {value!r} ({_type_name(value)})")
    if value < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {value}")
    if int(value) > INT64_MAX:
        raise ValueError(f"{name} must fit in 64 bits, got {value}")
    return int(value)


def check_choice(value: Any, name: str, choices: Iterable[str]) -> str:
    """Return ``value`` if it is one of ``choices``; otherwise say which names exist."""
    options = list(choices)
    if not isinstance(value, str) or value not in options:
        raise ValueError(f"unknown {name} {value!r}; expected one of: {', '.join(options)}")
    return value


def as_lengths(lengths: Sequence[int] | npt.ArrayLike) -> npt.NDArray[np.int64]:
    """Return sequence lengths as a new 1-D ``int64`` array, refusing anything but integers >= 0.

    >>> as_lengths([3, 0, 5]).tolist()
    [3, 0, 5]
    >>> as_lengths([3, -1])
    Traceback (most recent call last):
    ...
    ValueError: lengths[1]: expected a non-negative integer, got -1
    """
    array = np.asarray(lengths) if not isinstance(lengths, np.ndarray) else lengths
    if array.ndim != 1:
        if array.size == 0:
            return np.zeros(0, dtype=np.int64)
        raise ValueError(f"lengths must be a flat list of integers, got an array of shape {array.shape}")
    if array.size == 0:
        return np.zeros(0, dtype=np.int64)
    # numpy converts a mixed list as a whole ([2, True] to ints, [1, 2.5] to floats): find the bad item
    given: Any = lengths
    too_big = array.dtype == np.uint64 and int(array.max()) > INT64_MAX
    if array.dtype.kind not in "iu" or too_big or (not isinstance(given, np.ndarray) and has_bools(given)):
        items = given.tolist() if isinstance(given, np.ndarray) else list(given)
        for index, value in enumerate(items):
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, Integral):
                raise TypeError(
                    f"lengths[{index}]: expected a non-negative integer, got {value!r} ({_type_name(value)})"
                )
            if int(value) > INT64_MAX:
                raise ValueError(f"lengths[{index}]: {value} does not fit in 64 bits")
        array = np.asarray(items, dtype=np.int64)
    if array.min() < 0:
        index = int(np.flatnonzero(array < 0)[0])
        raise ValueError(f"lengths[{index}]: expected a non-negative integer, got {array[index]}")
    return np.array(array, dtype=np.int64, copy=True)
