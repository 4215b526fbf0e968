"""Arrow tables and record batches read column by column into Samples, without a Python loop per row.
Internal: the public names are in ``packing``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from packing.core._loss import LossRules
from packing.core._validation import INT32_MAX, check_flag
from packing.errors import SampleError, SettingError

if TYPE_CHECKING:  # pragma: no cover - typing only
    import pyarrow as pa
from packing.core._forms import FIELDS, TEXT_FIELDS, TOKEN_FIELDS, UNIT_FIELDS
from packing.core._samples import (
    Int64Array,
    Samples,
    all_ones,
    no_overflow,
)
from packing.reading._columns import RULES, arrow_column, arrow_takes, token_array
from packing.reading._reader import Rows, read_columns, read_samples
from packing.reading._rowfiles import repeated
from packing.vision._rope import VISION_FIELDS, without_vision

# ---------------------------------------------------------------- Arrow tables, column by column


def read_table(
    table: pa.Table,
    *,
    completion_only_loss: bool = True,
    tokenizer: Any = None,
    loss_rules: LossRules | None = None,
    num_proc: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    share_prompt: bool = False,
) -> Samples:
    """Check and flatten the rows of a ``pyarrow.Table``, column by column. O(total tokens + rows).

    The one reader (:func:`~packing.reading._reader.read_columns`) on the table's columns: the same rules and
    errors as :func:`read_rows` on ``table.to_pylist()``, without a Python step per row. Columns other than the
    reader's (``FIELDS``) are ignored. A table with text, pairs or groups (``chosen``, ``rejected``,
    ``completions``), or a column of a type no list column of ids has, is read from its rows (pairs and groups
    laid out as ``share_prompt`` says).

    >>> import pyarrow as pa
    >>> t = pa.table({"input_ids": [[1, 2], None], "prompt": [None, [3]], "completion": [None, [4, 5]]})
    >>> s = read_table(t)
    >>> s.tokens.tolist(), s.loss_mask.tolist(), s.lengths.tolist()
    ([1, 2, 3, 4, 5], [1, 1, 0, 1, 1], [2, 3])
    """
    import pyarrow as pa

    completion_only = LossRules.of(loss_rules, check_flag(completion_only_loss, "completion_only_loss")).masks_anything
    double = repeated([name for name in table.column_names if name in FIELDS])
    if double is not None:
        raise SettingError("table", "every column name once", f"<two columns named {double!r}>")
    names = [name for name in FIELDS if name in table.column_names]
    _refuse_images(table)
    columns = {name: arrow_column(table.column(name), RULES[name]) for name in names if name in RULES}
    length = table.column("length") if "length" in names else None
    odd = length is not None and not (pa.types.is_integer(length.type) or pa.types.is_null(length.type))
    if tokenizer is not None or set(names) & {*TEXT_FIELDS, *UNIT_FIELDS} or odd or None in columns.values():
        return read_samples(
            table.select(names).to_pylist(),
            completion_only,
            tokenizer=tokenizer,
            loss_rules=loss_rules,
            num_proc=num_proc,
            progress=progress,
            share_prompt=share_prompt,
        )
    fields = None if length is None else (length, ~length.is_null().to_numpy(zero_copy_only=False).astype(bool))
    record = lambda row: table.select(names).slice(row, 1).to_pylist()[0]  # noqa: E731  # a bad row, to word it
    return read_columns(
        Rows({k: v for k, v in columns.items() if v is not None}, fields, table.num_rows, record), completion_only
    )


def _refuse_images(table: pa.Table) -> None:
    """Refuse a table whose rows hold images or videos (a non-empty value in a column of
    :data:`~packing.vision.VISION_FIELDS`): they are read where a vision config is given, never as text. O(rows)
    of those columns.

    >>> import pyarrow as pa
    >>> _refuse_images(pa.table({"input_ids": [[1], [5]], "image_grid_thw": [None, [[1, 2, 2]]]}))
    Traceback (most recent call last):
    ...
    packing.errors.SampleError: sample 1, 'image_grid_thw': expected no images or videos without a vision config (vision=...), got <1 grid>
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    for name in (name for name in VISION_FIELDS if name in table.column_names):
        column = table.column(name)
        kind = column.type
        sized = pc.list_value_length(column) if pa.types.is_list(kind) or pa.types.is_large_list(kind) else None
        given = column.is_valid() if sized is None else pc.fill_null(pc.greater(sized, 0), False)
        for row in np.flatnonzero(given.to_numpy(zero_copy_only=False)).tolist():  # [[]] is a list, but no grid
            error = without_vision({name: column[row].as_py()}, row)
            if error is not None:
                raise error


