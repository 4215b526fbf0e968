"""Reading files nobody vouched for: one opener, bounds checked before decoding, JSON scanned before parsing.

Every reader of the library (``read_dataset``, ``read_packed``, ``audit``, hence the command line and the
explorer) opens paths with :func:`open_input`, which refuses anything that is not a regular file (a FIFO,
a device, a socket; a symlink is followed first) before reading a byte and without blocking. JSON text is
scanned by :func:`scan_json` (one compiled pass over the raw bytes, O(bytes), no allocation) before any
parser sees it: nesting deeper than :attr:`ReadLimits.max_depth` is refused, so no parser can recurse
until the process crashes (``pyarrow.json`` segfaults on 10,000 levels). :class:`ReadLimits` holds the
optional bounds a caller such as a server passes (``limits=``): bytes, tokens and rows, checked from a
file's size or a Parquet file's metadata before anything is decoded. They bound a whole dataset: over the
files of a folder, the totals count (:meth:`ReadLimits.after` is what the files read so far left).

>>> limits = ReadLimits(max_bytes=1_000, max_tokens=100)
>>> scan_json(b'{"input_ids": [[1], [2]]}\\n\\n[3]\\n', "x.jsonl", limits)
JsonScan(rows=2, values=3)
>>> scan_json(b"[" * 100 + b"]" * 100, "x.json", limits)
Traceback (most recent call last):
...
packing.errors.DatasetError: x.json, line 1: JSON nested too deeply (more than 64 levels; refused before parsing)

Internal: the public names are in ``packing`` and ``packing.reading``.
"""

from __future__ import annotations

import dataclasses
import io
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any, NamedTuple

import numpy as np
import numpy.typing as npt
from numba import njit

from packing.core._arrays import compile_for
from packing.core._validation import check_integer
from packing.errors import DatasetError, LimitError, SettingError

if TYPE_CHECKING:  # pragma: no cover - typing only
    import pyarrow.parquet as pq

PathType = str | os.PathLike[str]

MAX_JSON_DEPTH = 64
"""Default nesting limit of JSON input: samples need 6 levels at most (a list of rows of messages of parts)."""


@dataclass(frozen=True)
class ReadLimits:
    """Bounds on one input (all its files together), checked before it is decoded; ``None`` = unbounded.

    - ``max_bytes``: bytes of the file (JSON, JSON lines, CSV, Arrow), or of a Parquet file's column data
      once uncompressed (from its metadata);
    - ``max_tokens``: tokens the input holds (packed data: positions over all blocks); a Parquet file's list
      values are counted from its metadata;
    - ``max_length_tokens``: tokens lengths-only input stands for (the sum of its lengths: planning them costs
      O(sequences), not O(tokens), so a caller may allow far more); None = ``max_tokens`` applies;
    - ``max_values``: values JSON text spells out (commas outside strings, plus one a line), counted by
      :func:`scan_json` before it is parsed (ids, labels and masks: a few per token);
    - ``max_rows``: samples (``read_dataset``) or blocks (``read_packed``, ``audit``);
    - ``max_depth``: nesting of JSON values (always checked);
    - ``max_line_bytes``: bytes of one line of JSON lines.

    >>> ReadLimits(max_tokens=10**6).max_tokens
    1000000
    >>> ReadLimits(max_bytes=-1)
    Traceback (most recent call last):
    ...
    packing.errors.SettingError: max_bytes: expected None or an integer >= 1, got -1
    """

    max_bytes: int | None = None
    max_tokens: int | None = None
    max_rows: int | None = None
    max_depth: int = MAX_JSON_DEPTH
    max_line_bytes: int | None = None
    max_length_tokens: int | None = None
    max_values: int | None = None

    def __post_init__(self) -> None:
        for bound in dataclasses.fields(self):
            value = getattr(self, bound.name)
            if value is not None or bound.name == "max_depth":
                check_integer(value, bound.name, optional=bound.name != "max_depth")

    @property
    def length_tokens(self) -> int | None:
        """The bound on the tokens lengths-only input stands for: ``max_length_tokens``, else ``max_tokens``.

        >>> ReadLimits(max_tokens=10).length_tokens, ReadLimits(max_tokens=10, max_length_tokens=99).length_tokens
        (10, 99)
        """
        return self.max_tokens if self.max_length_tokens is None else self.max_length_tokens

    def after(self, *, bytes: int = 0, rows: int = 0, tokens: int = 0, values: int = 0) -> ReadLimits:
        """What is left of these bounds once earlier files of the same dataset used ``bytes``, ``rows``,
        ``tokens`` and ``values`` (at least 1 of each: the totals are checked again as they grow). O(1).

        >>> left = ReadLimits(max_bytes=100, max_rows=5).after(bytes=60, rows=5)
        >>> left.max_bytes, left.max_rows, left.max_tokens
        (40, 1, None)
        """

        def left(bound: int | None, used: int) -> int | None:
            return None if bound is None else max(int(bound) - used, 1)

        return dataclasses.replace(
            self,
            max_bytes=left(self.max_bytes, bytes),
            max_rows=left(self.max_rows, rows),
            max_tokens=left(self.max_tokens, tokens),
            max_length_tokens=left(self.max_length_tokens, tokens),
            max_values=left(self.max_values, values),
        )


