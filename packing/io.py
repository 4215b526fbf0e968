"""Reading datasets from files and writing packed blocks to files.

Shared by the command line and the explorer app. Input formats: JSON lines
(``.jsonl``), JSON (``.json``), CSV (``.csv``) and Parquet (``.parquet``).
A dataset holds one of these column layouts (other columns are ignored):

- ``input_ids``, optionally with ``loss_mask``: token ids (and 0/1 loss flags);
- ``prompt`` and ``completion``: token ids, loss on the completion by default;
- ``length``: sequence lengths only, enough to plan and compare strategies.

JSON may also be a list of token lists, or a histogram object like the bundled
workloads (a ``histogram`` or ``lengths`` key, lengths only). CSV cells hold
token lists as ``1 2 3`` or ``[1, 2, 3]``. Every problem raises
:class:`DatasetError` with a one-line message naming the file, the line or row
(counted from 1), the column and what was expected.

Outputs are written atomically: to a temporary file next to the target, renamed
onto it only once complete, so a failure never leaves a half-written file.

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
import secrets
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from numbers import Integral
from pathlib import Path
from typing import IO, Any, Literal

import numpy as np
import numpy.typing as npt

from packing.packed import PackedBatch
from packing.samples import read_sample
from packing.validation import check_token_id
from packing.workloads import workload_from_json

Int64Array = npt.NDArray[np.int64]
PathType = str | os.PathLike[str]
Source = PathType | IO[bytes]
Layout = Literal["list", "tokens", "length"]

FORMATS = ("jsonl", "json", "csv", "parquet")
"""Input formats ``read_dataset`` understands."""
OUTPUT_COLUMNS = ("input_ids", "labels", "loss_mask", "position_ids", "sequence_ids", "seq_lengths")
"""Columns of the files ``write_parquet`` and ``write_jsonl`` produce, one row per block."""

_ALIASES = {"jsonl": "jsonl", "ndjson": "jsonl", "json": "json", "csv": "csv", "parquet": "parquet", "pq": "parquet"}
_TOKEN_COLUMNS = ("input_ids", "loss_mask", "prompt", "completion")
_KNOWN_COLUMNS = (*_TOKEN_COLUMNS, "length")
_EXPECTED = "'input_ids' (optionally with 'loss_mask'), 'prompt' and 'completion', or 'length'"
_INTEGER = re.compile(r"[+-]?\d+")
_SEPARATORS = re.compile(r"[\s,]+")
_CSV_FIELD_LIMIT = 2**31 - 1
_MAX_INT64 = 2**63 - 1
_PARQUET_CHUNK_VALUES = 1 << 22


class DatasetError(ValueError):
    """A dataset file that cannot be read, with a one-line message saying where and what was expected.

    >>> import io
    >>> read_dataset(io.BytesIO(b"text\\nhello\\n"), name="notes.csv")
    Traceback (most recent call last):
    ...
    packing.io.DatasetError: notes.csv: no usable columns; found columns 'text', expected 'input_ids' (optionally with 'loss_mask'), 'prompt' and 'completion', or 'length'
    """


@dataclass(frozen=True, eq=False)
class Dataset:
    """Samples read from a file.

    ``samples`` holds items ``packing.pack`` accepts (token sequences as 1-D int64
    numpy arrays, ``{"prompt", "completion"}`` dicts or ``{"input_ids", "loss_mask"}``
    dicts); it is ``None`` for lengths-only data. ``lengths`` (tokens per sample) is
    always set. ``source`` names the file in messages.

    >>> import io
    >>> data = read_dataset(io.BytesIO(b"prompt,completion\\n1 2,3\\n"), name="pairs.csv")
    >>> data.kind, data.source, data.lengths.tolist()
    ('tokens', 'pairs.csv', [3])
    >>> {key: value.tolist() for key, value in data.samples[0].items()}
    {'prompt': [1, 2], 'completion': [3]}
    """

    samples: list[Any] | None
    lengths: Int64Array
    source: str
    kind: Literal["tokens", "lengths"]


@dataclass(frozen=True)
class _Table:
    """Rows of a file before checking: ``(where, item)`` pairs and the column names seen."""

    columns: list[str]
    rows: list[tuple[str, Any]]
    has_objects: bool = True


# ---------------------------------------------------------------- reading


def read_dataset(source: Source, format: str | None = None, name: str | None = None) -> Dataset:
    """Read samples (or lengths) from a path or a binary file object.

    ``format`` is ``jsonl``, ``json``, ``csv`` or ``parquet``; without it the
    extension of ``name`` or of the path decides. ``name`` is how messages refer to
    the file (needed for file objects such as uploads). O(total tokens).

    >>> import io
    >>> read_dataset(io.BytesIO(b"length\\n5\\n7\\n"), name="lengths.csv").lengths.tolist()
    [5, 7]
    >>> read_dataset(io.BytesIO(b'[[1, 2], [3, "x"]]'), name="bad.json")
    Traceback (most recent call last):
    ...
    packing.io.DatasetError: bad.json, item 2, position 1: expected a non-negative integer token id, got 'x' (str)
    """
    label = _label(source, name)
    kind = _format(format, label)
    with _binary(source, label) as handle:
        table = _READERS[kind](handle, label)
    if isinstance(table, Dataset):
        return table
    return _dataset(table, label)


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
            raise DatasetError(f"{label}: unknown format {format!r}; expected one of: {', '.join(FORMATS)}")
        return _ALIASES[given]
    extension = Path(label).suffix.lower().lstrip(".")
    if extension not in _ALIASES:
        raise DatasetError(
            f"{label}: cannot tell the format from the file name; expected a .jsonl, .json, .csv or .parquet file"
        )
    return _ALIASES[extension]


@contextmanager
def _binary(source: Source, label: str) -> Iterator[IO[bytes]]:
    """The file opened for binary reading (a path), or the file object itself (left open)."""
    if not isinstance(source, (str, os.PathLike)):
        yield source
        return
    try:
        handle = open(source, "rb")  # noqa: SIM115 - closed by the with block below
    except OSError as error:
        raise DatasetError(f"{label}: {_os_reason(error)}") from None
    with handle:
        yield handle


def _os_reason(error: OSError) -> str:
    """Why a file could not be opened, in a few words."""
    if isinstance(error, FileNotFoundError):
        return "no such file"
    if isinstance(error, IsADirectoryError):
        return "is a directory, expected a file"
    if isinstance(error, PermissionError):
        return "permission denied"
    return f"cannot read the file ({error.strerror or error})"


def _decode(raw: bytes, label: str, where: str) -> str:
    """One line as text (UTF-8, a leading byte-order mark dropped)."""
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise DatasetError(f"{label}, {where}: not valid UTF-8 text") from None


def _parse_json(text: str, label: str, where: str) -> Any:
    """One JSON value; a syntax error names the line and character."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise DatasetError(f"{label}, {where}, character {error.colno}: invalid JSON ({error.msg})") from None
    except RecursionError:
        raise DatasetError(f"{label}, {where}: JSON nested too deeply") from None


