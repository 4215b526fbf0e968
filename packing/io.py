"""Dataset files in, packed blocks out.

A file reader only turns a file into rows (JSON lines, JSON, CSV) or an Arrow table
(Parquet); the one reader (:mod:`packing.reader`) decides what each row is, so a file
is checked once, and ``pack(read_dataset(path), ...)`` does not check it again. Rows
hold any form the reader accepts: ``input_ids`` (with a loss mask), ``prompt`` and
``completion``, or ``length`` alone (enough to plan and compare). JSON may also be a
list of samples, or a histogram object like the bundled workloads (``histogram`` or
``lengths``). CSV cells hold token lists as ``1 2 3`` or ``[1, 2, 3]``; an empty cell
is a null. A problem raises :class:`~packing.errors.DatasetError` naming the file, the
line or row (from 1), the column, the position and what was expected.

Outputs are the schema's columns (:mod:`packing.schema`), written atomically
(:func:`~packing.outputs.atomic_path`): to a temporary file next to the target, renamed
onto it only once complete. A failure, Ctrl-C, SIGTERM or SIGHUP leaves the old output
as it was and no temporary or lock file; a second writer of the same path, in another
process or thread, is refused while the first runs.

>>> import io
>>> data = read_dataset(io.BytesIO(b'{"input_ids": [1, 2, 3]}\\n{"input_ids": [4]}\\n'), format="jsonl")
>>> data.kind, data.lengths.tolist()
('tokens', [3, 1])
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal

import numpy as np
import numpy.typing as npt

from packing.arrays import offsets_of
from packing.errors import DatasetError, SampleError, quote
from packing.limits import ReadLimits, check_count, check_parquet, limits_of, open_input, read_bounded, scan_json
from packing.outputs import atomic_path
from packing.packed import PackedBatch
from packing.reader import FIELDS, TOKEN_FIELDS, Samples, read_rows, read_table
from packing.schema import NAMES, arrow_schema
from packing.workloads import workload_from_json

Int64Array = npt.NDArray[np.int64]
PathType = str | os.PathLike[str]
Source = PathType | IO[bytes]

FORMATS = ("jsonl", "json", "csv", "parquet")
"""Input formats ``read_dataset`` understands."""

_ALIASES = {"jsonl": "jsonl", "ndjson": "jsonl", "json": "json", "csv": "csv", "parquet": "parquet", "pq": "parquet"}
_LIST_COLUMNS = (*TOKEN_FIELDS, "loss_mask", "completion_mask", "assistant_masks")
_INTEGER = re.compile(r"[+-]?\d{1,20}")
_SEPARATORS = re.compile(r"[\s,]+")
_CSV_FIELD_LIMIT = 2**31 - 1
_PARQUET_CHUNK_ROWS = 1 << 22


@dataclass(frozen=True, eq=False)
class Dataset:
    """Samples read from a file: what ``pack`` and ``plan`` accept, checked once.

    ``samples`` is a :class:`~packing.reader.Samples` (without tokens for lengths-only
    data); ``lengths`` is tokens per sample; ``source`` names the file in messages.

    >>> import io
    >>> data = read_dataset(io.BytesIO(b"prompt,completion\\n1 2,3\\n"), name="pairs.csv")
    >>> data.kind, data.source, data.lengths.tolist(), data.samples.loss_mask.tolist()
    ('tokens', 'pairs.csv', [3], [0, 0, 1])
    """

    samples: Samples
    source: str

    @property
    def lengths(self) -> Int64Array:
        """Tokens per sample. O(n)."""
        return self.samples.lengths

    @property
    def kind(self) -> Literal["tokens", "lengths"]:
        """``tokens`` when the samples can be packed, ``lengths`` when they can only be planned."""
        return "tokens" if self.samples.has_tokens else "lengths"

    def __len__(self) -> int:
        return len(self.samples)


@dataclass(frozen=True)
class _Rows:
    """Rows of a file and where each one is (``line 3``, ``item 2``), before the reader checks them."""

    rows: list[Any]
    where: list[str]


# ---------------------------------------------------------------- reading


def read_dataset(
    source: Source,
    format: str | None = None,
    name: str | None = None,
    *,
    completion_only_loss: bool = True,
    tokenizer: Any = None,
    progress: Callable[[int, int], None] | None = None,
    limits: ReadLimits | None = None,
    loss_rules: Any = None,
    num_proc: int | None = None,
) -> Dataset:
    """Read samples (or lengths) from a path or a binary file object. O(total tokens).

    ``format`` is ``jsonl``, ``json``, ``csv`` or ``parquet``; without it the extension of
    ``name`` or of the path decides. ``name`` is how messages refer to the file (needed for
    file objects such as uploads). ``completion_only_loss`` is applied to prompt/completion
    rows as they are read. With a ``tokenizer``, text rows (``text``, ``messages``, ``prompt`` and
    ``completion`` as text) are tokenized with their masks (``packing.text``) by ``num_proc`` processes,
    trained as ``loss_rules`` say (``Recipe.loss_rules``); in a CSV file the ``text``, ``prompt`` and
    ``completion`` cells are then text.

    >>> import io
    >>> read_dataset(io.BytesIO(b"length\\n5\\n7\\n"), name="lengths.csv").lengths.tolist()
    [5, 7]
    >>> read_dataset(io.BytesIO(b'[[1, 2], [3, "x"]]'), name="bad.json")
    Traceback (most recent call last):
    ...
    packing.errors.DatasetError: bad.json, item 2, position 1: expected a non-negative integer token id, got 'x' (str)
    """
    label = _label(source, name)
    kind = _format(format, label)
    bounds = limits_of(limits)
    with _binary(source, label) as handle:
        if kind == "parquet":
            table = _read_parquet(
                handle, label, completion_only_loss, tokenizer, progress, bounds, loss_rules, num_proc
            )
            return _bounded(table, bounds)
        if kind == "csv":
            content: _Rows | Dataset = _read_csv(_csv_input(handle, label, bounds), label, tokenizer is not None)
        else:
            content = _READERS[kind](read_bounded(handle, label, bounds), label, bounds)
    if isinstance(content, Dataset):
        return _bounded(content, bounds)
    if not content.rows:
        raise DatasetError(label, None, "the file holds no samples")
    check_count(label, "samples", len(content.rows), bounds.max_rows)
    _check_columns(content.rows, label)
    try:
        samples = read_rows(
            content.rows,
            completion_only_loss=completion_only_loss,
            tokenizer=tokenizer,
            progress=progress,
            loss_rules=loss_rules,
            num_proc=num_proc,
        )
    except SampleError as error:
        raise DatasetError.from_sample(label, content.where[error.sample or 0], error) from None
    return _bounded(Dataset(samples, label), bounds)


def _bounded(data: Dataset, limits: ReadLimits) -> Dataset:
    """``data``, refused when it holds (or, lengths only, stands for) more samples or tokens than ``limits``. O(1)."""
    check_count(data.source, "samples", len(data), limits.max_rows)
    bound = limits.max_tokens if data.samples.has_tokens else limits.length_tokens
    check_count(data.source, "tokens", int(data.samples.offsets[-1]), bound)
    return data


def _csv_input(handle: IO[bytes], label: str, limits: ReadLimits) -> IO[bytes]:
    """The CSV file as it is, or (with ``max_bytes``) its bytes read within the limit."""
    return handle if limits.max_bytes is None else io.BytesIO(read_bounded(handle, label, limits))


def _check_columns(rows: list[Any], label: str) -> None:
    """Refuse rows that are all objects without a single column the reader uses. O(rows × keys)."""
    if not all(isinstance(row, dict) for row in rows):
        return
    seen: dict[str, None] = {}
    for row in rows:
        seen.update(dict.fromkeys(map(str, row)))
    if not set(seen) & set(FIELDS):
        raise DatasetError(label, None, f"no usable columns; found {_names(list(seen))}, expected {_expected()}")


def _label(source: Source, name: str | None) -> str:
    """How messages name the file: ``name``, the path, or the file object's name."""
    if name is not None:
        return name
    if isinstance(source, (str, os.PathLike)):
        return os.fspath(source)
    return str(getattr(source, "name", None) or "<uploaded file>")