NO_LIMITS = ReadLimits()
"""What readers apply when given none: only the JSON nesting limit."""


def limits_of(limits: ReadLimits | None) -> ReadLimits:
    """``limits``, or :data:`NO_LIMITS`; anything else is a SettingError."""
    if limits is None:
        return NO_LIMITS
    if not isinstance(limits, ReadLimits):
        raise SettingError("limits", "a packing.reading._limits.ReadLimits or None", limits)
    return limits


# ---------------------------------------------------------------- opening


def _os_reason(error: OSError) -> str:
    """Why a file could not be opened, in a few words."""
    if isinstance(error, FileNotFoundError):
        return "no such file"
    if isinstance(error, IsADirectoryError):
        return "is a directory, expected a file"
    if isinstance(error, PermissionError):
        return "permission denied"
    return f"cannot read the file ({error.strerror or error})"


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _refuse_special(mode: int, label: str) -> None:
    if stat.S_ISDIR(mode):
        raise DatasetError(label, None, "is a directory, expected a file")
    if not stat.S_ISREG(mode):
        raise DatasetError(label, None, f"is {_kind(mode)}, expected a regular file")


def open_input(path: PathType, label: str) -> IO[bytes]:
    """``path`` opened for binary reading if it is a regular file (symlinks followed); a DatasetError otherwise.

    Checked with ``os.stat`` before opening, and again on the open descriptor (``O_NONBLOCK``, so a FIFO put
    in its place meanwhile cannot block): a FIFO, a device or a socket is refused before a byte is read.

    >>> open_input("/dev/zero", "zeros.jsonl")
    Traceback (most recent call last):
    ...
    packing.errors.DatasetError: zeros.jsonl: is a device, expected a regular file
    """
    try:
        _refuse_special(os.stat(path).st_mode, label)
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as error:
        raise DatasetError(label, None, _os_reason(error)) from None
    try:
        _refuse_special(os.fstat(descriptor).st_mode, label)
        os.set_blocking(descriptor, True)
    except BaseException:
        os.close(descriptor)
        raise
    return os.fdopen(descriptor, "rb")


# ---------------------------------------------------------------- sizes


def _size(handle: IO[bytes]) -> int | None:
    """Bytes left to read in ``handle``, when it can tell (a file or a seekable object); None otherwise."""
    try:
        if handle.seekable():
            here = handle.tell()
            end = handle.seek(0, io.SEEK_END)
            handle.seek(here)
            return max(end - here, 0)
    except (OSError, ValueError, AttributeError):
        return None
    return None


def too_many(label: str, what: str, count: int, limit: int, where: str | None = None) -> LimitError:
    """The refusal of an input over a limit: ``label: holds 2,000 tokens, more than the limit of 1,000``."""
    return LimitError(label, where, f"holds {count:,} {what}, more than the limit of {limit:,}")


