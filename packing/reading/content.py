"""What one file of a dataset is and holds: the :class:`File` (where it is, how messages name it, its format),
opened for reading (:func:`opened`), and its :class:`Content` once decoded: rows with their places, chunks of
rows, a histogram's lengths, or a table's :class:`Batches` not yet decoded. Shared by the decoders of
:mod:`packing.reading.rowfiles` (JSON, JSON lines, CSV) and :mod:`packing.reading.files` (Parquet, Arrow).
Internal.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from packing.errors import DatasetError, quote
from packing.reading.limits import open_input

if TYPE_CHECKING:  # pragma: no cover - typing only
    import pyarrow as pa

Int64Array = npt.NDArray[np.int64]
PathType = str | os.PathLike[str]


@dataclass(frozen=True)
class File:
    """One file of a dataset: a path or a binary file object, how messages name it, its format."""

    source: PathType | IO[bytes]
    label: str
    format: str


@contextmanager
def opened(file: File) -> Iterator[IO[bytes]]:
    """The file opened for binary reading (a path: a regular file), or the file object itself (left open)."""
    if isinstance(file.source, (str, os.PathLike)):
        with open_input(file.source, file.label) as handle:
            yield handle
    else:
        yield file.source


def unreadable(file: File, error: Exception, kind: str) -> DatasetError:
    reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return DatasetError(file.label, None, f"not a readable {kind} file ({quote(reason, 80)})")


_BATCH_VALUES = 1 << 22
"""About how many list values one batch of a Parquet or Arrow file holds once decoded (rows of a batch: from
the file's metadata), so that reading a file holds one batch of it at a time."""
_BATCH_BYTES = 1 << 26
"""About how many bytes one batch holds once decoded."""
_TEXT_BATCH_BYTES = 1 << 22
"""About how many bytes one batch of text rows (strings, messages) holds once decoded: what bounds the ids
its tokenization makes at once (a character may be a token)."""


class Batches:
    """A Parquet or Arrow file's (wanted) columns, checked and not yet decoded: iterated, its record batches
    as tables of about :data:`_BATCH_VALUES` list values (and :data:`_BATCH_BYTES` bytes), one at a time
    (``nbytes`` counts what was decoded); :meth:`read` gives the whole table. Iterating or reading once
    closes the file it owns. Made by :func:`packing.reading.files.decode` (``ParquetBatches``,
    ``ArrowBatches``).

    >>> import io
    >>> import pyarrow as pa, pyarrow.parquet as pq
    >>> from packing.reading.files import decode
    >>> buffer = io.BytesIO()
    >>> pq.write_table(pa.table({"input_ids": [[1, 2], [3], []]}), buffer, row_group_size=2)
    >>> batches = decode(File(buffer, "d.parquet", "parquet")).batches
    >>> batches.num_rows, batches.values(["input_ids"]), [t.num_rows for t in batches]
    (3, 4, [3])
    """

    kind = "Parquet"

    def __init__(self, columns: list[str], file: File, owned: ExitStack) -> None:
        self.columns = columns
        self.file = file
        self.nbytes = 0
        self._owned = owned

    @property
    def schema(self) -> pa.Schema:  # pragma: no cover - each kind of file says
        """The wanted columns' Arrow schema. O(columns)."""
        raise NotImplementedError

    @property
    def num_rows(self) -> int:  # pragma: no cover - each kind of file says
        """Rows of the file. O(1)."""
        raise NotImplementedError

    @property
    def file_columns(self) -> tuple[str, ...]:  # pragma: no cover - each kind of file says
        """Every column of the file, wanted or not. O(columns)."""
        raise NotImplementedError

    def values(self, columns: Collection[str]) -> int:  # pragma: no cover - each kind of file says
        """An upper bound on the list values of ``columns`` (of the wanted ones). O(row groups × columns)."""
        raise NotImplementedError

    def decoded_bytes(self) -> int:  # pragma: no cover - each kind of file says
        """About how many bytes the wanted columns take once decoded. O(row groups × columns)."""
        raise NotImplementedError

    def _batches(self, rows: int) -> Iterator[pa.RecordBatch]:  # pragma: no cover - each kind of file says
        """The wanted columns' record batches of at most ``rows`` rows, in order."""
        raise NotImplementedError

    def _whole(self) -> pa.Table:  # pragma: no cover - each kind of file says
        """The wanted columns as one table."""
        raise NotImplementedError

    def rows_per_batch(self) -> int:
        """Rows of one batch: about :data:`_BATCH_VALUES` list values and :data:`_BATCH_BYTES` bytes
        (:data:`_TEXT_BATCH_BYTES` when a column holds text or messages: each character may be a token once
        tokenized). O(row groups × columns)."""
        import pyarrow as pa

        rows = max(1, self.num_rows)
        by_values = _BATCH_VALUES * rows / max(1, self.values(self.columns))
        kinds = [self.schema.field(name).type for name in self.columns]
        plain = all(
            (
                (pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind))
                and (pa.types.is_integer(kind.value_type) or pa.types.is_boolean(kind.value_type))
            )
            or pa.types.is_integer(kind)
            or pa.types.is_null(kind)
            for kind in kinds
        )
        by_bytes = (_BATCH_BYTES if plain else _TEXT_BATCH_BYTES) * rows / max(1, self.decoded_bytes())
        return int(min(1 << 16, max(1, min(by_values, by_bytes))))

    def __iter__(self) -> Iterator[pa.Table]:
        import pyarrow as pa

        try:
            for batch in self._batches(self.rows_per_batch()):
                self.nbytes += int(batch.nbytes) if self.kind == "Parquet" else 0
                yield pa.Table.from_batches([batch])
        except (pa.ArrowException, OSError, ValueError) as error:
            if isinstance(error, DatasetError):
                raise
            raise unreadable(self.file, error, self.kind) from None
        finally:
            self.close()

    def read(self) -> pa.Table:
        """The whole table (every batch at once). O(bytes)."""
        import pyarrow as pa

        try:
            table = self._whole()
        except (pa.ArrowException, OSError, ValueError) as error:
            raise unreadable(self.file, error, self.kind) from None
        finally:
            self.close()
        self.nbytes = max(self.nbytes, int(table.nbytes))
        return table

    def close(self) -> None:
        """Close the file, if it was opened for these batches."""
        self._owned.close()


