"""Files of rows, decoded: JSON lines, JSON (a list of rows, a histogram object, or JSON lines) and CSV, whole
or in chunks of rows parsed as they are read (:func:`decode_rows`: what :func:`packing.reading.files.decode`
gives for these formats). Internal.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import mmap
import os
from collections.abc import Collection, Iterable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from typing import Any

import numpy as np
import numpy.typing as npt

import packing.reading.longrows as longrows
from packing.core.validation import INT32_MAX, INT64_MAX, integer_words, is_integer
from packing.errors import DatasetError, quote
from packing.reading.content import Content, File, opened
from packing.reading.limits import ReadLimits, check_count, check_size, read_bounded, scan_json
from packing.reading.longrows import parse_json as _parse_json
from packing.workloads import workload_from_json

Int64Array = npt.NDArray[np.int64]

EXPECTED = (
    "'input_ids' (with a loss mask), 'prompt' and 'completion', 'length', or text ('text', 'messages'), "
    "or a pair ('prompt', 'chosen', 'rejected') or group ('prompt', 'completions')"
)
"""The columns of samples, for messages."""


def names(columns: Sequence[str]) -> str:
    """Column names quoted and comma-separated (at most a few), for messages.

    >>> names(["input_ids", "note"])
    "'input_ids', 'note'"
    """
    shown = ", ".join(quote(name, 24) for name in columns[:6])
    return (shown + (", ..." if len(columns) > 6 else "")) if columns else "none"


def repeated(columns: Sequence[str]) -> str | None:
    """The first column name ``columns`` holds twice, or None (Parquet and Arrow files may repeat a name; no
    column of a repeated name can be told from the other). O(columns).

    >>> repeated(["input_ids", "labels", "input_ids"]), repeated(["input_ids"])
    ('input_ids', None)
    """
    seen: set[str] = set()
    for name in columns:
        if name in seen:
            return name
        seen.add(name)
    return None


def twice(name: str) -> str:
    """The reason given for a table with two columns named ``name``."""
    return f"two columns named {quote(name, 24)}; expected every column name once"


def decode_rows(
    file: File,
    limits: ReadLimits,
    columns: Collection[str] | None = None,
    rows_are: str = "rows",
    chunk_bytes: int | None = None,
) -> Content:
    """What a JSON lines, JSON or CSV ``file`` holds (see :func:`packing.reading.files.decode`), whole or in
    chunks of about ``chunk_bytes`` bytes of text (a JSON list: about :data:`ROW_BYTES` a row). O(bytes).

    >>> import io
    >>> decode_rows(File(io.BytesIO(b"length\\n3\\n"), "d.csv", "csv"), ReadLimits()).rows
    [{'length': '3'}]
    """
    if file.format == "csv":
        return _csv(file, limits, columns, rows_are, chunk_bytes)
    if file.format == "jsonl" and chunk_bytes is not None:
        return _mapped_json_lines(file, limits, chunk_bytes)
    with opened(file) as handle:
        data = read_bounded(handle, file.label, limits)
    if file.format == "jsonl":
        return _json_lines(data, file, scan_json(data, file.label, limits).values)
    content = read_json(data, file, limits, rows_are, chunk_bytes)
    if chunk_bytes is None or content.rows is None or content.where is None:
        return content
    chunks = _list_chunks(content.rows, content.where, max(1, chunk_bytes // ROW_BYTES))
    return Content(file, size=content.size, values=content.values, chunks=chunks, lines=len(content.rows))


_WHOLE = 1 << 62
"""A chunk size no file reaches: rows decoded whole are one chunk."""
ROW_BYTES = 1 << 10
"""About how many bytes of text a row of a JSON list stands for, to size its chunks."""


def _joined_chunks(chunks: Iterable[tuple[list[Any], list[str]]]) -> tuple[list[Any], list[str]]:
    """The rows and places of ``chunks``, one list each. O(rows)."""
    rows: list[Any] = []
    where: list[str] = []
    for chunk_rows, chunk_where in chunks:
        rows += chunk_rows
        where += chunk_where
    return rows, where


def _json_line_chunks(
    data: bytes | mmap.mmap, label: str, chunk_bytes: int, release: Any = None
) -> Iterator[tuple[list[Any], list[str]]]:
    """One JSON value per line (the bytes scanned), blank lines skipped, in chunks of the rows of about
    ``chunk_bytes`` bytes of lines; ``release(end)`` is called with where each chunk's bytes end. O(bytes)."""
    rows: list[Any] = []
    where: list[str] = []
    held = position = number = 0
    size = len(data)
    while position < size:
        end = data.find(b"\n", position)
        stop = size if end < 0 else end + 1
        long = stop - position >= longrows.LONG_LINE
        raw = memoryview(data)[position:stop] if long else data[position:stop]
        number, position, held = number + 1, stop, held + stop - position
        place = f"line {number}"
        if isinstance(raw, memoryview):  # a long line: its lists of ids straight into arrays, not Python ints
            with raw:
                row = longrows.json_line(raw, label, place)
            if row is not longrows.BLANK:
                rows.append(row)
                where.append(place)
        else:
            try:
                text = raw.decode("utf-8-sig")
            except UnicodeDecodeError:
                raise DatasetError(label, place, "not valid UTF-8 text") from None
            if text.strip():
                rows.append(_parse_json(text.rstrip("\r\n"), label, place))
                where.append(place)
        if held >= chunk_bytes and rows:
            yield rows, where
            rows, where, held = [], [], 0
            if release is not None:
                release(position)
    if rows:
        yield rows, where