def _table(rows: list[tuple[str, Any]]) -> _Table:
    """Column names in order of first appearance among the object rows. O(rows × columns)."""
    seen: dict[str, None] = {}
    has_objects = False
    for _, item in rows:
        if isinstance(item, Mapping):
            has_objects = True
            seen.update(dict.fromkeys(map(str, item)))
    return _Table(list(seen), rows, has_objects)


def _read_jsonl(handle: IO[bytes], label: str) -> _Table:
    """One JSON value per line; blank lines are skipped. O(bytes)."""
    rows: list[tuple[str, Any]] = []
    for number, raw in enumerate(handle, start=1):
        where = f"line {number}"
        text = _decode(raw, label, where)
        if text.strip():
            rows.append((where, _parse_json(text.rstrip("\r\n"), label, where)))
    return _table(rows)


def _read_json(handle: IO[bytes], label: str) -> _Table | Dataset:
    """A list of samples, a histogram object, or (when it is really JSON lines) one value per line."""
    raw = handle.read()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = raw[: error.start].count(b"\n") + 1
        raise DatasetError(f"{label}, line {line}: not valid UTF-8 text") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        if error.msg == "Extra data":
            return _read_jsonl(io.BytesIO(raw), label)
        raise DatasetError(
            f"{label}, line {error.lineno}, character {error.colno}: invalid JSON ({error.msg})"
        ) from None
    except RecursionError:
        raise DatasetError(f"{label}: JSON nested too deeply") from None
    if isinstance(data, list):
        return _table([(f"item {number}", item) for number, item in enumerate(data, start=1)])
    if isinstance(data, dict) and ("histogram" in data or "lengths" in data):
        return _histogram(data, label)
    found = f"an object with keys {_names(list(map(str, data)))}" if isinstance(data, dict) else type(data).__name__
    raise DatasetError(
        f"{label}: expected a list of samples, one JSON object per line, or an object with 'histogram' or "
        f"'lengths'; found {found}"
    )


