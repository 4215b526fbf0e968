"""The one file reader: where a dataset's files are, how each is opened, and what it holds once decoded.

A *source* is a file (a path, a binary file object such as an upload, or its ``bytes``), several paths, a
glob (``data/*.parquet``), a folder of shards, or a folder written by ``datasets``' ``save_to_disk``.
:func:`resolve` turns it into files in a stable order: paths sorted (a folder's files, a glob's matches,
a list given), a ``save_to_disk`` folder in its ``state.json`` order. A folder is read without its
subfolders, hidden files (``.x``, ``_x``) and files of other extensions. Formats, by extension:

- ``jsonl`` (``.jsonl``, ``.ndjson``): one JSON value per line, blank lines skipped;
- ``json``: a list of rows, a histogram object (``histogram`` or ``lengths``), or JSON lines;
- ``csv``: a header line, then one row per line (cells as text: :func:`packing.reading.cells.cells_row` reads them);
- ``parquet`` (``.parquet``, ``.pq``) and ``arrow`` (Arrow IPC file or stream: ``.arrow``, ``.feather``,
  ``.ipc``): an Arrow table;
- ``npy``: NeMo's packed rows (a ``.npy`` of dicts, read by :func:`packing.layouts.megatron.read_npy`), packed
  data only.

Every path is opened with :func:`packing.reading.limits.open_input` (regular files only); JSON is scanned
(:func:`packing.reading.limits.scan_json`) before it is parsed. Bounds (:class:`~packing.reading.limits.ReadLimits`) apply
to the whole source: each file is checked before it is decoded against what the files before it left
(:class:`Budget`), and the totals as they grow. Two views of a file: :func:`decode` (rows with their places,
or a Parquet or Arrow file's :class:`Batches`, decoded one at a time: what :func:`packing.read_dataset` gives
the reader) and :func:`read_file` (one Arrow table over
all files: what the auditor reads). O(bytes) throughout.

>>> import os, tempfile
>>> folder = tempfile.mkdtemp()
>>> for name, text in [("b.jsonl", '{"input_ids": [3]}\\n'), ("a.csv", "input_ids\\n1 2\\n"), ("notes.md", "hi")]:
...     _ = open(os.path.join(folder, name), "w").write(text)
>>> [os.path.basename(file.label) for file in resolve(folder).files]
['a.csv', 'b.jsonl']
>>> [content.rows for content in map(decode, resolve(folder).files)]
[[{'input_ids': '1 2'}], [{'input_ids': [3]}]]

Internal: the public names are in ``packing`` and ``packing.reading``.
"""

from __future__ import annotations

import glob
import io
import json
import mmap
import os
import re
from collections.abc import Collection, Iterable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from packing.core.validation import INT32_MAX
from packing.errors import DatasetError, LimitError, SettingError, quote
from packing.reading.content import Batches, Content, File, opened, unreadable
from packing.reading.limits import (
    NO_LIMITS,
    ReadLimits,
    check_count,
    check_parquet,
    check_size,
    open_input,
    read_bounded,
    scan_json,
)
from packing.reading.paths import once, refuse_cycles
from packing.reading.rowfiles import EXPECTED, decode_rows, names, read_json, repeated, twice

if TYPE_CHECKING:  # pragma: no cover - typing only
    import pyarrow as pa
    import pyarrow.parquet as pq

Int64Array = npt.NDArray[np.int64]

FORMATS = ("jsonl", "json", "csv", "parquet", "arrow")
"""Formats of dataset files (samples): what :func:`decode` reads, the command line's ``--input-format``."""
PACKED_FORMATS = ("jsonl", "json", "parquet", "arrow", "npy")
"""Formats of packed files (blocks): what :func:`read_file` reads (CSV holds samples only, NeMo's ``.npy``
blocks only)."""
EXTENSIONS = {
    "jsonl": "jsonl",
    "ndjson": "jsonl",
    "json": "json",
    "csv": "csv",
    "parquet": "parquet",
    "pq": "parquet",
    "arrow": "arrow",
    "feather": "arrow",
    "ipc": "arrow",
    "npy": "npy",
}
"""Format of each file extension (and format name); ``npy`` is NeMo's packed rows (packed data only)."""


