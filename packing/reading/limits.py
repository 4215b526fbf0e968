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
JsonScan(rows=2, longest_line=25, values=3)
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
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any, NamedTuple

import numpy as np
import numpy.typing as npt
from numba import njit

from packing.core.arrays import compile_for
from packing.core.validation import check_integer
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
        for name in _BOUNDS:
            value = getattr(self, name)
            if value is None and name != "max_depth":
                continue
            check_integer(value, name, optional=name != "max_depth")

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


_BOUNDS = ("max_bytes", "max_tokens", "max_rows", "max_depth", "max_line_bytes", "max_length_tokens", "max_values")


NO_LIMITS = ReadLimits()
"""What readers apply when given none: only the JSON nesting limit."""


def limits_of(limits: ReadLimits | None) -> ReadLimits:
    """``limits``, or :data:`NO_LIMITS`; anything else is a SettingError."""
    if limits is None:
        return NO_LIMITS
    if not isinstance(limits, ReadLimits):
        raise SettingError("limits", "a packing.reading.limits.ReadLimits or None", limits)
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
    """What a scan of JSON text found: non-blank lines, the longest line (bytes) and about how many values
    (an upper bound: commas outside strings plus one a line)."""

    rows: int
    longest_line: int
    values: int


@njit(cache=True, nogil=True)
def _scan(
    data: npt.NDArray[np.uint8], max_depth: int, max_line: int
) -> tuple[int, int, int, int, int]:  # pragma: no cover
    """(status, line, rows, longest, commas): commas outside strings; status 0 = fine, 1 = nested deeper than ``max_depth`` at ``line``,
    2 = ``line`` longer than ``max_line`` bytes (0 = no limit). Brackets inside strings do not count; a raw
    newline ends any string (JSON strings cannot hold one), so an unclosed quote hides nothing after it. O(bytes)."""
    depth = 0
    in_string = False
    escaped = False
    line = 1
    line_start = 0
    rows = 0
    content = False
    longest = 0
    commas = 0
    for i in range(len(data)):
        c = data[i]
        if c == 10:
            longest = max(longest, i - line_start)
            rows += content
            content = False
            in_string = False
            escaped = False
            line += 1
            line_start = i + 1
            continue
        if max_line and i - line_start >= max_line:
            return 2, line, rows, longest, commas
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
                return 1, line, rows, longest, commas
        elif (c == 93 or c == 125) and depth > 0:
            depth -= 1
        elif c == 44:
            commas += 1
    longest = max(longest, len(data) - line_start)
    rows += content
    return 0, line, rows, longest, commas


def scan_json(data: bytes, label: str, limits: ReadLimits = NO_LIMITS) -> JsonScan:
    """Check raw JSON (or JSON lines) before it is parsed: nesting within ``max_depth``, every line within
    ``max_line_bytes``, non-blank lines within ``max_rows``, values (commas outside strings plus one a line:
    an upper bound) within ``max_values``. O(bytes), one compiled pass, no copy.

    >>> scan_json(b"[" + b"0," * 11 + b"0]", "x.json", ReadLimits(max_values=10))
    Traceback (most recent call last):
    ...
    packing.errors.LimitError: x.json: holds about 12 values, more than the limit of 10 (refused before parsing)
    """
    array = np.frombuffer(data, dtype=np.uint8)  # over the caller's buffer (a mapped file): not kept
    depth, line_bytes = int(limits.max_depth), int(limits.max_line_bytes or 0)
    compile_for(_scan, array, depth, line_bytes)  # never compiled on the caller's buffer
    status, line, rows, longest, commas = _scan(array, depth, line_bytes)
    del array
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
    return JsonScan(rows, longest, values)


def _type_depth(kind: Any) -> int:
    """How deeply an Arrow type nests (a list of integers: 1). O(fields)."""
    children = [kind.field(i).type for i in range(kind.num_fields)] if kind.num_fields else []
    return (1 + max(map(_type_depth, children), default=0)) if children else 0


