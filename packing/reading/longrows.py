"""Rows too long to hold as Python values: a JSON line or a CSV cell of millions of token ids, whose lists of
integers are parsed straight from the bytes into int64 arrays (8 bytes an id, not a Python int's 28 and a list's
8), one compiled pass each. What they give the reader is what it reads of the same rows parsed by ``json`` (the
same samples, the same errors); anything else in them is parsed as before. Internal.

>>> row = json_line(b'{"input_ids": [1, 2, 3], "note": "x"}', "d.jsonl", "line 1", least=0)
>>> row["input_ids"].tolist(), row["note"]
([1, 2, 3], 'x')
>>> id_cell(" [1, 2,3] ", least=0).tolist()
[1, 2, 3]
"""

from __future__ import annotations

import json
import secrets
from typing import Any

import numpy as np
import numpy.typing as npt
from numba import njit

from packing.core.arrays import compile_for
from packing.core.forms import LABELS, MASK_FIELDS, TEXT_FIELDS, TOKEN_FIELDS
from packing.errors import DatasetError

Int64Array = npt.NDArray[np.int64]
LONG_LINE = 1 << 20
"""Bytes from which a JSON line is parsed here: its long lists of integers straight into arrays."""
LONG_LIST = 1 << 12
"""Bytes from which a list of integers of a long line (or a CSV cell) becomes an array; shorter ones stay lists."""
_ARRAY_FIELDS = frozenset((*TOKEN_FIELDS, *MASK_FIELDS, LABELS))
"""The columns whose lists of integers the reader reads as it reads arrays (ids, masks, labels)."""
_MAX_DEPTH = 128
BLANK = object()
"""What :func:`json_line` gives for a line of white space only (skipped, as a short one is)."""


@njit(cache=True, nogil=True)
def _plain_lists(data: npt.NDArray[np.uint8], start: int, stop: int, least: int) -> Int64Array:  # pragma: no cover
    """``(open, close)`` of every list in ``data[start:stop]`` (JSON, scanned) holding nothing but digits, minus
    signs, commas and white space, at least ``least`` bytes long; brackets inside strings do not count. O(bytes)."""
    found = np.empty((16, 2), dtype=np.int64)
    count = 0
    opens = np.empty(_MAX_DEPTH, dtype=np.int64)
    plain = np.zeros(_MAX_DEPTH, dtype=np.bool_)
    depth = 0
    in_string = False
    escaped = False
    for i in range(start, stop):
        c = data[i]
        if in_string:
            if escaped:
                escaped = False
            elif c == 92:
                escaped = True
            elif c == 34:
                in_string = False
            continue
        if c == 34:
            in_string = True
            if depth:
                plain[depth - 1] = False
        elif c == 91 or c == 123:
            if depth:
                plain[depth - 1] = False
            if depth == _MAX_DEPTH:
                return found[:count]
            opens[depth] = i
            plain[depth] = c == 91
            depth += 1
        elif c == 93 or c == 125:
            if depth:
                depth -= 1
                if c == 93 and plain[depth] and i - opens[depth] >= least:
                    if count == len(found):
                        grown = np.empty((2 * count, 2), dtype=np.int64)
                        grown[:count] = found
                        found = grown
                    found[count, 0] = opens[depth]
                    found[count, 1] = i
                    count += 1
        elif depth and not (48 <= c <= 57 or c == 45 or c == 44 or c == 32 or c == 9 or c == 13):
            plain[depth - 1] = False
    return found[:count]


@njit(cache=True, nogil=True)
def _integers(
    data: npt.NDArray[np.uint8], start: int, stop: int, json_rules: bool
) -> tuple[bool, Int64Array]:  # pragma: no cover
    """The integers of ``data[start:stop]`` and whether they are exactly a list's: JSON's (``json_rules``: commas
    between, white space around, no sign but ``-``, no leading zero) or a CSV cell's (any run of commas and white
    space between, a sign ``+`` or ``-``, at most 20 digits as the cell reader takes them); each within int64, else
    not. O(bytes)."""
    separators = 0  # runs of separators: an upper bound on the integers less one
    apart = False
    for i in range(start, stop):
        between = data[i] == 44 or (not json_rules and (data[i] == 32 or 9 <= data[i] <= 13))
        separators += between and not apart
        apart = between
    values = np.empty(separators + 1, dtype=np.int64)
    count = 0
    i = start
    limit = np.int64(922337203685477580)  # (2**63 - 1) // 10
    while True:
        while i < stop and (
            data[i] == 32
            or data[i] == 9
            or data[i] == 13
            or (not json_rules and (10 <= data[i] <= 12 or data[i] == 44))
        ):
            i += 1
        if i == stop:
            if json_rules and count > 0:
                return False, values[:count]  # a comma before the end
            return True, values[:count]
        negative = False
        if data[i] == 45 or (not json_rules and data[i] == 43):
            negative = data[i] == 45
            i += 1
        first = i
        value = np.int64(0)
        while i < stop and 48 <= data[i] <= 57:
            digit = np.int64(data[i] - 48)
            if value > limit or (value == limit and digit > 7):
                return False, values[:count]
            value = value * 10 + digit
            i += 1
        digits = i - first
        if digits == 0 or (json_rules and digits > 1 and data[first] == 48):
            return False, values[:count]
        values[count] = -value if negative else value
        count += 1
        if not json_rules:  # a CSV cell: a separator (white space or a comma) or the end after each integer
            if i < stop and not (data[i] == 44 or data[i] == 32 or 9 <= data[i] <= 13):
                return False, values[:count]
            continue
        while i < stop and (data[i] == 32 or data[i] == 9 or data[i] == 13):
            i += 1
        if i == stop:
            return True, values[:count]
        if data[i] != 44:
            return False, values[:count]
        i += 1