def extensions(formats: Iterable[str] = FORMATS) -> list[str]:
    """Every file extension of ``formats``, in :data:`EXTENSIONS`' order (what an upload may be named). O(1).

    >>> extensions(["parquet", "arrow"])
    ['parquet', 'pq', 'arrow', 'feather', 'ipc']
    """
    wanted = set(formats)
    return [extension for extension, kind in EXTENSIONS.items() if kind in wanted]


def listed(formats: Sequence[str] = FORMATS) -> str:
    """``formats`` as file extensions in words, for messages and help. O(1).

    >>> listed()
    '.jsonl, .json, .csv, .parquet or .arrow'
    """
    shown = [f".{kind}" for kind in formats]
    return f"{', '.join(shown[:-1])} or {shown[-1]}" if len(shown) > 1 else "".join(shown)


_KINDS = listed()
_KNOWN = f"a {_KINDS} file"
_MAGIC = re.compile(r"[*?[]")
_STATE_BYTES = 1 << 20


# ---------------------------------------------------------------- where the files are


@dataclass(frozen=True)
class Files:
    """The files of a source, in reading order, and how messages name the whole (``label``)."""

    label: str
    files: tuple[File, ...]


def format_of(label: str, format: str | None = None) -> str:
    """The format of a file: ``format`` (a name or an extension) when given, else its name's extension.

    >>> format_of("shard.NDJSON"), format_of("x.bin", ".feather")
    ('jsonl', 'arrow')
    """
    if format is not None:
        given = str(format).lower().lstrip(".")
        if given not in EXTENSIONS:
            raise DatasetError(label, None, f"unknown format {quote(format)}; expected one of: {', '.join(FORMATS)}")
        return EXTENSIONS[given]
    extension = Path(label).suffix.lower().lstrip(".")
    if extension not in EXTENSIONS:
        raise DatasetError(label, None, f"cannot tell the format from the file name; expected {_KNOWN}")
    return EXTENSIONS[extension]


def resolve(source: Any, format: str | None = None, name: str | None = None) -> Files:
    """The files of ``source`` in reading order (see the module). ``format`` forces every file's format;
    ``name`` is how messages name the source (needed for file objects such as uploads). O(files · log files).

    >>> import io
    >>> found = resolve(io.BytesIO(b"[[1]]"), name="upload.json")
    >>> found.label, [(f.label, f.format) for f in found.files]
    ('upload.json', [('upload.json', 'json')])
    >>> resolve("/nowhere/*.jsonl")
    Traceback (most recent call last):
    ...
    packing.errors.DatasetError: /nowhere/*.jsonl: no file matches this pattern
    """
    if isinstance(source, (bytes, bytearray, memoryview)):
        source = io.BytesIO(bytes(source))
    if hasattr(source, "read"):
        label = name or str(getattr(source, "name", None) or "<uploaded file>")
        return Files(label, (File(source, label, format_of(label, format)),))
    if isinstance(source, (str, os.PathLike)):
        label = name or os.fspath(source)
        return Files(label, tuple(once(_expand(os.fspath(source), format))))
    if isinstance(source, (list, tuple)) and source and all(isinstance(p, (str, os.PathLike)) for p in source):
        found = {file.label: file for path in source for file in _expand(os.fspath(path), format)}
        given = sorted(os.fspath(path) for path in source)
        shown = given[0] + (f" and {len(given) - 1} more" if len(given) > 1 else "")
        return Files(name or shown, tuple(once([found[label] for label in sorted(found)])))
    raise SettingError(
        "source", "a path, a glob, a folder, a list of paths, or a binary file object", type(source).__name__
    )