def _histogram(data: dict[str, Any], label: str) -> Dataset:
    """Lengths from a histogram object like ``packing/workloads/*.json``. O(sequences)."""
    key = "histogram" if "histogram" in data else "lengths"
    _check_counts(data[key], f"{label}, key '{key}'")
    workload = workload_from_json(label, {key: data[key], "max_seq_length": 0})
    if not len(workload.lengths):
        raise DatasetError(f"{label}: the {key} holds no sequences")
    return Dataset(None, workload.lengths, label, "lengths")


def _check_counts(values: Any, where: str) -> None:
    """Refuse anything but a list of non-negative integers. O(len(values))."""
    if not isinstance(values, list):
        raise DatasetError(f"{where}: expected a list of non-negative integers, got {type(values).__name__}")
    for position, value in enumerate(values):
        if not _is_count(value):
            raise DatasetError(f"{where}, position {position}: expected a non-negative integer, got {value!r}")


def _is_count(value: Any) -> bool:
    """True for an integer (not a bool) in 0 .. 2**63 - 1."""
    return not isinstance(value, bool) and isinstance(value, Integral) and 0 <= int(value) <= _MAX_INT64


def _read_csv(handle: IO[bytes], label: str) -> _Table:
    """A header line with column names, then one sample per line. O(bytes)."""
    if csv.field_size_limit() < _CSV_FIELD_LIMIT:
        csv.field_size_limit(_CSV_FIELD_LIMIT)  # long token lists exceed the 128 KiB default
    text = io.TextIOWrapper(handle, encoding="utf-8-sig", newline="")
    reader = csv.reader(text)
    try:
        return _csv_rows(reader, label)
    except UnicodeDecodeError:
        raise DatasetError(f"{label}, line {reader.line_num + 1}: not valid UTF-8 text") from None
    except csv.Error as error:
        raise DatasetError(f"{label}, line {reader.line_num}: invalid CSV ({error})") from None
    finally:
        text.detach()  # leave the caller's file object open


def _csv_rows(reader: Any, label: str) -> _Table:
    """The header, then every non-blank row as a dict of parsed cells. O(cells)."""
    header = next(reader, None)
    if header is None:
        raise DatasetError(f"{label}: the file is empty; expected a header line with column names")
    columns = [name.strip() for name in header]
    rows: list[tuple[str, Any]] = []
    for cells in reader:
        if not any(cell.strip() for cell in cells):
            continue
        where = f"line {reader.line_num}"
        if len(cells) != len(columns):
            raise DatasetError(
                f"{label}, {where}: expected {len(columns)} cells (columns {_names(columns)}), got {len(cells)}"
            )
        row = {
            column: _csv_cell(column, cell, f"{label}, {where}") for column, cell in zip(columns, cells, strict=True)
        }
        rows.append((where, row))
    return _Table(columns, rows)


def _csv_cell(column: str, cell: str, where: str) -> Any:
    """A CSV cell as its value: token lists for token columns, an integer for ``length``."""
    if column in _TOKEN_COLUMNS:
        return _cell_tokens(cell, f"{where}, column '{column}'")
    if column == "length" and _INTEGER.fullmatch(cell.strip()):
        return int(cell)
    return cell


def _cell_tokens(cell: str, where: str) -> list[int]:
    """``"1 2 3"``, ``"1,2,3"`` or ``"[1, 2, 3]"`` as a list of ints. O(characters).

    >>> _cell_tokens(" [1, 2,3] ", "x")
    [1, 2, 3]
    """
    text = cell.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    parts = [part for part in _SEPARATORS.split(text) if part]
    for position, part in enumerate(parts):
        if not _INTEGER.fullmatch(part):
            raise DatasetError(f"{where}, position {position}: expected a non-negative integer token id, got {part!r}")
    return [int(part) for part in parts]