def flat_batches(schema: pa.Schema, tokenizer: bool = False) -> bool:
    """Whether tables of ``schema`` can be read batch by batch (:func:`batch_parts` into an :class:`Accumulator`) with the same result as
    whole: without a ``tokenizer``, its reader columns are token, mask and label columns of integer lists
    (boolean masks too), with a token column among them; with one, any columns but ``length`` (a length row
    among token rows is refused by the whole table's first row). O(columns).

    >>> import pyarrow as pa
    >>> flat_batches(pa.schema([("input_ids", pa.list_(pa.int32()))])), flat_batches(pa.schema([("length", pa.int64())]))
    (True, False)
    >>> flat_batches(pa.schema([("text", pa.string())])), flat_batches(pa.schema([("text", pa.string())]), tokenizer=True)
    (False, True)
    """
    used = [name for name in schema.names if name in FIELDS]
    if tokenizer:
        return "length" not in used
    plain = all(name in RULES and arrow_takes(schema.field(name).type, RULES[name]) for name in used)
    return plain and bool(set(used) & set(TOKEN_FIELDS))


class _Flat:
    """A flat column written part by part into one array, made at the first part (``size`` values, or more),
    grown by half (reallocated) and widened as parts need. O(values) amortized."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.array: npt.NDArray[Any] | None = None

    def put(self, values: npt.NDArray[Any], at: int, before: Any = 1) -> None:
        """Write ``values`` from position ``at``; a column made now holds ``before`` (a value, or an array
        of at least ``at`` values) before it."""
        end = at + len(values)
        if self.array is None:
            dtype = np.result_type(values, before) if isinstance(before, np.ndarray) else values.dtype
            self.array = np.empty(max(self.size, end), dtype=dtype)
            self.array[:at] = before[:at] if isinstance(before, np.ndarray) else before
        elif end > len(self.array) or np.result_type(self.array, values) != self.array.dtype:
            more = max(end, len(self.array) + len(self.array) // 2) if end > len(self.array) else len(self.array)
            dtype = np.result_type(self.array, values)
            if dtype == self.array.dtype:  # reallocated: in place where the allocator can, never two copies
                self.array.resize(more, refcheck=False)  # no view of it is held while it is written
            else:
                grown = np.empty(more, dtype=dtype)
                grown[:at] = self.array[:at]
                self.array = grown
        self.array[at:end] = values

    def done(self, count: int) -> npt.NDArray[Any]:
        """The first ``count`` values, the unused end given back. O(1) where the allocator shrinks in place."""
        assert self.array is not None
        if len(self.array) > count and self.array.flags.owndata:
            self.array.resize(count, refcheck=False)
        return self.array[:count]


def _narrowed(values: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """int64 ``values`` as int32 when every one fits (ids, labels of -100 too), else as they are. O(values)."""
    if values.dtype != np.int64 or (values.size and (values.min() < -INT32_MAX - 1 or values.max() > INT32_MAX)):
        return values
    return values.astype(np.int32)


class Accumulator:
    """Samples written part by part (a table's, a chunk of rows', a file's) into one set of arrays: the tokens,
    the loss mask and the labels each a :class:`_Flat` (the mask and the labels made at the first part that
    needs them), the offsets joined at the end. What :meth:`samples` gives is what ``Samples.join`` gives for
    the parts, without holding them all or copying them again; a lone part is given as it is. ``narrow``
    (:meth:`add`) writes a part's int64 ids and labels as int32 when they fit (what the Python row reader
    reads as int64): the result is int32 when every narrowed part fits, whatever the parts. O(total tokens
    + rows) amortized; memory: the samples so far and one part.

    >>> from packing.reading._reader import read_rows
    >>> acc = Accumulator()
    >>> acc.add(read_rows([[1, 2]]), narrow=True); acc.add(read_rows([{"prompt": [3], "completion": [4]}]), narrow=True)
    >>> s = acc.samples()
    >>> s.tokens.tolist(), s.tokens.dtype.name, s.loss_mask.tolist(), s.offsets.tolist(), (acc.rows, acc.tokens)
    ([1, 2, 3, 4], 'int32', [1, 1, 0, 1], [0, 2, 4], (2, 4))
    """

    def __init__(self, size: int = 0) -> None:
        self._ids, self._mask, self._labels = _Flat(size), _Flat(size), _Flat(size)
        self._offsets: list[Int64Array] = [np.zeros(1, dtype=np.int64)]
        self._lone: tuple[Samples, bool] | None = None  # the first part, copied only once a second one comes
        self._parts: list[Samples] | None = None  # parts with units (pairs, groups): joined with them at the end
        self.rows = 0
        self.tokens = 0
        self.has_tokens: bool | None = None

    def reserve(self, values: int) -> None:
        """Make room for ``values`` more tokens (an upper bound, such as a Parquet file's value counts): the
        arrays grown once to it, not by half again and again. O(1) amortized."""
        wanted = self.tokens + int(values)
        for flat in (self._ids, self._mask, self._labels):
            flat.size = max(flat.size, wanted)
            if flat.array is not None and len(flat.array) < wanted:
                flat.array.resize(wanted, refcheck=False)  # no view of it is held while it is written

    def add(self, part: Samples, narrow: bool = False) -> None:
        """Write ``part`` after the samples so far (all parts have tokens, or all lengths only). O(part)."""
        if self.has_tokens is None:
            self.has_tokens = part.has_tokens
        if part.has_tokens != self.has_tokens:
            raise SettingError("parts", "samples all with tokens or all lengths only", "<both>")
        if self._parts is None and part.units is not None:
            self._parts = [self.samples()] if self.rows else []
        if self._parts is not None:
            self._parts.append(part)
            self.rows += len(part)
            self.tokens += int(part.offsets[-1])
            return
        if self._lone is None and not self.rows:
            self._lone = (part, narrow)
        else:
            if self._lone is not None:
                lone, self._lone = self._lone, None
                self._put(*lone, at=0)
            self._put(part, narrow, at=self.tokens)
        self.rows += len(part)
        self.tokens += int(part.offsets[-1])

    def _put(self, part: Samples, narrow: bool, at: int) -> None:
        self._offsets.append(part.offsets[1:] + at)
        if part.tokens is None or part.loss_mask is None:
            return
        tokens = _narrowed(part.tokens) if narrow else part.tokens
        self._ids.put(tokens, at)
        if self._mask.array is not None or (len(tokens) and part.loss_mask.strides[0] != 0):
            self._mask.put(part.loss_mask, at)
        if self._labels.array is not None or part.labels is not None:
            assert self._ids.array is not None
            labels = tokens if part.labels is None else _narrowed(part.labels) if narrow else part.labels
            wide = np.result_type(labels, self._ids.array)  # labels hold ids: never narrower than the ids
            self._labels.put(labels.astype(wide, copy=False), at, before=self._ids.array)

    def samples(self) -> Samples:
        """The samples of every part, in order. O(rows)."""
        if self._parts is not None:
            return Samples.join(self._parts)
        if self._lone is not None:
            part, narrow = self._lone
            if not narrow or part.tokens is None:
                return part
            tokens = _narrowed(part.tokens)
            labels = None if part.labels is None else _narrowed(part.labels)
            if labels is not None:
                labels = labels.astype(np.result_type(labels, tokens), copy=False)
            return Samples(tokens, part.loss_mask, part.offsets, labels)
        if not self.has_tokens:
            return Samples(None, None, no_overflow(np.concatenate(self._offsets)))
        if self._ids.array is None:
            return _no_samples()
        total = self.tokens
        loss_mask = all_ones(total) if self._mask.array is None else self._mask.done(total)
        other = None if self._labels.array is None else self._labels.done(total)
        return Samples(self._ids.done(total), loss_mask, np.concatenate(self._offsets), other)


def batch_parts(
    tables: Iterable[pa.Table], rows: int, progress: Callable[[int, int], None] | None, **reading: Any
) -> Iterator[Samples]:
    """Each table's samples (:func:`read_table`), a bad row named and progress counted over all tables
    (``rows``: how many, when known). O(tokens + rows) over all tables; memory: one table's."""
    done = 0
    for table in tables:
        shown = None if progress is None else progress_after(progress, done, rows)
        try:
            part = read_table(table, progress=shown, **reading)
        except SampleError as error:
            raise error.after(done) from None
        done += len(part)
        yield part


def _no_samples() -> Samples:
    return Samples(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int8), np.zeros(1, dtype=np.int64))