def parse_json(text: str, label: str, where: str | None) -> Any:
    """One JSON value (already scanned); a syntax error names the line and character."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        place = where or f"line {error.lineno}"
        raise DatasetError(label, f"{place}, character {error.colno}", f"invalid JSON ({error.msg})") from None
    except RecursionError:
        raise DatasetError(label, where, "JSON nested too deeply") from None
    except ValueError:  # an integer of thousands of digits
        raise DatasetError(label, where, "a number too long to read (more than 4,300 digits)") from None


def _replace(value: Any, arrays: dict[str, Int64Array], as_arrays: bool) -> Any:
    """``value`` (a parsed skeleton) with each marker string replaced by its array (``as_arrays``) or list.
    O(the skeleton's values)."""
    if isinstance(value, str):
        found = arrays.get(value)
        if found is None:
            return value
        return found if as_arrays else found.tolist()
    if isinstance(value, list):
        return [_replace(item, arrays, as_arrays) for item in value]
    if isinstance(value, dict):
        return {key: _replace(item, arrays, as_arrays) for key, item in value.items()}
    return value


def _token_row(skeleton: Any, arrays: dict[str, Int64Array]) -> bool:
    """Whether the reader reads the arrays of this row as it reads their lists: a bare list of ids, or an object
    whose arrays are all values of its id, mask and label columns and that is no text row. O(keys)."""
    if isinstance(skeleton, str):
        return skeleton in arrays
    if not isinstance(skeleton, dict):
        return False
    if any(skeleton.get(field) is not None for field in TEXT_FIELDS):
        return False
    for field in ("prompt", "completion"):
        if isinstance(skeleton.get(field), str) and skeleton[field] not in arrays:
            return False  # text: the pair is a text row
    placed = sum(
        1 for key, value in skeleton.items() if key in _ARRAY_FIELDS and isinstance(value, str) and value in arrays
    )
    return placed == len(arrays)


def json_line(data: Any, label: str, place: str, least: int | None = None) -> Any:
    """One JSON line (its bytes, scanned), as ``json.loads`` gives it but for its lists of integers of at least
    ``least`` bytes (default :data:`LONG_LIST`), which are int64 arrays when the reader reads them as it reads lists (ids, masks, labels of a
    token row), else lists; the line's other values are parsed by ``json`` from a copy of the line without those
    lists. A line ``json`` would refuse, or a list that is not exactly JSON integers within int64, is parsed whole
    by ``json`` (the same value and the same error as before). O(bytes); memory: the arrays and the rest.

    >>> json_line(b'[0, 1, 2]', "d.jsonl", "line 1", least=0).dtype.name
    'int64'
    >>> json_line(b'{"text": [1, 2]}', "d.jsonl", "line 1", least=0)
    {'text': [1, 2]}
    """
    least = LONG_LIST if least is None else least
    arrays: dict[str, Int64Array] = {}
    pieces: list[bytes] = []
    nonce = secrets.token_hex(8)
    view = np.frombuffer(data, dtype=np.uint8)  # over the caller's buffer: gone before this returns or raises
    try:
        end = len(view)
        while end and view[end - 1] in (10, 13):
            end -= 1
        at = 0
        compile_for(_plain_lists, view, 0, end, least)  # never compiled on the caller's buffer
        compile_for(_integers, view, 0, end, True)  # the types of every call below
        for open_, close in _plain_lists(view, 0, end, least).tolist():
            ok, values = _integers(view, open_ + 1, close, True)
            if not ok:
                continue
            marker = f"packing {nonce} {len(arrays)}"
            arrays[marker] = values
            pieces += [bytes(view[at:open_]), f'"{marker}"'.encode()]
            at = close + 1
        if arrays:
            pieces.append(bytes(view[at:end]))
    finally:
        del view
    if not arrays:
        return _whole(data, label, place)
    try:
        skeleton = json.loads(b"".join(pieces).decode("utf-8-sig"))
    except (ValueError, RecursionError):  # not UTF-8, or not JSON: the line's own error, as a whole line's
        return _whole(data, label, place)
    return _replace(skeleton, arrays, _token_row(skeleton, arrays))


def _whole(data: Any, label: str, place: str) -> Any:
    """The line parsed by ``json`` as a short one is (:data:`BLANK` if it is white space only). O(bytes)."""
    try:
        text = bytes(data).decode("utf-8-sig")
    except UnicodeDecodeError:
        raise DatasetError(label, place, "not valid UTF-8 text") from None
    return parse_json(text.rstrip("\r\n"), label, place) if text.strip() else BLANK


def id_cell(cell: str, least: int | None = None) -> Int64Array | None:
    """A CSV cell of at least ``least`` characters holding a list of integers (``1 2 3`` or ``[1, 2, 3]``: runs of
    white space and commas between, a sign allowed) as an int64 array, or None: a shorter cell, or one holding
    anything else (a word, a number past int64), which the cell reader reads as it did. O(characters).

    >>> id_cell("1 x", least=0) is None, id_cell("1 2", least=8)
    (True, None)
    """
    stripped = cell.strip()
    if len(stripped) < (LONG_LIST if least is None else least) or not stripped.isascii():
        return None
    if stripped.startswith("[") and stripped.endswith("]"):
        stripped = stripped[1:-1]
    view = np.frombuffer(stripped.encode("ascii"), dtype=np.uint8)
    ok, values = _integers(view, 0, len(view), False)
    return values if ok else None
