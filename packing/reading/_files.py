"""The one file reader: where a dataset's files are, how each is opened, and what it holds once decoded.

A *source* is a file (a path, a binary file object such as an upload, or its ``bytes``), several paths, a
glob (``data/*.parquet``), a folder of shards, or a folder written by ``datasets``' ``save_to_disk``.
:func:`resolve` turns it into files in a stable order: paths sorted (a folder's files, a glob's matches,
a list given), a ``save_to_disk`` folder in its ``state.json`` order. A folder is read without its
subfolders, hidden files (``.x``, ``_x``) and files of other extensions. Formats, by extension:

- ``jsonl`` (``.jsonl``, ``.ndjson``): one JSON value per line, blank lines skipped;
- ``json``: a list of rows, a histogram object (``histogram`` or ``lengths``), or JSON lines;
- ``csv``: a header line, then one row per line (cells as text: :func:`packing.reading._cells.cells_row` reads them);
- ``parquet`` (``.parquet``, ``.pq``) and ``arrow`` (Arrow IPC file or stream: ``.arrow``, ``.feather``,
  ``.ipc``): an Arrow table;
- ``npy``: NeMo's packed rows (a ``.npy`` of dicts, read by :func:`packing.layouts.megatron.read_npy`), packed
  data only.

Every path is opened with :func:`packing.reading._limits.open_input` (regular files only); pyarrow decodes
(:mod:`packing.reading._rowfiles` for files of rows). Bounds (:class:`~packing.reading._limits.ReadLimits`) apply
to the whole source: each file within what the files before it left (:class:`Budget`), and the totals as they
grow. Two views of a file: :func:`decode` (parts of rows, or a Parquet or Arrow file's :class:`Batches`,
decoded one at a time: what :func:`packing.read_dataset` gives the reader) and :func:`read_file` (one Arrow
table over all files: what the auditor reads). O(bytes) throughout.

>>> import os, tempfile
>>> folder = tempfile.mkdtemp()
>>> for name, text in [("b.jsonl", '{"input_ids": [3]}\\n'), ("a.csv", "input_ids\\n1 2\\n"), ("notes.md", "hi")]:
...     _ = open(os.path.join(folder, name), "w").write(text)
>>> [os.path.basename(file.label) for file in resolve(folder).files]
['a.csv', 'b.jsonl']
>>> [content.rows for content in map(decode, resolve(folder).files)]
[[{'input_ids': [1, 2]}], [{'input_ids': [3]}]]

Internal: the public names are in ``packing`` and ``packing.reading``.
"""

from __future__ import annotations

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

from packing.errors import DatasetError, LimitError, SettingError, quote
from packing.reading._content import Batches, Content, File, list_values, opened, unreadable
from packing.reading._limits import (
    NO_LIMITS,
    ReadLimits,
    check_count,
    check_parquet,
    check_size,
    open_input,
    read_bounded,
)
from packing.reading._rowfiles import EXPECTED, decode_rows, names, repeated, twice

if TYPE_CHECKING:  # pragma: no cover - typing only
    import pyarrow as pa

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
        return Files(label, tuple(_once(_expand(os.fspath(source), format))))
    if isinstance(source, (list, tuple)) and source and all(isinstance(p, (str, os.PathLike)) for p in source):
        found = {file.label: file for path in source for file in _expand(os.fspath(path), format)}
        given = sorted(os.fspath(path) for path in source)
        shown = given[0] + (f" and {len(given) - 1} more" if len(given) > 1 else "")
        return Files(name or shown, tuple(_once([found[label] for label in sorted(found)])))
    raise SettingError(
        "source", "a path, a glob, a folder, a list of paths, or a binary file object", type(source).__name__
    )


def _expand(path: str, format: str | None) -> list[File]:
    """The files one path stands for: a folder's, a glob's matches, or the file itself."""
    if os.path.isdir(path):
        return _folder(path, format)
    if not os.path.lexists(path) and _MAGIC.search(path):
        matches = [match for match in _glob(path) if not os.path.isdir(match)]
        files = [File(match, match, format_of(match, format)) for match in matches if _readable(match, format)]
        if not files:
            reason = "no file matches this pattern" if not matches else f"no {_KINDS} file matches this pattern"
            raise DatasetError(path, None, reason)
        return files
    return [File(path, path, format_of(path, format))]


