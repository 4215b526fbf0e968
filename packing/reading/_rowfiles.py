"""Files of rows, decoded by pyarrow block by block: JSON lines (``pyarrow.json``), CSV (``pyarrow.csv``, its
cells read by ``pyarrow.compute``: :func:`packing.reading._cells.cell_table`) and JSON (a list of rows, a
histogram object, or JSON lines). A file is cut into blocks of about ``block_bytes`` at line ends (a CSV line
end outside quotes), each block's nesting and line lengths scanned (:func:`~packing.reading._limits.scan_json`)
before pyarrow parses it. What pyarrow does not read, or refuses, is read with Python's ``json`` and ``csv``
for that block alone: lines of bare lists, a column whose type changes, a line of two values, a CSV row of
the wrong number of cells; so errors name the file and the line as before. Internal.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from collections.abc import Collection, Iterator, Sequence
from typing import IO, Any

import numpy as np
import numpy.typing as npt

from packing._workloads import workload_from_json
from packing.core._validation import INT32_MAX, INT64_MAX, integer_words, is_integer
from packing.errors import DatasetError, LimitError, SampleError, quote
from packing.reading._cells import cell_table, cells_row
from packing.reading._content import Content, File, Part, opened
from packing.reading._limits import MAX_JSON_DEPTH, ReadLimits, check_count, check_size, read_bounded, scan_json

Int64Array = npt.NDArray[np.int64]

EXPECTED = (
    "'input_ids' (with a loss mask), 'prompt' and 'completion', 'length', or text ('text', 'messages'), "
    "or a pair ('prompt', 'chosen', 'rejected') or group ('prompt', 'completions')"
)
"""The columns of samples, for messages."""
BLOCK_BYTES = 1 << 24
"""About how many bytes of text (JSON lines, CSV) pyarrow decodes at a time."""


def names(columns: Sequence[str]) -> str:
    """Column names quoted and comma-separated (at most a few), for messages.

    >>> names(["input_ids", "note"])
    "'input_ids', 'note'"
    """
    shown = ", ".join(quote(name, 24) for name in columns[:6])
    return (shown + (", ..." if len(columns) > 6 else "")) if columns else "none"


def repeated(columns: Sequence[str]) -> str | None:
    """The first column name ``columns`` holds twice, or None (Parquet and Arrow files may repeat a name). O(columns).

    >>> repeated(["input_ids", "labels", "input_ids"]), repeated(["input_ids"])
    ('input_ids', None)
    """
    seen: set[str] = set()
    return next((name for name in columns if name in seen or seen.add(name)), None)  # type: ignore[func-returns-value]


def twice(name: str) -> str:
    """The reason given for a table with two columns named ``name``."""
    return f"two columns named {quote(name, 24)}; expected every column name once"


def decode_rows(
    file: File,
    limits: ReadLimits,
    columns: Collection[str] | None = None,
    rows_are: str = "rows",
    block_bytes: int | None = None,
    text: bool = False,
) -> Content:
    """What a JSON lines, JSON or CSV ``file`` holds, parsed block by block as its parts are iterated (see the
    module); ``text``: CSV ``prompt`` and ``completion`` cells are text (a tokenizer reads them). O(bytes).

    >>> import io
    >>> decode_rows(File(io.BytesIO(b"length\\n3\\n"), "d.csv", "csv"), ReadLimits()).rows
    [{'length': 3}]
    >>> content = decode_rows(File(io.BytesIO(b'[1]\\n\\n{"input_ids": [2, 3]}\\n'), "d.jsonl", "jsonl"), ReadLimits())
    >>> [(part.rows, part.place(0)) for part in content.parts]
    [([[1], {'input_ids': [2, 3]}], 'line 1')]
    """
    content = Content(file)
    size = block_bytes or BLOCK_BYTES
    if file.format == "json":
        with opened(file) as handle:
            data = read_bounded(handle, file.label, limits)
        return _json(data, content, limits, rows_are, size)
    if file.format == "csv":
        content.parts = _csv_parts(content, limits, columns, rows_are, size, text)
    else:
        content.parts = _line_parts(content, limits, rows_are, size)
    return content


def _blocks(
    content: Content, handle: IO[bytes], limits: ReadLimits, size: int, quoted: bool = False
) -> Iterator[tuple[bytes, int]]:
    """``handle``'s bytes in blocks of about ``size`` that end at a line's end (``quoted``: outside CSV quotes),
    and the line each starts on; past ``max_bytes`` (from the file's size first), a LimitError. O(bytes);
    memory: a block (more for a longer line)."""
    label = content.file.label
    check_size(handle, label, limits)
    rest, line = b"", 1
    while True:
        wanted = max(size, len(rest))  # a line longer than a block: read as much again (O(bytes) in all)
        read = handle.read(wanted)
        data, last = rest + read, len(read) < wanted  # a short read: the end (regular files and buffers)
        cut = len(data) if last else data.rfind(b"\n") + 1
        while quoted and not last and cut and data.count(b'"', 0, cut) % 2:  # inside quotes: an earlier end
            cut = data.rfind(b"\n", 0, cut - 1) + 1
        if cut:
            content.size += cut
            if limits.max_bytes is not None and content.size > limits.max_bytes:
                raise LimitError(label, None, f"holds more than the limit of {limits.max_bytes:,} bytes")
            yield data[:cut], line
            line += data.count(b"\n", 0, cut)
        rest = data[cut:]
        if last:
            return


def _line_parts(
    content: Content, limits: ReadLimits, rows_are: str, size: int, data: bytes | None = None
) -> Iterator[Part]:
    """JSON lines (``data``, or the file read block by block), each block through ``pyarrow.json`` (bare lists
    as ``input_ids``), or Python's ``json`` when pyarrow does not read it. O(bytes)."""
    label = content.file.label
    within = dataclasses.replace(limits, max_rows=None, max_values=None, max_bytes=None)
    shallow = dataclasses.replace(within, max_depth=min(limits.max_depth, MAX_JSON_DEPTH))
    rows = values = 0
    with opened(content.file) if data is None else io.BytesIO(data) as handle:
        for block, first in _blocks(content, handle, limits, size):
            try:  # pyarrow.json crashes on deep nesting: only blocks within the default depth go to it
                scan, safe = scan_json(block, label, shallow, first), True
            except DatasetError:
                if limits.max_depth <= MAX_JSON_DEPTH:
                    raise
                scan, safe = scan_json(block, label, within, first), False
            rows, values = rows + scan.rows, values + scan.values
            check_count(label, "lines", rows, limits.max_rows)
            if limits.max_values is not None and values > limits.max_values:
                reason = f"holds about {values:,} values, more than the limit of {limits.max_values:,} (refused before parsing)"
                raise LimitError(label, None, reason)
            if scan.rows:
                yield _line_block(block, first, label, scan.rows if safe else -1)


def _line_block(block: bytes, first: int, label: str, count: int) -> Part:
    """One block of JSON lines (``count`` of them not blank; -1: too deep for pyarrow) as an Arrow table, or as
    Python rows. O(bytes)."""
    import pyarrow as pa
    import pyarrow.json as pj

    def place(index: int) -> str:
        lines = [number for number, line in enumerate(block.split(b"\n"), first) if line.strip()]
        return f"line {lines[index]}"

    filled = [line for line in block.split(b"\n") if line.strip()]
    starts = {line.lstrip()[:1] for line in filled}  # pyarrow.json reads objects (and crashes on a bare null)
    bare = starts == {b"["}
    source = b"\n".join(b'{"input_ids":' + line + b"}" for line in filled) if bare else block
    try:
        if count < 0 or not (bare or starts == {b"{"}):
            raise ValueError("lines pyarrow does not read: too deep, or not all objects (nor all lists)")
        options = pj.ReadOptions(use_threads=False, block_size=min(len(source) + 1, INT32_MAX))
        table = pj.read_json(pa.BufferReader(source), read_options=options)
        if table.num_rows == count and not any(_inexact(kind) for kind in table.schema.types):
            return Part(table, place)
        refused: Exception | None = None
    except (pa.ArrowException, ValueError) as error:
        refused = error
    rows: list[Any] = []
    lines: list[int] = []
    for number, line in enumerate(block.split(b"\n"), first):
        try:
            text = line.decode("utf-8-sig")
        except UnicodeDecodeError:
            raise DatasetError(label, f"line {number}", "not valid UTF-8 text") from None
        if text.strip():
            rows.append(parse_json(text.rstrip("\r"), label, f"line {number}"))
            lines.append(number)
    return Part(rows, lambda index: f"line {lines[index]}", refused)


def _inexact(kind: Any) -> bool:
    """Whether an Arrow type holds what Python's ``json`` reads otherwise (floats: an integer past int64 or
    ``1.0``; lists of lists of ids as a bare line), so the block is read by ``json`` instead. O(fields)."""
    import pyarrow as pa

    if pa.types.is_floating(kind) or pa.types.is_decimal(kind):
        return True
    return any(_inexact(kind.field(i).type) for i in range(kind.num_fields))


def parse_json(text: str, label: str, where: str | None) -> Any:
    """One JSON value (already scanned); a syntax error names the line and character."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        place = where or f"line {error.lineno}"
        raise DatasetError(label, f"{place}, character {error.colno}", f"invalid JSON ({error.msg})") from None
    except RecursionError:
        raise DatasetError(label, where, "JSON nested too deeply") from None
    except ValueError:  # an integer of thousands of digits
        raise DatasetError(label, where, "a number too long to read (more than 4,300 digits)") from None


def _json(raw: bytes, content: Content, limits: ReadLimits, rows_are: str, size: int) -> Content:
    """A JSON file's ``raw`` bytes: a list of rows, a histogram object, or (when it is really JSON lines) one
    value per line. O(bytes)."""
    label = content.file.label
    scan_json(raw, label, ReadLimits(max_depth=limits.max_depth, max_values=limits.max_values))
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = raw[: error.start].count(b"\n") + 1
        raise DatasetError(label, f"line {line}", "not valid UTF-8 text") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        if error.msg == "Extra data":
            content.parts = _line_parts(content, dataclasses.replace(limits, max_bytes=None), rows_are, size, raw)
            return content
        data = parse_json(text, label, None)
    except (RecursionError, ValueError):
        data = parse_json(text, label, None)
    content.size = len(raw)
    if isinstance(data, list):
        check_count(label, rows_are, len(data), limits.max_rows)
        content.parts = [Part(data, lambda index: f"item {index + 1}")] if data else []
        return content
    if isinstance(data, dict) and ("histogram" in data or "lengths" in data):
        content.lengths = _histogram(data, label, limits)
        return content
    found = f"an object with keys {names(list(map(str, data)))}" if isinstance(data, dict) else type(data).__name__
    expected = "a list of rows, one JSON object per line, or an object with 'histogram' or 'lengths'"
    raise DatasetError(label, None, f"expected {expected}; found {quote(found)}")


def _histogram(data: dict[str, Any], label: str, limits: ReadLimits) -> Int64Array:
    """Lengths from a histogram object like ``packing/_workloads/*.json``; the sequences and tokens it stands
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


# ---------------------------------------------------------------- CSV


def _csv_parts(
    content: Content, limits: ReadLimits, columns: Collection[str] | None, rows_are: str, size: int, text: bool
) -> Iterator[Part]:
    """A header line of column names, then the rows block by block, each block through :func:`_csv_block`.
    O(bytes)."""
    label = content.file.label
    rows = 0
    with opened(content.file) as handle:
        header: list[str] | None = None
        for block, first in _blocks(content, handle, limits, size, quoted=True):
            if header is None:
                header, skip = _csv_header(block, label, columns)
                content.columns = tuple(header)
                block, first = block[skip:], first + block.count(b"\n", 0, skip)
            part = _csv_block(block, first, label, header, columns, text)
            rows += len(part.rows)
            check_count(label, rows_are, rows, limits.max_rows)
            if len(part.rows):
                yield part
        if header is None:
            raise DatasetError(label, None, "the file is empty; expected a header line with column names")


def _csv_cells(text: str) -> list[str] | None:
    """The cells of the first CSV row of ``text`` by Python's ``csv`` (the header; a row of another width than it,
    as pyarrow set it aside); None when it holds none."""
    if csv.field_size_limit() < INT32_MAX:
        csv.field_size_limit(INT32_MAX)  # long token lists exceed the 128 KiB default (a C long: 32 bits on Windows)
    return next(csv.reader(io.StringIO(text, newline="")), None)


def _csv_header(block: bytes, label: str, columns: Collection[str] | None) -> tuple[list[str], int]:
    """The column names of the header line, and the bytes it takes. O(cells)."""
    end = block.find(b"\n") + 1 or len(block)
    while block.count(b'"', 0, end) % 2 and end < len(block):
        end = block.find(b"\n", end) + 1 or len(block)
    try:
        found = _csv_cells(block[:end].decode("utf-8-sig"))
    except UnicodeDecodeError:
        raise DatasetError(label, "line 1", "not valid UTF-8 text") from None
    if found is None:
        raise DatasetError(label, None, "the file is empty; expected a header line with column names")
    header = [name.strip() for name in found]
    if columns is not None and not set(header) & set(columns):
        raise DatasetError(label, None, f"no usable columns; found {names(header)}, expected {EXPECTED}")
    return header, end


def _csv_block(
    block: bytes, first: int, label: str, header: list[str], columns: Collection[str] | None, text: bool
) -> Part:
    """One block of CSV rows after the header, parsed by ``pyarrow.csv`` (every cell a string; a row of another
    width set aside by its number), as a table of row values (:func:`~packing.reading._cells.cell_table`), or as
    Python rows (:func:`~packing.reading._cells.cells_row`) when a cell is one ``pyarrow.compute`` does not read.
    Each row is named by the line it ends on; rows of blank cells are skipped. O(bytes)."""
    import pyarrow as pa
    import pyarrow.csv as pv

    wanted = [name for name in header if columns is None or name in columns]
    others: dict[int, list[str]] = {}  # the cells of each row of another width, by its number in the block

    def other_width(row: Any) -> str:
        others[row.number] = _csv_cells(row.text) or []
        return "skip"

    named = [f"c{i}" for i in range(len(header))]
    read = pv.ReadOptions(column_names=named, use_threads=False, block_size=min(len(block) + 1, INT32_MAX))
    parse = pv.ParseOptions(newlines_in_values=True, ignore_empty_lines=False, invalid_row_handler=other_width)
    strings = pv.ConvertOptions(column_types=dict.fromkeys(named, pa.string()), strings_can_be_null=False)
    if not block:
        return Part([], str)
    try:
        table = pv.read_csv(pa.BufferReader(block), read_options=read, parse_options=parse, convert_options=strings)
    except pa.ArrowInvalid as error:  # text that is not UTF-8, named by its line
        try:
            block.decode("utf-8")
        except UnicodeDecodeError as bad:
            line = first + block[: bad.start].count(b"\n")
            raise DatasetError(label, f"line {line}", "not valid UTF-8 text") from None
        raise DatasetError(label, None, f"invalid CSV ({quote(str(error))})") from None

    def rows() -> Iterator[tuple[int, list[str]]]:
        """Each row not of blank cells, with the line it ends on (its cells' newlines counted)."""
        parsed = zip(*(column.to_pylist() for column in table.columns), strict=True)
        line = first - 1
        for number in range(1, table.num_rows + len(others) + 1):
            cells = others[number] if number in others else list(next(parsed))
            line += 1 + sum(cell.count("\n") for cell in cells)
            if any(cell.strip() for cell in cells):
                yield line, cells

    lines: list[int] = []

    def place(index: int) -> str:
        lines.extend([] if lines else (line for line, _ in rows()))
        return f"line {lines[index]}"

    if not any(cell.strip() for cells in others.values() for cell in cells):  # only rows of blank cells set aside
        try:
            return Part(cell_table(table.rename_columns(header), wanted, text), place)
        except (pa.ArrowException, ValueError, SampleError):
            pass
    found: list[Any] = []
    for number, cells in rows():
        if len(cells) != len(header):
            reason = f"expected {len(header)} cells ({names(header)}), got {len(cells)}"
            raise DatasetError(label, f"line {number}", reason)
        try:
            row = cells_row(
                {c: cell for c, cell in zip(header, cells, strict=True) if c in wanted}, len(found), text=text
            )
        except SampleError as error:
            raise DatasetError.from_sample(label, f"line {number}", error) from None
        found.append(row)
        lines.append(number)
    return Part(found, lambda index: f"line {lines[index]}")
