"""This project's own layout: the columns of :mod:`packing.batches.schema` (``input_ids``, ``labels``, ``loss_mask``,
``position_ids``, ``sequence_ids``, ``seq_lengths``), padding after ``sum(seq_lengths)``.

>>> import pyarrow as pa
>>> from packing import pack
>>> table = write(Rows(pack([[1, 2], [3]], 4), None))
>>> table.column_names
['input_ids', 'labels', 'loss_mask', 'position_ids', 'sequence_ids', 'seq_lengths']
>>> parsed = read(table, "<t>")
>>> parsed.layout.document.tolist(), parsed.layout.targets.tolist()
([0, 0, 1, -1], [False, True, False, False])
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from packing.layouts.common import (
    PackedLayout,
    Parsed,
    Rows,
    check_lengths,
    from_lengths,
    list_column,
    required,
    starts_of,
    targets_of,
    values_of,
)

if TYPE_CHECKING:  # pragma: no cover - typing only
    import pyarrow as pa

NAME = "packing"
TITLE = "this project's blocks"


def recognises(names: set[str], table: pa.Table) -> bool:
    """Whether the columns are this project's (``input_ids``, ``labels``, ``position_ids``, ``seq_lengths``)."""
    return {"input_ids", "labels", "position_ids", "seq_lengths"} <= names


def write(rows: Rows) -> pa.Table:
    """The blocks as the schema's columns (``PackedBatch.to_arrow``). O(blocks × max_seq_length)."""
    table: pa.Table = rows.batch.to_arrow(rows.rows)
    return table


def read(table: pa.Table, source: str) -> Parsed:
    """This project's columns as a :class:`PackedLayout`; ``loss_mask`` on padding is trained padding. O(tokens)."""
    tokens = required(table, "input_ids", source)
    offsets = tokens.offsets
    columns = {
        name: list_column(table, name, source)
        for name in ("labels", "loss_mask", "position_ids", "sequence_ids", "attention_mask")
    }
    for name, column in columns.items():
        check_lengths(column, name, tokens, "input_ids", source)
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
    labels = columns["labels"]
    targets = targets_of(labels)
    loss_mask = columns["loss_mask"]
    extra = None
    if loss_mask is not None:
        extra = (loss_mask.values != 0) & (document < 0)
        if targets is None:
            targets = loss_mask.values != 0
            targets &= ~starts_of(offsets, document)
    layout = PackedLayout(
        format="packing",
        row_offsets=offsets,
        input_ids=tokens.values,
        document=document,
        targets=targets,
        position_ids=values_of(columns["position_ids"]),
        attention_mask=values_of(columns["attention_mask"]),
        labels=values_of(labels),
        boundaries_known=np.ones(len(tokens.lengths), dtype=bool),
    )
    return Parsed(layout, bad, extra)
