"""The one reader of samples: what a row is, for Python rows and Arrow tables alike.

A row (sample) is one of these forms:

- a token list: a list or 1-D integer array (or tensor) of token ids, every token trained on;
- ``{"input_ids": [...]}``, optionally with a per-token loss mask under ``loss_mask``
  (TRL's ``completion_mask`` and ``assistant_masks`` are read as loss masks too; when a
  row has several, a token is trained on only where all of them are 1), and optionally
  with ``labels`` as transformers tokenizes them (one per token, -100 where not trained):
  a token is trained on only where its label is not -100 (ANDed with any mask). Labels
  that differ from ``input_ids`` where trained are kept in ``Samples.labels``, for
  ``packing.torch.collate``; packed blocks train each token on itself and refuse them;
- ``{"prompt": [...], "completion": [...]}``: loss on the completion only (unless
  ``completion_only_loss=False``);
- ``{"length": n}``: a length alone, enough to plan but not to pack;
- a preference pair ``{"prompt": [...], "chosen": [...], "rejected": [...]}`` or a completion group
  ``{"prompt": [...], "completions": [[...], ...]}`` (optionally ``chosen_mask`` and ``rejected_mask``, or
  ``completion_masks``: a 0/1 loss mask per completion token): a unit (``packing.core._pairs_groups``), laid out with its
  prompt before every completion or, with ``share_prompt``, once; the prompt is never trained. Plain rows may come
  among units (each a unit of its own); text units are tokenized first (:mod:`packing.text._pairs_groups_encoding`).

One rule for every entry point: a key whose value is null (``None``) is absent, so rows
of mixed forms in one table (where each row has nulls in the other form's columns)
read as they would one by one; booleans in a loss mask are 1/0 (elsewhere they are
refused: ``True`` is not a token id). Anything else raises :class:`SampleError` with
the row, the field, the position and what was expected.

One reader (:func:`read_columns`) reads rows as columns, one per field, each field's values checked once by
its :class:`Rule` without a Python step per row: Python rows are made columns (:func:`python_rows`, a
``datasets`` batch :func:`read_batch`; lists converted by pyarrow, numpy arrays and tensors joined), an Arrow
table's columns are read as they are (:func:`packing.reading.read_table`); pairs and groups (:func:`read_unit_rows`)
as three columns, their prompts, completions and masks. A bad row is named as it would be read alone: its row,
field and position.

>>> s = read_rows([[1, 2], {"prompt": [3], "completion": [4]}, {"input_ids": [5, 6], "loss_mask": [True, False]}])
>>> s.tokens.tolist(), s.loss_mask.tolist(), s.lengths.tolist()
([1, 2, 3, 4, 5, 6], [1, 1, 0, 1, 1, 0], [2, 2, 2])
>>> s = read_rows([{"input_ids": [7, 8, 9], "labels": [-100, 8, 9]}])
>>> s.loss_mask.tolist(), s.labels
([0, 1, 1], None)

Internal: the public names are in ``packing`` and ``packing.reading``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from operator import attrgetter
from typing import Any, Literal, NamedTuple

import numpy as np
import numpy.typing as npt

from packing.core._arrays import copy_runs, offsets_of, ranges, row_at
from packing.core._forms import (
    FIELDS,
    FORMS,
    LABELS,
    MASK_FIELDS,
    TEXT_FIELDS,
    TOKEN_FIELDS,
    UNIT_FIELDS,
    RowKind,
    group_completions,
    is_message_list,
    is_text_row,
    is_text_unit,
    null_unit,
    null_unit_error,
    unit_kind,
)
from packing.core._loss import LossRules
from packing.core._pairs_groups import KINDS, UnitKind, Units
from packing.core._samples import (
    IGNORE_INDEX,
    Int8Array,
    Int64Array,
    Samples,
    TokenArray,
    all_ones,
    joined_dtype,
    no_overflow,
    sample_offsets,
    token_dtype,
)
from packing.core._validation import INT64_MAX, check_flag
from packing.errors import NeedsTokenizer, SampleError, SettingError, UnitError
from packing.reading._columns import (
    FLAGS,
    LENGTHS,
    RULES,
    TOKENS,
    Column,
    Where,
    as_named,
    as_numpy,
    length_array,
    python_column,
    token_array,
)
from packing.text._text_rows import encode_rows
from packing.vision._rope import VISION_FIELDS, without_vision

# ---------------------------------------------------------------- the row forms, over columns


def _present(row: Mapping[str, Any], field: str) -> bool:
    return row.get(field) is not None


def _dict_form(row: Mapping[str, Any], index: int | None) -> Literal["input_ids", "prompt", "length"]:
    """Which form a dict row has, by its non-null keys; a row with none or two forms, or a mask or labels outside
    ``input_ids``, is refused."""
    has_ids = _present(row, "input_ids")
    has_pair = _present(row, "prompt") or _present(row, "completion")
    if has_ids and has_pair:
        raise SampleError(index, None, None, "one form, 'input_ids' or 'prompt'/'completion'", "<both>")
    if has_pair:
        if not _present(row, "completion") and (null := null_unit(row)) is not None:
            raise null_unit_error(index, null)
        for field in ("prompt", "completion"):
            if not _present(row, field):
                raise SampleError(index, field, None, "a list of token ids (a prompt needs a completion)", None)
        _no_stray_mask(row, index, "prompt/completion")
        return "prompt"
    if has_ids:
        return "input_ids"
    if _present(row, "length"):
        _no_stray_mask(row, index, "length")
        return "length"
    keys = sorted(str(key) for key, value in row.items() if value is not None)
    raise SampleError(index, None, None, FORMS, f"<keys {', '.join(keys) or 'none'}>")


class _UnitRows(Exception):
    """Rows made columns (:func:`python_rows`) hold a pair or group: they are read by the unit reader."""


def _no_stray_mask(row: Mapping[str, Any], index: int | None, form: str) -> None:
    for field in (*MASK_FIELDS, LABELS):
        if _present(row, field):
            what = "labels" if field == LABELS else "a mask"
            raise SampleError(index, field, None, f"no {what} in a {form} row (only with 'input_ids')", what)


_FORM_CODES = {"input_ids": 0, "prompt": 1, "length": 2}
_LIST_FIELDS = (*TOKEN_FIELDS, *MASK_FIELDS, LABELS)


class Rows(NamedTuple):
    """Rows as columns, what :func:`read_columns` reads: the list fields' :class:`Column`\\ s, the ``length``
    field (values, which are null, which are not lengths) when any row has it, how many ``rows``, ``record(row)``
    (the row as a dict, to word an error about its form), ``where`` (how an error names a row and field) and
    ``refused``: the first row no column can hold (not a list nor a dict, or text), with its error."""

    columns: Mapping[str, Column]
    length: tuple[Any, npt.NDArray[np.bool_]] | None
    rows: int
    record: Callable[[int], Any]
    where: Where = as_named
    refused: tuple[int, SampleError] | None = None


def _length_column(rows: Rows, alone: npt.NDArray[np.bool_]) -> Column:
    """The ``length`` of the rows that have a length ``alone`` (no tokens) as a column of one value each, checked
    by the rule of lengths. O(rows)."""
    import pyarrow as pa

    values = rows.length[0] if rows.length is not None else None
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        numbers = values.fill_null(0).to_numpy(zero_copy_only=False) if values.null_count < len(values) else None
        if numbers is None or numbers.dtype.kind != "u" or not numbers.size or int(numbers.max()) <= INT64_MAX:
            taken = np.zeros(0, np.int64) if numbers is None else numbers[alone]
            return Column(taken, alone.astype(np.int64), ~alone)
        values = values.to_pylist()
    assert values is not None
    wrapped = [[value] if given else None for value, given in zip(values, alone.tolist(), strict=True)]
    return python_column(wrapped, LENGTHS, "length", rows.where)


def _form_codes(rows: Rows) -> tuple[npt.NDArray[np.int8], tuple[int, SampleError] | None]:
    """Each row's form (:data:`_FORM_CODES`; -1: refused) by which fields it has, judged once per pattern of
    present fields by :func:`_dict_form`, and the first refused row with the error its record gets. O(rows)."""
    names = [name for name in _LIST_FIELDS if name in rows.columns] + (["length"] if rows.length is not None else [])
    present = [~rows.columns[name].null for name in names if name != "length"]
    if rows.length is not None:
        present.append(rows.length[1])
    pattern = np.zeros(rows.rows, dtype=np.int64)
    for bit, given in enumerate(present):
        pattern |= given.astype(np.int64) << bit
    patterns, inverse = np.unique(pattern, return_inverse=True)
    codes = np.empty(len(patterns), dtype=np.int8)
    for at, value in enumerate(patterns.tolist()):
        record: dict[str, Any] = {name: [] for bit, name in enumerate(names) if value >> bit & 1}
        try:
            codes[at] = _FORM_CODES[_dict_form(record, 0)]
        except SampleError:
            codes[at] = -1
    forms = codes[inverse.reshape(-1)]
    first = np.flatnonzero(forms < 0)
    if not first.size:
        return forms, None
    row, record = int(first[0]), rows.record(int(first[0]))
    if not isinstance(record, Mapping):
        return forms, None  # neither a list nor a dict: refused as such (``Rows.refused``)
    try:
        _dict_form(record, rows.where(row, "")[0])
    except SampleError as error:
        return forms, (row, error)
    raise AssertionError("a row refused by its pattern but not by its record")  # pragma: no cover


def _first_error(
    rows: Rows, forms: npt.NDArray[np.int8], form_error: tuple[int, SampleError] | None, expected: RowKind | None
) -> SampleError | None:
    """The error for the first bad row, as a row read alone would give it: its form first, then its fields in
    the order ``input_ids``, ``prompt``, ``completion``, the masks, ``labels`` (a field as a whole, then its
    count, then its first bad value), and a row of the other kind than ``expected`` (row 0's) last. O(values)."""
    found: list[tuple[tuple[int, int, int, int], SampleError]] = []
    for refused in (rows.refused, form_error):
        if refused is not None:
            found.append(((refused[0], 0, 0, 0), refused[1]))
    columns = rows.columns
    ids = forms == 0
    id_len = np.where(ids, columns["input_ids"].lengths, 0) if "input_ids" in columns else np.zeros(rows.rows, np.int64)
    if rows.length is not None:
        error = _length_column(rows, forms == 2).error(LENGTHS, "length", rows.where)
        if error is not None:  # one value, not a list of them: named without a position
            found.append(((error[0], 1, 0, 0), error[2].moved(position=None)))
    for rank, name in enumerate(_LIST_FIELDS, start=2):
        if name not in columns:
            continue
        column = columns[name]
        error = column.error(RULES[name], name, rows.where)
        if error is not None:
            found.append(((error[0], rank, 1 if error[1] < 0 else 3, error[1]), error[2]))
        if name not in TOKEN_FIELDS:
            wrong = np.flatnonzero(ids & ~column.null & (column.lengths != id_len))
            if wrong.size:
                row = int(wrong[0])
                sample, field = rows.where(row, name)
                words = f"{int(id_len[row])} values (one per token)", f"<{int(column.lengths[row])} values>"
                found.append(((row, rank, 2, 0), SampleError(sample, field, None, *words)))
    if rows.rows:
        kinds = np.where(forms == 2, 1, 0)
        first = expected or ("length" if kinds[0] else "tokens")
        other = np.flatnonzero(kinds != (first == "length"))
        if other.size:
            row = int(other[0])
            kind: RowKind = "length" if kinds[row] else "tokens"
            found.append(((row, 99, 0, 0), mixed_kinds_error(rows.where(row, "")[0], first, kind)))
    return min(found, key=lambda pair: pair[0])[1] if found else None


def read_columns(rows: Rows, completion_only: bool, expected: RowKind | None = None) -> Samples:
    """The one reader of rows: :class:`Rows` (from Python rows or an Arrow table) checked column by column and
    flattened into :class:`Samples`, without a Python step per row. A bad row is refused as it would be alone
    (:func:`_first_error`); ``expected``: the kind every row must have (else row 0's). O(total tokens + rows).

    >>> s = read_columns(python_rows([[1, 2], {"prompt": [3], "completion": [4]}]), True)
    >>> s.tokens.tolist(), s.loss_mask.tolist(), s.lengths.tolist()
    ([1, 2, 3, 4], [1, 1, 0, 1], [2, 2])
    """
    forms, form_error = _form_codes(rows)
    error = _first_error(rows, forms, form_error, expected)
    if error is not None:
        raise error
    if rows.rows and (forms == 2).all():
        return Samples(None, None, no_overflow(offsets_of(_length_column(rows, forms == 2).values)))
    return _flattened(rows.columns, forms, completion_only)


def _flattened(columns: Mapping[str, Column], forms: npt.NDArray[np.int8], completion_only: bool) -> Samples:
    """Checked token rows (``forms``: 0 ``input_ids``, 1 prompt/completion) as :class:`Samples`: the tokens, the
    loss mask (the prompt's 0 when ``completion_only``, ANDed with every mask and with labels of -100) and the
    labels where they differ from the tokens where trained. O(total tokens + rows)."""
    rows = len(forms)
    ids, pair = forms == 0, forms == 1
    zero = np.zeros(rows, dtype=np.int64)

    def counts(name: str, where: npt.NDArray[np.bool_]) -> Int64Array:
        return np.where(where, columns[name].lengths, 0) if name in columns else zero

    id_len, p_len, c_len = counts("input_ids", ids), counts("prompt", pair), counts("completion", pair)
    offsets = no_overflow(offsets_of(id_len + p_len + c_len))
    starts = offsets[:-1]
    dtype = token_dtype(
        columns[name].values.dtype for name in TOKEN_FIELDS if name in columns and columns[name].values.size
    )
    tokens: TokenArray
    if ids.all():  # one form: the column's values are the tokens, in order
        tokens = columns["input_ids"].values.astype(dtype, copy=False) if rows else np.zeros(0, dtype=np.int64)
    else:
        tokens = np.empty(int(offsets[-1]), dtype=dtype)
        if "input_ids" in columns:
            copy_runs(columns["input_ids"].values, tokens, starts[ids], id_len[ids])
        if pair.any():
            copy_runs(columns["prompt"].values, tokens, starts[pair], p_len[pair])
            copy_runs(columns["completion"].values, tokens, starts[pair] + p_len[pair], c_len[pair])
    loss_mask: Int8Array | None = None
    if pair.any() and completion_only:
        loss_mask = np.ones(len(tokens), dtype=np.int8)
        copy_runs(np.zeros(int(p_len.sum()), dtype=np.int8), loss_mask, starts[pair], p_len[pair])
    for name in MASK_FIELDS:
        given = ~columns[name].null if name in columns else zero.astype(bool)
        if given.any():
            values = columns[name].values.astype(np.int8, copy=False)
            if given.all() and ids.all():  # the column is the mask
                mask = values
            else:
                mask = np.ones(len(tokens), dtype=np.int8)
                copy_runs(values, mask, starts[given], id_len[given])
            loss_mask = (mask if mask.flags.writeable else mask.copy()) if loss_mask is None else loss_mask & mask
    labelled = ~columns[LABELS].null if LABELS in columns else zero.astype(bool)
    if not labelled.any():
        return Samples(tokens, all_ones(len(tokens)) if loss_mask is None else loss_mask, offsets)
    labels = _placed_labels(columns[LABELS].values, tokens, starts, id_len, labelled, bool(ids.all()))
    trained = (labels != IGNORE_INDEX).astype(np.int8)
    loss_mask = trained if loss_mask is None else loss_mask & trained
    if not ((labels != tokens) & (loss_mask != 0)).any():
        return Samples(tokens, loss_mask, offsets)
    kept: TokenArray = np.where(loss_mask != 0, labels, tokens).astype(token_dtype([tokens.dtype, labels.dtype]))
    return Samples(tokens, loss_mask, offsets, kept)


def _placed_labels(
    values: npt.NDArray[Any], tokens: TokenArray, starts: Int64Array, id_len: Int64Array, rows_with: Any, aligned: bool
) -> npt.NDArray[np.signedinteger[Any]]:
    """A label column's values at their tokens' places (rows without labels: their tokens). O(tokens)."""
    signed = np.dtype(np.int64) if values.dtype.kind == "u" else values.dtype
    if aligned and rows_with.all():  # the column is as long as the tokens, in order
        return values.astype(signed, copy=False)
    placed = tokens.astype(np.promote_types(tokens.dtype, signed))  # the dtype of the aligned case, joined
    copy_runs(values.astype(placed.dtype, copy=False), placed, starts[rows_with], id_len[rows_with])
    return placed


def _is_list(row: Any) -> bool:
    """Whether a row that is not a dict is a token list (a list, tuple, 1-D array or tensor). O(1)."""
    row = as_numpy(row)
    return isinstance(row, (Sequence, np.ndarray)) and not isinstance(row, (str, bytes))


def python_rows(rows: Sequence[Any], index: Sequence[int] | None = None) -> Rows:
    """Python rows (token lists, dicts of the forms, none a pair or group: :class:`_UnitRows`) as :class:`Rows`,
    a column per field (:func:`python_column`); ``index``: each row's number in errors (else its place). A text
    row is refused as the first one comes (:class:`NeedsTokenizer`). O(values), a few C passes per field.

    >>> python_rows([[1], {"input_ids": [2, 3], "labels": None}]).columns["input_ids"].lengths.tolist()
    [1, 2]
    """
    count = len(rows)
    types = set(map(type, rows))
    dicts, lists = types <= {dict}, not any(issubclass(kind, Mapping) for kind in types)
    bare = (
        None
        if dicts
        else np.ones(count, dtype=bool)
        if lists
        else np.fromiter((not isinstance(row, Mapping) for row in rows), dtype=bool, count=count)
    )
    records = rows if dicts else [{}] * count if lists else [row if isinstance(row, Mapping) else {} for row in rows]
    present = set().union(*records)
    keys = present & set(FIELDS)

    def where(row: int, field: str) -> tuple[int, str | None]:
        bare_row = bare is not None and bool(bare[row])
        return (row if index is None else int(index[row])), (None if bare_row and field == "input_ids" else field)

    refused: tuple[int, SampleError] | None = None
    if bare is not None and bare.any():
        keys.add("input_ids")
        plain = types <= {list, tuple, np.ndarray, dict}
        others = [] if plain else [row for row in np.flatnonzero(bare).tolist() if not _is_list(rows[row])]
        if others:
            refused = (others[0], SampleError(where(others[0], "")[0], None, None, FORMS, rows[others[0]]))
    if present & set(VISION_FIELDS):  # images where no vision config reads them: refused, not read as text
        pictured = next((row for row, record in enumerate(records) if without_vision(record, row)), None)
        if pictured is not None and (refused is None or pictured < refused[0]):
            error = without_vision(records[pictured], where(pictured, "")[0])
            assert error is not None
            refused = (pictured, error)
    if keys & set(UNIT_FIELDS) and any(unit_kind(record) is not None for record in records):
        raise _UnitRows
    if keys & {*TEXT_FIELDS, "prompt", "completion"}:
        text = next((row for row, record in enumerate(records) if is_text_row(record)), None)
        if text is not None and (refused is None or text < refused[0]):
            refused = (text, _text_error(records[text], where(text, "")[0]))

    def values(name: str) -> list[Any]:
        if bare is None or name != "input_ids":
            return [record.get(name) for record in records]
        return [rows[row] if bare[row] else records[row].get(name) for row in range(count)]

    columns = {name: python_column(values(name), RULES[name], name, where) for name in _LIST_FIELDS if name in keys}
    lengths = values("length") if "length" in keys else None
    length = None if lengths is None else (lengths, np.fromiter((v is not None for v in lengths), bool, count))
    return Rows(columns, length, count, lambda row: rows[row], where, refused)


def _text_error(row: Mapping[str, Any], index: int) -> SampleError:
    """The error for a text row met without a tokenizer, naming its text field. O(1)."""
    field = next((name for name in TEXT_FIELDS if _present(row, name)), None) or next(
        (name for name in ("prompt", "completion") if not isinstance(row.get(name), (list, np.ndarray))), "prompt"
    )
    return NeedsTokenizer(index, field, row.get(field) if field else row)


def read_row(
    row: Any, index: int = 0, completion_only_loss: bool = True
) -> tuple[RowKind, TokenArray, Int8Array | None, TokenArray | None]:
    """What one row is: ``("tokens", tokens, mask or None, labels or None)`` or ``("length", [n], None,
    None)``: the one reader on one row. O(length).

    A mask of None means every token is trained on; labels of None, that each trained token is its own label.

    >>> kind, tokens, mask, labels = read_row({"prompt": [5, 6], "completion": [7]})
    >>> kind, tokens.tolist(), mask.tolist(), labels
    ('tokens', [5, 6, 7], [0, 0, 1], None)
    >>> read_row("hello", 3)
    Traceback (most recent call last):
    ...
    packing.errors.SampleError: sample 3: expected a list of token ids, or a dict with 'input_ids' (and a 'loss_mask'), 'prompt' and 'completion', or 'length', or a pair ('prompt', 'chosen', 'rejected') or group ('prompt', 'completions'), got 'hello' (str)
    """
    samples = read_columns(python_rows([row], [index]), completion_only_loss)
    if samples.tokens is None or samples.loss_mask is None:
        return "length", samples.lengths, None, None
    mask = None if samples.loss_mask.all() else samples.loss_mask
    return "tokens", samples.tokens, mask, samples.labels


def read_block(row: Any, index: int = 0) -> tuple[TokenArray, npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """A packed block (a row with ``seq_lengths``: a ``PackedDataset`` item, a row of this project's or TRL's
    packed files) read as a row is: its ``input_ids`` checked as token ids, its loss (``labels``, ``loss_mask``,
    ``completion_mask``, ``assistant_masks``) as :func:`read_row` reads a row's, its ``seq_lengths`` as
    non-negative integers adding up to at most its tokens (the rest is padding). Returns the documents' tokens,
    their labels (-100 where not trained and at every document's first token, so no document predicts the next)
    and the documents' lengths (empty ones included). O(block length).

    >>> tokens, labels, lengths = read_block({"input_ids": [5, 6, 7, 0], "labels": [5, 6, 7, 0], "seq_lengths": [2, 1]})
    >>> tokens.tolist(), labels.tolist(), lengths.tolist()
    ([5, 6, 7], [-100, 6, -100], [2, 1])
    >>> read_block({"input_ids": [5, 6], "seq_lengths": [2, 1]}, 3)
    Traceback (most recent call last):
    ...
    packing.errors.SampleError: sample 3, 'seq_lengths': expected lengths adding up to at most the 2 tokens of 'input_ids', got <3>
    """
    if not isinstance(row, Mapping) or not _present(row, "input_ids"):
        raise SampleError(index, None, None, "a packed block: a dict with 'input_ids' and 'seq_lengths'", row)
    tokens = token_array(row["input_ids"], index, "input_ids")
    lengths = length_array(row["seq_lengths"], index, "seq_lengths")
    total = int(lengths.sum())
    if total > len(tokens):
        expected = f"lengths adding up to at most the {len(tokens)} tokens of 'input_ids'"
        raise SampleError(index, "seq_lengths", None, expected, f"<{total}>")
    loss = {name: row.get(name) for name in ("input_ids", *MASK_FIELDS, LABELS)}
    read = read_columns(python_rows([loss], [index]), True)
    assert read.tokens is not None and read.loss_mask is not None
    targets = (read.tokens if read.labels is None else read.labels).astype(np.int64)
    kept = np.where(read.loss_mask != 0, targets, IGNORE_INDEX)[:total]
    starts = np.cumsum(lengths) - lengths
    kept[starts[lengths > 0]] = IGNORE_INDEX
    return tokens[:total], kept, lengths


def mixed_kinds_error(index: int | None, first: RowKind, kind: RowKind) -> SampleError:
    """A row whose kind differs from row 0's: tokens and lengths only do not mix."""
    expected = "token ids" if first == "tokens" else "a length only"
    got = "<a length only>" if kind == "length" else "<token ids>"
    return SampleError(
        index, None, None, f"{expected} like sample 0 (all rows have tokens or all have lengths only)", got
    )


def _integer_arrays(rows: list[Any]) -> bool:
    """Whether ``rows`` is a non-empty list of 1-D signed integer numpy arrays: a few passes in C, no Python
    loop per row. O(rows)."""
    if not rows or set(map(type, rows)) != {np.ndarray} or set(map(attrgetter("ndim"), rows)) != {1}:
        return False
    return all(dtype.kind == "i" for dtype in set(map(attrgetter("dtype"), rows)))


def read_rows(
    rows: Iterable[Any],
    completion_only_loss: bool = True,
    *,
    tokenizer: Any = None,
    loss_rules: LossRules | None = None,
    num_proc: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    share_prompt: bool = False,
) -> Samples:
    """Check and flatten Python rows of any form. O(total tokens); never modifies the input.

    All rows have tokens, or all have lengths only. A ``Samples`` is returned as it is.
    With a ``tokenizer`` (anything ``packing.load_tokenizer`` takes), text rows (``text``,
    ``messages``, ``prompt``/``completion`` as strings or messages) are tokenized with their
    chat template and masks (``packing.text._text_rows``) by ``num_proc`` processes (default one);
    ``progress(done, total)`` follows them. ``loss_rules`` (:class:`packing.core._loss.LossRules`,
    ``Recipe.loss_rules``) say what is trained, else ``completion_only_loss`` does. Preference pairs and
    completion groups (:func:`read_unit_rows`) are laid out as ``share_prompt`` says (the prompt once, or once
    per completion) and the result carries their ``units``. Other rows are made columns (:func:`python_rows`)
    and read by the one reader (:func:`read_columns`), as an Arrow table is.

    >>> s = read_rows([[1, 2], {"input_ids": [3, 4], "prompt": None, "completion": None}])
    >>> s.tokens.tolist(), s.offsets.tolist()
    ([1, 2, 3, 4], [0, 2, 4])
    >>> read_rows([[1, 2], {"length": 3}])
    Traceback (most recent call last):
    ...
    packing.errors.SampleError: sample 1: expected token ids like sample 0 (all rows have tokens or all have lengths only), got <a length only>
    """
    return read_samples(
        rows,
        completion_only_loss,
        tokenizer=tokenizer,
        loss_rules=loss_rules,
        num_proc=num_proc,
        progress=progress,
        share_prompt=share_prompt,
    )


def read_samples(
    rows: Iterable[Any],
    completion_only_loss: bool = True,
    *,
    tokenizer: Any = None,
    loss_rules: LossRules | None = None,
    num_proc: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    share_prompt: bool = False,
) -> Samples:
    """:func:`read_rows` for the doors' pipeline: the same rows and options, read once (a door calls this, not
    the public verb). O(total tokens).

    >>> read_samples([[1, 2], [3]]).lengths.tolist()
    [2, 1]
    """
    if isinstance(rows, Samples):
        return rows
    completion_only = LossRules.of(loss_rules, check_flag(completion_only_loss, "completion_only_loss")).masks_anything
    if tokenizer is not None:
        from packing.text._tokenizers import load_tokenizer

        return read_text_rows(
            rows,
            load_tokenizer(tokenizer),
            completion_only_loss=completion_only,
            loss_rules=loss_rules,
            num_proc=num_proc,
            progress=progress,
            share_prompt=share_prompt,
        )
    if isinstance(rows, (str, bytes, Mapping)) or not isinstance(rows, Iterable):
        raise SettingError("samples", f"a list of samples ({FORMS})", rows)
    share_prompt = check_flag(share_prompt, "share_prompt")
    rows = rows if isinstance(rows, list) else list(rows)
    lengths = token_array_lengths(rows)
    if lengths is not None:  # token arrays: joined and checked at once, in C
        tokens = np.empty(int(lengths.sum()), dtype=joined_dtype(rows))
        join_token_arrays(rows, tokens)
        return Samples(tokens, all_ones(len(tokens)), sample_offsets(lengths, len(rows)))
    try:
        return read_columns(python_rows(rows), completion_only)
    except _UnitRows:  # pairs and groups: laid out by the unit reader, with their units
        return read_unit_rows(rows, completion_only, share_prompt=share_prompt)


def read_batch(batch: Mapping[str, Sequence[Any]], completion_only_loss: bool = True, **reading: Any) -> Samples:
    """A batch of rows as ``datasets.map(batched=True)`` gives it, a dict of equal-length columns, read as
    :func:`read_rows` reads its rows, column by column (:func:`python_column`) without a dict per row. A batch
    whose columns are not all lists of ids (text, pairs, groups, a value to name) is read from its rows,
    ``reading`` (``read_rows``'s options) as given. O(values).

    >>> read_batch({"input_ids": [[1, 2], [3]], "labels": [[-100, 2], [3]]}).loss_mask.tolist()
    [0, 1, 1]
    """
    sizes = sorted({len(column) for column in batch.values()})
    if len(sizes) > 1:
        raise SettingError("batch", "columns of one length", f"<columns of lengths {sizes}>")
    options = dict(reading)
    rules = LossRules.of(options.pop("loss_rules", None), check_flag(completion_only_loss, "completion_only_loss"))
    if sizes and options.get("tokenizer") is None and not set(batch) & {*TEXT_FIELDS, *UNIT_FIELDS, *VISION_FIELDS}:
        names = [name for name in _LIST_FIELDS if name in batch]
        columns = {name: python_column(batch[name], RULES[name], name) for name in names}
        if all(column.broken is None for column in columns.values()):
            given = None if "length" not in batch else np.array([v is not None for v in batch["length"]], dtype=bool)
            length = None if given is None else (batch["length"], given)
            rows = Rows(columns, length, sizes[0], lambda row: {name: batch[name][row] for name in batch})
            return read_columns(rows, rules.masks_anything)
    rows_of = [dict(zip(batch, values, strict=True)) for values in zip(*batch.values(), strict=True)]
    return read_samples(rows_of, completion_only_loss, loss_rules=rules, **options)


def read_text_rows(
    rows: Iterable[Any],
    tokenizer: Any,
    *,
    completion_only_loss: bool = True,
    loss_rules: LossRules | None = None,
    num_proc: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    share_prompt: bool = False,
) -> Samples:
    """Rows of any form as one :class:`~packing.core._samples.Samples`: text rows tokenized (:func:`encode_rows`),
    every other row read by :func:`packing.reading._reader.read_rows`; errors number rows from 0 in the input order.
    ``loss_rules`` and ``num_proc`` as :func:`encode_rows` takes them; pairs and groups of text are tokenized by
    :func:`packing.text._pairs_groups_encoding.encode_units` and laid out as ``share_prompt`` says. O(characters + tokens).

    >>> s = read_text_rows([{"text": "hi"}, [7, 8], {"prompt": "a", "completion": "b"}], "bytes")
    >>> s.tokens.tolist(), s.loss_mask.tolist(), s.lengths.tolist()
    ([104, 105, 256, 7, 8, 97, 98, 256], [1, 1, 1, 1, 1, 0, 1, 1], [3, 2, 3])
    """
    row_list = list(rows)
    units = [index for index, row in enumerate(row_list) if unit_kind(row) is not None and is_text_row(row)]
    if units:
        from packing.text._pairs_groups_encoding import encode_units

        encoded = encode_units(
            [row_list[i] for i in units], tokenizer, loss_rules=LossRules.of(loss_rules, completion_only_loss),
            indices=units, num_proc=num_proc,
        )  # fmt: skip
        for index, row in zip(units, encoded, strict=True):
            row_list[index] = row
    positions = [index for index, row in enumerate(row_list) if is_text_row(row)]
    if units and not positions:
        return read_samples(
            row_list, LossRules.of(loss_rules, completion_only_loss).masks_anything, share_prompt=share_prompt
        )
    tokens, mask, offsets = encode_rows(
        [row_list[i] for i in positions],
        tokenizer,
        completion_only_loss=completion_only_loss,
        loss_rules=loss_rules,
        num_proc=num_proc,
        indices=positions,
        progress=progress,
    )
    if len(positions) == len(row_list):
        return Samples(tokens, mask, offsets)
    for slot, index in enumerate(positions):
        start, end = offsets[slot], offsets[slot + 1]
        row_list[index] = {"input_ids": tokens[start:end], "loss_mask": mask[start:end]}
    return read_samples(
        row_list,
        completion_only_loss=LossRules.of(loss_rules, completion_only_loss).masks_anything,
        share_prompt=share_prompt,
    )


def token_array_lengths(rows: Any) -> Int64Array | None:
    """The lengths of ``rows`` when it is a non-empty list of 1-D signed integer numpy arrays (what
    tokenizers give, read without a Python loop per row), else None. O(rows).

    >>> token_array_lengths([np.array([1, 2]), np.array([3])]).tolist(), token_array_lengths([[1, 2]])
    ([2, 1], None)
    """
    if not isinstance(rows, list) or not _integer_arrays(rows):
        return None
    return np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))