@dataclass(frozen=True, eq=False)
class Content:
    """What one file holds before the reader judges it: ``rows`` (Python values; CSV rows as dicts of text
    cells when ``cells``) with the place of each (``line 3``, ``item 2``), a Parquet or Arrow file's ``batches``
    (row ``i`` is ``row i + 1``), or the ``lengths`` of a histogram; decoded in chunks
    (:func:`packing.reading.files.decode`'s ``chunk_bytes``), ``chunks`` of rows and their places, parsed as
    they are iterated (once), instead of ``rows`` (``lines``: the non-blank lines a scan found, 0 if none did).
    ``size``: bytes read or decoded (0 for CSV read as a stream, without ``max_bytes``); ``values``: JSON values
    scanned (an upper bound). Made by :func:`packing.reading.rowfiles.decode_rows` (files of rows) and
    :func:`packing.reading.files.decode` (tables)."""

    file: File
    rows: list[Any] | None = None
    where: list[str] | None = None
    lengths: Int64Array | None = None
    cells: bool = False
    size: int = 0
    values: int = 0
    batches: Batches | None = field(default=None, repr=False)
    chunks: Iterable[tuple[list[Any], list[str]]] | None = field(default=None, repr=False)
    lines: int = 0
    columns: tuple[str, ...] = ()
    """Every column the file has, when it says before its rows are read (a CSV header; Parquet and Arrow:
    ``batches.file_columns``)."""

    @property
    def bytes_read(self) -> int:
        """Bytes read or decoded: ``size``, or what the ``batches`` decoded so far. O(1)."""
        return self.batches.nbytes if self.batches is not None else self.size

    def place(self, index: int) -> str:
        """Where row ``index`` (from 0) is in the file: ``line 3``, ``item 2`` or ``row 7``."""
        return self.where[index] if self.where is not None else f"row {index + 1}"

    @property
    def num_rows(self) -> int:
        """Rows of the file (sequences of a histogram). O(1)."""
        if self.batches is not None:
            return self.batches.num_rows
        if self.chunks is not None:  # not known before they are parsed: the lines scanned (JSON lines), else 0
            return self.lines
        return len(self.rows) if self.rows is not None else len(self.lengths if self.lengths is not None else ())