def _format(format: str | None, label: str) -> str:
    """The input format: given, or from the extension of ``label``."""
    if format is not None:
        given = str(format).lower().lstrip(".")
        if given not in _ALIASES:
            raise DatasetError(label, None, f"unknown format {quote(format)}; expected one of: {', '.join(FORMATS)}")
        return _ALIASES[given]
    extension = Path(label).suffix.lower().lstrip(".")
    if extension not in _ALIASES:
        raise DatasetError(
            label, None, "cannot tell the format from the file name; expected a .jsonl, .json, .csv or .parquet file"
        )
    return _ALIASES[extension]


@contextmanager
def _binary(source: Source, label: str) -> Iterator[IO[bytes]]:
    """The file opened for binary reading (a path: a regular file, see :func:`packing.limits.open_input`), or
    the file object itself (left open)."""
    if not isinstance(source, (str, os.PathLike)):
        yield source
        return
    with open_input(source, label) as handle:
        yield handle


def _parse_json(text: str, label: str, where: str | None, scanned: bool = True) -> Any:
    """One JSON value; a syntax error names the line and character. Unless ``scanned`` (the file's bytes were),
    the text is scanned for nesting first (:func:`packing.limits.scan_json`)."""
    if not scanned:
        scan_json(text.encode("utf-8", "surrogatepass"), label)
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        place = where or f"line {error.lineno}"
        raise DatasetError(label, f"{place}, character {error.colno}", f"invalid JSON ({error.msg})") from None
    except RecursionError:
        raise DatasetError(label, where, "JSON nested too deeply") from None
    except ValueError:  # an integer of thousands of digits
        raise DatasetError(label, where, "a number too long to read (more than 4,300 digits)") from None


