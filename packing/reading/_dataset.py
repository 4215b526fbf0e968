"""Datasets in, packed blocks out.

:func:`read_dataset` reads a file, several files, a glob, a folder of shards or a ``datasets``
``save_to_disk`` folder (:mod:`packing.reading._files` finds and decodes the files: JSON lines, JSON, CSV, Parquet,
Arrow) as one dataset, in a stable order; the one reader (:mod:`packing.reading._reader`) decides what each row is,
so a dataset is checked once, and ``pack(read_dataset(path), ...)`` does not check it again. Rows hold any
form the reader accepts: ``input_ids`` (with a loss mask), ``prompt`` and ``completion``, text (with a
tokenizer), or ``length`` alone (enough to plan and compare). JSON may also be a list of rows, or a
histogram object like the bundled workloads (``histogram`` or ``lengths``). A problem raises
:class:`~packing.errors.DatasetError` naming the file, the line or row (from 1), the column, the position
and what was expected.

What :func:`read_dataset` returns is a map-style dataset (``len``, ``data[i]``, ``.lengths``): it goes
straight into a ``torch.utils.data.DataLoader`` with ``packing.torch.PackingSampler(data.lengths, ...)``.

Outputs are the schema's columns (:mod:`packing.batches._schema`), written atomically
(:func:`~packing.layouts._outputs.atomic_path`): to a temporary file next to the target, renamed
onto it only once complete. A failure or Ctrl-C (and, at the command line, SIGTERM or SIGHUP) leaves
the old output as it was and no temporary or lock file; a second writer of the same path, in another
process or thread, is refused while the first runs.

>>> import io
>>> data = read_dataset(io.BytesIO(b'{"input_ids": [1, 2, 3]}\\n{"input_ids": [4]}\\n'), format="jsonl")
>>> data.kind, data.lengths.tolist(), data[1]["input_ids"].tolist()
('tokens', [3, 1], [4])

Internal: the public names are in ``packing`` and ``packing.reading``.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt

from packing.core._arrays import offsets_of
from packing.core._forms import FIELDS, READ_FIELDS, TOKEN_FIELDS
from packing.core._samples import IGNORE_INDEX, Samples
from packing.core._validation import is_integer
from packing.errors import DatasetError, SampleError
from packing.reading._arrow import Accumulator, batch_parts, flat_batches, progress_after, read_table
from packing.reading._content import Content, File, Part
from packing.reading._files import FORMATS, Budget, decode, resolve
from packing.reading._limits import ReadLimits, check_count, limits_of
from packing.reading._reader import read_samples, unit_row
from packing.reading._rowfiles import EXPECTED, names
from packing.recipe import Recipe, RecipeOptions
from packing.strategies._overflow import check_within
from packing.text._prepare import Prepared, prepare

if TYPE_CHECKING:  # pragma: no cover - typing only
    from typing import Unpack

Int64Array = npt.NDArray[np.int64]
PathType = str | os.PathLike[str]
Source = PathType | IO[bytes] | bytes | Sequence[PathType]

__all__ = ["FORMATS", "FileSamples", "read_dataset"]


@dataclass(frozen=True, eq=False)
class FileSamples:
    """Samples read from files: what ``pack`` and ``plan`` accept, checked once; a map-style dataset.

    ``samples`` is a :class:`~packing.core._samples.Samples` (without tokens for lengths-only data);
    ``lengths`` is tokens per sample; ``source`` names the dataset in messages; ``files`` are its files
    in reading order and ``starts`` the index of each one's first sample. ``data[i]`` is sample ``i``:
    ``{"input_ids": ..., "loss_mask": ...}`` (int64 and int8 arrays; with ``labels`` when the samples' labels
    differ from their ids, see ``Samples.labels``), or ``{"length": n}``; a preference pair or completion group
    is given back in its own form, ``{"prompt", "chosen", "rejected"}`` or ``{"prompt", "completions"}`` (token
    arrays; with the completions' masks when one of their tokens is not trained).

    >>> import io
    >>> data = read_dataset(io.BytesIO(b"prompt,completion\\n1 2,3\\n"), name="pairs.csv")
    >>> data.kind, data.source, data.lengths.tolist(), data.samples.loss_mask.tolist()
    ('tokens', 'pairs.csv', [3], [0, 0, 1])
    >>> {name: values.tolist() for name, values in data[0].items()}
    {'input_ids': [1, 2, 3], 'loss_mask': [0, 0, 1]}
    """

    samples: Samples
    source: str
    files: tuple[str, ...] = ()
    starts: tuple[int, ...] = field(default=(), repr=False)
    notes: tuple[str, ...] = ()
    """What a person reading this dataset should know, one sentence each: files that look like packed blocks
    rather than samples (:data:`PACKED_COLUMNS`). The command line prints them as warnings."""
    sources: tuple[File, ...] = field(default=(), repr=False, compare=False)
    """The files, to find a sample's place in its file again (:meth:`locate`)."""

    def locate(self, error: SampleError) -> SampleError | DatasetError:
        """``error`` about sample ``i`` of the dataset as the same error at its place in its file (``a.jsonl,
        line 7``), found by reading that file again up to it (a file object, read once, is named by the sample's
        number in it). O(the file's bytes), on the way to an error only.

        >>> import io, os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "ids.jsonl")
        >>> _ = open(path, "w").write("[1]\\n\\n[2, 2147483648]\\n")
        >>> data = read_dataset(path)
        >>> str(data.locate(data.samples.wide_id_error())).replace(path, "ids.jsonl")
        'ids.jsonl, line 3, position 1: expected a token id at most 2147483647 (the int32 schema; int64=True for larger ids), got 2147483648'
        """
        if error.sample is None or not self.sources or not 0 <= error.sample < len(self):
            return error
        index = int(np.searchsorted(np.asarray(self.starts), error.sample, side="right")) - 1
        file, local = self.sources[index], error.sample - self.starts[index]
        return DatasetError.from_sample(file.label, _place(file, local), error)

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

    def __getitem__(self, index: int) -> dict[str, Any]:
        """Sample ``index`` (negative from the end): its tokens and loss mask (views), or its length. O(1)."""
        if not is_integer(index):
            raise TypeError(f"dataset indices are integers, not {type(index).__name__}")
        count = len(self)
        position = int(index) + count if index < 0 else int(index)
        if not 0 <= position < count:
            raise IndexError(f"sample {int(index)} out of range for {count:,} samples")
        lo, hi = int(self.samples.offsets[position]), int(self.samples.offsets[position + 1])
        if self.samples.tokens is None or self.samples.loss_mask is None:
            return {"length": hi - lo}
        if self.samples.units is not None:  # a pair or group as a row the reader reads back (collate, the sampler)
            return unit_row(self.samples, position)
        item = {"input_ids": self.samples.tokens[lo:hi], "loss_mask": self.samples.loss_mask[lo:hi]}
        if self.samples.labels is not None:  # labels other than the tokens, for collate
            item["labels"] = np.where(item["loss_mask"] != 0, self.samples.labels[lo:hi], IGNORE_INDEX)
        return item


# ---------------------------------------------------------------- reading


def read_dataset(
    source: Source,
    format: str | None = None,
    name: str | None = None,
    *,
    progress: Callable[[int, int], None] | None = None,
    limits: ReadLimits | None = None,
    recipe: Recipe | None = None,
    _chunk_bytes: int | None = None,
    **options: Unpack[RecipeOptions],
) -> FileSamples:
    """Read samples (or lengths) from one file or many, as one dataset. O(total tokens).

    ``source`` is a path, a binary file object (an upload) or its bytes, a list of paths, a glob
    (``"data/*.parquet"``), a folder of shards (``.jsonl``, ``.json``, ``.csv``, ``.parquet``, ``.arrow``,
    mixed or not), or a ``datasets`` ``save_to_disk`` folder; files are read in sorted order (a
    ``save_to_disk`` folder in its own). ``format`` (``jsonl``, ``json``, ``csv``, ``parquet``, ``arrow``)
    overrides the extensions. ``name`` is how messages refer to the source (needed for file objects).
    The options are the reading ones (:class:`~packing.Recipe`, or a whole ``recipe=``; another option given
    here is refused by name): the loss rule (``loss``, applied to prompt/completion rows as they are read), the
    ``tokenizer`` (loaded once for every file) and, with ``overflow="error"`` and a ``max_seq_length``, a longer
    sample refused naming its file and line (a ``DatasetError`` whose ``cause`` is the ``SequenceTooLong``). With a ``tokenizer``,
    text rows (``text``, ``messages``, ``prompt`` and ``completion`` as text) are tokenized with their masks
    (``packing.text._text_rows``) by ``num_proc`` processes, trained as ``loss_rules`` say (``Recipe.loss_rules``); in
    a CSV file the ``text``, ``prompt`` and ``completion`` cells are then text. ``limits`` bound the whole dataset (summed over its files), checked before each file is decoded.

    Memory: the samples and one part of one file at a time, written into one set of arrays (no join): a
    Parquet or Arrow file's batches (text batches of a bounded number of characters), JSON lines and CSV in
    blocks of about ``_chunk_bytes`` bytes of text decoded by pyarrow (a private knob; default
    :data:`packing.reading._rowfiles.BLOCK_BYTES`), ids read as int64 from text narrowed to int32 where they
    fit. A single JSON list is parsed whole.

    >>> import io, os, tempfile
    >>> read_dataset(io.BytesIO(b"length\\n5\\n7\\n"), name="lengths.csv").lengths.tolist()
    [5, 7]
    >>> folder = tempfile.mkdtemp()
    >>> for n, rows in enumerate(['[1, 2]\\n[3]\\n', '[4, 5, 6]\\n[7, "x"]\\n']):
    ...     _ = open(os.path.join(folder, f"shard-{n:05d}.jsonl"), "w").write(rows)
    >>> read_dataset(os.path.join(folder, "*.jsonl"))
    Traceback (most recent call last):
    ...
    packing.errors.DatasetError: .../shard-00001.jsonl, line 2, position 1: expected a non-negative integer token id, got 'x' (str)
    """
    chosen = Recipe.at("read_dataset", recipe, **options)
    given_length = recipe is not None or options.get("max_seq_length") is not None
    return read_files(
        source, format, name, chosen, prepare(chosen), given_length, progress=progress, limits=limits,
        chunk_bytes=_chunk_bytes,
    )  # fmt: skip


def read_files(
    source: Source,
    format: str | None,
    name: str | None,
    recipe: Recipe,
    prepared: Prepared,
    given_length: bool = True,
    *,
    progress: Callable[[int, int], None] | None = None,
    limits: ReadLimits | None = None,
    chunk_bytes: int | None = None,
) -> FileSamples:
    """:func:`read_dataset` with the door's ``recipe`` built and ``prepared`` once (the command line reads its
    input here, not through the public verb); ``given_length``: the recipe's ``max_seq_length`` was given, so
    ``overflow="error"`` refuses a longer sample. O(total tokens).

    >>> import io
    >>> read_files(io.BytesIO(b"[1, 2]\\n"), "jsonl", "x", Recipe(8), prepare(Recipe(8))).lengths.tolist()
    [2]
    """
    reading = prepared.read_options
    longest = recipe.max_seq_length if given_length and recipe.overflow == "error" else None
    _chunk_bytes = chunk_bytes
    found = resolve(source, format, name)
    budget = Budget(limits_of(limits), found.label, rows_are="samples")
    accumulator = Accumulator()  # every file's samples written into one set of arrays, no join
    starts: list[int] = []

    def report(count: int, total: int) -> None:
        if progress is not None:
            progress(starts[-1] + count, starts[-1] + total)

    notes: list[str] = []
    for file in found.files:
        rows, tokens, kind = 0, 0, None
        starts.append(accumulator.rows)
        keys: list[str] = []  # the first row's, for rows of JSON
        with budget.reading():
            text = reading.get("tokenizer") is not None
            content = decode(file, budget.left(), READ_FIELDS, "samples", chunk_bytes=_chunk_bytes, text=text)
            if content.batches is not None and not text:
                accumulator.reserve(content.batches.values(TOKEN_FIELDS))  # an upper bound: grown once
            for part, narrow, place in _parts(content, reading, report if progress else None, keys):
                if longest is not None:
                    _refuse_longer(part, file.label, longest, place)
                kind = part.has_tokens if kind is None else kind
                rows, tokens = rows + len(part), tokens + int(part.offsets[-1])
                if accumulator.has_tokens in (None, kind):  # a file of the other kind: read on, for its errors
                    accumulator.add(part, narrow)
        if accumulator.has_tokens is not None and accumulator.has_tokens != kind:
            raise _mixed(file, found.files[0], bool(kind))
        notes.extend(_packed_note(file.label, content, keys))
        budget.spend(bytes=content.bytes_read, rows=rows, tokens=tokens)
        if budget.files == 1:
            _bounded(rows, tokens, bool(kind), file.label, budget.limits)
        else:
            budget.check_tokens(lengths_only=not kind)
    labels = tuple(file.label for file in found.files)
    return FileSamples(accumulator.samples(), found.label, labels, tuple(starts), tuple(notes), found.files)


def _place(file: File, index: int) -> str:
    """Where row ``index`` (from 0) of ``file`` is (``line 7``, ``item 3``, ``row 12``): the file decoded again,
    part by part, up to it. O(the file's bytes up to the row)."""
    content = decode(file)
    if content.batches is not None:
        content.batches.close()
        return f"row {index + 1}"
    for part in content.parts or ():
        if index < len(part.rows):
            return part.place(index)
        index -= len(part.rows)
    return f"sample {index}"  # pragma: no cover - the file changed since it was read


PACKED_COLUMNS = ("seq_lengths", "sequence_ids", "seq_start_id", "position_ids")
"""Columns packed blocks have and samples do not (this project's, TRL's, Megatron's, transformers' flattening):
a file of samples holding one most likely holds packed blocks, whose padding would be read as tokens."""


def _packed_note(label: str, content: Content, keys: list[str]) -> list[str]:
    """The note for a file that looks like packed blocks (one of :data:`PACKED_COLUMNS` among its columns, or
    among the first row's keys), or none. O(columns).

    >>> import io
    >>> _packed_note("old.jsonl", decode(File(io.BytesIO(b""), "old.jsonl", "jsonl")), ["input_ids", "seq_lengths"])
    ["old.jsonl looks like packed blocks, not samples (it has a 'seq_lengths' column): each of its rows is read as one sample, its padding as tokens"]
    """
    batches = content.batches
    found = batches.file_columns if batches is not None else content.columns or tuple(keys)
    column = next((name for name in PACKED_COLUMNS if name in found), None)
    if column is None:
        return []
    return [
        f"{label} looks like packed blocks, not samples (it has a '{column}' column): each of its rows is read as "
        "one sample, its padding as tokens"
    ]


def _parts(
    content: Content,
    reading: dict[str, Any],
    progress: Callable[[int, int], None] | None,
    keys: list[str] | None = None,
) -> Iterator[tuple[Samples, bool, Callable[[int], str]]]:
    """The samples a file holds, part by part, through the one reader (``reading``: its keywords, the loss
    rule and the tokenizer), each with whether its int64 ids are to be narrowed (:class:`Accumulator`) and the
    place of each of its rows: a Parquet or Arrow file's batches, a block of rows, or a histogram; a bad row is
    named by the file and its place. At least one part, else a DatasetError."""
    label = content.file.label
    if content.lengths is not None:
        yield Samples(None, None, offsets_of(content.lengths)), False, lambda index: f"row {index + 1}"
        return
    text = reading.get("tokenizer") is not None
    batches = content.batches
    if batches is not None:
        if batches.num_rows == 0:
            batches.close()
            raise DatasetError(label, None, "the file holds no samples")
        try:
            tables = batches if flat_batches(batches.schema, text) else [batches.read()]
            for samples in batch_parts(tables, batches.num_rows, progress, **reading):  # one batch held at a time
                yield samples, text, lambda index: f"row {index + 1}"
        except SampleError as error:
            raise DatasetError.from_sample(label, f"row {(error.sample or 0) + 1}", error) from None
        return
    done, kind = 0, None
    for part in content.parts or ():
        rows = part.rows
        if not done:
            found = (
                list(rows.column_names)
                if not isinstance(rows, list)
                else list(map(str, rows[0]))
                if rows and isinstance(rows[0], dict)
                else []
            )
            if keys is not None:
                keys.extend(found)
            _check_columns(rows, label, content.parts)
        shown = None if progress is None else progress_after(progress, done, done + len(rows))
        try:
            if isinstance(rows, list):
                samples = read_samples(rows, progress=shown, **reading)
            else:
                samples = read_table(rows, progress=shown, **reading)
        except SampleError as error:
            raise DatasetError.from_sample(label, part.place(error.sample or 0), error.after(done)) from None
        if kind is not None and samples.has_tokens != kind:
            raise _mixed_rows(label, part, kind, done, reading)
        kind = samples.has_tokens
        done += len(rows)
        yield samples, True, part.place
    if not done:
        raise DatasetError(label, None, "the file holds no samples")


def _mixed_rows(label: str, part: Part, kind: bool, done: int, reading: dict[str, Any]) -> DatasetError:
    """The error for a part of rows of the other kind (token ids, lengths only) than the ``done`` rows before
    them: read again after a row of the file's kind, as row by row over the file, the first that differs named."""
    rows = part.rows if isinstance(part.rows, list) else part.rows.to_pylist()
    try:
        read_samples([[] if kind else {"length": 0}, *rows], **reading)
    except SampleError as error:
        return DatasetError.from_sample(label, part.place((error.sample or 1) - 1), error.after(done - 1))
    raise AssertionError("rows read differently after a row of their file's kind")  # pragma: no cover


def _refuse_longer(samples: Samples, label: str, capacity: int, place: Callable[[int], str]) -> None:
    """``overflow="error"``: a sample longer than ``capacity`` refused, named by the file and its place in it
    (``line 4``), as a bad row is. O(samples)."""
    try:
        if samples.units is not None:  # a pair or group, laid out as the recipe says: named with its kind
            samples.units.refuse_longer(capacity)
        check_within(samples.lengths, capacity)
    except SampleError as error:
        raise DatasetError.from_sample(label, place(error.sample or 0), error) from None


def _bounded(rows: int, tokens: int, has_tokens: bool, label: str, limits: ReadLimits) -> None:
    """Refuse a file holding (or, lengths only, standing for) more samples or tokens than ``limits``. O(1)."""
    check_count(label, "samples", rows, limits.max_rows)
    check_count(label, "tokens", tokens, limits.max_tokens if has_tokens else limits.length_tokens)


def _mixed(file: File, first: File, tokens: bool) -> DatasetError:
    """The error for a file whose kind (token ids, lengths only) differs from the first file's."""
    kinds = ("token ids", "lengths only")
    this, other = kinds if tokens else kinds[::-1]
    reason = f"holds {this}, unlike {first.label} ({other}); every file holds token ids, or every file lengths only"
    return DatasetError(file.label, None, reason)


def _check_columns(rows: Any, label: str, rest: Any = ()) -> None:
    """Refuse rows (Python rows or a table) that are all objects without a single column the reader uses, nor
    do the parts after them (``rest``, read on only then). O(rows × keys)."""
    if isinstance(rows, list) and not all(isinstance(row, dict) for row in rows):
        return
    seen: dict[str, None] = {}
    for part in itertools.chain([Part(rows, str)], rest):  # the rest consumed: an error follows either way
        found = part.rows if isinstance(part.rows, list) else [dict.fromkeys(part.rows.column_names)]
        if not all(isinstance(row, dict) for row in found):
            return
        for row in found:
            seen.update(dict.fromkeys(map(str, row)))
        if set(seen) & set(FIELDS):
            return
    raise DatasetError(label, None, f"no usable columns; found {names(list(seen))}, expected {EXPECTED}")