def _glob(pattern: str) -> list[str]:
    """The paths ``pattern`` matches, sorted, by ``pathlib`` (``**``: any folders below, symbolic links to
    folders not followed, so no link cycle is walked). O(matches · log matches).

    >>> import os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> os.makedirs(os.path.join(folder, "a")); os.symlink(folder, os.path.join(folder, "a", "up"))
    >>> _ = open(os.path.join(folder, "a", "x.jsonl"), "w").write("[1]\\n")
    >>> [os.path.relpath(path, folder) for path in _glob(os.path.join(folder, "**", "*.jsonl"))]
    ['a/x.jsonl']
    """
    parts = Path(pattern).parts
    first = next(index for index, part in enumerate(parts) if _MAGIC.search(part))
    root = Path(*parts[:first]) if first else Path()
    return sorted(str(path) for path in root.glob(str(Path(*parts[first:]))))


def _once(files: list[File]) -> list[File]:
    """``files`` (in reading order) with each real file once: the first of the paths that lead to it (two names
    for one file, a folder and a file in it, a link). O(files)."""
    if not all(isinstance(file.source, (str, os.PathLike)) for file in files):
        return files
    kept: dict[str, File] = {}
    for file in files:
        kept.setdefault(os.path.realpath(file.source), file)  # type: ignore[arg-type]
    return list(kept.values())


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
    try:
        state = json.loads(data)
    except (ValueError, RecursionError):
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
    text: bool = False,
) -> Content:
    """What ``file`` holds, within ``limits`` (checked before decoding: a file's size, a Parquet file's footer,
    JSON's nesting, lines and values; and as pyarrow decodes); ``columns`` keeps only those columns of tables and
    CSV rows (None: all); ``rows_are`` names rows in messages (samples, blocks). Files of rows come in parts of
    about ``chunk_bytes`` bytes of text (:mod:`packing.reading._rowfiles`), parsed as they are iterated; ``text``:
    CSV ``prompt`` and ``completion`` cells are text. O(bytes).

    >>> import io
    >>> content = decode(File(io.BytesIO(b'[{"input_ids": [1]}, {"input_ids": [2, 3]}]'), "d.json", "json"))
    >>> part = next(iter(content.parts))
    >>> part.rows, part.place(1)
    ([{'input_ids': [1]}, {'input_ids': [2, 3]}], 'item 2')
    >>> content = decode(File(io.BytesIO(b'[1]\\n\\n[2, 3]\\n[4]\\n'), "d.jsonl", "jsonl"), chunk_bytes=8)
    >>> [(part.rows.column("input_ids").to_pylist(), part.place(0)) for part in content.parts]
    [([[1]], 'line 1'), ([[2, 3], [4]], 'line 3')]
    """
    if file.format == "npy":
        raise DatasetError(file.label, None, "a NeMo .npy file holds packed blocks, not samples; audit it instead")
    if file.format not in ("parquet", "arrow"):
        return decode_rows(file, limits, columns, rows_are, chunk_bytes, text)
    import pyarrow as pa

    kind = "Parquet" if file.format == "parquet" else "Arrow"
    with ExitStack() as stack:
        try:
            handle = stack.enter_context(opened(file))
            batches = (_parquet if kind == "Parquet" else _arrow)(file, handle, limits, columns, rows_are)
        except (pa.ArrowException, OSError, ValueError) as error:
            if isinstance(error, DatasetError):
                raise
            raise unreadable(file, error, kind) from None
        batches.owned = stack.pop_all()
        return Content(file, batches=batches, columns=batches.file_columns)
    raise AssertionError("unreachable")  # pragma: no cover