def _read_parquet(handle: IO[bytes], label: str) -> _Table:
    """Every row of a Parquet file; integer list columns are read without a Python loop per token."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(handle)
    except (pa.ArrowException, OSError, ValueError) as error:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise DatasetError(f"{label}: not a readable Parquet file ({reason})") from None
    columns = [str(name) for name in table.column_names]
    values = {name: _parquet_values(table.column(name)) for name in columns if name in _KNOWN_COLUMNS}
    rows = [
        (f"row {index + 1}", {name: column[index] for name, column in values.items()})
        for index in range(table.num_rows)
    ]
    return _Table(columns, rows)


def _parquet_values(column: Any) -> list[Any]:
    """A column's values; a null-free integer list column becomes numpy views of one flat array."""
    import pyarrow as pa

    kind = column.type
    is_list = pa.types.is_list(kind) or pa.types.is_large_list(kind)
    if not (is_list and pa.types.is_integer(kind.value_type) and column.null_count == 0 and len(column)):
        values: list[Any] = column.to_pylist()
        return values
    array = column.combine_chunks()
    flat = array.flatten()
    if flat.null_count:
        values = column.to_pylist()
        return values
    ends = np.cumsum(array.value_lengths().to_numpy(zero_copy_only=False))
    return list(np.split(flat.to_numpy(zero_copy_only=False), ends[:-1]))


_READERS = {"jsonl": _read_jsonl, "json": _read_json, "csv": _read_csv, "parquet": _read_parquet}


# ---------------------------------------------------------------- checking rows


def _names(columns: list[str]) -> str:
    """Column names quoted and comma-separated, for messages."""
    return ", ".join(repr(name) for name in columns) if columns else "none"


def _layout(table: _Table, label: str) -> Layout:
    """Whether rows are token samples, lengths, or plain token lists; unusable columns are refused."""
    if not table.has_objects:
        return "list"
    columns = table.columns
    if "input_ids" in columns:
        return "tokens"
    if "prompt" in columns or "completion" in columns:
        missing = [name for name in ("prompt", "completion") if name not in columns]
        if missing:
            raise DatasetError(
                f"{label}: column '{missing[0]}' is missing; found columns {_names(columns)}, expected {_EXPECTED}"
            )
        return "tokens"
    if "length" in columns:
        return "length"
    raise DatasetError(f"{label}: no usable columns; found columns {_names(columns)}, expected {_EXPECTED}")


def _dataset(table: _Table, label: str) -> Dataset:
    """Check every row and build the dataset. O(total tokens)."""
    layout = _layout(table, label)
    if not table.rows:
        raise DatasetError(f"{label}: the file holds no samples")
    if layout == "length":
        lengths = [_length(item, f"{label}, {where}") for where, item in table.rows]
        return Dataset(None, np.asarray(lengths, dtype=np.int64), label, "lengths")
    samples: list[Any] = []
    lengths = []
    for where, item in table.rows:
        sample, length = _token_sample(_pick(item, table.columns, f"{label}, {where}"), f"{label}, {where}")
        samples.append(sample)
        lengths.append(length)
    return Dataset(samples, np.asarray(lengths, dtype=np.int64), label, "tokens")


def _length(item: Any, where: str) -> int:
    """The ``length`` value of one row, checked."""
    if not isinstance(item, Mapping) or item.get("length") is None:
        raise DatasetError(f"{where}: no value in column 'length'")
    value = item["length"]
    if not _is_count(value):
        raise DatasetError(f"{where}, column 'length': expected a non-negative integer, got {value!r}")
    return int(value)