def _json_lines(data: bytes, file: File, values: int) -> Content:
    """One JSON value per line (the bytes scanned); blank lines are skipped. O(bytes)."""
    rows, where = _joined_chunks(_json_line_chunks(data, file.label, _WHOLE))
    return Content(file, rows, where, size=len(data), values=values)


def _mapped_json_lines(file: File, limits: ReadLimits, chunk_bytes: int) -> Content:
    """JSON lines as chunks of rows (:func:`_json_line_chunks`): a path's bytes memory-mapped, scanned, and let
    go from this process's memory as each chunk is parsed (they stay in the page cache); a file object's read
    within ``max_bytes``. O(bytes); memory: one chunk's rows and pages."""
    label = file.label
    mapped: mmap.mmap | None = None
    with opened(file) as handle:
        if not isinstance(file.source, (str, os.PathLike)):
            data: bytes | mmap.mmap = read_bounded(handle, label, limits)
        else:
            check_size(handle, label, limits)
            if os.fstat(handle.fileno()).st_size:  # an empty file cannot be mapped
                mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
            data = mapped if mapped is not None else b""
    scan = scan_json(data, label, limits)  # type: ignore[arg-type]  # a buffer, as bytes are
    released = [0]

    def release(end: int) -> None:
        advice = getattr(mmap, "MADV_DONTNEED", None)
        whole = end // mmap.PAGESIZE * mmap.PAGESIZE
        if mapped is not None and advice is not None and whole > released[0]:
            mapped.madvise(advice, released[0], whole - released[0])
            released[0] = whole

    release(len(data))  # the pages the scan read
    released[0] = 0

    def chunks() -> Iterator[tuple[list[Any], list[str]]]:
        try:
            yield from _json_line_chunks(data, label, chunk_bytes, release)
        finally:
            if mapped is not None:
                mapped.close()

    return Content(file, size=len(data), values=scan.values, chunks=chunks(), lines=scan.rows)


def _list_chunks(rows: list[Any], where: list[str], count: int) -> Iterator[tuple[list[Any], list[str]]]:
    """A parsed list's rows in chunks of ``count``, each let go from ``rows`` once given (the list is the
    caller's to drop). O(rows)."""
    for start in range(0, len(rows), count):
        stop = min(start + count, len(rows))
        chunk = rows[start:stop]
        rows[start:stop] = itertools.repeat(None, stop - start)
        yield chunk, where[start:stop]