def _expand(path: str, format: str | None) -> list[File]:
    """The files one path stands for: a folder's, a glob's matches, or the file itself."""
    if os.path.isdir(path):
        return _folder(path, format)
    if not os.path.lexists(path) and _MAGIC.search(path):
        refuse_cycles(path)
        matches = [match for match in sorted(glob.glob(path, recursive=True)) if not os.path.isdir(match)]
        files = [File(match, match, format_of(match, format)) for match in matches if _readable(match, format)]
        if not files:
            reason = "no file matches this pattern" if not matches else f"no {_KINDS} file matches this pattern"
            raise DatasetError(path, None, reason)
        return files
    return [File(path, path, format_of(path, format))]


def read_whole(source: Any, format: str | None = None) -> list[str]:
    """The files of ``source`` that are parsed whole, not row by row: JSON files holding one array (the first
    byte other than white space is ``[``). Nothing when the source does not resolve (reading it says why).
    O(files), the first bytes of each JSON file.

    >>> import os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> for name, text in [("a.json", " [[1, 2]]"), ("b.json", '{"lengths": [3]}'), ("c.jsonl", "[1]\\n")]:
    ...     _ = open(os.path.join(folder, name), "w").write(text)
    >>> [os.path.basename(label) for label in read_whole(folder)]
    ['a.json']
    """
    try:
        files = resolve(source, format).files
    except (DatasetError, SettingError):
        return []
    whole = []
    for file in files:
        if file.format != "json" or not isinstance(file.source, (str, os.PathLike)):
            continue
        try:
            with open(file.source, "rb") as handle:
                first = b""
                while not first and (block := handle.read(1 << 16)):
                    first = block.lstrip(b" \t\r\n\xef\xbb\xbf")[:1]
        except OSError:
            continue
        if first == b"[":
            whole.append(file.label)
    return whole


def _readable(path: str, format: str | None = None) -> bool:
    """Whether a file found in a folder or by a glob is read: not hidden, and of a known extension (a glob's
    matches: any, when ``format`` says what they hold)."""
    base = os.path.basename(path)
    extension = Path(base).suffix.lower().lstrip(".")
    return not base.startswith((".", "_")) and (format is not None or extension in EXTENSIONS)


def _folder(path: str, format: str | None) -> list[File]:
    """A folder's files: a ``save_to_disk`` folder's data files, or the readable files in it, sorted."""
    if os.path.isfile(os.path.join(path, "state.json")):
        return _saved(path)
    if os.path.isfile(os.path.join(path, "dataset_dict.json")):
        splits = sorted(entry.name for entry in os.scandir(path) if entry.is_dir())
        raise DatasetError(path, None, f"a datasets DatasetDict folder; read one of its splits: {', '.join(splits)}")
    names = sorted(entry.name for entry in os.scandir(path) if not entry.is_dir())
    files = [File(os.path.join(path, n), os.path.join(path, n), format_of(n, format)) for n in names if _readable(n)]
    if not files:
        raise DatasetError(path, None, f"a folder without dataset files ({_KINDS}; subfolders are not read)")
    return files


def _saved(path: str) -> list[File]:
    """The Arrow files a ``datasets`` ``save_to_disk`` folder lists in its ``state.json``, in that order."""
    state_path = os.path.join(path, "state.json")
    with open_input(state_path, state_path) as handle:
        data = read_bounded(handle, state_path, ReadLimits(max_bytes=_STATE_BYTES))
    scan_json(data, state_path)
    try:
        state = json.loads(data)
    except ValueError:
        state = None
    entries = state.get("_data_files") if isinstance(state, dict) else None
    names = [item.get("filename") if isinstance(item, dict) else None for item in entries or []]
    if not isinstance(entries, list) or not names or not all(map(_plain_name, names)):
        expected = "a datasets save_to_disk state: '_data_files', a list of {'filename': name in this folder}"
        raise DatasetError(state_path, None, f"expected {expected}")
    return [File(os.path.join(path, str(n)), os.path.join(path, str(n)), "arrow") for n in names]