def _pick(item: Any, columns: list[str], where: str) -> Any:
    """The part of a row that makes the sample: ``input_ids`` (with ``loss_mask``) when the row has
    them, else ``prompt`` and ``completion``; a missing value is an error."""
    if not isinstance(item, Mapping):
        return item
    if item.get("input_ids") is not None and (item.get("prompt") is not None or item.get("completion") is not None):
        raise DatasetError(f"{where}: has both 'input_ids' and 'prompt'/'completion'; give one form per row")
    if item.get("input_ids") is not None:
        return {"input_ids": item["input_ids"], "loss_mask": item.get("loss_mask")}
    if "prompt" not in columns:
        raise DatasetError(f"{where}: no value in column 'input_ids'")
    if "input_ids" in columns and item.get("prompt") is None and item.get("completion") is None:
        raise DatasetError(f"{where}: no value in column 'input_ids', nor in 'prompt' and 'completion'")
    for name in ("prompt", "completion"):
        if item.get(name) is None:
            raise DatasetError(f"{where}: no value in column '{name}'")
    return {"prompt": item["prompt"], "completion": item["completion"]}


def _token_sample(picked: Any, where: str) -> tuple[Any, int]:
    """A checked sample (numpy arrays inside) and its length in tokens. O(tokens)."""
    try:
        tokens, mask = read_sample(picked, 0)
    except (TypeError, ValueError, OverflowError) as error:
        raise DatasetError(_token_message(picked, str(error), where)) from None
    if isinstance(picked, Mapping) and "prompt" in picked:
        cut = len(tokens) - int(mask.sum())
        return {"prompt": tokens[:cut], "completion": tokens[cut:]}, len(tokens)
    if isinstance(picked, Mapping) and picked.get("loss_mask") is not None:
        return {"input_ids": tokens, "loss_mask": mask}, len(tokens)
    return tokens, len(tokens)


def _token_message(picked: Any, message: str, where: str) -> str:
    """Reword a ``read_sample`` message with the file and row, pointing at the first bad value."""
    if isinstance(picked, Mapping):
        columns = [(name, picked[name]) for name in _TOKEN_COLUMNS if picked.get(name) is not None]
    else:
        columns = [("", picked)]
    for name, values in columns:
        problem = _first_bad_value(values, flags=name == "loss_mask")
        if problem is not None:
            return f"{where}{f', column {name!r}' if name else ''}, {problem}"
    rest = message.removeprefix("sample 0")
    if rest == message:
        return f"{where}: {message}"
    return where + re.sub(r"^ '([^']+)'", r", column '\1'", rest)


def _first_bad_value(values: Any, flags: bool = False) -> str | None:
    """What is wrong with the first item of a list that is not a token id (or, with ``flags``,
    not 0 or 1); None if all are fine. O(length)."""
    if not isinstance(values, list):
        return None
    for position, value in enumerate(values):
        if flags and value not in (0, 1):
            return f"position {position}: expected 0 or 1, got {value!r}"
        if isinstance(value, int) and not isinstance(value, bool) and value > _MAX_INT64:
            return f"position {position}: token id {value} does not fit in 64 bits"
        if not flags and not _is_count(value):
            return (
                f"position {position}: expected a non-negative integer token id, got {value!r} ({type(value).__name__})"
            )
    return None


# ---------------------------------------------------------------- writing


def block_order(num_blocks: int, shuffle: bool = True, seed: int = 0) -> Int64Array:
    """The order to write blocks in: a seeded random permutation, or plan order. O(num_blocks).

    Decreasing strategies put the longest samples first, so a trainer reading
    blocks in plan order would see a length curriculum; shuffling avoids it.

    >>> block_order(4, shuffle=False).tolist()
    [0, 1, 2, 3]
    >>> sorted(block_order(4, seed=1).tolist())
    [0, 1, 2, 3]
    """
    count = check_token_id(num_blocks, "num_blocks")
    if not shuffle:
        return np.arange(count, dtype=np.int64)
    rng = np.random.default_rng(check_token_id(seed, "seed"))
    return rng.permutation(count).astype(np.int64)


def _check_order(order: npt.ArrayLike | None, num_blocks: int) -> Int64Array:
    """The rows to write: ``order`` checked, or every block in plan order."""
    if order is None:
        return np.arange(num_blocks, dtype=np.int64)
    rows = np.asarray(order)
    if rows.ndim != 1 or (rows.size and rows.dtype.kind not in "iu"):
        raise ValueError("order must be a flat array of block indexes")
    if rows.size and (int(rows.min()) < 0 or int(rows.max()) >= num_blocks):
        raise ValueError(f"order holds block indexes outside 0..{num_blocks - 1}")
    return rows.astype(np.int64)