def _leaves(kind: Any) -> int:
    """How many Parquet leaf columns an Arrow type is stored in (a list of integers: 1). O(fields)."""
    return sum(_leaves(kind.field(i).type) for i in range(kind.num_fields)) if kind.num_fields else 1


# ---------------------------------------------------------------- Parquet


def _varint(data: bytes, at: int) -> tuple[int, int]:
    """An unsigned varint of Thrift's compact protocol at ``at`` (a size): the value and where the next byte is.
    O(1)."""
    shift = result = 0
    while True:
        byte = data[at]
        at += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return result, at
        if shift > 70:
            raise ValueError("a varint too long")


def _thrift_int(data: bytes, at: int) -> tuple[int, int]:
    """A zigzag varint of Thrift's compact protocol at ``at`` (an integer field). O(1)."""
    raw, at = _varint(data, at)
    return (raw >> 1) ^ -(raw & 1), at


def _thrift_struct(data: bytes, at: int, wanted: dict[int, Any], depth: int = 0) -> tuple[dict[int, Any], int]:
    """The fields of a compact-protocol struct at ``at`` that ``wanted`` names (field id: True for an integer, a
    dict for a struct and its own wanted fields), every other field skipped; and where the struct ends. O(bytes)."""
    found: dict[int, Any] = {}
    last = 0
    while True:
        header = data[at]
        at += 1
        if header == 0:
            return found, at
        kind, delta = header & 0x0F, header >> 4
        if delta:
            number = last + delta
        else:
            number, at = _thrift_int(data, at)
        last = number
        want = wanted.get(number)
        if kind in (4, 5, 6):
            value, at = _thrift_int(data, at)
            if want is True:
                found[number] = value
        elif kind == 12:
            if depth > 8:
                raise ValueError("a struct nested too deeply")
            inner, at = _thrift_struct(data, at, want if isinstance(want, dict) else {}, depth + 1)
            if isinstance(want, dict):
                found[number] = inner
        else:
            at = _thrift_skip(data, at, kind, depth)


def _thrift_skip(data: bytes, at: int, kind: int, depth: int) -> int:
    """Where a compact-protocol value of ``kind`` at ``at`` ends. O(bytes)."""
    if kind in (1, 2):
        return at
    if kind == 3:
        return at + 1
    if kind in (4, 5, 6):
        return _thrift_int(data, at)[1]
    if kind == 7:
        return at + 8
    if kind == 8:
        size, at = _varint(data, at)
        return at + size
    if kind in (9, 10):
        header = data[at]
        at += 1
        size, element = header >> 4, header & 0x0F
        if size == 15:
            size, at = _varint(data, at)
        for _ in range(size):
            at = at + 1 if element in (1, 2) else _thrift_skip(data, at, element, depth)
        return at
    if kind == 12:
        return _thrift_struct(data, at, {}, depth + 1)[1]
    raise ValueError(f"no Thrift type {kind}")


_PAGE_FIELDS = {2: True, 5: {1: True}, 8: {1: True}}
"""What a Parquet page header says of its size: ``uncompressed_page_size`` (2), and the values of a data page (v1:
5, v2: 8; each its field 1, ``num_values``); ``compressed_page_size`` (3) says where the next page starts."""


def parquet_pages(source: IO[bytes], start: int, size: int) -> tuple[int, int]:
    """``(values, bytes once decompressed)`` of a Parquet column chunk's pages, from their headers (``size`` bytes
    from ``start``, as its metadata says): what the reader will decode, whatever the file's footer claims. O(pages),
    reading the headers only."""
    values = decoded = 0
    at, end = start, start + size
    while at < end:
        source.seek(at)
        head = source.read(min(1 << 16, end - at))
        if not head:
            break
        try:
            found, length = _thrift_struct(head, 0, {**_PAGE_FIELDS, 3: True})
        except (IndexError, ValueError):
            break  # not a page header: the reader says why
        decoded += max(int(found.get(2, 0)), 0)
        values += max(int(found.get(5, found.get(8, {})).get(1, 0)), 0)
        at += length + max(int(found.get(3, 0)), 0)
    return values, decoded