def _plain_name(name: Any) -> bool:
    """Whether ``name`` names a file inside a folder (no path, not ``..``): what ``state.json`` may list."""
    return isinstance(name, str) and name not in ("", ".", "..") and os.path.basename(name) == name


# ---------------------------------------------------------------- bounds over all files


class Budget:
    """The bounds of a whole source, spent file by file: :meth:`left` is what the next file may hold (checked
    before it is decoded), :meth:`spend` counts a file and checks the totals so far.

    >>> budget = Budget(ReadLimits(max_rows=5), "data", rows_are="samples")
    >>> budget.spend(rows=3)
    >>> budget.left().max_rows
    2
    >>> budget.spend(rows=3)
    Traceback (most recent call last):
    ...
    packing.errors.LimitError: data: holds 6 samples in 2 files, more than the limit of 5
    """

    def __init__(self, limits: ReadLimits, label: str, rows_are: str = "rows") -> None:
        self.limits = limits
        self.label = label
        self.rows_are = rows_are
        self.files = 0
        self.used = {"bytes": 0, "rows": 0, "tokens": 0, "values": 0}

    def left(self) -> ReadLimits:
        """The bounds of the next file: what the files before it left."""
        return self.limits if not self.files else self.limits.after(**self.used)

    def spend(self, *, bytes: int = 0, rows: int = 0, tokens: int = 0, values: int = 0) -> None:
        """Count one more file; refuse the dataset once a total passes its bound."""
        self.files += 1
        for key, count in (("bytes", bytes), ("rows", rows), ("tokens", tokens), ("values", values)):
            self.used[key] += int(count)
        if self.files < 2:
            return
        totals = (
            ("bytes", self.used["bytes"], self.limits.max_bytes),
            (self.rows_are, self.used["rows"], self.limits.max_rows),
            ("values", self.used["values"], self.limits.max_values),
        )
        for what, count, bound in totals:
            check_count(self.label, f"{what} in {self.files} files", count, bound)

    def check_tokens(self, lengths_only: bool) -> None:
        """Refuse the dataset when its tokens so far pass ``max_tokens`` (``max_length_tokens`` for lengths)."""
        bound = self.limits.length_tokens if lengths_only else self.limits.max_tokens
        files = f" in {self.files} files" if self.files > 1 else ""
        check_count(self.label, f"tokens{files}", self.used["tokens"], bound)

    @contextmanager
    def reading(self) -> Iterator[None]:
        """Read the next file within what is left: a bound it passes is named as what the files before it left."""
        try:
            yield
        except LimitError as error:
            if not self.files or self.limits == NO_LIMITS:
                raise
            before = "the file" if self.files == 1 else f"the {self.files} files"
            note = f" (what {before} before it left of the limits over {self.label})"
            raise LimitError(error.source, error.where, error.reason + note) from None


# ---------------------------------------------------------------- decoding one file


def decode(
    file: File,
    limits: ReadLimits = NO_LIMITS,
    columns: Collection[str] | None = None,
    rows_are: str = "rows",
    chunk_bytes: int | None = None,
) -> Content:
    """What ``file`` holds, within ``limits`` (checked before decoding: a file's size, a Parquet file's
    metadata, JSON's nesting, lines and values); ``columns`` keeps only those columns of tables and CSV rows
    (None: all); ``rows_are`` names rows in messages (samples, blocks). With ``chunk_bytes``, rows (JSON
    lines, CSV, a JSON list) come as ``chunks`` of about that many bytes of text (a JSON list: about
    :data:`packing.reading.rowfiles.ROW_BYTES` a row), parsed as they are iterated: the same rows, places and errors as whole, one
    chunk of Python values held at a time (JSON lines from a path: its bytes memory-mapped, each chunk's pages
    let go once parsed; a JSON list is parsed whole, its rows let go chunk by chunk). O(bytes).

    >>> import io
    >>> content = decode(File(io.BytesIO(b'[{"input_ids": [1]}, {"input_ids": [2, 3]}]'), "d.json", "json"))
    >>> content.rows, content.where
    ([{'input_ids': [1]}, {'input_ids': [2, 3]}], ['item 1', 'item 2'])
    >>> content = decode(File(io.BytesIO(b'[1]\\n\\n[2, 3]\\n[4]\\n'), "d.jsonl", "jsonl"), chunk_bytes=8)
    >>> list(content.chunks)
    [([[1], [2, 3]], ['line 1', 'line 3']), ([[4]], ['line 4'])]
    """
    if file.format == "npy":
        raise DatasetError(file.label, None, "a NeMo .npy file holds packed blocks, not samples; audit it instead")
    if file.format == "parquet":
        return _parquet(file, limits, columns, rows_are)
    if file.format == "arrow":
        return _arrow(file, limits, columns, rows_are)
    return decode_rows(file, limits, columns, rows_are, chunk_bytes)