def _read_jsonl(data: bytes, label: str, limits: ReadLimits, scanned: bool = False) -> _Rows:
    """One JSON value per line; blank lines are skipped. The bytes are scanned (nesting, lines) before any
    line is parsed. O(bytes)."""
    if not scanned:
        scan_json(data, label, limits)
    rows: list[Any] = []
    where: list[str] = []
    for number, raw in enumerate(io.BytesIO(data), start=1):
        place = f"line {number}"
        try:
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError:
            raise DatasetError(label, place, "not valid UTF-8 text") from None
        if text.strip():
            rows.append(_parse_json(text.rstrip("\r\n"), label, place))
            where.append(place)
    return _Rows(rows, where)


def _read_json(raw: bytes, label: str, limits: ReadLimits) -> _Rows | Dataset:
    """A list of samples, a histogram object, or (when it is really JSON lines) one value per line; scanned
    (nesting) before it is parsed."""
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
            return _read_jsonl(raw, label, limits)
        data = _parse_json(text, label, None)
    except (RecursionError, ValueError):
        data = _parse_json(text, label, None)
    if isinstance(data, list):
        return _Rows(data, [f"item {number}" for number in range(1, len(data) + 1)])
    if isinstance(data, dict) and ("histogram" in data or "lengths" in data):
        return _histogram(data, label, limits)
    found = f"an object with keys {_names(list(map(str, data)))}" if isinstance(data, dict) else type(data).__name__
    raise DatasetError(
        label,
        None,
        f"expected a list of samples, one JSON object per line, or an object with 'histogram' or 'lengths'; "
        f"found {quote(found)}",
    )


