"""Text cells (CSV) read as row values: lists of ids or flags, integers, text, JSON. Internal."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from packing.errors import DatasetError, SampleError
from packing.reading.limits import scan_json
from packing.reading.longrows import id_cell

if TYPE_CHECKING:  # pragma: no cover - typing only
    pass
from packing.core.forms import LABELS, MASK_FIELDS, TOKEN_FIELDS

CELLS: dict[str, Literal["ids", "flags", "integer", "text", "json"]] = {
    **dict.fromkeys((*TOKEN_FIELDS, LABELS, "chosen", "rejected"), "ids"),
    **dict.fromkeys((*MASK_FIELDS, "chosen_mask", "rejected_mask"), "flags"),
    "length": "integer",
    "text": "text",
    **dict.fromkeys(("messages", "completions", "completion_masks"), "json"),
}
"""What a text cell (CSV) of each column holds: a list of ids or of 0/1 flags (``1 2 3`` or ``[1, 2, 3]``), an
integer, text, or JSON (messages; a group's completions and their masks, lists of lists). ``prompt``,
``completion``, ``chosen`` and ``rejected`` hold text when a tokenizer is given."""
TEXT_CELLS = ("prompt", "completion", "chosen", "rejected")
"""The columns whose cells are text when a tokenizer is given."""
JSON_WORDS = {"messages": "a list of messages", "completions": "a list of completions"}
"""What each JSON column holds, as its errors say (default: a list of masks)."""
_INTEGER = re.compile(r"[+-]?\d{1,20}")
_SEPARATORS = re.compile(r"[\s,]+")


# ---------------------------------------------------------------- one row, from text cells (CSV)


def _number(part: str) -> int | str:
    """An integer when ``part`` is one of at most 20 digits; the text itself otherwise (the reader names it)."""
    return int(part) if _INTEGER.fullmatch(part) else part


def _json_cell(cell: str, index: int, field: str) -> Any:
    """The JSON value a cell holds, scanned for nesting before it is parsed; a SampleError otherwise."""
    expected = f"JSON text ({JSON_WORDS.get(field, 'a list of masks')})"
    try:
        scan_json(cell.encode("utf-8", "surrogatepass"), field)
        return json.loads(cell)
    except DatasetError as error:
        raise SampleError(index, field, None, expected, f"<{error.reason}>") from None
    except (ValueError, RecursionError):
        raise SampleError(index, field, None, expected, cell) from None


def cells_row(cells: Mapping[str, str], index: int = 0, *, text: bool = False) -> dict[str, Any]:
    """A row from text cells (a CSV line), each read as :data:`CELLS` says; other columns are left out, an
    empty cell is a null. With ``text``, ``prompt`` and ``completion`` cells are text. O(characters).

    >>> cells_row({"input_ids": " [1, 2,3] ", "prompt": "", "length": "7", "note": "x"})
    {'input_ids': [1, 2, 3], 'prompt': None, 'length': 7}
    >>> cells_row({"prompt": "Hi", "completion": "there"}, text=True)
    {'prompt': 'Hi', 'completion': 'there'}
    >>> cells_row({"prompt": "1 2", "completions": "[[3], [4, 5]]"})
    {'prompt': [1, 2], 'completions': [[3], [4, 5]]}
    """
    row: dict[str, Any] = {}
    for column, cell in cells.items():
        kind = CELLS.get(column)
        stripped = cell.strip()
        if kind is None:
            continue
        if not stripped:
            row[column] = None
        elif kind == "text" or (text and column in TEXT_CELLS):
            row[column] = cell
        elif kind == "json":
            row[column] = _json_cell(cell, index, column)
        elif kind == "integer":
            row[column] = _number(stripped)
        elif (values := id_cell(stripped)) is not None:  # a long list of integers: an array, not Python ints
            row[column] = values
        else:
            inner = stripped[1:-1] if stripped.startswith("[") and stripped.endswith("]") else stripped
            row[column] = [_number(part) for part in _SEPARATORS.split(inner) if part]
    return row