class ParquetBatches(Batches):
    """A Parquet file's batches; rows and value counts from its metadata (checked before a value is decoded)."""

    def __init__(self, parquet: pq.ParquetFile, columns: list[str], file: File, owned: ExitStack) -> None:
        super().__init__(columns, file, owned)
        self.parquet = parquet

    @property
    def schema(self) -> pa.Schema:
        import pyarrow as pa

        schema = self.parquet.schema_arrow
        return pa.schema([schema.field(name) for name in self.columns])

    @property
    def num_rows(self) -> int:
        return int(self.parquet.metadata.num_rows)

    @property
    def file_columns(self) -> tuple[str, ...]:
        return tuple(self.parquet.schema_arrow.names)

    def values(self, columns: Collection[str]) -> int:
        """An upper bound from the column chunks' value counts (an empty or null list counts one)."""
        return sum(int(chunk.num_values) for chunk in self._chunks(columns))

    def decoded_bytes(self) -> int:
        return sum(int(chunk.total_uncompressed_size) for chunk in self._chunks(self.columns))

    def _chunks(self, columns: Collection[str]) -> Iterator[Any]:
        """The column chunks of ``columns`` (of the wanted ones) in every row group."""
        metadata = self.parquet.metadata
        counted = set(columns) & set(self.columns)
        for group in range(metadata.num_row_groups):
            row_group = metadata.row_group(group)
            for index in range(row_group.num_columns):
                chunk = row_group.column(index)
                if chunk.path_in_schema.split(".", 1)[0] in counted:
                    yield chunk

    def _batches(self, rows: int) -> Iterator[pa.RecordBatch]:
        return iter(self.parquet.iter_batches(batch_size=rows, columns=self.columns, use_threads=False))

    def _whole(self) -> pa.Table:
        return self.parquet.read(columns=self.columns)