def _histogram(data: dict[str, Any], label: str, limits: ReadLimits) -> Dataset:
    """Lengths from a histogram object like ``packing/workloads/*.json``; the sequences and tokens it stands
    for are checked against ``limits`` (and 2**63) from its counts, before it is expanded. O(sequences)."""
    key = "histogram" if "histogram" in data else "lengths"
    values = data[key]
    if not isinstance(values, list):
        raise DatasetError(label, f"key '{key}'", f"expected a list of non-negative integers, got {quote(values)}")
    for position, value in enumerate(values):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**63:
            raise DatasetError(
                label, f"key '{key}', position {position}", f"expected a non-negative integer, got {quote(value)}"
            )
    sequences = sum(values) if key == "histogram" else len(values)
    check_count(label, "sequences", sequences, limits.max_rows)
    if key == "histogram" and sequences > 2**31:
        raise DatasetError(label, f"key '{key}'", f"expected at most 2**31 sequences, got {sequences:,}")
    tokens = sum(length * count for length, count in enumerate(values)) if key == "histogram" else sum(values)
    check_count(label, "tokens", tokens, limits.length_tokens)
    if tokens >= 2**63:
        raise DatasetError(label, f"key '{key}'", f"expected lengths adding up to less than 2**63, got {tokens:,}")
    workload = workload_from_json(label, {key: values, "max_seq_length": 0})
    if not len(workload.lengths):
        raise DatasetError(label, None, f"the {key} holds no sequences")
    return Dataset(Samples(None, None, offsets_of(workload.lengths)), label)


def _read_csv(handle: IO[bytes], label: str, text: bool = False) -> _Rows:
    """A header line with column names, then one sample per line. O(bytes)."""
    if csv.field_size_limit() < _CSV_FIELD_LIMIT:
        csv.field_size_limit(_CSV_FIELD_LIMIT)  # long token lists exceed the 128 KiB default
    wrapper = io.TextIOWrapper(handle, encoding="utf-8-sig", newline="")
    reader = csv.reader(wrapper)
    try:
        return _csv_rows(reader, label, text)
    except UnicodeDecodeError:
        raise DatasetError(label, f"line {reader.line_num + 1}", "not valid UTF-8 text") from None
    except csv.Error as error:
        raise DatasetError(label, f"line {reader.line_num}", f"invalid CSV ({quote(str(error))})") from None
    finally:
        wrapper.detach()  # leave the caller's file object open


def _csv_rows(reader: Any, label: str, text: bool = False) -> _Rows:
    """The header, then every non-blank row as a dict of parsed cells. O(cells)."""
    header = next(reader, None)
    if header is None:
        raise DatasetError(label, None, "the file is empty; expected a header line with column names")
    columns = [name.strip() for name in header]
    if not set(columns) & set(FIELDS):
        raise DatasetError(label, None, f"no usable columns; found {_names(columns)}, expected {_expected()}")
    rows: list[Any] = []
    where: list[str] = []
    for cells in reader:
        if not any(cell.strip() for cell in cells):
            continue
        place = f"line {reader.line_num}"
        if len(cells) != len(columns):
            raise DatasetError(label, place, f"expected {len(columns)} cells ({_names(columns)}), got {len(cells)}")
        rows.append({c: _csv_cell(c, cell, text) for c, cell in zip(columns, cells, strict=True) if c in FIELDS})
        where.append(place)
    return _Rows(rows, where)


def _number(part: str) -> int | str:
    """An integer when ``part`` is one of at most 20 digits; the text itself otherwise (the reader names it)."""
    return int(part) if _INTEGER.fullmatch(part) else part


def _csv_cell(column: str, cell: str, text: bool = False) -> Any:
    """A CSV cell as its value: None when empty, a list for list columns, an integer for ``length``;
    with ``text``, the cell itself for the text columns (``text``, ``prompt``, ``completion``).

    >>> _csv_cell("input_ids", " [1, 2,3] "), _csv_cell("prompt", ""), _csv_cell("length", "7")
    ([1, 2, 3], None, 7)
    """
    stripped = cell.strip()
    if not stripped:
        return None
    if text and column in ("text", "prompt", "completion"):
        return cell
    if column == "messages":
        return _parse_json(cell, "CSV cell", "column 'messages'", scanned=False)
    if column == "length":
        return _number(stripped)
    if stripped.startswith("[") and stripped.endswith("]"):
        stripped = stripped[1:-1]
    return [_number(part) for part in _SEPARATORS.split(stripped) if part]


