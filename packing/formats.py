"""Exports of packed blocks in other frameworks' layouts, as ``pyarrow`` tables (one row per block).

``export(batch, format)`` with ``format`` one of :data:`EXPORT_FORMATS`:

- ``packing``: this project's columns ``input_ids``, ``labels`` (int64), ``loss_mask`` (int8),
  ``position_ids`` (int64), ``sequence_ids`` (int32, -1 = padding), ``seq_lengths`` (int32);
- ``trl``: TRL ``pack_dataset``'s ``input_ids`` (no padding) and ``seq_lengths``, with ``labels`` (which
  TRL's collator takes as they are); its padding-free collator derives position ids from ``seq_lengths``;
- ``flattening``: ``DataCollatorWithFlattening``'s ``input_ids``, ``labels`` (-100 at each document's first
  token) and ``position_ids`` restarting at 0, no padding;
- ``torchtune``: ``tokens``, ``labels``, ``input_pos`` and ``seq_lens``, padded to ``max_seq_length``, the padding
  appended to ``seq_lens`` as one more entry and ``input_pos`` counting on through it (capped at
  ``max_seq_length - 1``), as torchtune's ``PackedDataset`` does;
- ``megatron``: NeMo / Megatron packed rows ``input_ids`` (no padding), ``seq_start_id`` and ``loss_mask`` shifted
  by one within each document (``loss_mask[i]`` trains the prediction of token ``i + 1``; 0 on every
  document's last token); every block fits a pack size of ``max_seq_length``;
- ``segment_ids``: ``input_ids``, ``labels``, ``attention_mask`` holding the document number 1..k of each
  token (0 = padding) and ``position_ids``, padded: LLaMA-Factory's neat packing.

Every export passes :func:`packing.auditing.audit` without findings and reads back as the same documents.
O(blocks × max_seq_length), numpy throughout.

>>> from packing import pack
>>> batch = pack([[1, 2, 3], [4, 5], [6]], 4, strategy="ffd")
>>> export(batch, "trl").to_pydict()
{'input_ids': [[1, 2, 3, 6], [4, 5]], 'labels': [[-100, 2, 3, -100], [-100, 5]], 'seq_lengths': [[3, 1], [2]]}
>>> export(batch, "torchtune").to_pydict()["seq_lens"]
[[3, 1], [2, 2]]
>>> export(batch, "megatron").to_pydict()["loss_mask"]
[[1, 1, 0, 0], [1, 0]]
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from packing.arrays import check_block_indexes, offsets_of, ranges
from packing.errors import SettingError
from packing.outputs import atomic_path
from packing.packed import IGNORE_INDEX, PackedBatch
from packing.schema import LOSS_WEIGHTS
from packing.weighting import LossMode

if TYPE_CHECKING:  # pragma: no cover - typing only
    import pyarrow as pa

Int64Array = npt.NDArray[np.int64]
PathType = str | os.PathLike[str]

EXPORT_FORMATS = ("packing", "trl", "flattening", "torchtune", "megatron", "segment_ids")
"""Layouts :func:`export` writes (the same names :func:`packing.auditing.audit` reports)."""
_CHUNK_VALUES = 1 << 22
"""Values per Arrow chunk (keeps 32-bit list offsets far from overflow)."""


class _Rows:
    """The blocks to export, in order, with their real (non-padding) parts. O(blocks × max_seq_length)."""

    def __init__(self, batch: PackedBatch, order: npt.ArrayLike | None) -> None:
        count = batch.num_blocks
        rows = np.arange(count, dtype=np.int64) if order is None else check_block_indexes(order, count, "order")
        self.batch = batch
        self.rows = rows.astype(np.int64)
        starts = batch.plan.block_starts
        self.doc_counts = np.diff(starts)[self.rows].astype(np.int64)
        pieces = ranges(starts[:-1][self.rows], self.doc_counts)
        self.doc_lengths = batch.plan.piece_length[pieces].astype(np.int64)
        self.used = (
            np.add.reduceat(self.doc_lengths, offsets_of(self.doc_counts)[:-1]) if len(self.rows) else self.doc_counts
        )
        self.used = np.where(self.doc_counts > 0, self.used, 0).astype(np.int64)
        self.width = batch.max_seq_length
        self.real = np.arange(self.width)[None, :] < self.used[:, None]

    def grid(self, matrix: npt.NDArray[Any]) -> npt.NDArray[Any]:
        """The chosen blocks of a ``(blocks, max_seq_length)`` array."""
        return matrix[self.rows]

    def flat_real(self, matrix: npt.NDArray[Any]) -> npt.NDArray[Any]:
        """The real tokens of the chosen blocks, concatenated."""
        return matrix[self.rows][self.real]

    def document(self) -> Int64Array:
        """Per cell: the document's number within its block (0, 1, ...), -1 in padding."""
        numbers = np.full((len(self.rows), self.width), -1, dtype=np.int64)
        within = ranges(np.zeros(len(self.doc_counts), dtype=np.int64), self.doc_counts)
        numbers[self.real] = np.repeat(within, self.doc_lengths)
        return numbers

    def last_of_document(self) -> npt.NDArray[np.bool_]:
        """Per cell: whether it is its document's last token."""
        last = np.zeros((len(self.rows), self.width), dtype=bool)
        ends = np.cumsum(self.doc_lengths) - 1
        flat = last.reshape(-1)
        row_of_doc = np.repeat(np.arange(len(self.rows), dtype=np.int64), self.doc_counts)
        before = offsets_of(self.doc_counts)
        base = np.concatenate(([0], np.cumsum(self.doc_lengths)))[before[:-1]]
        local_end = ends - np.repeat(base, self.doc_counts)
        flat[row_of_doc * self.width + local_end] = True
        return last