def read_json(
    raw: bytes, file: File, limits: ReadLimits, rows_are: str = "rows", chunk_bytes: int | None = None
) -> Content:
    """A JSON file's ``raw`` bytes: a list of rows, a histogram object, or (when it is really JSON lines) one
    value per line, whole or (``chunk_bytes``) JSON lines in chunks. O(bytes)."""
    label = file.label
    scan = scan_json(raw, label, ReadLimits(max_depth=limits.max_depth, max_values=limits.max_values))
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = raw[: error.start].count(b"\n") + 1
        raise DatasetError(label, f"line {line}", "not valid UTF-8 text") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        if error.msg == "Extra data":
            lines = scan_json(raw, label, limits)
            if chunk_bytes is None:
                return _json_lines(raw, file, lines.values)
            chunks = _json_line_chunks(raw, label, chunk_bytes)
            return Content(file, size=len(raw), values=lines.values, chunks=chunks, lines=lines.rows)
        data = _parse_json(text, label, None)
    except (RecursionError, ValueError):
        data = _parse_json(text, label, None)
    if isinstance(data, list):
        check_count(label, rows_are, len(data), limits.max_rows)
        where = [f"item {number}" for number in range(1, len(data) + 1)]
        return Content(file, data, where, size=len(raw), values=scan.values)
    if isinstance(data, dict) and ("histogram" in data or "lengths" in data):
        return Content(file, lengths=_histogram(data, label, limits), size=len(raw), values=scan.values)
    found = f"an object with keys {names(list(map(str, data)))}" if isinstance(data, dict) else type(data).__name__
    raise DatasetError(
        label,
        None,
        f"expected a list of rows, one JSON object per line, or an object with 'histogram' or 'lengths'; "
        f"found {quote(found)}",
    )


def _histogram(data: dict[str, Any], label: str, limits: ReadLimits) -> Int64Array:
    """Lengths from a histogram object like ``packing/workloads/*.json``; the sequences and tokens it stands
    for are checked against ``limits`` (and 2**63) from its counts, before it is expanded. O(sequences)."""
    key = "histogram" if "histogram" in data else "lengths"
    values = data[key]
    if not isinstance(values, list):
        raise DatasetError(label, f"key '{key}'", f"expected a list of non-negative integers, got {quote(values)}")
    for position, value in enumerate(values):
        if not is_integer(value) or not 0 <= value <= INT64_MAX:
            raise DatasetError(
                label, f"key '{key}', position {position}", f"expected {integer_words(0)}, got {quote(value)}"
            )
    sequences = sum(values) if key == "histogram" else len(values)
    check_count(label, "sequences", sequences, limits.max_rows)
    if key == "histogram" and sequences > 2**31:
        raise DatasetError(label, f"key '{key}'", f"expected at most 2**31 sequences, got {sequences:,}")
    tokens = sum(length * count for length, count in enumerate(values)) if key == "histogram" else sum(values)
    check_count(label, "tokens", tokens, limits.length_tokens)
    if tokens >= 2**63:
        raise DatasetError(label, f"key '{key}'", f"expected lengths adding up to less than 2**63, got {tokens:,}")
    lengths = workload_from_json(label, {key: values, "max_seq_length": 0}).lengths
    if not len(lengths):
        raise DatasetError(label, None, f"the {key} holds no sequences")
    return np.asarray(lengths, dtype=np.int64)