def _parquet(file: File, limits: ReadLimits, columns: Collection[str] | None, rows_are: str) -> Content:
    """A Parquet file's (wanted) columns, as :class:`Batches` not yet decoded; its metadata is checked against
    ``limits`` first (:func:`packing.reading.limits.check_parquet`), so a bomb is refused before a value is decoded."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    with ExitStack() as stack:
        handle = stack.enter_context(opened(file))
        try:
            parquet = pq.ParquetFile(handle, pre_buffer=False)  # not the whole file read ahead
            wanted = _wanted(list(parquet.schema_arrow.names), file, columns)
            check_parquet(parquet, wanted if columns is not None else None, file.label, limits, rows_are)
        except (pa.ArrowException, OSError, ValueError) as error:
            if isinstance(error, DatasetError):
                raise
            raise unreadable(file, error, "Parquet") from None
        return Content(file, batches=ParquetBatches(parquet, wanted, file, stack.pop_all()))
    raise AssertionError("unreachable")  # pragma: no cover


def _wanted(found: list[str], file: File, columns: Collection[str] | None) -> list[str]:
    """The columns of ``found`` that are wanted (all when ``columns`` is None); none, or a wanted name that two
    columns have: a DatasetError."""
    wanted = [name for name in found if columns is None or name in columns]
    double = repeated(wanted)
    if double is not None:
        raise DatasetError(file.label, None, twice(double))
    if not wanted:
        raise DatasetError(file.label, None, f"no usable columns; found {names(found)}, expected {EXPECTED}")
    return wanted


class ArrowBatches(Batches):
    """An Arrow IPC file's or stream's batches (what ``datasets`` writes with ``save_to_disk``), over its
    bytes memory-mapped (a path) or read (a file object). One pass over the batches' metadata and list
    offsets, when made, counts the rows, bytes and list values and checks them against ``limits`` after each
    batch (a compressed batch is only as large as one batch before it is refused); iterating then slices the
    batches to the bounded size, zero-copy. ``nbytes``: the whole file's batches (all columns), decoded.

    >>> import io, pyarrow as pa
    >>> sink = io.BytesIO()
    >>> table = pa.table({"input_ids": [[1, 2], [3]]})
    >>> with pa.ipc.new_stream(sink, table.schema) as writer:
    ...     writer.write_table(table)
    >>> batches = decode(File(io.BytesIO(sink.getvalue()), "d.arrow", "arrow")).batches
    >>> batches.num_rows, batches.values(["input_ids"]), batches.read().column("input_ids").to_pylist()
    (2, 3, [[1, 2], [3]])
    """

    kind = "Arrow"

    def __init__(
        self,
        buffer: pa.Buffer,
        columns: Collection[str] | None,
        file: File,
        limits: ReadLimits,
        rows_are: str,
        mapped: mmap.mmap | None = None,
    ) -> None:
        super().__init__([], file, ExitStack())
        self.buffer = buffer
        self._mapped = mapped
        self._released = 0  # the mapped bytes let go in this pass over the batches
        schema, batches = self._reader()
        self.columns = _wanted(list(schema.names), file, columns)
        self._schema = schema
        self._rows = 0
        self._values = dict.fromkeys(self.columns, 0)
        self._wanted_bytes = 0
        for batch in batches:
            self._rows, self.nbytes = self._rows + batch.num_rows, self.nbytes + int(batch.nbytes)
            check_count(file.label, rows_are, self._rows, limits.max_rows)
            if limits.max_bytes is not None and self.nbytes > limits.max_bytes:
                raise LimitError(file.label, None, f"holds more than the limit of {limits.max_bytes:,} bytes once read")
            for name in self.columns:
                column = batch.column(name)
                self._values[name] += _list_count(column)
                self._wanted_bytes += int(column.nbytes)
        self._release(buffer.size)  # the headers and offsets this pass read
        self._released = 0

    def _reader(self) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
        """The schema and the batches of the IPC file, or else of the IPC stream."""
        import pyarrow as pa

        try:
            reader = pa.ipc.open_file(pa.BufferReader(self.buffer))
            return reader.schema, (reader.get_batch(i) for i in range(reader.num_record_batches))
        except pa.ArrowInvalid:
            stream = pa.ipc.open_stream(pa.BufferReader(self.buffer))
            return stream.schema, iter(stream)

    @property
    def schema(self) -> pa.Schema:
        import pyarrow as pa

        return pa.schema([self._schema.field(name) for name in self.columns])

    @property
    def num_rows(self) -> int:
        return self._rows

    @property
    def file_columns(self) -> tuple[str, ...]:
        return tuple(self._schema.names)

    def values(self, columns: Collection[str]) -> int:
        """The list values of ``columns`` (a column of scalars: one a row), counted when made."""
        return sum(count for name, count in self._values.items() if name in columns)

    def decoded_bytes(self) -> int:
        return self._wanted_bytes

    def _batches(self, rows: int) -> Iterator[pa.RecordBatch]:
        self._released = 0
        for batch in self._reader()[1]:
            chosen = batch.select(self.columns)
            for start in range(0, batch.num_rows, rows):
                yield chosen.slice(start, rows)
            self._release(self._end(batch))
        self._release(self.buffer.size)

    def _end(self, batch: pa.RecordBatch) -> int:
        """Where the last of ``batch``'s buffers in the mapped file ends (0: none is). O(buffers)."""
        base, size = self.buffer.address, self.buffer.size
        ends = [
            found.address + found.size - base
            for column in batch.columns
            for found in column.buffers()
            if found is not None and base <= found.address < base + size
        ]
        return max(ends, default=0)

    def _release(self, end: int) -> None:
        """Let the mapped pages before ``end`` go from this process's memory (they stay in the page cache and
        are read again if touched): a file read batch by batch holds one batch's pages, not the file's. O(1)
        calls to the system."""
        advice = getattr(mmap, "MADV_DONTNEED", None)
        whole = end // mmap.PAGESIZE * mmap.PAGESIZE
        if self._mapped is not None and advice is not None and whole > self._released:
            self._mapped.madvise(advice, self._released, whole - self._released)
            self._released = whole

    def _whole(self) -> pa.Table:
        import pyarrow as pa

        schema, batches = self._reader()
        table = pa.Table.from_batches(list(batches), schema=schema)
        return table.select(self.columns)


