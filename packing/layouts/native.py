"""This project's own layout: the columns of :mod:`packing.batches._schema` (``input_ids``, ``labels``, ``loss_mask``,
``position_ids``, ``sequence_ids``, ``seq_lengths``), padding after ``sum(seq_lengths)``.

>>> import pyarrow as pa
>>> from packing import pack
>>> table = write(Rows(pack([[1, 2], [3]], 4)))
>>> table.column_names
['input_ids', 'labels', 'loss_mask', 'position_ids', 'sequence_ids', 'seq_lengths']
>>> parsed = read(table, "<t>")
>>> parsed.layout.document.tolist(), parsed.layout.targets.tolist()
([0, 0, 1, -1], [False, True, False, False])
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from packing.core._arrays import row_of
from packing.layouts.common import (
    Int64Array,
    PackedLayout,
    Parsed,
    Rows,
    fixed_weights,
    from_lengths,
    read_columns,
    required,
    starts_of,
    targets_of,
)

if TYPE_CHECKING:  # pragma: no cover - typing only
    import pyarrow as pa

NAME = "packing"
TITLE = "this project's blocks"
weights_column = fixed_weights


def recognises(names: set[str], table: pa.Table) -> bool:
    """Whether the columns are this project's (``input_ids``, ``labels``, ``position_ids``, ``seq_lengths``)."""
    return {"input_ids", "labels", "position_ids", "seq_lengths"} <= names


def write(rows: Rows) -> pa.Table:
    """The blocks as the schema's columns (``PackedBatch.to_arrow``). O(blocks × max_seq_length)."""
    table: pa.Table = rows.batch.to_arrow()
    return table


def read(table: pa.Table, source: str) -> Parsed:
    """This project's columns as a :class:`PackedLayout`; ``loss_mask`` on padding is trained padding. O(tokens)."""
    names = ("labels", "loss_mask", "position_ids", "sequence_ids", "attention_mask", "document_ids")
    tokens, columns = read_columns(table, source, names)
    offsets = tokens.offsets
    lengths = required(table, "seq_lengths", source)
    build = from_lengths(offsets, lengths, fill_exactly=False)
    document = build.document
    bad = list(build.bad_cells)
    sequence_ids = columns["sequence_ids"]
    if sequence_ids is not None:
        ids = sequence_ids.values
        inside = np.zeros(len(ids), dtype=bool)
        inside[1:] = (document[1:] == document[:-1]) & (document[1:] >= 0) & (ids[1:] != ids[:-1])
        wrong_padding = (document < 0) != (ids < 0)
        bad.append(np.flatnonzero(inside | wrong_padding).astype(np.int64))
    if columns["document_ids"] is not None:  # blocks of units: the documents numbered in their block
        bad.append(_numbering_cells(offsets, document, columns["document_ids"].values))
    labels = columns["labels"]
    targets = targets_of(labels)
    loss_mask = columns["loss_mask"]
    extra = None
    if loss_mask is not None:
        extra = (loss_mask.values != 0) & (document < 0)
        if targets is None:
            targets = loss_mask.values != 0
            targets &= ~starts_of(offsets, document)
    return Parsed(PackedLayout.of(NAME, tokens, document, targets, columns), bad, extra)


def _numbering_cells(offsets: Int64Array, document: Int64Array, ids: Int64Array) -> Int64Array:
    """The cells whose ``document_ids`` (blocks of units) are not their document's number in its block (0, 1, ...
    as ``seq_lengths`` say; -1 in padding): a mask built from them would join or part other tokens. O(tokens).

    >>> _numbering_cells(np.array([0, 4]), np.array([0, 0, 1, -1]), np.array([0, 1, 1, -1])).tolist()
    [1]
    """
    rows = row_of(np.diff(offsets))
    first = np.where(np.diff(offsets) > 0, document[np.minimum(offsets[:-1], max(len(document) - 1, 0))], 0)
    expected = np.where(document >= 0, document - first[rows], -1) if len(document) else document
    return np.flatnonzero(expected != ids).astype(np.int64)
