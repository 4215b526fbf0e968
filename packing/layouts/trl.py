"""TRL's ``pack_dataset``: ``input_ids`` with ``seq_lengths`` (``bfd``, ``bfd_split``), or ``input_ids`` alone
(``wrapped``, which keeps no boundaries); every other list column of the input is carried along (``labels``,
``completion_mask``, ``assistant_masks``, ``attention_mask``). A batch of TRL's padded collator
(``padding_free=False``) is read as TRL's too: wrapped rows, padding where its ``attention_mask`` is 0.

Reading: ``labels``, ``completion_mask`` or ``assistant_masks`` mark the loss; TRL's padding-free collator drops
the loss at every document start (``labels[position_ids == 0] = -100``), so a label there is not a finding, and it
builds its own attention mask, so a carried ``attention_mask`` is not checked. Writing: ``input_ids`` (no
padding), ``labels`` (which TRL's collator takes as they are) and ``seq_lengths``.

>>> from packing import pack
>>> write(Rows(pack([[1, 2, 3], [4, 5], [6]], 4, strategy="ffd"))).to_pydict()
{'input_ids': [[1, 2, 3, 6], [4, 5]], 'labels': [[-100, 2, 3, -100], [-100, 5]], 'seq_lengths': [[3, 1], [2]]}
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from packing.core._arrays import row_of
from packing.errors import DatasetError
from packing.layouts.common import (
    IGNORE_INDEX,
    Int64Array,
    PackedLayout,
    Parsed,
    Rows,
    arrow_column,
    check_lengths,
    from_lengths,
    is_collated,
    list_column,
    not_block_start,
    positions_mark_nothing,
    read_columns,
    real_weights,
    starts_of,
)

if TYPE_CHECKING:  # pragma: no cover - typing only
    import pyarrow as pa

NAME = "trl"
TITLE = "TRL pack_dataset"
weights_column = real_weights


def recognises(names: set[str], table: pa.Table) -> bool:
    """Whether the columns are TRL's with boundaries (``input_ids`` and ``seq_lengths``), or a batch of TRL's padded
    collator with ``return_position_ids=True`` (a 0/1 ``attention_mask`` and ``position_ids`` counting
    ``0..T-1`` over each row's real tokens); ``wrapped`` output (``input_ids`` alone, or with carried columns) is
    what is left when no other layout claims a table."""
    return {"input_ids", "seq_lengths"} <= names or _padded_batch(names, table)


def _padded_batch(names: set[str], table: pa.Table) -> bool:
    """A collator's batch with a 0/1 ``attention_mask`` and ``position_ids`` that never restart where the mask is 1:
    TRL's ``DataCollatorForLanguageModeling(return_position_ids=True)`` (LLaMA-Factory's plain packing restarts
    them at every document). O(tokens)."""
    if not (is_collated(table) and {"input_ids", "attention_mask", "position_ids"} <= names):
        return False
    if "seq_lengths" in names:
        return False
    try:
        mask = list_column(table, "attention_mask", "<t>")
        positions = list_column(table, "position_ids", "<t>")
    except DatasetError:
        return False
    if mask is None or positions is None or len(mask.values) != len(positions.values):
        return False
    if not bool(np.isin(mask.values, (0, 1)).all()):
        return False
    return positions_mark_nothing(mask.offsets, positions.values, mask.values == 1)


def write(rows: Rows) -> pa.Table:
    """``input_ids``, ``labels`` (real tokens only) and ``seq_lengths``; without ``seq_lengths`` for a strategy that
    keeps no boundaries (``wrapped``), as TRL's ``wrapped`` writes it. O(tokens)."""
    import pyarrow as pa

    batch = rows.batch
    columns = {
        "input_ids": rows.real_column(batch.input_ids, rows.id_type()),
        "labels": rows.real_column(batch.labels, rows.id_type()),
    }
    if rows.keeps_boundaries:
        columns["seq_lengths"] = arrow_column(rows.doc_lengths, rows.doc_counts, pa.int32())
    return pa.table(columns)


def read(table: pa.Table, source: str) -> Parsed:
    """TRL's columns as a :class:`PackedLayout` (see the module). O(tokens)."""
    tokens, columns = read_columns(table, source, ("labels", "completion_mask", "assistant_masks", "position_ids"))
    offsets = tokens.offsets
    lengths = list_column(table, "seq_lengths", source)
    known = lengths is not None
    bad: list[Int64Array] = []
    if lengths is not None:
        build = from_lengths(offsets, lengths, fill_exactly=True)
        document = build.document
        bad.extend(build.bad_cells)
        variant = "seq_lengths"
    else:
        document = row_of(np.diff(offsets))
        variant = "wrapped: no document boundaries"
        mask = list_column(table, "attention_mask", source) if is_collated(table) else None
        if mask is not None:  # a padded collator's batch: the mask's zeros are its padding
            check_lengths(mask, "attention_mask", tokens, "input_ids", source)
            document = np.where(mask.values == 0, -1, document)
            variant = "padded collator batch: no document boundaries"
    targets = document >= 0
    if columns["labels"] is not None:
        targets &= columns["labels"].values != IGNORE_INDEX
    for name in ("completion_mask", "assistant_masks"):
        mask = columns[name]
        if mask is not None:
            targets &= mask.values != 0
    if known:  # TRL's padding-free collator sets labels[position_ids == 0] = -100
        targets &= ~starts_of(offsets, document)
    else:
        targets &= not_block_start(offsets, len(document))
    has_loss = any(columns[name] is not None for name in ("labels", "completion_mask", "assistant_masks"))
    # no attention_mask (not among the columns): TRL's collators build their own; a carried column is never used
    layout = PackedLayout.of(
        NAME, tokens, document, targets if has_loss or known else None, columns, known, variant=variant
    )
    return Parsed(layout, bad)