def join_token_arrays(rows: Sequence[npt.NDArray[Any]], out: TokenArray) -> None:
    """Write the token arrays ``rows`` (``token_array_lengths`` is not None) one after the other into ``out``
    (as long as they are together) and check them as ``read_rows`` does: the first negative token is
    refused with its row and position. Narrower ids are widened; ``out`` must be wide enough (its dtype at
    least ``joined_dtype(rows)``). O(total tokens), in C.

    >>> out = np.zeros(3, dtype=np.int32)
    >>> join_token_arrays([np.array([1, 2]), np.array([3])], out); out.tolist()
    [1, 2, 3]
    """
    np.concatenate(rows, out=out, casting="unsafe")
    lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
    error = Column(out, lengths, np.zeros(len(rows), dtype=bool)).error(TOKENS, "", lambda row, _: (row, None))
    if error is not None:
        raise error[2]


# ---------------------------------------------------------------- preference pairs and completion groups

Part = tuple[str, Any, str, Any]
"""One completion of a unit row: its field, its tokens, its mask's field and its mask (None: every token trained)."""


def _unit_parts(
    row: Mapping[str, Any], index: int
) -> tuple[list[Part], SampleError | None, tuple[int, SampleError] | None]:
    """A pair or group row judged by its keys: its completions (:data:`Part`), the error its keys give before its
    prompt is read (text, another form's column, no prompt) and the one its completions give after it, with the
    completion it comes at (-1: the list of completions or of masks; a missing or null completion). O(completions).

    >>> _unit_parts({"prompt": [1], "chosen": [2]}, 3)[2][1]
    UnitError("sample 3, 'rejected': expected a completion (a pair has 'prompt', 'chosen' and 'rejected'), got None (NoneType)")
    """
    kind = unit_kind(row)
    assert kind is not None  # callers read only units here
    if is_text_unit(row):
        texts = [("prompt", row.get("prompt"))]
        if kind == "group":
            listed = row["completions"] if isinstance(row["completions"], (list, tuple)) else []
            texts += [(f"completions[{i}]", part) for i, part in enumerate(listed)]
        else:
            texts += [(field, row.get(field)) for field in ("chosen", "rejected")]
        field, text = next((field, part) for field, part in texts if isinstance(part, str) or is_message_list(part))
        return [], NeedsTokenizer(index, field, text), None
    own = "completions" if kind == "group" else "chosen"
    others: tuple[str, ...] = ("input_ids", "completion", "length", *MASK_FIELDS, LABELS, *TEXT_FIELDS)
    others += ("chosen", "rejected", "chosen_mask", "rejected_mask") if kind == "group" else ("completion_masks",)
    other = next((field for field in others if _present(row, field)), None)
    if other is not None:
        return [], UnitError.two_forms(index, other, own), None
    if not _present(row, "prompt"):
        return [], UnitError.missing(index, "prompt", kind), None
    parts: list[Part] = []
    if kind == "pair":
        for number, field in enumerate(("chosen", "rejected")):
            if not _present(row, field):
                return parts, None, (number, UnitError.missing(index, field, kind))
            parts.append((field, row[field], f"{field}_mask", row.get(f"{field}_mask")))
        return parts, None, None
    try:
        items = group_completions(as_numpy(row["completions"]), index)
    except UnitError as error:
        return parts, None, (-1, error)
    given = row.get("completion_masks")
    if given is not None and (not isinstance(given, (Sequence, np.ndarray)) or len(given) != len(items)):
        return (
            parts,
            None,
            (-1, SampleError(index, "completion_masks", None, f"{len(items)} masks (one per completion)", given)),
        )
    for number, item in enumerate(items):
        field = f"completions[{number}]"
        if item is None:
            return parts, None, (number, SampleError(index, field, None, f"a list of {TOKENS.noun}s", None))
        parts.append((field, item, f"completion_masks[{number}]", None if given is None else given[number]))
    return parts, None, None