def _list_count(column: pa.Array) -> int:
    """The values of a list column (from its offsets: two values read), or its rows for another type. O(1)."""
    import pyarrow as pa

    kind = column.type
    if (pa.types.is_list(kind) or pa.types.is_large_list(kind)) and len(column):
        offsets = column.offsets
        return int(offsets[len(offsets) - 1].as_py()) - int(offsets[0].as_py())
    if pa.types.is_fixed_size_list(kind):
        return len(column) * int(kind.list_size)
    return len(column)


def _arrow(file: File, limits: ReadLimits, columns: Collection[str] | None, rows_are: str) -> Content:
    """An Arrow IPC file or stream as :class:`ArrowBatches`: a path memory-mapped (the descriptor opened and
    checked by :func:`packing.reading.limits.open_input`; its pages are read as the batches are, never copied, and let
    go once read), a file object read within ``max_bytes``. O(batches) until iterated."""
    import pyarrow as pa

    mapped: mmap.mmap | None = None
    try:
        with opened(file) as handle:
            if isinstance(file.source, (str, os.PathLike)):
                check_size(handle, file.label, limits)
                if os.fstat(handle.fileno()).st_size:  # an empty file cannot be mapped; the reader names it
                    mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)  # lives while buffers do
                buffer = pa.py_buffer(mapped if mapped is not None else b"")
            else:
                buffer = pa.py_buffer(read_bounded(handle, file.label, limits))
        return Content(file, batches=ArrowBatches(buffer, columns, file, limits, rows_are, mapped))
    except (pa.ArrowException, OSError, ValueError) as error:
        if isinstance(error, DatasetError):
            raise
        raise unreadable(file, error, "Arrow") from None


# ---------------------------------------------------------------- one table over all files (packed data)


def _as_table(file: File, limits: ReadLimits) -> tuple[pa.Table, int]:
    """A file as an Arrow table (JSON lines through ``pyarrow.json`` once scanned), and the JSON values scanned."""
    import pyarrow as pa
    import pyarrow.json as pj

    if file.format in ("parquet", "arrow"):
        batches = decode(file, limits, rows_are="blocks").batches
        assert batches is not None
        return batches.read(), 0
    if file.format == "csv":
        raise DatasetError(
            file.label, None, "a CSV file holds samples, not packed blocks; expected Parquet, JSON or Arrow"
        )
    with opened(file) as handle:
        data = read_bounded(handle, file.label, limits)
    if file.format == "npy":  # NeMo's packed rows, unpickled without running anything
        from packing.reading.npy import read_npy

        return read_npy(data, file.label), 0
    try:
        if file.format == "json":  # the same rule as for samples: a list of rows, or JSON lines
            content = read_json(data, file, limits, "blocks")
            if content.rows is None or not all(isinstance(row, dict) for row in content.rows):
                raise DatasetError(file.label, None, "expected packed blocks: JSON objects of columns, one per block")
            return pa.Table.from_pylist(content.rows), content.values
        scan = scan_json(data, file.label, limits)
        options = pj.ReadOptions(block_size=min(max(1 << 20, scan.longest_line + 2), INT32_MAX))
        return pj.read_json(pa.BufferReader(data), read_options=options), scan.values
    except (pa.ArrowException, OSError, ValueError) as error:
        if isinstance(error, DatasetError):
            raise
        raise unreadable(file, error, "JSON") from None


