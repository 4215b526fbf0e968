"""PackedDataset: a map-style dataset of packed blocks, from a PackedBatch or a packed file.
Internal: the public names are in ``packing.torch``.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from torch.utils.data import Dataset

from packing.batches._packed import PackedBatch, block_arrays
from packing.batches._schema import COLUMNS, LOSS_WEIGHTS, NAMES, UNIT_GRID
from packing.core._arrays import offsets_of, row_at
from packing.core._pairs_groups import UNIT_COLUMNS
from packing.errors import DatasetError, SettingError
from packing.layouts import takes_layout
from packing.layouts.audit import AuditReport, audit
from packing.reading._mapped import open_mapped
from packing.torch._schedule import Int64Array
from packing.weighting import LossMode

# ---------------------------------------------------------------- dataset

BLOCK_COLUMNS = NAMES
_DTYPES = {column.name: column.dtype_for(int64=True) for column in (*COLUMNS, *UNIT_GRID, LOSS_WEIGHTS)}
"""Item dtypes: the schema's, with ids, labels and positions as int64 (what embeddings and cross-entropy take),
whatever the dtype stored."""


class PackedDataset(Dataset[dict[str, torch.Tensor]]):
    """A map-style dataset of packed blocks: item ``i`` is block ``i`` as tensors ``input_ids``, ``labels``,
    ``position_ids`` (int64, whatever the stored dtype: what embeddings and cross-entropy take), ``loss_mask``
    (int8), ``sequence_ids`` (int32, -1 in padding), all of the block's length (``max_seq_length`` for this
    project's blocks), and ``seq_lengths`` (int32, the block's documents).

    ``source`` is a ``PackedBatch`` or the path of a packed file with the schema's columns: Parquet
    (``packing pack ... --output x.parquet``) or an Arrow IPC file (``.arrow``, ``.feather``, ``.ipc``; e.g.
    ``batch.to_arrow()`` written with ``pyarrow.ipc.new_file``). A file is opened through a memory map and never
    loaded whole: Parquet is decoded one row group at a time, on demand (the last few are kept); an Arrow IPC
    file is read in place (zero-copy). The dataset pickles without its open file, so DataLoader workers each open
    their own. ``collate`` turns a list of items into the padding-free batch, ``collate_fixed`` stacks them.
    Items also carry ``loss_weights`` (float32) when the file has that column, or for a ``PackedBatch`` with
    ``loss_weights=mode`` (normalised over every block; ``packing.weighting``), and the unit columns
    (``packing.core._pairs_groups.UNIT_COLUMNS``: ``unit_ids``, ``document_ids``, ``completion_ids``,
    ``prediction_positions``, ``unit_kinds``) for blocks of preference pairs and completion groups, which
    ``collate`` reads back and ``packing.torch.attention_mask`` builds a shared prompt's mask from.
    O(max_seq_length) per item, plus decoding a row group when it is first touched.

    Any other layout :func:`packing.audit` recognises (TRL, transformers flattening, torchtune, NeMo's ``.npy``,
    segment ids; a file, a ``pyarrow.Table``, a ``datasets.Dataset`` or a dict of columns) is read whole and
    converted to these columns block by block on the fly
    (:meth:`~packing.layouts.common.PackedLayout.block_columns`); ``layout`` forces its layout. ``report`` is
    the audit of the source, the same findings ``packing audit`` gives.

    >>> import packing
    >>> data = PackedDataset(packing.pack([[1, 2], [3, 4, 5], [6]], 4, strategy="bfd"))
    >>> len(data), data[0]["input_ids"].tolist(), data[0]["seq_lengths"].tolist()
    (2, [3, 4, 5, 6], [3, 1])
    >>> import pyarrow as pa
    >>> trl = PackedDataset(pa.table({"input_ids": [[1, 2, 3, 4]], "seq_lengths": [[3, 1]]}))
    >>> trl[0]["labels"].tolist(), trl[0]["position_ids"].tolist(), trl.report.layout, trl.report.findings
    ([-100, 2, 3, -100], [0, 1, 2, 0], 'trl', ())
    """

    @takes_layout
    def __init__(
        self,
        source: Any,
        *,
        cached_row_groups: int = 2,
        layout: str | None = None,
        loss_weights: LossMode | None = None,
    ) -> None:
        self._weights: npt.NDArray[np.float32] | None = None
        self._columns: tuple[str, ...] = BLOCK_COLUMNS
        self._batch: PackedBatch | None = None
        self._path: str | None = None
        self._file: Any = None
        self._cache: dict[int, dict[str, tuple[Int64Array, npt.NDArray[Any]]]] = {}
        self._cached_row_groups = cached_row_groups
        self._report: AuditReport | None = None
        if isinstance(source, PackedBatch):
            self._batch = source
            self._length = source.num_blocks
            if source.units is not None:
                self._columns = (*BLOCK_COLUMNS, *UNIT_COLUMNS)
            if loss_weights is not None:
                self._weights = source.loss_weights(loss_weights)
                self._columns = (*BLOCK_COLUMNS, LOSS_WEIGHTS.name)
            return
        if isinstance(source, (str, os.PathLike)) and layout in (None, "packing") and self._open_native(source):
            if loss_weights is not None and LOSS_WEIGHTS.name not in self._columns:
                raise DatasetError(os.fspath(source), None, "no 'loss_weights' column (to_arrow(loss_weights=...))")
            return
        if loss_weights is not None:
            raise SettingError("loss_weights", "a PackedBatch or a file of this project's columns", loss_weights)
        self._report = audit(source, layout=layout)
        self._length = self._report.num_blocks

    def _open_native(self, source: str | os.PathLike[str]) -> bool:
        """Open a Parquet or Arrow IPC file with the schema's columns in place; ``False`` for anything else."""
        import pyarrow as pa

        self._path = os.fspath(source)
        handle = self._open()
        if handle is None:
            self._path = None
            return False
        self._ipc = isinstance(handle, pa.ipc.RecordBatchFileReader)
        names = handle.schema.names if self._ipc else handle.schema_arrow.names
        if any(c not in names for c in BLOCK_COLUMNS):
            self._path = self._file = None
            return False
        if "completion_ids" in names:  # blocks of pairs and groups: the unit columns the file has
            self._columns = (*self._columns, *(name for name in UNIT_COLUMNS if name in names))
        if LOSS_WEIGHTS.name in names:
            self._columns = (*self._columns, LOSS_WEIGHTS.name)
        if self._ipc:
            rows = [handle.get_batch(g).num_rows for g in range(handle.num_record_batches)]
        else:
            rows = [handle.metadata.row_group(g).num_rows for g in range(handle.num_row_groups)]
        self._group_starts = offsets_of(rows)
        self._length = int(self._group_starts[-1])
        return True

    @property
    def report(self) -> AuditReport:
        """The audit of the source (:func:`packing.audit`): its layout, documents and findings. O(tokens) the first
        time for this project's own files and batches, kept after."""
        if self._report is None:
            source = self._batch.to_arrow() if self._batch is not None else self._path
            self._report = audit(source, name=self._path)
        return self._report

    def _open(self) -> Any:
        if self._file is None and self._path is not None:
            self._file = open_mapped(self._path)
        return self._file

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_file"] = None
        state["_cache"] = {}
        return state

    def __len__(self) -> int:
        return self._length

    def _row_group(self, group: int) -> dict[str, tuple[Int64Array, npt.NDArray[Any]]]:
        if group not in self._cache:
            handle = self._open()
            if self._ipc:
                table = handle.get_batch(group).select(list(self._columns))  # zero-copy from the memory map
            else:
                table = handle.read_row_group(group, columns=list(self._columns))
            columns = {}
            for name in self._columns:
                column = table.column(name)
                array = column.combine_chunks() if hasattr(column, "combine_chunks") else column
                offsets = array.offsets.to_numpy().astype(np.int64)
                values = array.values.to_numpy(zero_copy_only=False)
                columns[name] = (offsets - offsets[0], values[offsets[0] : offsets[-1]])
            while len(self._cache) >= max(1, self._cached_row_groups):
                self._cache.pop(next(iter(self._cache)))
            self._cache[group] = columns
        return self._cache[group]

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        if not -self._length <= index < self._length:
            raise IndexError(f"PackedDataset: block {index} does not exist; there are {self._length}")
        index %= self._length
        arrays: dict[str, npt.NDArray[Any]]
        if self._batch is None and self._path is None:
            arrays = self.report.packed.block_columns(index)
        elif self._batch is not None:
            arrays = block_arrays(self._batch, index)  # the schema's columns, the unit columns too
            if self._weights is not None:
                arrays[LOSS_WEIGHTS.name] = self._weights[index]
        else:
            group = row_at(self._group_starts, index)
            local = index - int(self._group_starts[group])
            arrays = {}
            for name, (offsets, values) in self._row_group(group).items():
                arrays[name] = values[offsets[local] : offsets[local + 1]]
        return {name: torch.from_numpy(np.array(arrays[name], dtype=_DTYPES[name])) for name in self._columns}