def _read_parquet(
    handle: IO[bytes],
    label: str,
    completion_only_loss: bool,
    tokenizer: Any = None,
    progress: Callable[[int, int], None] | None = None,
    limits: ReadLimits | None = None,
    loss_rules: Any = None,
    num_proc: int | None = None,
) -> Dataset:
    """A Parquet file through Arrow: only the reader's columns are read, and checked column by column; the
    file's metadata is checked against ``limits`` first (:func:`packing.limits.check_parquet`)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        file = pq.ParquetFile(handle)
        columns = [name for name in file.schema_arrow.names if name in FIELDS]
        if not columns:
            found = _names(list(file.schema_arrow.names))
            raise DatasetError(label, None, f"no usable columns; found {found}, expected {_expected()}")
        check_parquet(file, columns, label, limits_of(limits), "samples")
        table = file.read(columns=columns)
    except (pa.ArrowException, OSError, ValueError) as error:
        if isinstance(error, DatasetError):
            raise
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise DatasetError(label, None, f"not a readable Parquet file ({quote(reason, 80)})") from None
    if table.num_rows == 0:
        raise DatasetError(label, None, "the file holds no samples")
    try:
        samples = read_table(
            table,
            completion_only_loss=completion_only_loss,
            tokenizer=tokenizer,
            progress=progress,
            loss_rules=loss_rules,
            num_proc=num_proc,
        )
    except SampleError as error:
        raise DatasetError.from_sample(label, f"row {(error.sample or 0) + 1}", error) from None
    return Dataset(samples, label)


_READERS: dict[str, Callable[[bytes, str, ReadLimits], _Rows | Dataset]] = {"jsonl": _read_jsonl, "json": _read_json}


def _names(columns: list[str]) -> str:
    """Column names quoted and comma-separated (at most a few), for messages."""
    shown = ", ".join(quote(name, 24) for name in columns[:6])
    return (shown + (", ..." if len(columns) > 6 else "")) if columns else "none"


def _expected() -> str:
    return "'input_ids' (with a loss mask), 'prompt' and 'completion', 'length', or text ('text', 'messages')"


# ---------------------------------------------------------------- writing


def write_parquet(batch: PackedBatch, path: PathType, order: npt.ArrayLike | None = None) -> None:
    """Write one row per block (the schema's columns), in ``order`` (default plan order), atomically.
    O(blocks × max_seq_length).

    >>> import pyarrow.parquet as pq, tempfile, os
    >>> from packing import pack
    >>> target = os.path.join(tempfile.mkdtemp(), "blocks.parquet")
    >>> write_parquet(pack([[1, 2], [3, 4, 5], [6]], 4, strategy="split"), target, order=[1, 0])
    >>> pq.read_table(target).column("input_ids").to_pylist()
    [[5, 6, 0, 0], [1, 2, 3, 4]]
    """
    import pyarrow.parquet as pq

    table = batch.to_arrow(order)
    with atomic_path(path) as temporary, pq.ParquetWriter(temporary, arrow_schema()) as writer:
        writer.write_table(table, row_group_size=max(1, _PARQUET_CHUNK_ROWS // batch.max_seq_length))


def write_jsonl(batch: PackedBatch, path: PathType, order: npt.ArrayLike | None = None) -> None:
    """Write one JSON object per block and line (the schema's columns), in ``order``, atomically.
    O(blocks × max_seq_length).

    >>> import json, tempfile, os
    >>> from packing import pack
    >>> target = os.path.join(tempfile.mkdtemp(), "blocks.jsonl")
    >>> write_jsonl(pack([[1, 2], [3]], 4), target)
    >>> json.loads(open(target).readline())["labels"]
    [-100, 2, -100, -100]
    """
    table = batch.to_arrow(order)
    with atomic_path(path) as temporary, open(temporary, "w", encoding="utf-8") as handle:
        for chunk in table.to_batches(max_chunksize=1024):
            columns = [chunk.column(name).to_pylist() for name in NAMES]
            for values in zip(*columns, strict=True):
                handle.write(json.dumps(dict(zip(NAMES, values, strict=True))) + "\n")