def _list_values(table: pa.Table) -> int:
    """The most values any list column of ``table`` holds. O(rows · columns)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    most = 0
    for column in table.columns:
        kind = column.type
        if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
            most = max(most, int(pc.sum(pc.list_value_length(column)).as_py() or 0))
    return most


@dataclass(frozen=True, eq=False)
class FileTable:
    """The files of a source as one table: row ``i`` of ``table`` is a row of the file that ``parts``
    (``(file label, rows)`` in order) places it in; ``label`` names the whole."""

    table: pa.Table
    label: str
    parts: tuple[tuple[str, int], ...]

    def locate(self, error: DatasetError) -> DatasetError:
        """``error`` about ``row N`` of the whole table, naming the file and its row instead. O(files).

        >>> import pyarrow as pa
        >>> whole = FileTable(pa.table({"x": [1, 2, 3]}), "data", (("data/a.jsonl", 2), ("data/b.jsonl", 1)))
        >>> str(whole.locate(DatasetError("data", "row 3", "expected a list, got null")))
        'data/b.jsonl, row 1: expected a list, got null'
        """
        found = re.fullmatch(r"row (\d+)(.*)", error.where or "")
        if found is None or error.source != self.label or len(self.parts) < 2:
            return error
        row = int(found[1]) - 1
        for label, rows in self.parts:
            if row < rows:
                return DatasetError(label, f"row {row + 1}{found[2]}", error.reason, error.cause)
            row -= rows
        return error


def read_file(source: Any, limits: ReadLimits = NO_LIMITS, name: str | None = None) -> FileTable:
    """Every file of ``source`` as one Arrow table (rows: blocks); the files must have the same columns.
    ``limits`` bound the whole (:class:`Budget`). O(bytes).

    >>> import io
    >>> found = read_file(io.BytesIO(b'{"input_ids": [1, 2], "seq_lengths": [2]}\\n'), name="b.jsonl")
    >>> found.label, found.table.column_names, found.table.num_rows
    ('b.jsonl', ['input_ids', 'seq_lengths'], 1)
    """
    import pyarrow as pa

    found = resolve(source, name=name)
    budget = Budget(limits, found.label, rows_are="blocks")
    tables: list[pa.Table] = []
    for file in found.files:
        with budget.reading():
            table, values = _as_table(file, budget.left())
        if tables and set(table.column_names) != set(tables[0].column_names):
            first = found.files[0].label
            reason = (
                f"columns {names(table.column_names)}, unlike {quote(first, 60)} "
                f"({names(tables[0].column_names)}); every file of a dataset has the same columns"
            )
            raise DatasetError(file.label, None, reason)
        budget.spend(bytes=table.nbytes, rows=table.num_rows, tokens=_list_values(table), values=values)
        tables.append(table)
    parts = tuple((file.label, int(table.num_rows)) for file, table in zip(found.files, tables, strict=True))
    if len(tables) == 1:
        return FileTable(tables[0], found.label, parts)
    try:
        whole = pa.concat_tables(tables, promote_options="permissive")
    except (pa.ArrowException, ValueError) as error:
        reason = f"files with columns of incompatible types ({quote(str(error), 80)})"
        raise DatasetError(found.label, None, reason) from None
    return FileTable(whole, found.label, parts)
