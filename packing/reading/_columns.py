"""What each field of a row holds, stated once as a :class:`Rule` and checked on columns: a field's values of every
row one after another (:class:`Column`), made from an Arrow list column as it is (:func:`arrow_column`) or from
Python values (:func:`python_column`: numpy arrays joined, lists converted by pyarrow, and only what neither
takes scanned in Python, to name it). One value of a field (:func:`token_array`, :func:`length_array`, ...) is a
column of one row. A bad value is named by its row, field and position.

>>> column = python_column([[1, 2], None, [3, -1]], TOKENS, "input_ids")
>>> column.lengths.tolist(), str(column.error(TOKENS, "input_ids")[2])
([2, 0, 2], "sample 2, 'input_ids', position 1: expected a non-negative integer token id, got -1")

Internal: the reader of rows (:mod:`packing.reading._reader`) and of Arrow tables use it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from itertools import chain
from numbers import Real
from operator import attrgetter
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from packing.core._arrays import offsets_of, row_at
from packing.core._forms import FLAG, LABEL, LABELS, MASK_FIELDS, TOKEN, TOKEN_FIELDS
from packing.core._samples import IGNORE_INDEX, Int64Array, TokenArray, token_dtype
from packing.core._validation import INT64_MAX, INT64_MIN, is_integer
from packing.errors import SampleError


def as_numpy(value: Any) -> Any:
    """A tensor (torch's, or any array with ``__array__`` and ``ndim``, such as JAX's) as a numpy array on the
    host, so every door reads tensors as it reads lists; anything else as it is. O(length).

    >>> import torch
    >>> as_numpy(torch.tensor([1, 2])).tolist(), as_numpy([1, 2])
    ([1, 2], [1, 2])
    """
    if isinstance(value, (np.ndarray, np.generic)) or not (hasattr(value, "__array__") and hasattr(value, "ndim")):
        return value
    for step in ("detach", "cpu"):  # torch: off the autograd graph, onto the host
        method = getattr(value, step, None)
        if callable(method):
            value = method()
    return np.asarray(value)


def _items(value: Any, index: int | None, field: str | None, noun: str) -> list[Any]:
    """The items of a flat list, 1-D array or tensor; anything else refused as a whole. O(length)."""
    value = as_numpy(value)
    if isinstance(value, np.ndarray):
        if value.ndim != 1:
            raise SampleError(index, field, None, f"a flat list of {noun}s", f"<an array of shape {value.shape}>")
        return list(value.tolist())  # numbers as Python's, so a bad one is quoted as a list's would be
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence):
        raise SampleError(index, field, None, f"a list of {noun}s", value)
    return list(value)


class Rule(NamedTuple):
    """What every value of a field must be, the one statement of it for Python rows and Arrow columns alike:
    ``noun`` names a value (``a list of <noun>s``), ``item`` words one, ``kinds`` are the numpy kinds taken
    (``b`` booleans, ``f`` floats), ``least``/``most`` the bounds and ``also`` a value taken outside them,
    ``wide`` words an integer past 64 bits."""

    noun: str
    item: str
    kinds: str = "iu"
    least: int | None = 0
    most: int | None = None
    also: int | None = None
    wide: str | None = None


TOKENS = Rule("token id", TOKEN, wide="a token id that fits in 64 bits")
FLAGS = Rule("0/1 value", FLAG, "iub", most=1)
LABEL_VALUES = Rule("label", LABEL, also=IGNORE_INDEX)
LENGTHS = Rule("length", "a non-negative integer")
WEIGHTS = Rule("weight", "a finite number >= 0", "iuf")
IDS = Rule("integer", "an integer", least=None)
RULES = {**dict.fromkeys(TOKEN_FIELDS, TOKENS), **dict.fromkeys(MASK_FIELDS, FLAGS), LABELS: LABEL_VALUES}
"""The rule of each list field of the row forms."""


def _takes(rule: Rule, item: Any) -> bool:
    """Whether one Python item is of a kind ``rule`` takes (its bounds are checked on the column). O(1)."""
    if isinstance(item, (bool, np.bool_)):
        return "b" in rule.kinds
    if is_integer(item):
        return bool(INT64_MIN <= item <= INT64_MAX)
    return "f" in rule.kinds and isinstance(item, Real)


def _first_out(values: npt.NDArray[Any], rule: Rule) -> int | None:
    """The position of the first value out of ``rule``'s bounds (not finite, for floats), or None: a reduction
    per bound, and a temporary array only when a value is out. O(values)."""
    if not values.size or values.dtype.kind == "b":
        return None
    floats = values.dtype.kind == "f"
    low = values.min() if rule.least is not None or floats else 0
    high = values.max() if rule.most is not None or floats else 0
    inside = (rule.least is None or low >= rule.least) and (rule.most is None or high <= rule.most)
    if inside and (not floats or np.isfinite(high)):
        return None
    out = np.zeros(len(values), dtype=bool) if rule.least is None else values < rule.least
    if rule.most is not None:
        out |= values > rule.most
    if rule.also is not None:
        out &= values != rule.also
    if values.dtype.kind == "f":
        out |= ~np.isfinite(values)
    found = np.flatnonzero(out)
    return int(found[0]) if found.size else None


Where = Callable[[int, str], tuple["int | None", "str | None"]]
"""A row of a column and a field name as an error names them: the sample's number and the field (None for a bare
token list)."""


def as_named(row: int, field: str) -> tuple[int | None, str | None]:
    return row, field


class Column(NamedTuple):
    """One field of every row: the values one after another, each row's count (0 where null) and which rows are
    null; ``broken``: the first row whose value is not a list of the rule's kind, as ``(row, position, error)``
    (position -1: the value as a whole), the rows after it unread (no values)."""

    values: npt.NDArray[Any]
    lengths: Int64Array
    null: npt.NDArray[np.bool_]
    broken: tuple[int, int, SampleError] | None = None

    def error(self, rule: Rule, field: str, where: Where = as_named) -> tuple[int, int, SampleError] | None:
        """The first value ``rule`` refuses, as ``(row, position, error)``, or None. O(values)."""
        found = None
        position = _first_out(self.values, rule)
        if position is not None:
            offsets = offsets_of(self.lengths)
            row = int(row_at(offsets, position))
            item = self.values[position].item()
            sample, name = where(row, field)
            found = (
                row,
                position - int(offsets[row]),
                SampleError(sample, name, position - int(offsets[row]), rule.item, item),
            )
        if self.broken is not None and (found is None or self.broken[:2] <= found[:2]):
            return self.broken
        return found


def arrow_takes(kind: Any, rule: Rule) -> bool:
    """Whether the Arrow type ``kind`` is a list of values of a kind ``rule`` takes (a column of it is read
    without Python). O(1).

    >>> import pyarrow as pa
    >>> arrow_takes(pa.list_(pa.int32()), TOKENS), arrow_takes(pa.list_(pa.bool_()), TOKENS)
    (True, False)
    """
    import pyarrow as pa

    if not (pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind)):
        return False
    item = kind.value_type
    takes = pa.types.is_integer(item) or pa.types.is_null(item)
    return (
        takes or ("b" in rule.kinds and pa.types.is_boolean(item)) or ("f" in rule.kinds and pa.types.is_floating(item))
    )


def arrow_column(column: Any, rule: Rule) -> Column | None:
    """A ``pyarrow`` list column (array or chunked) as a :class:`Column`, or None when its type is not a list of
    the kinds ``rule`` takes, a list holds a null, or an unsigned value is past int64: read from Python then, where
    the value is named. O(values), zero-copy where Arrow's buffers allow."""
    import pyarrow as pa
    import pyarrow.compute as pc

    rows = len(column)
    if pa.types.is_null(column.type):
        return Column(np.zeros(0, dtype=np.int64), np.zeros(rows, dtype=np.int64), np.ones(rows, dtype=bool))
    values = pc.list_flatten(column) if arrow_takes(column.type, rule) else None
    if values is None or values.null_count:
        return None
    null = pc.is_null(column).to_numpy(zero_copy_only=False).astype(bool)
    lengths = pc.list_value_length(column).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    flat = values.to_numpy(zero_copy_only=False) if len(values) else np.zeros(0, dtype=np.int64)
    if flat.dtype.kind == "u" and flat.size and int(flat.max()) > INT64_MAX:
        return None
    return Column(flat, lengths, null)