@contextmanager
def _atomic(path: PathType) -> Iterator[Path]:
    """A temporary path next to ``path``, renamed onto it when the block succeeds, removed otherwise."""
    target = Path(path)
    temporary = target.with_name(f".{target.name}.{secrets.token_hex(6)}.tmp")
    os.close(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    try:
        yield temporary
        os.replace(temporary, target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def _seq_lengths(batch: PackedBatch, rows: Int64Array) -> tuple[Int64Array, Int64Array]:
    """Offsets and flat values of the document lengths of blocks ``rows``. O(pieces in them)."""
    starts = batch.plan.block_starts
    counts = np.diff(starts)[rows]
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    index = np.repeat(starts[:-1][rows] - offsets[:-1], counts) + np.arange(offsets[-1], dtype=np.int64)
    return offsets, batch.plan.piece_length[index]


def _record_batch(batch: PackedBatch, rows: Int64Array, schema: Any) -> Any:
    """Blocks ``rows`` as a pyarrow record batch with ``OUTPUT_COLUMNS``."""
    import pyarrow as pa

    width = batch.max_seq_length
    fixed = pa.array(np.arange(len(rows) + 1, dtype=np.int32) * np.int32(width))
    grids = (batch.input_ids, batch.labels, batch.loss_mask, batch.position_ids, batch.sequence_ids)
    arrays = [pa.ListArray.from_arrays(fixed, pa.array(grid[rows].reshape(-1).astype(np.int64))) for grid in grids]
    offsets, values = _seq_lengths(batch, rows)
    arrays.append(pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(values)))
    return pa.record_batch(arrays, schema=schema)


def write_parquet(batch: PackedBatch, path: PathType, order: npt.ArrayLike | None = None) -> None:
    """Write one row per block, in ``order`` (default plan order), atomically. O(blocks × max_seq_length).

    Columns ``OUTPUT_COLUMNS``, each a list of int64.

    >>> import pyarrow.parquet as pq, tempfile, os
    >>> from packing import pack
    >>> target = os.path.join(tempfile.mkdtemp(), "blocks.parquet")
    >>> write_parquet(pack([[1, 2], [3, 4, 5], [6]], 4), target, order=[1, 0])
    >>> pq.read_table(target).column("input_ids").to_pylist()
    [[5, 6, 0, 0], [1, 2, 3, 4]]
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = _check_order(order, batch.num_blocks)
    schema = pa.schema([(name, pa.list_(pa.int64())) for name in OUTPUT_COLUMNS])
    step = max(1, _PARQUET_CHUNK_VALUES // batch.max_seq_length)
    with _atomic(path) as temporary, pq.ParquetWriter(temporary, schema) as writer:
        for first in range(0, len(rows), step):
            writer.write_batch(_record_batch(batch, rows[first : first + step], schema))


def _block_record(batch: PackedBatch, block: int) -> dict[str, list[int]]:
    """One block as a dict of ``OUTPUT_COLUMNS`` lists. O(max_seq_length)."""
    return {
        "input_ids": batch.input_ids[block].tolist(),
        "labels": batch.labels[block].tolist(),
        "loss_mask": batch.loss_mask[block].astype(np.int64).tolist(),
        "position_ids": batch.position_ids[block].tolist(),
        "sequence_ids": batch.sequence_ids[block].tolist(),
        "seq_lengths": batch.seq_lengths(block).tolist(),
    }


def write_jsonl(batch: PackedBatch, path: PathType, order: npt.ArrayLike | None = None) -> None:
    """Write one JSON object per block and line, in ``order``, atomically. O(blocks × max_seq_length).

    >>> import json, tempfile, os
    >>> from packing import pack
    >>> target = os.path.join(tempfile.mkdtemp(), "blocks.jsonl")
    >>> write_jsonl(pack([[1, 2], [3]], 4), target)
    >>> json.loads(open(target).readline())["labels"]
    [-100, 2, -100, -100]
    """
    rows = _check_order(order, batch.num_blocks)
    with _atomic(path) as temporary, open(temporary, "w", encoding="utf-8") as handle:
        for block in rows.tolist():
            handle.write(json.dumps(_block_record(batch, block)) + "\n")