def read_unit_rows(rows: Sequence[Any], completion_only_loss: bool = True, *, share_prompt: bool = False) -> Samples:
    """Rows among which some are pairs or groups, read and laid out (``share_prompt``: the prompt stored once) as
    one :class:`~packing.core._samples.Samples` with its :class:`~packing.core._pairs_groups.Units`; other rows are read
    together by the one reader (``completion_only_loss`` for their prompt/completion pairs) and kept as units of
    their own. The units' prompts, completions and masks are read as three columns, each checked once by its
    rule; errors number rows from 0: the first bad row's, as it would be read alone (its keys, its prompt, then
    each completion: its tokens, its mask, a trained token). O(tokens), a Python step per unit for its keys.

    >>> s = read_unit_rows([{"prompt": [1], "chosen": [2], "rejected": [3]}, [7, 8]])
    >>> s.tokens.tolist(), s.lengths.tolist(), s.units.kind.tolist()
    ([1, 2, 1, 3, 7, 8], [4, 2], [1, 0])
    >>> read_unit_rows([{"prompt": [1], "completions": [[2], []]}], share_prompt=True).units.kind.tolist()
    Traceback (most recent call last):
    ...
    packing.errors.UnitError: sample 0, 'completions[1]': expected a completion of at least one token (nothing else is trained), got <no tokens>
    """
    kinds = [unit_kind(row) for row in rows]
    plain = [index for index, kind in enumerate(kinds) if kind is None]
    found: list[tuple[tuple[float, int, int, int, int], SampleError]] = []
    samples = Samples(np.zeros(0, dtype=np.int64), all_ones(0), np.zeros(1, dtype=np.int64))
    try:
        samples = read_columns(python_rows([rows[i] for i in plain], plain), completion_only_loss, "tokens")
    except SampleError as refused:
        found.append(((math.inf if refused.sample is None else refused.sample, 0, 0, 0, 0), refused))
    if samples.labels is not None:
        assert samples.loss_mask is not None and samples.tokens is not None
        differ = np.flatnonzero((samples.labels != samples.tokens) & (samples.loss_mask != 0))
        row = plain[int(row_at(samples.offsets, int(differ[0])))]
        found.append(
            (
                (row, 0, 0, 0, 0),
                SampleError(row, LABELS, None, "labels equal to the tokens among pairs or groups", "<others>"),
            )
        )
    entries: list[tuple[int, int, Part]] = []  # each completion: its unit, its number in the unit, its part
    units: list[int] = []  # the unit rows read: up to the first refused row (no row after it is looked at)
    for index in (index for index, kind in enumerate(kinds) if kind is not None):
        if found and index > min(found, key=lambda pair: pair[0])[0][0]:
            break
        parts, early, late = _unit_parts(rows[index], index)
        if early is not None:
            found.append(((index, 0, 0, 0, 0), early))
        if late is not None:
            found.append(((index, 2, late[0], 0, 0), late[1]))
        entries += [(len(units), number, part) for number, part in enumerate(parts)]
        units.append(index)
    named: Where = lambda row, field: (units[row], field)  # noqa: E731
    prompts = python_column([rows[index].get("prompt") for index in units], TOKENS, "prompt", named)
    if (bad := prompts.error(TOKENS, "prompt", named)) is not None:
        found.append(((units[bad[0]], 1, 0, 0, bad[1]), bad[2]))
    part_of: Where = lambda at, _: (units[entries[at][0]], entries[at][2][0])  # noqa: E731
    mask_of: Where = lambda at, _: (units[entries[at][0]], entries[at][2][2])  # noqa: E731
    tokens = python_column([part[1] for _, _, part in entries], TOKENS, "", part_of)
    masks = python_column([part[3] for _, _, part in entries], FLAGS, "", mask_of)

    def part(at: int) -> tuple[int, str]:  # a completion's row and field
        return units[entries[at][0]], entries[at][2][0]

    def add(at: int, step: int, error: SampleError, position: int = 0) -> None:
        found.append(((units[entries[at][0]], 2, entries[at][1], step, position), error))

    if (bad := tokens.error(TOKENS, "", part_of)) is not None:
        add(bad[0], 1, bad[2], bad[1])
    if (empty := np.flatnonzero(tokens.lengths == 0)).size:
        add(int(empty[0]), 2, UnitError.empty_completion(*part(int(empty[0]))))
    if (bad := masks.error(FLAGS, "", mask_of)) is not None:
        add(bad[0], 3 if bad[1] < 0 else 5, bad[2], bad[1])
    given = ~masks.null
    if (wrong := np.flatnonzero(given & (masks.lengths != tokens.lengths))).size:
        at = int(wrong[0])
        words = f"{int(tokens.lengths[at])} values (one per token)", f"<{int(masks.lengths[at])} values>"
        add(at, 4, SampleError(*mask_of(at, ""), None, *words))
    trained = offsets_of(masks.values != 0)[offsets_of(masks.lengths)]
    if (untrained := np.flatnonzero(given & (np.diff(trained) == 0))).size:
        add(int(untrained[0]), 6, UnitError.untrained_completion(*part(int(untrained[0]))))
    if found:
        raise min(found, key=lambda pair: pair[0])[1]
    return _laid_out(len(rows), units, kinds, prompts, entries, tokens, masks, samples, share_prompt, plain)