def python_column(values: Sequence[Any], rule: Rule, field: str, where: Where = as_named) -> Column:
    """Each row's value of one field (None: null) as a :class:`Column`: 1-D numpy arrays joined, lists converted
    by ``pyarrow`` in C, and only where neither takes them, each row read in Python up to the first that is not a
    list of ``rule``'s kind. O(values).

    >>> python_column([[1, 2], None, [3]], TOKENS, "input_ids").lengths.tolist()
    [2, 0, 1]
    """
    import pyarrow as pa

    types = set(map(type, values))
    if not types <= {list, tuple, np.ndarray, type(None)}:
        values = [as_numpy(value) for value in values]  # tensors as their numpy views
        types = set(map(type, values))
    if types == {np.ndarray} and {a.ndim for a in values} == {1}:
        dtypes = set(map(attrgetter("dtype"), values))
        if all(dtype.kind in rule.kinds and dtype != np.uint64 for dtype in dtypes):  # joined without a float
            lengths = np.fromiter(map(len, values), dtype=np.int64, count=len(values))
            if len(dtypes) > 1:  # an empty array widens nothing: only the dtypes of arrays with values count
                dtypes = {value.dtype for value in values if value.size} or dtypes
            joined = np.result_type(*dtypes)
            flat = np.concatenate(values, dtype=joined, casting="unsafe")
            return Column(flat, lengths, np.zeros(len(values), dtype=bool))
    converted = None
    if types <= {list, tuple, np.ndarray, type(None)}:  # what pyarrow reads as Python does (not a set, a str)
        with suppress(pa.ArrowException, TypeError, ValueError, OverflowError):
            converted = arrow_column(pa.array(values, from_pandas=False), rule)
    if converted is None or _disguised(values, rule, converted):
        return _scanned(values, rule, field, where)
    return converted


