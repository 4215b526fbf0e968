"""Datasets in, packed blocks out.

:func:`read_dataset` reads a file, several files, a glob, a folder of shards or a ``datasets``
``save_to_disk`` folder (:mod:`packing.reading.files` finds and decodes the files: JSON lines, JSON, CSV, Parquet,
Arrow) as one dataset, in a stable order; the one reader (:mod:`packing.reading.rows`) decides what each row is,
so a dataset is checked once, and ``pack(read_dataset(path), ...)`` does not check it again. Rows hold any
form the reader accepts: ``input_ids`` (with a loss mask), ``prompt`` and ``completion``, text (with a
tokenizer), or ``length`` alone (enough to plan and compare). JSON may also be a list of rows, or a
histogram object like the bundled workloads (``histogram`` or ``lengths``). A problem raises
:class:`~packing.errors.DatasetError` naming the file, the line or row (from 1), the column, the position
and what was expected.

What :func:`read_dataset` returns is a map-style dataset (``len``, ``data[i]``, ``.lengths``): it goes
straight into a ``torch.utils.data.DataLoader`` with ``packing.torch.PackingSampler(data.lengths, ...)``.

Outputs are the schema's columns (:mod:`packing.batches.schema`), written atomically
(:func:`~packing.layouts.outputs.atomic_path`): to a temporary file next to the target, renamed
onto it only once complete. A failure, Ctrl-C, SIGTERM or SIGHUP leaves the old output
as it was and no temporary or lock file; a second writer of the same path, in another
process or thread, is refused while the first runs.

>>> import io
>>> data = read_dataset(io.BytesIO(b'{"input_ids": [1, 2, 3]}\\n{"input_ids": [4]}\\n'), format="jsonl")
>>> data.kind, data.lengths.tolist(), data[1]["input_ids"].tolist()
('tokens', [3, 1], [4])
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt

from packing.core.forms import FIELDS, TOKEN_FIELDS
from packing.core.samples import IGNORE_INDEX, Samples
from packing.errors import DatasetError, SampleError
from packing.reading.arrow import flat_batches, read_batches, read_table
from packing.reading.cells import cells_row
from packing.reading.files import EXPECTED, FORMATS, Budget, Content, File, decode, names, resolve
from packing.reading.limits import ReadLimits, check_count, limits_of
from packing.reading.rows import read_rows
from packing.recipe import Recipe, RecipeOptions
from packing.strategies.overflow import check_within
from packing.text.prepare import prepare

if TYPE_CHECKING:  # pragma: no cover - typing only
    from typing import Unpack

Int64Array = npt.NDArray[np.int64]
PathType = str | os.PathLike[str]
Source = PathType | IO[bytes] | bytes | Sequence[PathType]

__all__ = ["FORMATS", "Dataset", "read_dataset"]


@dataclass(frozen=True, eq=False)
class Dataset:
    """Samples read from files: what ``pack`` and ``plan`` accept, checked once; a map-style dataset.

    ``samples`` is a :class:`~packing.core.samples.Samples` (without tokens for lengths-only data);
    ``lengths`` is tokens per sample; ``source`` names the dataset in messages; ``files`` are its files
    in reading order and ``starts`` the index of each one's first sample. ``data[i]`` is sample ``i``:
    ``{"input_ids": ..., "loss_mask": ...}`` (int64 and int8 arrays; with ``labels`` when the samples' labels
    differ from their ids, see ``Samples.labels``), or ``{"length": n}``.

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
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)):
            raise TypeError(f"dataset indices are integers, not {type(index).__name__}")
        count = len(self)
        position = int(index) + count if index < 0 else int(index)
        if not 0 <= position < count:
            raise IndexError(f"sample {int(index)} out of range for {count:,} samples")
        lo, hi = int(self.samples.offsets[position]), int(self.samples.offsets[position + 1])
        if self.samples.tokens is None or self.samples.loss_mask is None:
            return {"length": hi - lo}
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
    **options: Unpack[RecipeOptions],
) -> Dataset:
    """Read samples (or lengths) from one file or many, as one dataset. O(total tokens).

    ``source`` is a path, a binary file object (an upload) or its bytes, a list of paths, a glob
    (``"data/*.parquet"``), a folder of shards (``.jsonl``, ``.json``, ``.csv``, ``.parquet``, ``.arrow``,
    mixed or not), or a ``datasets`` ``save_to_disk`` folder; files are read in sorted order (a
    ``save_to_disk`` folder in its own). ``format`` (``jsonl``, ``json``, ``csv``, ``parquet``, ``arrow``)
    overrides the extensions. ``name`` is how messages refer to the source (needed for file objects).
    The options are every entry point's (:class:`~packing.Recipe`, or ``recipe=``); reading uses the loss
    rule (``loss``, applied to prompt/completion rows as they are read), the ``tokenizer`` (loaded once
    for every file) and, with ``overflow="error"`` and a ``max_seq_length``, refuses a longer sample naming its
    file and line (a ``DatasetError`` whose ``cause`` is the ``SequenceTooLong``); it ignores the rest. With a ``tokenizer``,
    text rows (``text``, ``messages``, ``prompt`` and ``completion`` as text) are tokenized with their masks
    (``packing.text.rows``) by ``num_proc`` processes, trained as ``loss_rules`` say (``Recipe.loss_rules``); in
    a CSV file the ``text``, ``prompt`` and ``completion`` cells are then text. ``limits`` bound the whole dataset (summed over its files), checked before each file is decoded.

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
    chosen = Recipe.for_reading(recipe, **options)
    reading = prepare(chosen).read_options
    given_length = recipe is not None or options.get("max_seq_length") is not None
    longest = chosen.max_seq_length if given_length and chosen.overflow == "error" else None
    found = resolve(source, format, name)
    budget = Budget(limits_of(limits), found.label, rows_are="samples")
    parts: list[Samples] = []
    done = [0]

    def report(count: int, total: int) -> None:
        if progress is not None:
            progress(done[0] + count, done[0] + total)

    for file in found.files:
        with budget.reading():
            content = decode(file, budget.left(), FIELDS, "samples")
            samples = _samples(content, reading, report if progress else None)
        if longest is not None:
            _refuse_longer(samples, content, longest)
        if parts and parts[0].has_tokens != samples.has_tokens:
            raise _mixed(file, found.files[0], samples.has_tokens)
        budget.spend(bytes=content.bytes_read, rows=len(samples), tokens=int(samples.offsets[-1]))
        if budget.files == 1:
            _bounded(samples, file.label, budget.limits)
        else:
            budget.check_tokens(lengths_only=not samples.has_tokens)
        parts.append(samples)
        done[0] += len(samples)
    starts = np.cumsum([0] + [len(part) for part in parts[:-1]]).tolist()
    labels = tuple(file.label for file in found.files)
    return Dataset(Samples.join(parts), found.label, labels, tuple(int(start) for start in starts))


def _samples(content: Content, reading: dict[str, Any], progress: Callable[[int, int], None] | None) -> Samples:
    """The samples a file holds, through the one reader (``reading``: its keywords, the loss rule and the
    tokenizer); a bad row is named by the file and its place."""
    label = content.file.label
    if content.lengths is not None:
        offsets = np.zeros(len(content.lengths) + 1, dtype=np.int64)
        np.cumsum(content.lengths, out=offsets[1:])
        return Samples(None, None, offsets)
    if content.num_rows == 0:
        if content.batches is not None:
            content.batches.close()
        raise DatasetError(label, None, "the file holds no samples")
    try:
        batches = content.batches
        if batches is not None and flat_batches(batches.schema, reading.get("tokenizer") is not None):
            size = batches.values(TOKEN_FIELDS)  # one batch held at a time
            return read_batches(batches, size, rows=batches.num_rows, progress=progress, **reading)
        if batches is not None:
            return read_table(batches.read(), progress=progress, **reading)
        rows = content.rows or []
        if content.cells:
            text = reading.get("tokenizer") is not None
            rows = [cells_row(cells, index, text=text) for index, cells in enumerate(rows)]
        _check_columns(rows, label)
        return read_rows(rows, progress=progress, **reading)
    except SampleError as error:
        raise DatasetError.from_sample(label, content.place(error.sample or 0), error) from None


def _refuse_longer(samples: Samples, content: Content, capacity: int) -> None:
    """``overflow="error"``: a sample of the file longer than ``capacity`` refused, named by the file and its
    place in it (``line 4``), as a bad row is. O(samples)."""
    try:
        check_within(samples.lengths, capacity)
    except SampleError as error:
        raise DatasetError.from_sample(content.file.label, content.place(error.sample or 0), error) from None


def _bounded(samples: Samples, label: str, limits: ReadLimits) -> None:
    """Refuse a file holding (or, lengths only, standing for) more samples or tokens than ``limits``. O(1)."""
    check_count(label, "samples", len(samples), limits.max_rows)
    bound = limits.max_tokens if samples.has_tokens else limits.length_tokens
    check_count(label, "tokens", int(samples.offsets[-1]), bound)


def _mixed(file: File, first: File, tokens: bool) -> DatasetError:
    """The error for a file whose kind (token ids, lengths only) differs from the first file's."""
    kinds = ("token ids", "lengths only")
    this, other = kinds if tokens else kinds[::-1]
    reason = f"holds {this}, unlike {first.label} ({other}); every file holds token ids, or every file lengths only"
    return DatasetError(file.label, None, reason)


def _check_columns(rows: list[Any], label: str) -> None:
    """Refuse rows that are all objects without a single column the reader uses. O(rows × keys)."""
    if not all(isinstance(row, dict) for row in rows):
        return
    seen: dict[str, None] = {}
    for row in rows:
        seen.update(dict.fromkeys(map(str, row)))
    if not set(seen) & set(FIELDS):
        raise DatasetError(label, None, f"no usable columns; found {names(list(seen))}, expected {EXPECTED}")


# ---------------------------------------------------------------- writing