def _laid_out(
    count: int,
    units: list[int],
    kinds: Sequence[UnitKind | None],
    prompts: Column,
    entries: list[tuple[int, int, Part]],
    tokens: Column,
    masks: Column,
    samples: Samples,
    share_prompt: bool,
    plain: list[int],
) -> Samples:
    """Checked units (their prompts, completions and masks as columns) and plain samples, in row order, laid out
    ``P c1 P c2 ...`` per unit, or ``P c1 c2 ...`` with a shared prompt; the prompt's loss mask 0, each
    completion's its own (1 where none was given). O(tokens), in C."""
    assert samples.tokens is not None and samples.loss_mask is not None
    unit_of = np.array([unit for unit, _, _ in entries], dtype=np.int64)
    kind = np.zeros(count, dtype=np.int8)
    kind[units] = [KINDS.index(unit) for unit in kinds if unit is not None]
    prompt_lengths = np.zeros(count, dtype=np.int64)
    prompt_lengths[units] = prompts.lengths
    prompt_starts = np.zeros(count, dtype=np.int64)
    prompt_starts[units] = offsets_of(prompts.lengths)[:-1]
    completions = np.ones(count, dtype=np.int64)
    completions[units] = np.bincount(unit_of, minlength=len(units))
    mask = np.ones(len(tokens.values), dtype=np.int8)
    starts = offsets_of(tokens.lengths)[:-1]
    copy_runs(masks.values.astype(np.int8), mask, starts[~masks.null], masks.lengths[~masks.null])
    before = len(prompts.values)  # where the completions start in the source, and the plain samples after them
    rows = np.concatenate([np.asarray(units, dtype=np.int64)[unit_of], np.asarray(plain, dtype=np.int64)])
    order = np.argsort(rows, kind="stable")  # every completion in row order, a plain sample one of its own
    entry_rows = rows[order]
    entry_starts = np.concatenate([starts + before, samples.offsets[:-1] + before + len(mask)])[order]
    entry_lengths = np.concatenate([tokens.lengths, samples.lengths])[order]
    first = np.concatenate([[number for _, number, _ in entries], np.zeros(len(plain), dtype=np.int64)])[order] == 0
    prompt_needed = np.where(first | (not share_prompt), prompt_lengths[entry_rows], 0)
    index = ranges(
        np.column_stack([prompt_starts[entry_rows], entry_starts]).ravel(),
        np.column_stack([prompt_needed, entry_lengths]).ravel(),
    )
    pieces = [prompts.values, tokens.values, samples.tokens]
    dtype = token_dtype(piece.dtype for piece in pieces if piece.size)
    source: TokenArray = np.concatenate(pieces, dtype=dtype, casting="unsafe")
    source_mask = np.concatenate([np.zeros(before, dtype=np.int8), mask, samples.loss_mask])
    read = Units(kind, prompt_lengths, sample_offsets(completions, count), entry_lengths, bool(share_prompt))
    return Samples(source[index], source_mask[index], sample_offsets(read.lengths(), count), None, read)