def _disguised(values: Sequence[Any], rule: Rule, column: Column) -> bool:
    """Whether ``column`` (pyarrow's conversion of ``values``) hides a value ``rule`` refuses: an array of a
    refused kind, or numpy booleans among a Python list's numbers, which pyarrow reads as 0 and 1 (only the items
    read as 0 or 1 are looked at, unless they are many: then every item's type, in C). O(values).

    >>> python_column([[2, np.True_]], TOKENS, "input_ids").broken[2].position
    1
    """
    if not {value.dtype.kind for value in values if type(value) is np.ndarray} <= set(rule.kinds):
        return True
    flat = column.values
    if "b" in rule.kinds or not flat.size:
        return False
    suspects = np.flatnonzero((flat == 0) | (flat == 1))
    if len(suspects) > len(flat) // 8:
        lists = [value for value in values if type(value) is list or type(value) is tuple]
        return np.bool_ in set(map(type, chain.from_iterable(lists)))
    offsets = offsets_of(column.lengths)
    rows = row_at(offsets, suspects)
    at = zip(rows.tolist(), (suspects - offsets[rows]).tolist(), strict=True)
    return any(type(values[row][position]) is np.bool_ for row, position in at)


def _scanned(values: Sequence[Any], rule: Rule, field: str, where: Where) -> Column:
    """:func:`python_column` row by row in Python, up to the first row that is not a list of ``rule``'s kind,
    named in ``broken`` (its items from the bad one on read as 0). O(values)."""
    parts: list[npt.NDArray[Any]] = []
    lengths = np.zeros(len(values), dtype=np.int64)
    null = np.fromiter((value is None for value in values), dtype=bool, count=len(values))
    broken = None
    for row in np.flatnonzero(~null).tolist():
        sample, name = where(row, field)
        try:
            items = _items(values[row], sample, name, rule.noun)
        except SampleError as error:
            broken = (row, -1, error)
            break
        lengths[row] = len(items)
        position = next((at for at, item in enumerate(items) if not _takes(rule, item)), None)
        if position is not None:
            item = items[position]
            words = rule.wide if rule.wide and is_integer(item) and item > INT64_MAX else rule.item
            broken = (row, position, SampleError(sample, name, position, words, item))
            items = items[:position] + [0] * (len(items) - position)
        parts.append(np.array(items, dtype=np.float64 if "f" in rule.kinds else np.int64))
        if broken is not None:
            break
    flat = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    return Column(flat, lengths, null, broken)


