"""transformers' ``DataCollatorWithFlattening``: ``input_ids``, ``labels`` (-100 at each example's first token),
``position_ids`` restarting at 0, no padding; optionally ``cu_seq_lens_q``/``cu_seq_lens_k`` and ``seq_idx``.
A collator's batch (arrays of shape ``(1, T)``) is read as one block; with ``return_position_ids=False`` it holds
``input_ids`` and ``labels`` alone, and nothing marks where an example ends (the model sees one sequence). Position
ids that restart in no block at all (``0..T-1`` everywhere) mark no boundary either: documents run together
(TRL's ``wrapped``) look the same. A THD batch of context parallelism (``collate(..., context_parallel_size=cp)``:
``cu_seqlens_padded`` next to ``cu_seq_lens_q``) is read with its documents at the padded boundaries, the rest of
each padded span as padding, and the two lists are checked against each other (``inconsistent_boundaries``).

>>> from packing import pack
>>> write(Rows(pack([[1, 2], [3]], 4))).to_pydict()
{'input_ids': [[1, 2, 3]], 'labels': [[-100, 2, -100]], 'position_ids': [[0, 1, 0]]}
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from packing.core._arrays import ranges, row_of
from packing.layouts.common import (
    BoolArray,
    Int64Array,
    PackedLayout,
    Parsed,
    Rows,
    error,
    from_starts,
    is_collated,
    list_column,
    mismatch,
    positions_mark_nothing,
    read_columns,
    real_weights,
    targets_of,
    values_of,
)

if TYPE_CHECKING:  # pragma: no cover - typing only
    import pyarrow as pa

NAME = "flattening"
TITLE = "transformers DataCollatorWithFlattening"
weights_column = real_weights


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
    entry_row = row_of(column.lengths)
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


def _thd(table: pa.Table, offsets: Int64Array, source: str) -> tuple[BoolArray, BoolArray, list[Int64Array]] | None:
    """The THD layout of context parallelism (``cu_seqlens_padded`` next to ``cu_seq_lens_q``): documents open at
    the padded boundaries and hold their real length, the rest of each padded span is padding. Returns the
    starts, the padding and the rows whose two lists disagree (another count of documents, a real document
    longer than its padded span, real boundaries not rising from 0, padded ones not ending the row); None
    without ``cu_seqlens_padded``. O(tokens)."""
    padded = _cu_starts(table, "cu_seqlens_padded", offsets, source)
    if padded is None:
        return None
    starts, bad = padded
    total = int(offsets[-1])
    padding = np.zeros(total, dtype=bool)
    real = list_column(table, "cu_seq_lens_q", source)
    spans = list_column(table, "cu_seqlens_padded", source)
    assert spans is not None
    if real is None:
        return starts, padding, bad
    rows = len(offsets) - 1
    if len(real.lengths) != rows:
        raise error(source, f"column 'cu_seq_lens_q' has {len(real.lengths)} rows, expected {rows}")
    same = real.lengths == spans.lengths
    bad_rows = ~same & (np.diff(offsets) > 0)
    entry = np.flatnonzero(np.repeat(same, spans.lengths))  # entries of the rows whose lists have one count
    last = np.zeros(len(spans.values), dtype=bool)
    last[spans.offsets[1:][spans.lengths > 0] - 1] = True
    doc = entry[~last[entry]]  # one entry per document: its start
    row = row_of(spans.lengths)[doc]
    real_at = real.offsets[:-1][row] + (doc - spans.offsets[:-1][row])  # the same place in the real list
    real_len = real.values[real_at + 1] - real.values[real_at]
    span = spans.values[doc + 1] - spans.values[doc]
    wrong = (real_len < 0) | (real_len > span)
    first = np.zeros(len(real.values), dtype=bool)
    first[real.offsets[:-1][real.lengths > 0]] = True
    wrong_rows = np.bincount(row[wrong], minlength=rows) > 0
    wrong_rows |= np.bincount(row_of(real.lengths)[first & (real.values != 0)], minlength=rows) > 0
    bad_rows |= wrong_rows & same
    fine = ~wrong & (span > 0)
    start = offsets[:-1][row] + spans.values[doc]
    end = np.minimum(start + span, offsets[1:][row])
    pad_from = np.minimum(start + np.maximum(real_len, 0), end)
    padding[ranges(pad_from[fine], (end - pad_from)[fine])] = True
    if bad_rows.any():
        bad = [*bad, offsets[:-1][np.flatnonzero(bad_rows)].astype(np.int64)]
    return starts, padding, bad


def read(table: pa.Table, source: str) -> Parsed:
    """The collator's columns as a :class:`PackedLayout`: documents from ``cu_seq_lens_q`` when given (position
    ids and ``seq_idx`` are then checked against them), else from position ids. O(tokens)."""
    tokens, columns = read_columns(table, source, ("labels", "position_ids", "seq_idx"))
    offsets = tokens.offsets
    total = int(offsets[-1])
    positions = values_of(columns["position_ids"])
    bad: list[Int64Array] = []
    thd = _thd(table, offsets, source)
    cu = None if thd is not None else _cu_starts(table, "cu_seq_lens_q", offsets, source)
    known = True
    if thd is not None:  # context parallelism: documents at the padded boundaries, followed by their padding
        document = from_starts(offsets, thd[0], thd[1])
        bad.extend(thd[2])
        variant = "THD: cu_seq_lens_q within cu_seqlens_padded"
    elif cu is not None:  # explicit boundaries first; position ids are then checked against them
        document = from_starts(offsets, cu[0], np.zeros(total, dtype=bool))
        bad.extend(cu[1])
        variant = "cu_seq_lens"
    elif positions is not None:
        document = from_starts(offsets, positions == 0, np.zeros(total, dtype=bool))
        variant = "position ids"
    else:
        document = row_of(np.diff(offsets))
        known = False
        variant = "no position ids: no document boundaries"
    known_rows = np.full(len(tokens.lengths), known, dtype=bool)
    if cu is None and thd is None and positions is not None and positions_mark_nothing(offsets, positions):
        known_rows[:] = False  # positions 0..T-1 in every block mark no boundary: documents may run together
        variant = "position ids that never restart: no document boundaries"
    seq_idx = columns["seq_idx"]
    if seq_idx is not None:
        changes = np.zeros(total, dtype=bool)
        changes[1:] = seq_idx.values[1:] != seq_idx.values[:-1]
        bad.append(mismatch(offsets, document, changes))
    layout = PackedLayout.of(
        NAME, tokens, document, targets_of(columns["labels"]), columns, known_rows, variant=variant
    )
    return Parsed(layout, bad)