def _column(values: npt.NDArray[Any], lengths: Int64Array, kind: Any) -> Any:
    """A chunked Arrow ``list<kind>`` column with rows of ``lengths`` values taken from ``values`` in order."""
    import pyarrow as pa

    offsets = offsets_of(lengths)
    chunks: list[Any] = []
    first = 0
    rows = len(lengths)
    while first < rows or not chunks:
        last = int(np.searchsorted(offsets, offsets[first] + _CHUNK_VALUES, side="right")) - 1
        last = min(max(last, first + 1), rows) if rows else 0
        part = offsets[first : last + 1] - offsets[first]
        flat = values[offsets[first] : offsets[last]] if rows else values[:0]
        chunks.append(pa.ListArray.from_arrays(pa.array(part.astype(np.int32)), pa.array(flat, type=kind)))
        first = last
        if not rows:
            break
    return pa.chunked_array(chunks, type=pa.list_(kind))


def _fixed(rows: _Rows, matrix: npt.NDArray[Any], kind: Any) -> Any:
    grid = rows.grid(matrix)
    return _column(grid.reshape(-1), np.full(len(rows.rows), rows.width, dtype=np.int64), kind)


def _real(rows: _Rows, matrix: npt.NDArray[Any], kind: Any) -> Any:
    return _column(rows.flat_real(matrix), rows.used, kind)


def _targets(batch: PackedBatch) -> npt.NDArray[np.bool_]:
    targets: npt.NDArray[np.bool_] = batch.labels != IGNORE_INDEX
    return targets


def _packing(rows: _Rows) -> pa.Table:
    table: pa.Table = rows.batch.to_arrow(rows.rows)
    return table


def _trl(rows: _Rows) -> pa.Table:
    import pyarrow as pa

    batch = rows.batch
    return pa.table(
        {
            "input_ids": _real(rows, batch.input_ids, pa.int64()),
            "labels": _real(rows, batch.labels, pa.int64()),
            "seq_lengths": _column(rows.doc_lengths, rows.doc_counts, pa.int32()),
        }
    )


def _flattening(rows: _Rows) -> pa.Table:
    import pyarrow as pa

    batch = rows.batch
    return pa.table(
        {
            "input_ids": _real(rows, batch.input_ids, pa.int64()),
            "labels": _real(rows, batch.labels, pa.int64()),
            "position_ids": _real(rows, batch.position_ids, pa.int64()),
        }
    )


def _torchtune(rows: _Rows) -> pa.Table:
    import pyarrow as pa

    batch = rows.batch
    width = rows.width
    positions = rows.grid(batch.position_ids).copy()
    padding = ~rows.real
    # padding counts on from the block's last position, capped at max_seq_length - 1
    last = np.where(rows.used > 0, positions[np.arange(len(rows.rows)), np.maximum(rows.used - 1, 0)], -1)
    steps = np.arange(width)[None, :] - rows.used[:, None] + 1
    positions[padding] = np.minimum(last[:, None] + steps, width - 1)[padding]
    pad = width - rows.used
    has_pad = pad > 0
    counts = rows.doc_counts + has_pad
    lengths = np.zeros(int(counts.sum()), dtype=np.int64)
    slots = offsets_of(counts)
    real_slots = ranges(slots[:-1], rows.doc_counts)
    lengths[real_slots] = rows.doc_lengths
    lengths[slots[1:][has_pad] - 1] = pad[has_pad]
    return pa.table(
        {
            "tokens": _fixed(rows, batch.input_ids, pa.int64()),
            "labels": _fixed(rows, batch.labels, pa.int64()),
            "input_pos": _column(positions.reshape(-1), np.full(len(rows.rows), width, dtype=np.int64), pa.int64()),
            "seq_lens": _column(lengths, counts, pa.int64()),
        }
    )