def checked(
    value: Any, index: int | None, field: str | None, rule: Rule, length: int | None = None
) -> npt.NDArray[Any]:
    """One value of a field (a flat list, 1-D array or tensor) checked by ``rule``, with ``length`` items when
    given: the column check on a column of one row. O(length).

    >>> checked([1, 2], 0, "input_ids", TOKENS).tolist()
    [1, 2]
    >>> checked([1, -2], 4, "prompt", TOKENS)
    Traceback (most recent call last):
    ...
    packing.errors.SampleError: sample 4, 'prompt', position 1: expected a non-negative integer token id, got -2
    """
    named: Where = lambda _row, _field: (index, field)  # noqa: E731
    if value is None:
        raise SampleError(index, field, None, f"a list of {rule.noun}s", None)
    column = python_column([value], rule, field or "", named)
    found = column.error(rule, field or "", named)
    if found is not None and found[1] < 0:
        raise found[2]
    count = int(column.lengths[0])
    if length is not None and count != length:
        raise SampleError(index, field, None, f"{length} values (one per token)", f"<{count} values>")
    if found is not None:
        raise found[2]
    return column.values


def token_array(value: Any, index: int | None, field: str | None) -> TokenArray:
    """Check one list (or 1-D array) of token ids and return it as int32 (an array of at most 32-bit
    ids) or int64. O(length).

    >>> token_array([1, 2], 0, None).tolist()
    [1, 2]
    >>> token_array([1, True], 4, "prompt")
    Traceback (most recent call last):
    ...
    packing.errors.SampleError: sample 4, 'prompt', position 1: expected a non-negative integer token id, got True (bool)
    """
    array = checked(value, index, field, TOKENS)
    return array.astype(token_dtype([array.dtype]), copy=False)


def length_array(value: Any, index: int, field: str) -> npt.NDArray[np.int64]:
    """Check a list of lengths (non-negative integers) and return it as int64. O(length).

    >>> length_array([3, 0, 2], 0, "seq_lengths").tolist()
    [3, 0, 2]
    >>> length_array([3, 1.5], 2, "seq_lengths")
    Traceback (most recent call last):
    ...
    packing.errors.SampleError: sample 2, 'seq_lengths', position 1: expected a non-negative integer, got 1.5 (float)
    """
    return checked(value, index, field, LENGTHS).astype(np.int64, copy=False)


def weight_array(value: Any, index: int, field: str, length: int) -> npt.NDArray[np.float32]:
    """Check per-token weights (finite numbers >= 0, one per token) and return them as float32. O(length).

    >>> weight_array([0.5, 0], 0, "loss_weights", 2).tolist()
    [0.5, 0.0]
    >>> weight_array([0.5, float("nan")], 1, "loss_weights", 2)
    Traceback (most recent call last):
    ...
    packing.errors.SampleError: sample 1, 'loss_weights', position 1: expected a finite number >= 0, got nan (float)
    """
    return checked(value, index, field, WEIGHTS, length).astype(np.float32)


def id_array(value: Any, index: int, field: str, length: int) -> npt.NDArray[np.int64]:
    """Check per-token integers (such as ``sequence_ids``: -1 in padding), one per token, and return them as
    int64. O(length).

    >>> id_array([0, 0, -1], 0, "sequence_ids", 3).tolist()
    [0, 0, -1]
    """
    return checked(value, index, field, IDS, length).astype(np.int64, copy=False)
