"""transformers' ``DataCollatorWithFlattening``: ``input_ids``, ``labels`` (-100 at each example's first token),
``position_ids`` restarting at 0, no padding; optionally ``cu_seq_lens_q``/``cu_seq_lens_k`` and ``seq_idx``.
A collator's batch (arrays of shape ``(1, T)``) is read as one block; with ``return_position_ids=False`` it holds
``input_ids`` and ``labels`` alone, and nothing marks where an example ends (the model sees one sequence). Position
ids that restart in no block at all (``0..T-1`` everywhere) mark no boundary either: documents run together
(TRL's ``wrapped``) look the same.

>>> from packing import pack
>>> write(Rows(pack([[1, 2], [3]], 4), None)).to_pydict()
{'input_ids': [[1, 2, 3]], 'labels': [[-100, 2, -100]], 'position_ids': [[0, 1, 0]]}
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from packing.layouts.common import (
    IGNORE_INDEX,
    BoolArray,
    Int64Array,
    PackedLayout,
    Parsed,
    Rows,
    check_lengths,
    error,
    from_starts,
    is_collated,
    list_column,
    mismatch,
    positions_mark_nothing,
    required,
    row_of,
    values_of,
)

if TYPE_CHECKING:  # pragma: no cover - typing only
    import pyarrow as pa

NAME = "flattening"
TITLE = "transformers DataCollatorWithFlattening"


def recognises(names: set[str], table: pa.Table) -> bool:
    """Whether the columns are the collator's: ``input_ids`` with ``position_ids`` or ``cu_seq_lens_q``, or a
    collator's one-row batch of ``input_ids`` and ``labels`` alone (``return_position_ids=False``)."""
    if "input_ids" not in names:
        return False
    if {"position_ids", "cu_seq_lens_q"} & names:
        return True
    return is_collated(table) and names <= {"input_ids", "labels"} and table.num_rows == 1


def write(rows: Rows) -> pa.Table:
    """``input_ids``, ``labels`` and ``position_ids`` of the real tokens. O(tokens)."""
    import pyarrow as pa

    batch = rows.batch
    return pa.table(
        {
            "input_ids": rows.real_column(batch.input_ids, rows.id_type()),
            "labels": rows.real_column(batch.labels, rows.id_type()),
            "position_ids": rows.real_column(batch.position_ids, rows.id_type()),
        }
    )


def _cu_starts(
    table: pa.Table, name: str, offsets: Int64Array, source: str
) -> tuple[BoolArray, list[Int64Array]] | None:
    """Document starts from a ``cu_seqlens``-like column (per row: 0, ends...), and the rows that disagree."""
    column = list_column(table, name, source)
    if column is None:
        return None
    if len(column.lengths) != len(offsets) - 1:
        raise error(source, f"column '{name}' has {len(column.lengths)} rows, expected {len(offsets) - 1}")
    total = int(offsets[-1])
    row_length = np.diff(offsets)
    entry_row = np.repeat(np.arange(len(column.lengths), dtype=np.int64), column.lengths)
    value = column.values
    local_ok = (value >= 0) & (value < row_length[entry_row])
    starts = np.zeros(total, dtype=bool)
    starts[(offsets[:-1][entry_row] + value)[local_ok]] = True
    last = column.offsets[1:] - 1
    has = column.lengths > 0
    bad_rows = np.zeros(len(row_length), dtype=bool)
    bad_rows[has] = value[last[has]] != row_length[has]
    bad_rows[~has] = row_length[~has] > 0
    bad_rows |= np.bincount(entry_row[~local_ok & (value != row_length[entry_row])], minlength=len(row_length)) > 0
    bad_rows &= row_length > 0
    cells = [offsets[np.flatnonzero(bad_rows)].astype(np.int64)] if bad_rows.any() else []
    return starts, cells


def read(table: pa.Table, source: str) -> Parsed:
    """The collator's columns as a :class:`PackedLayout`: documents from ``cu_seq_lens_q`` when given (position
    ids and ``seq_idx`` are then checked against them), else from position ids. O(tokens)."""
    tokens = required(table, "input_ids", source)
    offsets = tokens.offsets
    total = int(offsets[-1])
    columns = {name: list_column(table, name, source) for name in ("labels", "position_ids", "seq_idx")}
    for name, column in columns.items():
        check_lengths(column, name, tokens, "input_ids", source)
    positions = values_of(columns["position_ids"])
    bad: list[Int64Array] = []
    cu = _cu_starts(table, "cu_seq_lens_q", offsets, source)
    known = True
    if cu is not None:  # explicit boundaries first; position ids are then checked against them
        document = from_starts(offsets, cu[0], np.zeros(total, dtype=bool))
        bad.extend(cu[1])
        variant = "cu_seq_lens"
    elif positions is not None:
        document = from_starts(offsets, positions == 0, np.zeros(total, dtype=bool))
        variant = "position ids"
    else:
        document = row_of(offsets, total)
        known = False
        variant = "no position ids: no document boundaries"
    known_rows = np.full(len(tokens.lengths), known, dtype=bool)
    if cu is None and positions is not None and positions_mark_nothing(offsets, positions):
        known_rows[:] = False  # positions 0..T-1 in every block mark no boundary: documents may run together
        variant = "position ids that never restart: no document boundaries"
    seq_idx = columns["seq_idx"]
    if seq_idx is not None:
        changes = np.zeros(total, dtype=bool)
        changes[1:] = seq_idx.values[1:] != seq_idx.values[:-1]
        bad.append(mismatch(offsets, document, changes))
    labels = columns["labels"]
    layout = PackedLayout(
        "flattening",
        offsets,
        tokens.values,
        document,
        labels.values != IGNORE_INDEX if labels is not None else None,
        positions,
        None,
        values_of(labels),
        known_rows,
        variant,
    )
    return Parsed(layout, bad)
