"""Exports of packed blocks in other frameworks' layouts, as ``pyarrow`` tables (one row per block).

``export(batch, layout)`` with ``layout`` one of :data:`packing.layouts.LAYOUTS` (``packing``, ``trl``, ``flattening``,
``torchtune``, ``megatron``, ``segment_ids``; each described in its module of :mod:`packing.layouts`).

Each layout's writer lives with its reader in :mod:`packing.layouts`. Every export passes
:func:`packing.layouts.audit.audit` without findings and reads back as the same documents. Files: one writer a file
format, ``write_parquet`` and ``write_jsonl``, which take blocks (a ``PackedBatch``) and write
any layout chunk by chunk (:func:`export_chunks`: one chunk of the output in memory at a time, loss weights
normalised over every block first), and ``write_table``, which writes a table made whole (through the same two,
or, for NeMo, the ``.npy`` file its loader reads: a pickle, made whole). O(blocks × max_seq_length), numpy
throughout.

>>> from packing import pack
>>> batch = pack([[1, 2, 3], [4, 5], [6]], 4, strategy="ffd")
>>> export(batch, "trl").to_pydict()
{'input_ids': [[1, 2, 3, 6], [4, 5]], 'labels': [[-100, 2, 3, -100], [-100, 5]], 'seq_lengths': [[3, 1], [2]]}
>>> export(batch, "torchtune").to_pydict()["seq_lens"]
[[3, 1], [2, 2]]
>>> export(batch, "megatron").to_pydict()["loss_mask"]
[[1, 1, 0, 0], [1, 0]]

Internal: the public names are in ``packing`` and ``packing.layouts``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from packing.batches._packed import PackedBatch
from packing.batches._schema import LOSS_WEIGHTS
from packing.core._samples import IGNORE_INDEX
from packing.errors import SettingError
from packing.layouts import MODULES, Rows, check_layout, takes_layout
from packing.layouts._outputs import atomic_path
from packing.layouts.megatron import write_npy
from packing.weighting import DocumentWeights, LossMode, check_mode

if TYPE_CHECKING:  # pragma: no cover - typing only
    import pyarrow as pa

PathType = str | os.PathLike[str]


@takes_layout
def export(
    batch: PackedBatch,
    layout: str = "packing",
    order: npt.ArrayLike | None = None,
    loss_weights: LossMode | None = None,
) -> pa.Table:
    """The blocks of ``batch`` in ``order`` (default: plan order) as a table in ``layout``.

    With ``loss_weights`` (an objective of ``packing.weighting``), also a ``loss_weights`` column (float32),
    aligned with the layout's labels (with megatron's shifted ``loss_mask``), normalised over every block of
    ``batch``: :func:`export_chunks` as one chunk. O(blocks × max_seq_length).

    >>> from packing import pack
    >>> table = export(pack([[1, 2], [3]], 4), "segment_ids")
    >>> table.column("attention_mask").to_pylist(), table.column("position_ids").to_pylist()
    ([[1, 1, 2, 0]], [[0, 1, 0, 0]])
    >>> export(pack([[1]], 2), "keras")
    Traceback (most recent call last):
    ...
    packing.errors.SettingError: layout: expected one of packing, trl, flattening, torchtune, megatron, segment_ids, got 'keras' (str)
    >>> export(pack([[1, 2], [3, 4, 5]], 8), "trl", loss_weights="sequence").column("loss_weights").to_pylist()
    [[0.0, 0.25, 0.25, 0.0, 0.5]]
    """
    whole = max(batch.num_blocks if order is None else np.size(order), 1) * batch.max_seq_length
    (table,) = export_chunks(batch, layout, order, loss_weights, chunk_tokens=whole)  # one chunk: every block
    return table


def refuse_shared(blocks: PackedBatch, layout: str) -> None:
    """Refuse to write blocks of shared prompts in another framework's layout: only this project's columns
    (``unit_ids``, ``completion_ids``, ``prediction_positions``) keep a shared prompt's completions apart; the
    others' boundaries would let each see its siblings. Blocks of units in the duplicated layout are documents like
    any others (each completion with its prompt): every layout writes them. O(1).

    >>> from packing import pack
    >>> export(pack([{"prompt": [1], "chosen": [2], "rejected": [3]}], 4, share_prompt=True), "trl")
    Traceback (most recent call last):
    ...
    packing.errors.SettingError: layout: expected 'packing' (this project's own layout) with share_prompt: the other layouts cannot keep a shared prompt's completions apart (pack with share_prompt=False for them), got 'trl' (str)
    """
    units = blocks.units
    if units is not None and units.share_prompt and layout != "packing":
        raise SettingError(
            "layout",
            "'packing' (this project's own layout) with share_prompt: the other layouts cannot keep a shared prompt's "
            "completions apart (pack with share_prompt=False for them)",
            layout,
        )


@takes_layout
def export_chunks(
    blocks: PackedBatch,
    layout: str = "packing",
    order: npt.ArrayLike | None = None,
    loss_weights: LossMode | None = None,
    *,
    chunk_tokens: int | None = None,
) -> Iterator[pa.Table]:
    """``export(blocks, layout, order, loss_weights)`` as consecutive tables of about ``chunk_tokens`` token slots
    each (default ``packing.batches._packed.CHUNK_TOKENS``, about 4 M): the same columns, types and values, row
    for row, one chunk of blocks made (``PackedBatch.chunks``) and laid out at a time, so memory holds the input
    and one chunk of the output. Loss weights are normalised over every block of ``blocks`` first, per document
    from the plan and the loss masks (``document_weights``), then weighed per chunk. No block: one empty table
    (the columns' types). O(blocks × max_seq_length) in all.

    >>> from packing import pack
    >>> batch = pack([[1, 2], [3, 4, 5], [6]], 4, strategy="split")
    >>> [t.to_pydict()["input_ids"] for t in export_chunks(batch, "trl", chunk_tokens=4)]
    [[[1, 2, 3, 4]], [[5, 6]]]
    >>> [t.column("loss_weights").to_pylist() for t in export_chunks(batch, "trl", None, "token", chunk_tokens=4)]
    [[[0.0, 0.5, 0.0, 0.5]], [[0.0, 0.0]]]
    """
    refuse_shared(blocks, check_layout(layout))
    weights = blocks.document_weights(check_mode(loss_weights)) if loss_weights is not None else None
    made = False
    for chunk in blocks.chunks(order, chunk_tokens):
        made = True
        yield _chunk_table(chunk, layout, weights)
    if not made:  # no block: a table of no rows still says what the columns are
        empty = np.zeros(0, dtype=np.int64)
        yield _chunk_table(blocks.select(empty), layout, weights)


def _chunk_table(chunk: PackedBatch, layout: str, weights: DocumentWeights | None) -> pa.Table:
    """One chunk of blocks laid out as ``layout``; with ``weights``, their ``loss_weights`` column. O(its slots)."""
    rows = Rows(chunk)
    table: pa.Table = MODULES[layout].write(rows)
    if weights is not None:
        grid = weights.grid(chunk.labels != IGNORE_INDEX, chunk.sequence_ids)
        table = table.append_column(LOSS_WEIGHTS.name, MODULES[layout].weights_column(rows, grid))
    return table


def write_table(table: pa.Table, path: PathType) -> None:
    """Write ``table`` to a ``.parquet`` or ``.jsonl`` file (as ``write_parquet`` and ``write_jsonl`` write their
    chunks), or a ``.npy`` file of dicts as NeMo writes its packed rows
    (:func:`packing.layouts.megatron.write_npy`), by extension, atomically. O(values).

    >>> import os, tempfile
    >>> from packing import pack
    >>> target = os.path.join(tempfile.mkdtemp(), "blocks.jsonl")
    >>> write_table(export(pack([[1, 2], [3]], 4), "flattening"), target)
    >>> open(target).read()
    '{"input_ids": [1, 2, 3], "labels": [-100, 2, -100], "position_ids": [0, 1, 0]}\\n'
    """
    suffix = Path(path).suffix.lower()
    if suffix not in (".parquet", ".jsonl", ".npy"):
        raise SettingError("output", "a .parquet, .jsonl or .npy path", os.fspath(path))
    if suffix == ".npy":
        write_npy(table, path)
    elif suffix == ".parquet":
        _parquet_file([table], path)
    else:
        _jsonl_file([table], path)


@takes_layout
def write_parquet(
    batch: PackedBatch,
    path: PathType,
    order: npt.ArrayLike | None = None,
    *,
    chunk_tokens: int | None = None,
    layout: str = "packing",
    loss_weights: LossMode | None = None,
) -> None:
    """Write one row per block in ``layout`` (default: the schema's columns), in ``order`` (default
    plan order), with ``loss_weights`` the column of that objective too, atomically, one Parquet row group per
    chunk of about ``chunk_tokens`` token slots (default ``packing.batches._packed.CHUNK_TOKENS``, about 4 M;
    :func:`export_chunks`): a batch whose blocks are not made yet is made chunk by chunk as it is written, so memory holds one chunk
    of the output, not all of it. The file holds what ``export`` makes whole. O(blocks × max_seq_length).

    >>> import pyarrow.parquet as pq, tempfile, os
    >>> from packing import pack
    >>> target = os.path.join(tempfile.mkdtemp(), "blocks.parquet")
    >>> write_parquet(pack([[1, 2], [3, 4, 5], [6]], 4, strategy="split"), target, order=[1, 0])
    >>> pq.read_table(target).column("input_ids").to_pylist()
    [[5, 6, 0, 0], [1, 2, 3, 4]]
    >>> write_parquet(pack([[1, 2], [3, 4, 5], [6]], 4, strategy="split"), target, layout="trl")
    >>> pq.read_table(target).column("input_ids").to_pylist()
    [[1, 2, 3, 4], [5, 6]]
    """
    _parquet_file(export_chunks(batch, layout, order, loss_weights, chunk_tokens=chunk_tokens), path)


@takes_layout
def write_jsonl(
    batch: PackedBatch,
    path: PathType,
    order: npt.ArrayLike | None = None,
    *,
    chunk_tokens: int | None = None,
    layout: str = "packing",
    loss_weights: LossMode | None = None,
) -> None:
    """Write one JSON object per block and line (``layout``'s columns, with ``loss_weights`` that one too), in
    ``order``, atomically, chunk by chunk as ``write_parquet``. O(blocks × max_seq_length).

    >>> import json, tempfile, os
    >>> from packing import pack
    >>> target = os.path.join(tempfile.mkdtemp(), "blocks.jsonl")
    >>> write_jsonl(pack([[1, 2], [3]], 4), target)
    >>> json.loads(open(target).readline())["labels"]
    [-100, 2, -100, -100]
    >>> write_jsonl(pack([[1, 2], [3]], 4), target, layout="megatron", loss_weights="sequence")
    >>> open(target).read()
    '{"input_ids": [1, 2, 3], "seq_start_id": [0, 2], "loss_mask": [1, 0, 0], "loss_weights": [1.0, 0.0, 0.0]}\\n'
    """
    _jsonl_file(export_chunks(batch, layout, order, loss_weights, chunk_tokens=chunk_tokens), path)


def _parquet_file(tables: Iterable[pa.Table], path: PathType) -> None:
    """The one Parquet writer: ``tables`` (one schema) as one file, a row group each, atomically, as zstd (level 1)
    pages without dictionaries: a dictionary of token ids costs more time than any other step of writing and
    saves little once compressed (a block's positions and masks compress to almost nothing either way).
    O(values)."""
    import pyarrow.parquet as pq

    with atomic_path(path) as temporary:
        writer: pq.ParquetWriter | None = None
        try:
            for table in tables:
                if writer is None:  # an empty output keeps its schema
                    writer = pq.ParquetWriter(
                        temporary, table.schema, use_dictionary=False, compression="zstd", compression_level=1
                    )
                if table.num_rows:
                    writer.write_table(table, row_group_size=table.num_rows)
        finally:
            if writer is not None:
                writer.close()


def _jsonl_file(tables: Iterable[pa.Table], path: PathType) -> None:
    """The one JSON lines writer: every row of ``tables`` as one JSON object a line (its columns in order),
    atomically, 1,024 rows turned into Python values at a time. O(values)."""
    with atomic_path(path) as temporary, open(temporary, "w", encoding="utf-8") as handle:
        for table in tables:
            names = table.column_names
            for part in table.to_batches(max_chunksize=1024):
                columns = [part.column(name).to_pylist() for name in names]
                for values in zip(*columns, strict=True):
                    handle.write(json.dumps(dict(zip(names, values, strict=True))) + "\n")