def _parquet(file: File, handle: Any, limits: ReadLimits, columns: Collection[str] | None, rows_are: str) -> Batches:
    """A Parquet file's wanted columns, its footer checked against ``limits`` first
    (:func:`~packing.reading._limits.check_parquet`). O(row groups × columns)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    parquet = pq.ParquetFile(handle, pre_buffer=False)  # not the whole file read ahead
    schema = parquet.schema_arrow
    wanted = _wanted(list(schema.names), file, columns)
    counts, decoded = check_parquet(parquet, wanted, file.label, limits, rows_are)

    def make(rows: int) -> Iterator[pa.RecordBatch]:
        yield from parquet.iter_batches(batch_size=rows, columns=wanted, use_threads=False)

    chosen = pa.schema([schema.field(name) for name in wanted])
    return Batches(file, "Parquet", chosen, tuple(schema.names), int(parquet.metadata.num_rows), counts, decoded, make,
                   limits=limits, rows_are=rows_are)  # fmt: skip


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


def _arrow(file: File, handle: Any, limits: ReadLimits, columns: Collection[str] | None, rows_are: str) -> Batches:
    """An Arrow IPC file or stream (what ``datasets`` writes with ``save_to_disk``): a path memory-mapped, a file
    object read within ``max_bytes``. One pass over its batches counts rows, bytes and list values as pyarrow
    decodes them, refused past ``limits`` after each batch (a compressed batch is as large as one batch before it
    is refused); iterating then slices the batches to the bounded size, zero-copy. O(batches)."""
    import pyarrow as pa

    check_size(handle, file.label, limits)
    mapped = None
    if isinstance(file.source, (str, os.PathLike)) and os.fstat(handle.fileno()).st_size:
        mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)  # lives while its buffers do
    buffer = pa.py_buffer(mapped if mapped is not None else read_bounded(handle, file.label, limits))
    source = pa.BufferReader(buffer)

    def release(batch: Any = None) -> None:
        """Let the mapped pages before ``batch``'s last buffer (None: all) go from this process's memory (they
        stay in the page cache): a file read batch by batch holds one batch's pages, not the file's."""
        if mapped is None or not hasattr(mmap, "MADV_DONTNEED"):
            return
        inside = [] if batch is None else [b for c in batch.columns for b in c.buffers() if b is not None]
        ends = [b.address + b.size - buffer.address for b in inside if 0 <= b.address - buffer.address < buffer.size]
        end = (max(ends, default=0) if batch is not None else buffer.size) // mmap.PAGESIZE * mmap.PAGESIZE
        if end:
            mapped.madvise(mmap.MADV_DONTNEED, 0, end)

    def reader() -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
        source.seek(0)
        try:
            found = pa.ipc.open_file(source)
            return found.schema, (found.get_batch(i) for i in range(found.num_record_batches))
        except pa.ArrowInvalid:
            source.seek(0)
            stream = pa.ipc.open_stream(source)
            return stream.schema, iter(stream)

    schema, all_batches = reader()
    wanted = _wanted(list(schema.names), file, columns)
    rows = nbytes = 0
    counts = dict.fromkeys(wanted, 0)
    for batch in all_batches:
        rows, nbytes = rows + batch.num_rows, nbytes + int(batch.nbytes)
        check_count(file.label, rows_are, rows, limits.max_rows)
        if limits.max_bytes is not None and nbytes > limits.max_bytes:
            raise LimitError(file.label, None, f"holds more than the limit of {limits.max_bytes:,} bytes once read")
        for name in wanted:
            counts[name] += list_values(batch.column(name))
    release()  # the pages the count read

    def make(size: int) -> Iterator[pa.RecordBatch]:
        for batch in reader()[1]:
            chosen = batch.select(wanted)
            yield from (chosen.slice(start, size) for start in range(0, batch.num_rows, size))
            release(batch)

    chosen = pa.schema([schema.field(name) for name in wanted])
    return Batches(
        file, "Arrow", chosen, tuple(schema.names), rows, counts, nbytes, make, limits=limits, rows_are=rows_are
    )


# ---------------------------------------------------------------- one table over all files (packed data)


def _as_table(file: File, limits: ReadLimits) -> pa.Table:
    """A file as an Arrow table: Parquet and Arrow batches, JSON lines and JSON block by block, NeMo's ``.npy``."""
    import pyarrow as pa

    if file.format == "csv":
        raise DatasetError(
            file.label, None, "a CSV file holds samples, not packed blocks; expected Parquet, JSON or Arrow"
        )
    if file.format == "npy":  # NeMo's packed rows, unpickled without running anything
        from packing.reading._npy import read_npy

        with opened(file) as handle:
            return read_npy(read_bounded(handle, file.label, limits), file.label)
    content = decode(file, limits, rows_are="blocks")
    if content.batches is not None:
        return content.batches.read()
    tables = []
    for part in content.parts or ():
        if part.refused is not None and file.format == "jsonl":
            raise unreadable(file, part.refused, "JSON")
        if isinstance(part.rows, list) and not all(isinstance(row, dict) for row in part.rows):
            raise DatasetError(file.label, None, "expected packed blocks: JSON objects of columns, one per block")
        tables.append(pa.Table.from_pylist(part.rows) if isinstance(part.rows, list) else part.rows)
    if content.lengths is not None or not tables:
        raise DatasetError(file.label, None, "expected packed blocks: JSON objects of columns, one per block")
    try:
        return pa.concat_tables(tables, promote_options="permissive")
    except (pa.ArrowException, ValueError) as error:
        raise unreadable(file, error, "JSON") from None


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
            table = _as_table(file, budget.left())
        if tables and set(table.column_names) != set(tables[0].column_names):
            first = found.files[0].label
            reason = (
                f"columns {names(table.column_names)}, unlike {quote(first, 60)} "
                f"({names(tables[0].column_names)}); every file of a dataset has the same columns"
            )
            raise DatasetError(file.label, None, reason)
        budget.spend(bytes=table.nbytes, rows=table.num_rows, tokens=max(map(list_values, table.columns), default=0))
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
