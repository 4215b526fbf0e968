"""Exports of packed blocks in other frameworks' layouts, as ``pyarrow`` tables (one row per block).

``export(batch, format)`` with ``format`` one of :data:`EXPORT_FORMATS` (``packing``, ``trl``, ``flattening``,
``torchtune``, ``megatron``, ``segment_ids``; each described in its module of :mod:`packing.layouts`).

Each layout's writer lives with its reader in :mod:`packing.layouts`. Every export passes
:func:`packing.layouts.audit.audit` without findings and reads back as the same documents; ``write_table`` writes
``.parquet``, ``.jsonl`` or, for NeMo, the ``.npy`` file its loader reads. O(blocks × max_seq_length), numpy
throughout.

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
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from packing.batches.packed import LazyBatch, PackedBatch
from packing.batches.schema import LOSS_WEIGHTS, NAMES, arrow_schema
from packing.errors import SettingError
from packing.layouts import LAYOUTS, MODULES, Rows
from packing.layouts.megatron import write_npy
from packing.layouts.outputs import atomic_path
from packing.weighting import LossMode

if TYPE_CHECKING:  # pragma: no cover - typing only
    import pyarrow as pa

PathType = str | os.PathLike[str]

EXPORT_FORMATS = LAYOUTS
"""Layouts :func:`export` writes (the same names :func:`packing.layouts.audit.audit` reports)."""


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
    >>> table = export(pack([[1, 2], [3]], 4), "segment_ids")
    >>> table.column("attention_mask").to_pylist(), table.column("position_ids").to_pylist()
    ([[1, 1, 2, 0]], [[0, 1, 0, 0]])
    >>> export(pack([[1]], 2), "keras")
    Traceback (most recent call last):
    ...
    packing.errors.SettingError: format: expected one of packing, trl, flattening, torchtune, megatron, segment_ids, got 'keras' (str)
    >>> export(pack([[1, 2], [3, 4, 5]], 8), "trl", loss_weights="sequence").column("loss_weights").to_pylist()
    [[0.0, 0.25, 0.25, 0.0, 0.5]]
    """
    if format not in MODULES:
        raise SettingError("format", f"one of {', '.join(EXPORT_FORMATS)}", format)
    rows = Rows(batch, order)
    table: pa.Table = MODULES[format].write(rows)
    if loss_weights is not None:
        table = table.append_column(LOSS_WEIGHTS.name, _weights_column(rows, format, batch.loss_weights(loss_weights)))
    return table


def _weights_column(rows: Rows, format: str, weights: npt.NDArray[np.float32]) -> Any:
    """``weights`` laid out as ``format`` lays out its labels: padding-free layouts keep the real tokens, megatron
    shifts them with its ``loss_mask`` (the weight of the token each position predicts). O(blocks × width)."""
    import pyarrow as pa

    if format == "megatron":
        shifted = np.zeros_like(weights)
        shifted[:, :-1] = weights[:, 1:]
        weights = shifted
    if format in ("trl", "flattening", "megatron"):
        return rows.real_column(weights, pa.float32())
    return rows.fixed(weights, pa.float32())


def write_table(table: pa.Table, path: PathType) -> None:
    """Write ``table`` to a ``.parquet`` or ``.jsonl`` file, or a ``.npy`` file of dicts as NeMo writes its packed
    rows (:func:`packing.layouts.megatron.write_npy`), by extension, atomically. O(values).

    >>> import os, tempfile
    >>> from packing import pack
    >>> target = os.path.join(tempfile.mkdtemp(), "blocks.jsonl")
    >>> write_table(export(pack([[1, 2], [3]], 4), "flattening"), target)
    >>> open(target).read()
    '{"input_ids": [1, 2, 3], "labels": [-100, 2, -100], "position_ids": [0, 1, 0]}\\n'
    """
    import pyarrow.parquet as pq

    suffix = Path(path).suffix.lower()
    if suffix not in (".parquet", ".jsonl", ".npy"):
        raise SettingError("output", "a .parquet, .jsonl or .npy path", os.fspath(path))
    if suffix == ".npy":
        write_npy(table, path)
        return
    with atomic_path(path) as temporary:
        if suffix == ".parquet":
            pq.write_table(table, temporary)
            return
        with open(temporary, "w", encoding="utf-8") as handle:
            for chunk in table.to_batches(max_chunksize=1024):
                for row in chunk.to_pylist():
                    handle.write(json.dumps(row) + "\n")


Blocks = PackedBatch | LazyBatch
"""What the writers take: a made batch, or a plan and its samples made chunk by chunk while written."""


def write_parquet(
    batch: Blocks, path: PathType, order: npt.ArrayLike | None = None, *, chunk_tokens: int | None = None
) -> None:
    """Write one row per block (the schema's columns), in ``order`` (default plan order), atomically, one
    Parquet row group per chunk of about ``chunk_tokens`` token slots (default
    ``packing.batches.packed.CHUNK_TOKENS``, about 4 M): a ``LazyBatch`` is made chunk by chunk as it is written,
    so memory holds one chunk of the output, not all of it. O(blocks × max_seq_length).

    >>> import pyarrow.parquet as pq, tempfile, os
    >>> from packing import pack
    >>> target = os.path.join(tempfile.mkdtemp(), "blocks.parquet")
    >>> write_parquet(pack([[1, 2], [3, 4, 5], [6]], 4, strategy="split"), target, order=[1, 0])
    >>> pq.read_table(target).column("input_ids").to_pylist()
    [[5, 6, 0, 0], [1, 2, 3, 4]]
    """
    import pyarrow.parquet as pq

    with atomic_path(path) as temporary, pq.ParquetWriter(temporary, arrow_schema(batch.int64)) as writer:
        for chunk in batch.chunks(order, chunk_tokens):
            writer.write_table(chunk.to_arrow(), row_group_size=chunk.num_blocks)


def write_jsonl(
    batch: Blocks, path: PathType, order: npt.ArrayLike | None = None, *, chunk_tokens: int | None = None
) -> None:
    """Write one JSON object per block and line (the schema's columns), in ``order``, atomically, chunk by
    chunk as ``write_parquet``. O(blocks × max_seq_length).

    >>> import json, tempfile, os
    >>> from packing import pack
    >>> target = os.path.join(tempfile.mkdtemp(), "blocks.jsonl")
    >>> write_jsonl(pack([[1, 2], [3]], 4), target)
    >>> json.loads(open(target).readline())["labels"]
    [-100, 2, -100, -100]
    """
    with atomic_path(path) as temporary, open(temporary, "w", encoding="utf-8") as handle:
        for chunk in batch.chunks(order, chunk_tokens):
            for part in chunk.to_arrow().to_batches(max_chunksize=1024):
                columns = [part.column(name).to_pylist() for name in NAMES]
                for values in zip(*columns, strict=True):
                    handle.write(json.dumps(dict(zip(NAMES, values, strict=True))) + "\n")