def check_size(handle: IO[bytes], label: str, limits: ReadLimits) -> None:
    """Refuse a file larger than ``max_bytes`` from its size, before reading it (when its size is known). O(1)."""
    size = _size(handle) if limits.max_bytes is not None else None
    if limits.max_bytes is not None and size is not None and size > limits.max_bytes:
        raise too_many(label, "bytes", size, limits.max_bytes)


def read_bounded(handle: IO[bytes], label: str, limits: ReadLimits) -> bytes:
    """The whole content of ``handle``, refused past ``max_bytes`` (from its size first; never reads more
    than one byte past the limit). O(bytes)."""
    check_size(handle, label, limits)
    if limits.max_bytes is None:
        return handle.read()
    data = handle.read(limits.max_bytes + 1)
    if len(data) > limits.max_bytes:
        raise LimitError(label, None, f"holds more than the limit of {limits.max_bytes:,} bytes")
    return data


def check_count(label: str, what: str, count: int, limit: int | None) -> None:
    """Refuse ``count`` ``what`` (tokens, rows, blocks) over ``limit``. O(1)."""
    if limit is not None and count > limit:
        raise too_many(label, what, count, limit)


# ---------------------------------------------------------------- JSON


class JsonScan(NamedTuple):
    """What a scan of JSON text found: non-blank lines and about how many values (an upper bound: commas
    outside strings plus one a line)."""

    rows: int
    values: int


@njit(cache=True, nogil=True)
def _scan(data: npt.NDArray[np.uint8], max_depth: int, max_line: int) -> tuple[int, int, int, int]:  # pragma: no cover
    """(status, line, rows, commas): commas outside strings; status 0 = fine, 1 = nested deeper than ``max_depth`` at ``line``,
    2 = ``line`` longer than ``max_line`` bytes (0 = no limit). Brackets inside strings do not count; a raw
    newline ends any string (JSON strings cannot hold one), so an unclosed quote hides nothing after it. O(bytes)."""
    depth = 0
    in_string = False
    escaped = False
    line = 1
    line_start = 0
    rows = 0
    content = False
    commas = 0
    for i in range(len(data)):
        c = data[i]
        if c == 10:
            rows += content
            content = False
            in_string = False
            escaped = False
            line += 1
            line_start = i + 1
            continue
        if max_line and i - line_start >= max_line:
            return 2, line, rows, commas
        if c != 32 and c != 9 and c != 13:
            content = True
        if in_string:
            if escaped:
                escaped = False
            elif c == 92:
                escaped = True
            elif c == 34:
                in_string = False
        elif c == 34:
            in_string = True
        elif c == 91 or c == 123:
            depth += 1
            if depth > max_depth:
                return 1, line, rows, commas
        elif (c == 93 or c == 125) and depth > 0:
            depth -= 1
        elif c == 44:
            commas += 1
    rows += content
    return 0, line, rows, commas


def scan_json(data: bytes, label: str, limits: ReadLimits = NO_LIMITS, first_line: int = 1) -> JsonScan:
    """Check raw JSON (or JSON lines) before it is parsed: nesting within ``max_depth``, every line within
    ``max_line_bytes``, non-blank lines within ``max_rows``, values (commas outside strings plus one a line:
    an upper bound) within ``max_values``; lines are named from ``first_line``. O(bytes), one compiled pass, no copy.

    >>> scan_json(b"[" + b"0," * 11 + b"0]", "x.json", ReadLimits(max_values=10))
    Traceback (most recent call last):
    ...
    packing.errors.LimitError: x.json: holds about 12 values, more than the limit of 10 (refused before parsing)
    """
    array = np.frombuffer(data, dtype=np.uint8)  # over the caller's buffer (a mapped file): not kept
    depth, line_bytes = int(limits.max_depth), int(limits.max_line_bytes or 0)
    compile_for(_scan, array, depth, line_bytes)  # never compiled on the caller's buffer
    status, line, rows, commas = _scan(array, depth, line_bytes)
    del array
    line += first_line - 1
    if status == 1:
        where = f"line {line}"
        raise DatasetError(
            label, where, f"JSON nested too deeply (more than {limits.max_depth} levels; refused before parsing)"
        )
    if status == 2:
        raise DatasetError(label, f"line {line}", f"a line longer than the limit of {limits.max_line_bytes:,} bytes")
    check_count(label, "lines", rows, limits.max_rows)
    values = commas + max(rows, 1)
    if limits.max_values is not None and values > limits.max_values:
        reason = f"holds about {values:,} values, more than the limit of {limits.max_values:,} (refused before parsing)"
        raise LimitError(label, None, reason)
    return JsonScan(rows, values)