def progress_after(progress: Callable[[int, int], None], done: int, rows: int) -> Callable[[int, int], None]:
    """``progress`` for a table after ``done`` rows of ``rows`` (at least what is known so far)."""
    return lambda count, total: progress(done + count, max(rows, done + total))


def chat_sample(
    turns: Iterable[tuple[str, Sequence[int]]], train_on: Iterable[str] = ("assistant",)
) -> dict[str, list[int]]:
    """A masked sample from ``(role, tokens)`` turns: loss only on the roles in ``train_on``. O(tokens).

    >>> chat_sample([("user", [1, 2]), ("assistant", [3, 4]), ("user", [5]), ("assistant", [6])])
    {'input_ids': [1, 2, 3, 4, 5, 6], 'loss_mask': [0, 0, 1, 1, 0, 1]}
    """
    trained = {train_on} if isinstance(train_on, str) else set(train_on)
    input_ids: list[int] = []
    loss_mask: list[int] = []
    for turn, item in enumerate(turns):
        if not isinstance(item, tuple) or len(item) != 2 or not isinstance(item[0], str):
            raise SampleError(None, f"turn {turn}", None, "a (role, tokens) pair", item)
        role, ids = item
        values = token_array(ids, None, f"turn {turn} ({role})").tolist()
        input_ids.extend(values)
        loss_mask.extend([int(role in trained)] * len(values))
    return {"input_ids": input_ids, "loss_mask": loss_mask}
