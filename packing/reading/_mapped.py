"""Packed files opened for random access (a data loader reads block ``i`` of a file without reading it whole).

Internal: the public names are in ``packing`` and ``packing.reading``.
"""

from __future__ import annotations

import os
from typing import Any

from packing.errors import DatasetError
from packing.reading._files import format_of
from packing.reading._limits import PathType


def open_mapped(path: PathType) -> Any:
    """A Parquet or Arrow IPC file (by its name's extension, as :func:`format_of` reads it) opened for random access
    through a memory map: a ``pyarrow.parquet.ParquetFile`` (row groups decoded on demand) or a
    ``pyarrow.ipc.RecordBatchFileReader`` (batches read in place, zero-copy); ``None`` for a file of another format.
    Not an Arrow or Parquet file inside: a DatasetError. O(file metadata).

    >>> import pyarrow as pa, pyarrow.parquet as pq, tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "blocks.pq")
    >>> pq.write_table(pa.table({"input_ids": [[1, 2]]}), path)
    >>> open_mapped(path).metadata.num_rows, open_mapped(path + ".jsonl")
    (1, None)
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    label = os.fspath(path)
    try:
        kind = format_of(label)
    except DatasetError:
        return None
    if kind not in ("parquet", "arrow"):
        return None
    try:
        mapped = pa.memory_map(label, "r")
        return pa.ipc.open_file(mapped) if kind == "arrow" else pq.ParquetFile(mapped)
    except pa.ArrowInvalid as error:
        raise DatasetError(
            label, None, f"not {'an Arrow IPC' if kind == 'arrow' else 'a Parquet'} file ({str(error)[:60]})"
        ) from error
