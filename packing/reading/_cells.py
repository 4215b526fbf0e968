"""Text cells (CSV) read as row values: lists of ids or flags, integers, text, JSON; a block of them at once by
``pyarrow.compute`` (:func:`cell_table`), one row by Python (:func:`cells_row`, for what the first refuses:
its errors name the column and position). Internal."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from packing.core._forms import IMAGE_GRIDS, LABELS, MASK_FIELDS, TOKEN_FIELDS
from packing.errors import DatasetError, SampleError
from packing.reading._limits import scan_json

if TYPE_CHECKING:  # pragma: no cover - typing only
    import pyarrow as pa

CELLS: dict[str, Literal["ids", "flags", "integer", "text", "json"]] = {
    **dict.fromkeys((*TOKEN_FIELDS, LABELS, "chosen", "rejected"), "ids"),
    **dict.fromkeys((*MASK_FIELDS, "chosen_mask", "rejected_mask"), "flags"),
    "length": "integer",
    "text": "text",
    **dict.fromkeys(("messages", "completions", "completion_masks", *IMAGE_GRIDS), "json"),
}
"""What a text cell (CSV) of each column holds: a list of ids or of 0/1 flags (``1 2 3`` or ``[1, 2, 3]``), an
integer, text, or JSON (messages; a group's completions and their masks, image grids: lists of lists). ``prompt``,
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
        else:
            inner = stripped[1:-1] if stripped.startswith("[") and stripped.endswith("]") else stripped
            row[column] = [_number(part) for part in _SEPARATORS.split(inner) if part]
    return row


def cell_table(table: pa.Table, wanted: list[str], text: bool = False) -> pa.Table:
    """A block of CSV rows (``table``: every cell a string) as the row values :func:`cells_row` gives, column by
    column: rows whose cells are all blank dropped, the ``wanted`` columns of :data:`CELLS` kept. A cell
    ``pyarrow.compute`` cannot read (JSON, a word among ids, a number past int64) raises, for
    :func:`cells_row` to name it. O(characters).

    >>> import pyarrow as pa
    >>> cell_table(pa.table({"input_ids": [" [1, 2,3] ", " ", "[]"], "length": ["7", "", "8"]}), ["input_ids", "length"]).to_pylist()
    [{'input_ids': [1, 2, 3], 'length': 7}, {'input_ids': [], 'length': 8}]
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    trimmed = [pc.utf8_trim_whitespace(column) for column in table.columns]
    keep = functools.reduce(pc.or_, [pc.not_equal(cells, "") for cells in trimmed])
    columns: dict[str, pa.Array] = {}
    for name, cells, raw in zip(table.column_names, trimmed, table.columns, strict=True):
        kind = CELLS.get(name)
        if name not in wanted or kind is None:
            continue
        empty = pc.equal(cells, "")
        if kind == "json":
            raise ValueError("JSON cells are read by cells_row")
        if kind == "text" or (text and name in TEXT_CELLS):
            values = pc.if_else(empty, None, raw)
        elif kind == "integer":
            values = pc.cast(pc.if_else(empty, None, cells), pa.int64())
        else:
            inner = pc.replace_substring_regex(cells, r"(?s)^\[(.*)\]$", r"\1")
            spaced = pc.utf8_trim(pc.replace_substring_regex(inner, r"[\s,]+", " "), " ")
            lists = pc.cast(pc.split_pattern(pc.if_else(pc.equal(spaced, ""), None, spaced), " "), pa.list_(pa.int64()))
            none = pa.scalar([], pa.list_(pa.int64()))
            values = pc.if_else(pc.and_(pc.is_null(lists), pc.invert(empty)), none, lists)
        columns[name] = values
    return pa.table(columns).filter(keep)