def _megatron(rows: _Rows) -> pa.Table:
    import pyarrow as pa

    batch = rows.batch
    targets = rows.grid(_targets(batch))
    shifted = np.zeros_like(targets)
    shifted[:, :-1] = targets[:, 1:]
    shifted &= ~rows.last_of_document()
    starts = offsets_of(rows.doc_lengths)[:-1] - np.repeat(
        np.concatenate(([0], np.cumsum(rows.doc_lengths)))[offsets_of(rows.doc_counts)[:-1]], rows.doc_counts
    )
    return pa.table(
        {
            "input_ids": _real(rows, batch.input_ids, pa.int64()),
            "seq_start_id": _column(starts, rows.doc_counts, pa.int64()),
            "loss_mask": _column(shifted[rows.real].astype(np.int8), rows.used, pa.int8()),
        }
    )


def _segment_ids(rows: _Rows) -> pa.Table:
    import pyarrow as pa

    batch = rows.batch
    segments = rows.document() + 1
    lengths = np.full(len(rows.rows), rows.width, dtype=np.int64)
    return pa.table(
        {
            "input_ids": _fixed(rows, batch.input_ids, pa.int64()),
            "labels": _fixed(rows, batch.labels, pa.int64()),
            "attention_mask": _column(segments.reshape(-1), lengths, pa.int64()),
            "position_ids": _fixed(rows, batch.position_ids, pa.int64()),
        }
    )


_EXPORTERS: dict[str, Callable[[_Rows], Any]] = {
    "packing": _packing,
    "trl": _trl,
    "flattening": _flattening,
    "torchtune": _torchtune,
    "megatron": _megatron,
    "segment_ids": _segment_ids,
}


def export(
    batch: PackedBatch,
    format: str = "packing",
    order: npt.ArrayLike | None = None,
    loss_weights: LossMode | None = None,
) -> pa.Table:
    """The blocks of ``batch`` in ``order`` (default: plan order) as a table in ``format``'s layout.

    With ``loss_weights`` (an objective of ``packing.weighting``), also a ``loss_weights`` column (float32),
    aligned with the layout's labels (with megatron's shifted ``loss_mask``), normalised over every block of
    ``batch``. O(blocks × max_seq_length).

    >>> from packing import pack
    >>> export(pack([[1, 2], [3, 4, 5]], 8), "trl", loss_weights="sequence").column("loss_weights").to_pylist()
    [[0.0, 0.25, 0.25, 0.0, 0.5]]

    >>> from packing import pack
    >>> table = export(pack([[1, 2], [3]], 4), "segment_ids")
    >>> table.column("attention_mask").to_pylist(), table.column("position_ids").to_pylist()
    ([[1, 1, 2, 0]], [[0, 1, 0, 0]])
    >>> export(pack([[1]], 2), "keras")
    Traceback (most recent call last):
    ...
    packing.errors.SettingError: format: expected one of packing, trl, flattening, torchtune, megatron, segment_ids, got 'keras' (str)
    """
    if format not in _EXPORTERS:
        raise SettingError("format", f"one of {', '.join(EXPORT_FORMATS)}", format)
    rows = _Rows(batch, order)
    table: pa.Table = _EXPORTERS[format](rows)
    if loss_weights is not None:
        table = table.append_column(LOSS_WEIGHTS.name, _weights_column(rows, format, batch.loss_weights(loss_weights)))
    return table


def _weights_column(rows: _Rows, format: str, weights: npt.NDArray[np.float32]) -> Any:
    """``weights`` laid out as ``format`` lays out its labels: padding-free layouts keep the real tokens, megatron
    shifts them with its ``loss_mask`` (the weight of the token each position predicts). O(blocks × width)."""
    import pyarrow as pa

    if format == "megatron":
        shifted = np.zeros_like(weights)
        shifted[:, :-1] = weights[:, 1:]
        weights = shifted
    if format in ("trl", "flattening", "megatron"):
        return _real(rows, weights, pa.float32())
    return _fixed(rows, weights, pa.float32())


def write_table(table: pa.Table, path: PathType) -> None:
    """Write ``table`` to a ``.parquet`` or ``.jsonl`` file (by extension), atomically. O(values).

    >>> import os, tempfile
    >>> from packing import pack
    >>> target = os.path.join(tempfile.mkdtemp(), "blocks.jsonl")
    >>> write_table(export(pack([[1, 2], [3]], 4), "flattening"), target)
    >>> open(target).read()
    '{"input_ids": [1, 2, 3], "labels": [-100, 2, -100], "position_ids": [0, 1, 0]}\\n'
    """
    import pyarrow.parquet as pq

    suffix = Path(path).suffix.lower()
    if suffix not in (".parquet", ".jsonl"):
        raise SettingError("output", "a .parquet or .jsonl path", os.fspath(path))
    with atomic_path(path) as temporary:
        if suffix == ".parquet":
            pq.write_table(table, temporary)
            return
        with open(temporary, "w", encoding="utf-8") as handle:
            for chunk in table.to_batches(max_chunksize=1024):
                for row in chunk.to_pylist():
                    handle.write(json.dumps(row) + "\n")