def _chunk_pages(source: IO[bytes], chunk: Any) -> tuple[int, int]:
    """:func:`parquet_pages` of one column chunk (its dictionary page first, if any). O(pages)."""
    start = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
    return parquet_pages(source, int(start), int(chunk.total_compressed_size))


def check_parquet(
    file: pq.ParquetFile,
    columns: list[str] | None,
    label: str,
    limits: ReadLimits,
    rows_are: str = "rows",
    source: IO[bytes] | None = None,
) -> None:
    """Refuse a Parquet file from its metadata alone, before a value is decoded: more than ``max_rows`` rows
    (``rows_are`` names them in messages: samples, blocks); a column (of ``columns``; None = all) holding
    more list values than ``max_tokens`` plus one per row, counted from its column chunks' value counts
    (200 M zeros compress to a few KB but count 200 M); more than ``max_bytes`` of uncompressed column
    data; or types nested deeper than ``max_depth``. With ``source`` (the file's bytes) and a bound on tokens or
    bytes, the pages' own headers are read too (:func:`parquet_pages`: what the reader will decode) and a footer
    that claims less than they hold is refused. O(row groups × columns), O(pages) with ``source``."""
    metadata = file.metadata
    rows = int(metadata.num_rows)
    check_count(label, rows_are, rows, limits.max_rows)
    schema = file.schema_arrow
    wanted = set(schema.names if columns is None else columns)
    for name in wanted:
        depth = _type_depth(schema.field(name).type)
        if depth > limits.max_depth:
            reason = f"column '{name}' is nested {depth} levels deep, more than the limit of {limits.max_depth}"
            raise DatasetError(label, None, reason)
    values: dict[str, int] = {}
    uncompressed = 0
    owners = [field.name for field in schema for _ in range(_leaves(field.type))]  # by position: names may repeat
    for group in range(metadata.num_row_groups):
        row_group = metadata.row_group(group)
        for index in range(row_group.num_columns):
            chunk = row_group.column(index)
            top = owners[index] if len(owners) == row_group.num_columns else chunk.path_in_schema.split(".", 1)[0]
            if columns is None or top in wanted:
                claimed = (int(chunk.num_values), int(chunk.total_uncompressed_size))
                found = claimed
                if source is not None and (limits.max_tokens is not None or limits.max_bytes is not None):
                    found = _chunk_pages(source, chunk)
                    if found[0] > claimed[0] or found[1] > claimed[1]:
                        reason = (
                            f"column '{top}': its pages hold {found[0]:,} values and {found[1]:,} bytes, where the "
                            f"file's metadata says {claimed[0]:,} and {claimed[1]:,}; a footer that does not match "
                            "its data"
                        )
                        raise DatasetError(label, None, reason)
                values[top] = values.get(top, 0) + max(found[0], claimed[0])
                uncompressed += max(found[1], claimed[1])
    if limits.max_tokens is not None:
        for name, count in values.items():
            if count > limits.max_tokens + rows:
                raise LimitError(
                    label,
                    None,
                    f"column '{name}' holds {count:,} values (from the file's metadata), "
                    f"more than the limit of {limits.max_tokens:,} tokens",
                )
    if limits.max_bytes is not None and uncompressed > limits.max_bytes:
        raise LimitError(
            label,
            None,
            f"holds {uncompressed:,} bytes once uncompressed (from the file's metadata), "
            f"more than the limit of {limits.max_bytes:,}",
        )


# ---------------------------------------------------------------- Arrow IPC


def _table(data: bytes, position: int) -> tuple[int, int]:
    """A flatbuffer table at ``position``: its position and its vtable's. O(1)."""
    return position, position - int.from_bytes(data[position : position + 4], "little", signed=True)


def _field(data: bytes, table: tuple[int, int], index: int) -> int:
    """Where field ``index`` of a flatbuffer table is (0: absent). O(1)."""
    position, vtable = table
    size = int.from_bytes(data[vtable : vtable + 2], "little")
    if 4 + 2 * index + 2 > size:
        return 0
    offset = int.from_bytes(data[vtable + 4 + 2 * index : vtable + 6 + 2 * index], "little")
    return position + offset if offset else 0


