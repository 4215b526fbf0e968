"""What one file of a dataset is and holds: the :class:`File` (where it is, how messages name it, its format),
opened for reading (:func:`opened`), and its :class:`Content` once decoded: :class:`Part` s of rows (Arrow
tables pyarrow decoded, or Python rows), a histogram's lengths, or a Parquet or Arrow file's :class:`Batches`
not yet decoded. Internal.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Iterable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from packing.errors import DatasetError, LimitError, first_line, quote
from packing.reading._limits import NO_LIMITS, ReadLimits, check_count, open_input

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
    """The one-line error for a file pyarrow cannot decode as ``kind``."""
    return DatasetError(file.label, None, f"not a readable {kind} file ({quote(first_line(error), 80)})")


_BATCH_VALUES = 1 << 22
"""About how many list values one batch of a Parquet or Arrow file holds once decoded (rows of a batch: from
the file's metadata), so that reading a file holds one batch of it at a time."""
_BATCH_BYTES = 1 << 26
"""About how many bytes one batch holds once decoded."""
_TEXT_BATCH_BYTES = 1 << 22
"""About how many bytes one batch of text rows (strings, messages) holds once decoded: what bounds the ids
its tokenization makes at once (a character may be a token)."""


def list_values(column: Any) -> int:
    """The values of a list column (from its offsets; 0 for another type). O(chunks).

    >>> import pyarrow as pa
    >>> list_values(pa.chunked_array([[[1, 2], [3]], [[4]]])), list_values(pa.array([1, 2]))
    (4, 0)
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = column.type
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        return int(pc.sum(pc.list_value_length(column)).as_py() or 0)
    return 0


@dataclass(eq=False)
class Batches:
    """A Parquet or Arrow file's wanted ``columns``, checked and not yet decoded: iterated, its record batches
    as tables of about :data:`_BATCH_VALUES` list values (and :data:`_BATCH_BYTES` bytes), one at a time;
    :meth:`read` gives the whole table. What pyarrow decodes is counted as it is (``nbytes``, list values) and
    refused past ``limits`` (a footer that claims less than its pages hold is caught there). Iterating or
    reading once closes the file it owns. Made by :func:`packing.reading._files.decode`.

    >>> import io
    >>> import pyarrow as pa, pyarrow.parquet as pq
    >>> from packing.reading._files import decode
    >>> buffer = io.BytesIO()
    >>> pq.write_table(pa.table({"input_ids": [[1, 2], [3], []]}), buffer, row_group_size=2)
    >>> batches = decode(File(buffer, "d.parquet", "parquet")).batches
    >>> batches.num_rows, batches.values(["input_ids"]), [t.num_rows for t in batches]
    (3, 4, [3])
    """

    file: File
    kind: str
    schema: pa.Schema
    """The wanted columns' Arrow schema."""
    file_columns: tuple[str, ...]
    num_rows: int
    counts: dict[str, int]
    """An upper bound on each wanted column's list values."""
    decoded: int
    """About how many bytes the wanted columns take once decoded."""
    make: Callable[[int], Iterable[pa.RecordBatch]]
    """The wanted columns' record batches of at most so many rows, in order."""
    owned: ExitStack = field(default_factory=ExitStack)
    limits: ReadLimits = NO_LIMITS
    rows_are: str = "rows"
    nbytes: int = 0

    @property
    def columns(self) -> list[str]:
        return list(self.schema.names)

    def values(self, columns: Collection[str]) -> int:
        """An upper bound on the list values of ``columns`` (of the wanted ones). O(columns)."""
        return sum(count for name, count in self.counts.items() if name in columns)

    def rows_per_batch(self) -> int:
        """Rows of one batch: about :data:`_BATCH_VALUES` list values and :data:`_BATCH_BYTES` bytes
        (:data:`_TEXT_BATCH_BYTES` when a column holds text or messages: each character may be a token once
        tokenized). O(columns)."""
        import pyarrow as pa

        rows = max(1, self.num_rows)
        by_values = _BATCH_VALUES * rows / max(1, self.values(self.columns))

        def plain(kind: Any) -> bool:
            if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
                kind = kind.value_type
            return bool(pa.types.is_integer(kind) or pa.types.is_boolean(kind) or pa.types.is_null(kind))

        flat = all(plain(kind) for kind in self.schema.types)
        by_bytes = (_BATCH_BYTES if flat else _TEXT_BATCH_BYTES) * rows / max(1, self.decoded)
        return int(min(1 << 16, max(1, min(by_values, by_bytes))))

    def _count(self, table: Any, values: dict[str, int]) -> None:
        """Count a decoded batch (``values``: each column's list values so far); past ``limits``, a LimitError.
        O(columns)."""
        self.nbytes += int(table.nbytes)
        limit, label = self.limits, self.file.label
        if limit.max_bytes is not None and self.nbytes > limit.max_bytes:
            raise LimitError(label, None, f"holds more than the limit of {limit.max_bytes:,} bytes once read")
        for name, column in zip(table.column_names, table.columns, strict=True):
            if limit.max_tokens is not None:
                values[name] = values.get(name, 0) + list_values(column)
                check_count(
                    label, f"values in column '{name}' once read", values[name], limit.max_tokens + self.num_rows
                )

    def __iter__(self) -> Iterator[pa.Table]:
        import pyarrow as pa

        values: dict[str, int] = {}
        try:
            for batch in self.make(self.rows_per_batch()):
                table = pa.Table.from_batches([batch])
                self._count(table, values)
                yield table
        except (pa.ArrowException, OSError, ValueError) as error:
            if isinstance(error, DatasetError):
                raise
            raise unreadable(self.file, error, self.kind) from None
        finally:
            self.close()

    def read(self) -> pa.Table:
        """The whole table (every batch at once). O(bytes)."""
        import pyarrow as pa

        return pa.concat_tables(list(self), promote_options="none") if self.num_rows else self.schema.empty_table()

    def close(self) -> None:
        """Close the file, if it was opened for these batches."""
        self.owned.close()


@dataclass(frozen=True, eq=False)
class Part:
    """Rows of a file: an Arrow table pyarrow decoded, or Python rows (what pyarrow does not read: a JSON list,
    lines of bare lists of other shapes, a CSV block it refuses), and the place of each in the file."""

    rows: Any
    place: Callable[[int], str]
    refused: Exception | None = None
    """Why pyarrow did not read these rows, when it was asked to (they are Python's ``json``'s then)."""


@dataclass(eq=False)
class Content:
    """What one file holds before the reader judges it: ``parts`` of rows (JSON lines and CSV decoded block by
    block as they are iterated, once), a Parquet or Arrow file's ``batches`` (row ``i`` is ``row i + 1``), or the
    ``lengths`` of a histogram. ``size``: bytes read (counted as the parts are); ``columns``: every column the
    file has, when it says before its rows are read (a CSV header; Parquet and Arrow: ``batches.file_columns``)."""

    file: File
    parts: Iterable[Part] | None = field(default=None, repr=False)
    lengths: Int64Array | None = None
    batches: Batches | None = field(default=None, repr=False)
    columns: tuple[str, ...] = ()
    size: int = 0

    @property
    def bytes_read(self) -> int:
        """Bytes read or decoded: ``size``, or what the ``batches`` decoded so far. O(1)."""
        return self.batches.nbytes if self.batches is not None else self.size

    @property
    def rows(self) -> list[Any]:
        """Every row of the parts, as Python values (for tests and small files). O(rows)."""
        return [
            row
            for part in self.parts or ()
            for row in (part.rows if isinstance(part.rows, list) else part.rows.to_pylist())
        ]