def _type_depth(kind: Any) -> int:
    """How deeply an Arrow type nests (a list of integers: 1). O(fields)."""
    children = [kind.field(i).type for i in range(kind.num_fields)] if kind.num_fields else []
    return (1 + max(map(_type_depth, children), default=0)) if children else 0


# ---------------------------------------------------------------- Parquet


def _leaves(kind: Any) -> int:
    """How many Parquet leaf columns an Arrow type is stored in (a list of integers: 1). O(fields)."""
    return sum(_leaves(kind.field(i).type) for i in range(kind.num_fields)) if kind.num_fields else 1


def column_chunks(file: pq.ParquetFile) -> Iterator[tuple[str, Any]]:
    """Each column chunk of a Parquet file's row groups with the top-level column it stores, told by position
    (a name may hold a dot, or repeat). O(row groups × columns)."""
    owners = [field.name for field in file.schema_arrow for _ in range(_leaves(field.type))]
    metadata = file.metadata
    for group in range(metadata.num_row_groups):
        row_group = metadata.row_group(group)
        for index in range(row_group.num_columns):
            yield owners[index], row_group.column(index)


def check_parquet(
    file: pq.ParquetFile, columns: list[str] | None, label: str, limits: ReadLimits, rows_are: str = "rows"
) -> tuple[dict[str, int], int]:
    """Refuse a Parquet file from its footer's own numbers, before a value is decoded: more than ``max_rows``
    rows (``rows_are`` names them: samples, blocks); a column (of ``columns``; None = all) holding more list
    values than ``max_tokens`` plus one per row (200 M zeros compress to a few KB but count 200 M); more than
    ``max_bytes`` of uncompressed column data; types nested deeper than ``max_depth``. A footer that lies is
    caught as the batches are read (:class:`packing.reading._content.Batches` counts what pyarrow decodes) and,
    for a server, by the memory limit of the process it reads in. What the footer counts is returned: each
    column's list values (an upper bound) and the bytes of the columns once uncompressed. O(row groups × columns).

    >>> import io, pyarrow as pa, pyarrow.parquet as pq
    >>> buffer = io.BytesIO()
    >>> pq.write_table(pa.table({"input_ids": [[0] * 1000] * 10}), buffer)
    >>> check_parquet(pq.ParquetFile(buffer), None, "zeros.parquet", ReadLimits(max_tokens=100))
    Traceback (most recent call last):
    ...
    packing.errors.LimitError: zeros.parquet: column 'input_ids' holds 10,000 values (from the file's metadata), more than the limit of 100 tokens
    """
    schema = file.schema_arrow
    rows = int(file.metadata.num_rows)
    check_count(label, rows_are, rows, limits.max_rows)
    wanted = set(schema.names if columns is None else columns)
    for name in wanted:
        depth = _type_depth(schema.field(name).type)
        if depth > limits.max_depth:
            reason = f"column '{name}' is nested {depth} levels deep, more than the limit of {limits.max_depth}"
            raise DatasetError(label, None, reason)
    values = dict.fromkeys(schema.names if columns is None else columns, 0)
    uncompressed = 0
    for top, chunk in column_chunks(file):
        if top in wanted:
            values[top] += int(chunk.num_values)
            uncompressed += int(chunk.total_uncompressed_size)
    for name, count in values.items():
        if limits.max_tokens is not None and count > limits.max_tokens + rows:
            reason = f"column '{name}' holds {count:,} values (from the file's metadata), more than the limit of"
            raise LimitError(label, None, f"{reason} {limits.max_tokens:,} tokens")
    if limits.max_bytes is not None and uncompressed > limits.max_bytes:
        reason = f"holds {uncompressed:,} bytes once uncompressed (from the file's metadata), more than the limit of"
        raise LimitError(label, None, f"{reason} {limits.max_bytes:,}")
    return values, uncompressed