def _follow(data: bytes, at: int) -> int:
    """The position an offset field at ``at`` points to. O(1)."""
    return at + int.from_bytes(data[at : at + 4], "little")


def ipc_batch_size(metadata: bytes, body: Any) -> tuple[int, int] | None:
    """``(rows, bytes once decoded)`` of an Arrow IPC record batch message, from its header (a flatbuffer: the
    ``Message`` and its ``RecordBatch``) and, for a compressed body, the decoded length each buffer starts with,
    before anything is decompressed; None for another message. A batch of zeros compressed to a few KB decodes
    to gigabytes: this is what lets a reader refuse it first. O(buffers).

    >>> import io, pyarrow as pa
    >>> sink = io.BytesIO()
    >>> table = pa.table({"input_ids": [[1, 2, 3]] * 1000})
    >>> with pa.ipc.new_stream(sink, table.schema, options=pa.ipc.IpcWriteOptions(compression="zstd")) as writer:
    ...     writer.write_table(table)
    >>> reader = pa.ipc.MessageReader.open_stream(pa.BufferReader(sink.getvalue()))
    >>> _ = reader.read_next_message()  # the schema
    >>> message = reader.read_next_message()
    >>> ipc_batch_size(message.metadata.to_pybytes(), message.body)
    (1000, 28004)
    """
    try:
        message = _table(metadata, int.from_bytes(metadata[:4], "little"))
        kind_at = _field(metadata, message, 1)
        if not kind_at or metadata[kind_at] != 3:  # MessageHeader.RecordBatch
            return None
        batch = _table(metadata, _follow(metadata, _field(metadata, message, 2)))
        length_at = _field(metadata, batch, 0)
        rows = int.from_bytes(metadata[length_at : length_at + 8], "little", signed=True) if length_at else 0
        buffers_at = _field(metadata, batch, 2)
        compressed = bool(_field(metadata, batch, 3))
        total = 0
        if buffers_at:
            vector = _follow(metadata, buffers_at)
            count = int.from_bytes(metadata[vector : vector + 4], "little")
            view = memoryview(body) if body is not None else memoryview(b"")
            for index in range(count):
                entry = vector + 4 + 16 * index
                offset = int.from_bytes(metadata[entry : entry + 8], "little", signed=True)
                length = int.from_bytes(metadata[entry + 8 : entry + 16], "little", signed=True)
                if compressed and length >= 8:
                    decoded = int.from_bytes(bytes(view[offset : offset + 8]), "little", signed=True)
                    total += length - 8 if decoded < 0 else decoded
                else:
                    total += max(length, 0)
        return rows, total
    except (IndexError, ValueError):
        return None


def check_ipc(buffer: Any, label: str, limits: ReadLimits, rows_are: str = "rows") -> None:
    """Refuse an Arrow IPC file or stream (its bytes, a ``pyarrow.Buffer``) from its batches' headers, before one is
    decoded: rows past ``max_rows``, or bytes once decoded past ``max_bytes`` (a compressed batch's buffers each
    say their decoded length: :func:`ipc_batch_size`). O(batches), reading headers only; nothing without those
    bounds."""
    import pyarrow as pa

    if limits.max_bytes is None and limits.max_rows is None:
        return
    start = 8 if buffer.size >= 8 and buffer[:6].to_pybytes() == b"ARROW1" else 0
    try:
        reader = pa.ipc.MessageReader.open_stream(pa.BufferReader(buffer[start:]))
        rows = decoded = 0
        while (message := reader.read_next_message()) is not None:
            size = ipc_batch_size(message.metadata.to_pybytes(), message.body)
            if size is None:
                continue
            rows, decoded = rows + size[0], decoded + size[1]
            check_count(label, rows_are, rows, limits.max_rows)
            if limits.max_bytes is not None and decoded > limits.max_bytes:
                reason = (
                    f"holds more than the limit of {limits.max_bytes:,} bytes once read (from its batches' headers)"
                )
                raise LimitError(label, None, reason)
    except (StopIteration, pa.ArrowInvalid, OSError):  # the end, or not a stream: the readers say why
        return
