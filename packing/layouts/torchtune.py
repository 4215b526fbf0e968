"""torchtune's ``PackedDataset``: ``tokens``, ``labels``, ``input_pos`` and ``seq_lens``, padded to
``max_seq_len``; its collated batch (``padded_collate_packed``: ``tokens``, ``labels``, ``input_pos`` and a
block-causal ``mask`` instead of ``seq_lens``) is read too, its documents taken from the mask. The padding is appended to ``seq_lens`` as one more entry, its labels are -100 and ``input_pos``
counts on through it (capped at ``max_seq_len - 1``); with ``split_across_pack`` the rest of a sample opens the
next pack with its positions running on (``x % max_seq_len``). Labels are unshifted (the recipe shifts once per
pack), so a label on a document's first token is predicted by the document before it.

>>> from packing import pack
>>> table = write(Rows(pack([[1, 2, 3], [4, 5], [6]], 4, strategy="ffd")))
>>> table.column("seq_lens").to_pylist(), table.column("input_pos").to_pylist()
([[3, 1], [2, 2]], [[0, 1, 2, 0], [0, 1, 2, 3]])
>>> read(table, "<t>").layout.document.tolist()
[0, 0, 0, 1, 2, 2, -1, -1]
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from packing.core._arrays import offsets_of, ranges, row_of
from packing.layouts.common import (
    IGNORE_INDEX,
    PackedLayout,
    Parsed,
    Rows,
    arrow_column,
    fixed_weights,
    from_lengths,
    read_columns,
    renumber,
    required,
    targets_of,
    values_of,
)

if TYPE_CHECKING:  # pragma: no cover - typing only
    import pyarrow as pa

NAME = "torchtune"
TITLE = "torchtune PackedDataset"
weights_column = fixed_weights


def seq_lens_of_mask(mask: npt.NDArray[Any]) -> list[list[int]]:
    """The ``seq_lens`` of every pack of a ``padded_collate_packed`` batch, from its ``(rows, T, T)`` block-causal
    ``mask`` (the collator keeps no ``seq_lens``): a token opens a run where it may not attend to the token before
    it. O(rows × T) (only the sub-diagonal is read).

    >>> mask = np.zeros((1, 5, 5), dtype=bool)
    >>> for lo, hi in ((0, 3), (3, 5)):
    ...     mask[0, lo:hi, lo:hi] = np.tril(np.ones((hi - lo, hi - lo), dtype=bool))
    >>> seq_lens_of_mask(mask)
    [[3, 2]]
    """
    rows, width = mask.shape[0], mask.shape[1]
    lens: list[list[int]] = []
    if width == 0:
        return [[] for _ in range(rows)]
    steps = np.arange(1, width)
    for row in range(rows):
        opens = np.concatenate(([0], steps[~mask[row, steps, steps - 1].astype(bool)], [width]))
        lens.append(np.diff(opens).astype(int).tolist())
    return lens


def recognises(names: set[str], table: pa.Table) -> bool:
    """Whether the columns are torchtune's (``tokens`` and ``seq_lens``)."""
    return {"tokens", "seq_lens"} <= names


def write(rows: Rows) -> pa.Table:
    """Padded packs as torchtune lays them out. O(blocks × max_seq_length)."""
    import pyarrow as pa

    batch = rows.batch
    width = rows.width
    positions = batch.position_ids.copy()
    padding = ~rows.real
    # padding counts on from the block's last position, capped at max_seq_length - 1
    last = np.where(rows.used > 0, positions[np.arange(batch.num_blocks), np.maximum(rows.used - 1, 0)], -1)
    steps = np.arange(width)[None, :] - rows.used[:, None] + 1
    positions[padding] = np.minimum(last[:, None] + steps, width - 1)[padding]
    pad = width - rows.used
    has_pad = pad > 0
    counts = rows.doc_counts + has_pad
    lengths = np.zeros(int(counts.sum()), dtype=np.int64)
    slots = offsets_of(counts)
    lengths[ranges(slots[:-1], rows.doc_counts)] = rows.doc_lengths
    lengths[slots[1:][has_pad] - 1] = pad[has_pad]
    every = np.full(batch.num_blocks, width, dtype=np.int64)
    return pa.table(
        {
            "tokens": rows.fixed(batch.input_ids, rows.id_type()),
            "labels": rows.fixed(batch.labels, rows.id_type()),
            "input_pos": arrow_column(positions.reshape(-1), every, rows.id_type()),
            "seq_lens": arrow_column(lengths, counts, pa.int32()),
        }
    )


def read(table: pa.Table, source: str) -> Parsed:
    """torchtune's columns as a :class:`PackedLayout`: documents from ``seq_lens``; a block's last entry is the
    padding when its positions do not restart at 0 and none of its labels is trained. O(tokens)."""
    tokens, columns = read_columns(table, source, ("labels", "input_pos"), tokens="tokens")
    offsets = tokens.offsets
    lengths = required(table, "seq_lens", source)
    build = from_lengths(offsets, lengths, fill_exactly=True)
    document = build.document
    positions = values_of(columns["input_pos"])
    if positions is not None and len(document):
        # the padding is the last entry of seq_lens: a block's last run (not its first) not restarting at 0
        values = np.maximum(lengths.values, 0)
        entry_row = row_of(lengths.lengths)
        sums = np.bincount(entry_row, weights=values, minlength=len(lengths.lengths)).astype(np.int64)
        rows = np.flatnonzero((lengths.lengths >= 2) & (sums == np.diff(offsets)))
        last = values[lengths.offsets[1:][rows] - 1]
        rows, last = rows[last > 0], last[last > 0]
        pad_starts = offsets[rows + 1] - last
        padded = positions[pad_starts] != 0
        labels_column = columns["labels"]
        if labels_column is not None and len(pad_starts):
            # torchtune's padding always has labels -100: a trained last run is a document whose positions
            # were not reset (a finding), not padding
            cells = ranges(pad_starts, last)
            run = row_of(last)
            trained = np.bincount(run[labels_column.values[cells] != IGNORE_INDEX], minlength=len(pad_starts))
            padded &= trained == 0
        if padded.any():
            document = document.copy()
            document[ranges(pad_starts[padded], last[padded])] = -1
            document = renumber(document)
    layout = PackedLayout.of(NAME, tokens, document, targets_of(columns["labels"]), columns, position_ids=positions)
    return Parsed(layout, list(build.bad_cells))
