"""Segment ids in ``attention_mask``: LLaMA-Factory's neat packing and Axolotl. ``attention_mask`` holds the
document number 1..k of each token (0 = padding), with ``labels`` and ``position_ids``; a 0/1 ``attention_mask``
with position ids is LLaMA-Factory's plain packing, where only position ids separate documents (and padding has
position 0 and mask 1).

>>> from packing import pack
>>> table = write(Rows(pack([[1, 2], [3]], 4)))
>>> table.column("attention_mask").to_pylist(), table.column("position_ids").to_pylist()
([[1, 1, 2, 0]], [[0, 1, 0, 0]])
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from packing.core._arrays import row_of
from packing.layouts.common import (
    BoolArray,
    Int64Array,
    PackedLayout,
    Parsed,
    Rows,
    arrow_column,
    fixed_weights,
    from_starts,
    positions_mark_nothing,
    read_columns,
    required,
    row_max,
    targets_of,
    values_of,
)

if TYPE_CHECKING:  # pragma: no cover - typing only
    import pyarrow as pa

NAME = "segment_ids"
TITLE = "segment ids in attention_mask, as LLaMA-Factory neat packing and Axolotl"
weights_column = fixed_weights


def recognises(names: set[str], table: pa.Table) -> bool:
    """Whether an ``attention_mask`` comes with ``position_ids``, or with ``labels`` and numbers documents (a
    value of 2 or more): a 0/1 mask with labels and no positions is TRL's ``wrapped`` output."""
    if "attention_mask" not in names or not {"labels", "position_ids"} & names:
        return False
    return "position_ids" in names or _numbers_documents(table)


def _numbers_documents(table: pa.Table) -> bool:
    """Whether the ``attention_mask`` column holds a value of 2 or more (a list column of numbers). O(tokens)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    column = table.column("attention_mask")
    kind = column.type
    if not (pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind)):
        return False
    if not (pa.types.is_integer(kind.value_type) or pa.types.is_floating(kind.value_type)):
        return False
    largest = pc.max(pc.list_flatten(column)).as_py()
    return largest is not None and largest >= 2


def write(rows: Rows) -> pa.Table:
    """Padded blocks with the document number 1..k of each token in ``attention_mask``. O(blocks ×
    max_seq_length)."""
    import pyarrow as pa

    batch = rows.batch
    segments = batch.document_ids.astype(np.int64) + 1
    every = np.full(batch.num_blocks, rows.width, dtype=np.int64)
    return pa.table(
        {
            "input_ids": rows.fixed(batch.input_ids, rows.id_type()),
            "labels": rows.fixed(batch.labels, rows.id_type()),
            "attention_mask": arrow_column(segments.reshape(-1), every, pa.int64()),
            "position_ids": rows.fixed(batch.position_ids, rows.id_type()),
        }
    )


def read(table: pa.Table, source: str) -> Parsed:
    """Segment-id columns as a :class:`PackedLayout`: documents from the numbers in ``attention_mask``, or from
    position ids under a 0/1 mask (plain packing). O(tokens)."""
    tokens, columns = read_columns(table, source, ("attention_mask", "labels", "position_ids"))
    offsets = tokens.offsets
    total = int(offsets[-1])
    mask = required(table, "attention_mask", source).values
    positions = values_of(columns["position_ids"])
    labels = columns["labels"]
    targets = targets_of(labels)
    rows = row_of(np.diff(offsets))
    numbered_rows = row_max(offsets, mask) >= 2  # a block numbering its documents; others hold 0/1 or one document
    numbered = numbered_rows[rows]
    padding = mask == 0
    bad: list[Int64Array] = []
    known = np.ones(len(tokens.lengths), dtype=bool)
    changes = np.ones(total, dtype=bool)
    changes[1:] = mask[1:] != mask[:-1]
    if positions is not None:
        padding |= (
            _trailing_padding(offsets, positions, targets)
            & ~numbered
            & ~(row_max(offsets, (mask == 0).astype(np.int64)) > 0)[rows]
        )
        opens = np.where(numbered, changes, positions == 0)
        variant = "document numbers" if numbered_rows.any() else "0/1 mask: documents from position ids"
    else:
        opens = changes
        if not numbered_rows.any():
            known[:] = False
            variant = "0/1 mask: no document boundaries"
        else:
            variant = "document numbers"
    if positions is not None and not numbered_rows.any() and positions_mark_nothing(offsets, positions, ~padding):
        known[:] = False  # positions 0..T-1 everywhere under a 0/1 mask mark no boundary
        variant = "0/1 mask, position ids that never restart: no document boundaries"
    document = from_starts(offsets, opens, padding)
    reused = _reused(offsets, mask, document, numbered)
    layout = PackedLayout.of(NAME, tokens, document, targets, columns, known, variant=variant)
    return Parsed(layout, bad, reused_segments=reused)


def _reused(offsets: Int64Array, mask: Int64Array, document: Int64Array, numbered: BoolArray) -> Int64Array:
    """The first token of every document whose segment number an earlier document of its block already has
    (``[1, 1, 2, 2, 1, 1]``): LLaMA-Factory and Axolotl let tokens of equal numbers attend to each other, so the
    two documents see each other. Blocks numbering their documents only. O(tokens + documents log documents).

    >>> _reused(np.array([0, 6]), np.array([1, 1, 2, 2, 1, 1]), np.array([0, 0, 1, 1, 2, 2]), np.ones(6, bool)).tolist()
    [4]
    """
    real = document >= 0
    starts = np.flatnonzero(real & numbered & np.concatenate(([True], document[1:] != document[:-1])))
    if len(starts) < 2:
        return np.zeros(0, dtype=np.int64)
    rows = np.searchsorted(offsets, starts, side="right") - 1
    values = mask[starts]
    order = np.lexsort((starts, values, rows))  # by block, then number, then place
    same = (rows[order][1:] == rows[order][:-1]) & (values[order][1:] == values[order][:-1])
    cells: Int64Array = np.sort(starts[order][1:][same]).astype(np.int64)
    return cells


def _trailing_padding(offsets: Int64Array, positions: Int64Array, targets: BoolArray | None) -> BoolArray:
    """LLaMA-Factory's plain packing pads with position 0 and an attention mask of 1: the tokens after a block's
    last position above 0, when at least two and none of them a target, are padding. O(tokens)."""
    total = len(positions)
    padding = np.zeros(total, dtype=bool)
    if not total:
        return padding
    rows = row_of(np.diff(offsets))
    index = np.arange(total, dtype=np.int64)
    marked = np.where(positions > 0, index, -1)
    nonempty = np.flatnonzero(np.diff(offsets) > 0)
    last_positive = np.full(len(offsets) - 1, -1, dtype=np.int64)
    last_positive[nonempty] = np.maximum.reduceat(marked, offsets[:-1][nonempty])
    tail_start = np.where(last_positive >= 0, last_positive + 1, offsets[:-1])
    candidate = index >= tail_start[rows]
    tail_length = offsets[1:] - tail_start
    trained = np.bincount(rows[candidate & targets], minlength=len(tail_length)) if targets is not None else 0
    ok_rows = (tail_length >= 2) & (np.asarray(trained) == 0) & (last_positive >= 0)
    result: BoolArray = candidate & ok_rows[rows]
    return result