def _csv(
    file: File, limits: ReadLimits, columns: Collection[str] | None, rows_are: str, chunk_bytes: int | None
) -> Content:
    """A header line with column names, then one row per line as a dict of its (wanted) text cells, whole or
    (``chunk_bytes``) in chunks of the rows of about that many characters of cells, read from the file as
    they are iterated. O(bytes)."""
    if csv.field_size_limit() < INT32_MAX:
        csv.field_size_limit(INT32_MAX)  # long token lists exceed the 128 KiB default (a C long: 32 bits on Windows)
    label = file.label
    with ExitStack() as stack:
        handle = stack.enter_context(opened(file))
        size = 0
        if limits.max_bytes is not None:
            data = read_bounded(handle, label, limits)
            handle, size = io.BytesIO(data), len(data)
        wrapper = io.TextIOWrapper(handle, encoding="utf-8-sig", newline="")
        stack.callback(wrapper.detach)  # leave the caller's file object open
        reader = _Lines(wrapper)
        with _csv_errors(label, reader):
            header = _csv_header(reader, label, columns)
        chunks = _csv_chunks(reader, header, label, columns, limits, rows_are, chunk_bytes or _WHOLE)
        if chunk_bytes is None:
            with _csv_errors(label, reader):
                rows, where = _joined_chunks(chunks)
            return Content(file, rows, where, cells=True, size=size, columns=tuple(header))
        owned = stack.pop_all()

        def read() -> Iterator[tuple[list[Any], list[str]]]:
            with owned, _csv_errors(label, reader):
                yield from chunks

        return Content(file, cells=True, size=size, chunks=read(), columns=tuple(header))
    raise AssertionError("unreachable")  # pragma: no cover


class _Lines:
    """A ``csv.reader`` over ``lines`` that can be made again where it stands (:meth:`renew`): the reader keeps
    the buffer of its longest field (4 bytes a character: 700 MB after a cell of 28 M ids) until it goes.
    ``line_num`` counts over every reader made. Iterating gives each row's cells."""

    def __init__(self, lines: Any) -> None:
        self.lines = lines
        self.reader = csv.reader(lines)
        self.before = 0

    @property
    def line_num(self) -> int:
        return self.before + int(self.reader.line_num)

    def renew(self) -> None:
        self.before = self.line_num
        self.reader = csv.reader(self.lines)

    def __iter__(self) -> Iterator[list[str]]:
        return self

    def __next__(self) -> list[str]:
        return next(self.reader)


@contextmanager
def _csv_errors(label: str, reader: Any) -> Iterator[None]:
    """Text that is not UTF-8 and malformed CSV, named by their line."""
    try:
        yield
    except UnicodeDecodeError:
        raise DatasetError(label, f"line {reader.line_num + 1}", "not valid UTF-8 text") from None
    except csv.Error as error:
        raise DatasetError(label, f"line {reader.line_num}", f"invalid CSV ({quote(str(error))})") from None


def _csv_header(reader: Any, label: str, columns: Collection[str] | None) -> list[str]:
    """The column names of the header line. O(cells)."""
    header = next(reader, None)
    if header is None:
        raise DatasetError(label, None, "the file is empty; expected a header line with column names")
    names_ = [name.strip() for name in header]
    if columns is not None and not set(names_) & set(columns):
        raise DatasetError(label, None, f"no usable columns; found {names(names_)}, expected {EXPECTED}")
    return names_


def _csv_chunks(
    reader: Any,
    names_: list[str],
    label: str,
    columns: Collection[str] | None,
    limits: ReadLimits,
    rows_are: str,
    chunk_bytes: int,
) -> Iterator[tuple[list[Any], list[str]]]:
    """Every non-blank row after the header as a dict of its cells, in chunks of about ``chunk_bytes``
    characters. O(cells)."""
    rows: list[Any] = []
    where: list[str] = []
    count = held = 0
    for cells in reader:
        if not any(cell.strip() for cell in cells):
            continue
        place = f"line {reader.line_num}"
        if sum(map(len, cells)) >= longrows.LONG_LINE:
            reader.renew()  # let go the reader's buffer of the long row: 4 bytes a character
        if len(cells) != len(names_):
            raise DatasetError(label, place, f"expected {len(names_)} cells ({names(names_)}), got {len(cells)}")
        rows.append({c: cell for c, cell in zip(names_, cells, strict=True) if columns is None or c in columns})
        where.append(place)
        count += 1
        check_count(label, rows_are, count, limits.max_rows)
        held += sum(map(len, cells))
        if held >= chunk_bytes:
            yield rows, where
            rows, where, held = [], [], 0
    if rows:
        yield rows, where