def unit_row(samples: Samples, index: int) -> dict[str, Any]:
    """Sample ``index`` of ``samples`` (with units) as a row the reader reads back: ``{"prompt", "chosen",
    "rejected"}`` or ``{"prompt", "completions"}`` of token arrays, with the completions' masks when a completion
    token is untrained; a plain sample as ``{"input_ids", "loss_mask"}``. O(the unit's tokens).

    >>> s = read_unit_rows([{"prompt": [1, 2], "chosen": [3], "rejected": [4]}], share_prompt=True)
    >>> {k: v.tolist() for k, v in unit_row(s, 0).items()}
    {'prompt': [1, 2], 'chosen': [3], 'rejected': [4]}
    """
    units = samples.units
    assert units is not None and samples.tokens is not None and samples.loss_mask is not None
    lo = int(samples.offsets[index])
    tokens, mask = samples.tokens, samples.loss_mask
    first, last = int(units.completion_offsets[index]), int(units.completion_offsets[index + 1])
    lengths = units.completion_lengths[first:last].tolist()
    prompt = int(units.prompt_lengths[index])
    if units.kind[index] == 0:
        end = lo + lengths[0]
        return {"input_ids": tokens[lo:end], "loss_mask": mask[lo:end]}
    parts: list[Any] = []
    part_masks: list[Any] = []
    at = lo + prompt
    for length in lengths:
        parts.append(tokens[at : at + length])
        part_masks.append(mask[at : at + length])
        at += length if units.share_prompt else length + prompt
    row: dict[str, Any] = {"prompt": tokens[lo : lo + prompt]}
    masked = any(not bool(m.all()) for m in part_masks)
    if units.kind[index] == 1:
        row["chosen"], row["rejected"] = parts
        if masked:
            row["chosen_mask"], row["rejected_mask"] = part_masks
    else:
        row["completions"] = parts
        if masked:
            row["completion_masks"] = part_masks
    return row
