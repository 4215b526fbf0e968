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
  ``completion_masks``: a 0/1 loss mask per completion token): a unit (``packing.core.pairs_groups``), laid out with its
  prompt before every completion or, with ``share_prompt``, once; the prompt is never trained. Plain rows may come
  among units (each a unit of its own); text units are tokenized first (:mod:`packing.text.pairs_groups_encoding`).

One rule for every entry point: a key whose value is null (``None``) is absent, so rows
of mixed forms in one table (where each row has nulls in the other form's columns)
read as they would one by one; booleans in a loss mask are 1/0 (elsewhere they are
refused: ``True`` is not a token id). Anything else raises :class:`SampleError` with
the row, the field, the position and what was expected.

:func:`read_rows` reads Python rows; :func:`read_table` reads a ``pyarrow.Table``
column by column, without a Python loop per row, and reports a bad row exactly as
:func:`read_rows` would (it re-reads that one row in Python to word the error).

>>> s = read_rows([[1, 2], {"prompt": [3], "completion": [4]}, {"input_ids": [5, 6], "loss_mask": [True, False]}])
>>> s.tokens.tolist(), s.loss_mask.tolist(), s.lengths.tolist()
([1, 2, 3, 4, 5, 6], [1, 1, 0, 1, 1, 0], [2, 2, 2])
>>> s = read_rows([{"input_ids": [7, 8, 9], "labels": [-100, 8, 9]}])
>>> s.loss_mask.tolist(), s.labels
([0, 1, 1], None)

Internal: the public names are in ``packing`` and ``packing.reading``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from numbers import Integral, Real
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

import numpy as np
import numpy.typing as npt

from packing.core.arrays import offsets_of, row_at
from packing.core.forms import (
    group_completions,
    is_message_list,
    is_text_row,
    is_text_unit,
    null_unit,
    null_unit_error,
    unit_kind,
)
from packing.core.loss import LossRules
from packing.core.pairs_groups import KINDS, UnitKind, Units
from packing.core.samples import Int64Array
from packing.core.validation import INT64_MAX, check_flag, has_bools, integer_words, is_integer
from packing.errors import NeedsTokenizer, SampleError, SettingError, UnitError
from packing.text.text_rows import encode_rows

if TYPE_CHECKING:  # pragma: no cover - typing only
    pass
from packing.core.forms import FLAG, FORMS, LABEL, LABELS, MASK_FIELDS, TEXT_FIELDS, TOKEN, RowKind
from packing.core.samples import (
    IGNORE_INDEX,
    Int8Array,
    Samples,
    TokenArray,
    all_ones,
    joined,
    joined_dtype,
    sample_offsets,
    token_dtype,
)

# ---------------------------------------------------------------- one row, in Python


def as_numpy(value: Any) -> Any:
    """A tensor (torch's, or any array with ``__array__`` and ``ndim``, such as JAX's) as a numpy array on the
    host, so every door reads tensors as it reads lists; anything else as it is. O(length).

    >>> import torch
    >>> as_numpy(torch.tensor([1, 2])).tolist(), as_numpy([1, 2])
    ([1, 2], [1, 2])
    """
    if isinstance(value, (np.ndarray, np.generic)) or not (hasattr(value, "__array__") and hasattr(value, "ndim")):
        return value
    for step in ("detach", "cpu"):  # torch: off the autograd graph, onto the host
        method = getattr(value, step, None)
        if callable(method):
            value = method()
    return np.asarray(value)


def _values(value: Any, index: int | None, field: str | None, expected: str) -> npt.NDArray[Any]:
    """``value`` as a 1-D numpy array if it is a flat list or 1-D array (or tensor); else a SampleError. O(length)."""
    value = as_numpy(value)
    if type(value) is np.ndarray and value.ndim == 1:
        return value if value.size else np.zeros(0, dtype=np.int64)  # an empty array of any dtype holds no bad item
    if isinstance(value, np.ndarray) and value.ndim != 1:
        raise SampleError(index, field, None, f"a flat list of {expected}s", f"<an array of shape {value.shape}>")
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, (Sequence, np.ndarray)):
        raise SampleError(index, field, None, f"a list of {expected}s", value)
    if len(value) == 0:
        return np.zeros(0, dtype=np.int64)
    try:
        array = np.asarray(value)
    except (ValueError, TypeError, OverflowError, RecursionError):
        array = np.asarray(value, dtype=object) if not isinstance(value, np.ndarray) else value
    if array.ndim != 1:
        array = np.empty(len(value), dtype=object)
        array[:] = list(value)  # ragged or nested: the first bad item is found below
    return array


def _first_bad_item(items: Sequence[Any], index: int | None, field: str | None, flags: bool) -> SampleError:
    """The error for the first item of ``items`` that is not an integer token id (or a 0/1 flag). O(length)."""
    for position, item in enumerate(items):
        if flags:
            if isinstance(item, (bool, np.bool_)) or (is_integer(item) and item in (0, 1)):
                continue
            return SampleError(index, field, position, FLAG, item)
        if not is_integer(item) or item < 0:
            return SampleError(index, field, position, TOKEN, item)
        if int(item) > INT64_MAX:
            return SampleError(index, field, position, "a token id that fits in 64 bits", item)
    raise AssertionError("no bad item found")  # pragma: no cover - callers checked that one exists


def token_array(value: Any, index: int | None, field: str | None) -> TokenArray:
    """Check one list (or 1-D array) of token ids and return it as int32 (an array of at most 32-bit
    ids) or int64. O(length).

    >>> token_array([1, 2], 0, None).tolist()
    [1, 2]
    >>> token_array([1, True], 4, "prompt")
    Traceback (most recent call last):
    ...
    packing.errors.SampleError: sample 4, 'prompt', position 1: expected a non-negative integer token id, got True (bool)
    """
    value = as_numpy(value)  # a tensor's bad item quoted as a number, as a list's
    array = _values(value, index, field, "token id")
    ok = array.dtype.kind == "i" or (array.dtype.kind == "u" and (not array.size or int(array.max()) <= INT64_MAX))
    if not ok or (type(value) is not np.ndarray and has_bools(value)):
        raise _first_bad_item(array.tolist() if type(value) is np.ndarray else value, index, field, flags=False)
    if array.size and array.dtype.kind == "i" and array.min() < 0:
        position = int(np.flatnonzero(array < 0)[0])
        raise SampleError(index, field, position, TOKEN, int(array[position]))
    return array.astype(token_dtype([array.dtype]), copy=False)


def mask_array(value: Any, index: int, field: str, length: int) -> Int8Array:
    """Check a loss mask (0/1 or booleans, one per token) and return it as int8. O(length).

    >>> mask_array([True, 0], 0, "loss_mask", 2).tolist()
    [1, 0]
    >>> mask_array([1], 2, "loss_mask", 3)
    Traceback (most recent call last):
    ...
    packing.errors.SampleError: sample 2, 'loss_mask': expected 3 values (one per token), got <1 values>
    """
    array = _values(value, index, field, "0/1 value")
    if len(array) != length:
        raise SampleError(index, field, None, f"{length} values (one per token)", f"<{len(array)} values>")
    if array.dtype.kind == "b":
        return array.astype(np.int8)
    if array.dtype.kind not in "iu" or (array.size and ((array != 0) & (array != 1)).any()):
        raise _first_bad_item(array.tolist() if type(value) is np.ndarray else value, index, field, flags=True)
    return array.astype(np.int8)


def _present(row: Mapping[str, Any], field: str) -> bool:
    return row.get(field) is not None


def _dict_form(row: Mapping[str, Any], index: int) -> Literal["input_ids", "prompt", "length"]:
    """Which form a dict row has, by its non-null keys; a row with none or two forms is refused."""
    has_ids = _present(row, "input_ids")
    has_pair = _present(row, "prompt") or _present(row, "completion")
    if (has_ids or has_pair) and unit_kind(row) is not None:
        raise _UnitRows  # a pair or group with another form's column: the unit reader refuses it by name
    if has_ids and has_pair:
        raise SampleError(index, None, None, "one form, 'input_ids' or 'prompt'/'completion'", "<both>")
    if has_pair:
        if not _present(row, "completion") and (null := null_unit(row)) is not None:
            raise null_unit_error(index, null)
        for field in ("prompt", "completion"):
            if not _present(row, field):
                raise SampleError(index, field, None, "a list of token ids (a prompt needs a completion)", None)
        return "prompt"
    if has_ids:
        return "input_ids"
    if _present(row, "length"):
        return "length"
    if unit_kind(row) is not None:
        raise _UnitRows
    keys = sorted(str(key) for key, value in row.items() if value is not None)
    raise SampleError(index, None, None, FORMS, f"<keys {', '.join(keys) or 'none'}>")


class _UnitRows(Exception):
    """The plain row reader met a pair or group: the rows are read again by the unit reader (:func:`read_rows`).
    Raised only where a plain row would be refused, so plain rows pay nothing for units."""


def _no_stray_mask(row: Mapping[str, Any], index: int, form: str) -> None:
    for field in (*MASK_FIELDS, LABELS):
        if _present(row, field):
            what = "labels" if field == LABELS else "a mask"
            raise SampleError(index, field, None, f"no {what} in a {form} row (only with 'input_ids')", what)


def label_array(value: Any, index: int, length: int) -> npt.NDArray[np.signedinteger[Any]]:
    """Check a row's ``labels`` (one per token, each a token id or -100) and return them as a signed
    integer array. O(length).

    >>> label_array([-100, 7], 0, 2).tolist()
    [-100, 7]
    >>> label_array([-100, -1], 5, 2)
    Traceback (most recent call last):
    ...
    packing.errors.SampleError: sample 5, 'labels', position 1: expected a non-negative integer token id or -100, got -1
    """
    array = _values(value, index, LABELS, "label")
    if len(array) != length:
        raise SampleError(index, LABELS, None, f"{length} values (one per token)", f"<{len(array)} values>")
    ok = array.dtype.kind == "i" or (array.dtype.kind == "u" and (not array.size or int(array.max()) <= INT64_MAX))
    if ok and array.size and array.dtype.kind == "i" and int(array.min()) < 0:
        ok = not ((array < 0) & (array != IGNORE_INDEX)).any()
    if not ok or (type(value) is not np.ndarray and has_bools(value)):
        items = array.tolist() if type(value) is np.ndarray else value
        for position, item in enumerate(items):
            if not is_integer(item) or not (item == IGNORE_INDEX or 0 <= item <= INT64_MAX):
                raise SampleError(index, LABELS, position, LABEL, item)
    return array.astype(np.int64 if array.dtype.kind == "u" else array.dtype, copy=False)


def _row_mask(
    row: Mapping[str, Any], index: int, tokens: TokenArray
) -> tuple[Int8Array | None, npt.NDArray[np.signedinteger[Any]] | None]:
    """The AND of every loss-mask field the row has (None: train on every token), and its ``labels`` when
    they differ from ``tokens`` where trained (else None). A label of -100 masks its token."""
    mask: Int8Array | None = None
    for field in MASK_FIELDS:
        if _present(row, field):
            values = mask_array(row[field], index, field, len(tokens))
            mask = values if mask is None else mask & values
    if not _present(row, LABELS):
        return mask, None
    labels = label_array(row[LABELS], index, len(tokens))
    trained = (labels != IGNORE_INDEX).astype(np.int8)
    mask = trained if mask is None else mask & trained
    return mask, labels if ((labels != tokens) & (mask != 0)).any() else None


def _length_value(value: Any, index: int) -> int:
    if not is_integer(value) or not 0 <= value <= INT64_MAX:
        raise SampleError(index, "length", None, integer_words(0), value)
    return int(value)


def read_row(
    row: Any, index: int = 0, completion_only_loss: bool = True
) -> tuple[RowKind, TokenArray, Int8Array | None, TokenArray | None]:
    """What one row is: ``("tokens", tokens, mask or None, labels or None)`` or ``("length", [n], None,
    None)``. O(length).

    A mask of None means every token is trained on; labels of None, that each trained token is its own label.

    >>> kind, tokens, mask, labels = read_row({"prompt": [5, 6], "completion": [7]})
    >>> kind, tokens.tolist(), mask.tolist(), labels
    ('tokens', [5, 6, 7], [0, 0, 1], None)
    >>> read_row("hello", 3)
    Traceback (most recent call last):
    ...
    packing.errors.SampleError: sample 3: expected a list of token ids, or a dict with 'input_ids' (and a 'loss_mask'), 'prompt' and 'completion', or 'length', or a pair ('prompt', 'chosen', 'rejected') or group ('prompt', 'completions'), got 'hello' (str)
    """
    if not isinstance(row, Mapping):
        row = as_numpy(row)
        if isinstance(row, (str, bytes)) or not isinstance(row, (Sequence, np.ndarray)):
            raise SampleError(index, None, None, FORMS, row)
        return "tokens", token_array(row, index, None), None, None
    if is_text_row(row):
        if unit_kind(row) is not None:
            raise _UnitRows  # a pair or group of text: the unit reader names its text field
        field = next((name for name in TEXT_FIELDS if _present(row, name)), None) or next(
            (name for name in ("prompt", "completion") if not isinstance(row.get(name), (list, np.ndarray))), "prompt"
        )
        raise NeedsTokenizer(index, field, row.get(field) if field else row)
    form = _dict_form(row, index)
    if form == "length":
        _no_stray_mask(row, index, "length")
        return "length", np.array([_length_value(row["length"], index)], dtype=np.int64), None, None
    if form == "prompt":
        _no_stray_mask(row, index, "prompt/completion")
        prompt = token_array(row["prompt"], index, "prompt")
        completion = token_array(row["completion"], index, "completion")
        mask = np.ones(len(prompt) + len(completion), dtype=np.int8)
        if completion_only_loss:
            mask[: len(prompt)] = 0
        return "tokens", np.concatenate((prompt, completion)), mask, None
    tokens = token_array(row["input_ids"], index, "input_ids")
    return "tokens", tokens, *_row_mask(row, index, tokens)


def length_array(value: Any, index: int, field: str) -> npt.NDArray[np.int64]:
    """Check a list of lengths (non-negative integers) and return it as int64. O(length).

    >>> length_array([3, 0, 2], 0, "seq_lengths").tolist()
    [3, 0, 2]
    >>> length_array([3, 1.5], 2, "seq_lengths")
    Traceback (most recent call last):
    ...
    packing.errors.SampleError: sample 2, 'seq_lengths', position 1: expected a non-negative integer, got 1.5 (float)
    """
    array = _values(value, index, field, "length")
    ok = array.dtype.kind == "i" or (array.dtype.kind == "u" and (not array.size or int(array.max()) <= INT64_MAX))
    if ok and array.size and array.dtype.kind == "i" and int(array.min()) < 0:
        ok = False
    if not ok or (type(value) is not np.ndarray and has_bools(value)):
        items = array.tolist() if type(value) is np.ndarray else value
        for position, item in enumerate(items):
            if isinstance(item, (bool, np.bool_)) or not isinstance(item, Integral) or not 0 <= int(item) <= INT64_MAX:
                raise SampleError(index, field, position, "a non-negative integer", item)
    return array.astype(np.int64, copy=False)


def weight_array(value: Any, index: int, field: str, length: int) -> npt.NDArray[np.float32]:
    """Check per-token weights (finite numbers >= 0, one per token) and return them as float32. O(length).

    >>> weight_array([0.5, 0], 0, "loss_weights", 2).tolist()
    [0.5, 0.0]
    >>> weight_array([0.5, float("nan")], 1, "loss_weights", 2)
    Traceback (most recent call last):
    ...
    packing.errors.SampleError: sample 1, 'loss_weights', position 1: expected a finite number >= 0, got nan (float)
    """
    array = _values(value, index, field, "weight")
    if len(array) != length:
        raise SampleError(index, field, None, f"{length} values (one per token)", f"<{len(array)} values>")
    numeric = array.dtype.kind in "iuf" and not (type(value) is not np.ndarray and has_bools(value))
    finite = numeric and bool(np.isfinite(array).all()) and not (array.size and float(array.min()) < 0)
    if not finite:
        items = array.tolist() if type(value) is np.ndarray else value
        for position, item in enumerate(items):
            if isinstance(item, (bool, np.bool_)) or not isinstance(item, Real) or not 0 <= float(item) < np.inf:
                raise SampleError(index, field, position, "a finite number >= 0", item)
    return array.astype(np.float32)


def id_array(value: Any, index: int, field: str, length: int) -> npt.NDArray[np.int64]:
    """Check per-token integers (such as ``sequence_ids``: -1 in padding), one per token, and return them as
    int64. O(length).

    >>> id_array([0, 0, -1], 0, "sequence_ids", 3).tolist()
    [0, 0, -1]
    """
    array = _values(value, index, field, "integer")
    if len(array) != length:
        raise SampleError(index, field, None, f"{length} values (one per token)", f"<{len(array)} values>")
    ok = array.dtype.kind == "i" or (array.dtype.kind == "u" and (not array.size or int(array.max()) <= INT64_MAX))
    if not ok or (type(value) is not np.ndarray and has_bools(value)):
        items = array.tolist() if type(value) is np.ndarray else value
        for position, item in enumerate(items):
            if isinstance(item, (bool, np.bool_)) or not isinstance(item, Integral) or abs(int(item)) > INT64_MAX:
                raise SampleError(index, field, position, "an integer", item)
    return array.astype(np.int64, copy=False)


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
    mask, labels = _row_mask(row, index, tokens)
    targets = (tokens if labels is None else labels).astype(np.int64)
    kept = targets if mask is None else np.where(mask != 0, targets, IGNORE_INDEX)
    kept = kept[:total].copy()
    starts = np.cumsum(lengths) - lengths
    kept[starts[lengths > 0]] = IGNORE_INDEX
    return tokens[:total], kept, lengths


def mixed_kinds_error(index: int, first: RowKind, kind: RowKind) -> SampleError:
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


def _first_negative(tokens: TokenArray, pieces: Sequence[npt.NDArray[Any]]) -> None:
    """Raise the row reader's error for the first negative token, if any: one vectorized pass. O(tokens)."""
    if tokens.size and int(tokens.min()) < 0:
        position = int(np.flatnonzero(tokens < 0)[0])
        row = row_at(offsets_of([len(piece) for piece in pieces]), position)
        token_array(pieces[row], row, None)  # raises the SampleError naming the row and the position


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
    chat template and masks (``packing.text.text_rows``) by ``num_proc`` processes (default one);
    ``progress(done, total)`` follows them. ``loss_rules`` (:class:`packing.core.loss.LossRules`,
    ``Recipe.loss_rules``) say what is trained, else ``completion_only_loss`` does. Preference pairs and
    completion groups (:func:`read_unit_rows`) are laid out as ``share_prompt`` says (the prompt once, or once
    per completion) and the result carries their ``units``.

    >>> s = read_rows([[1, 2], {"input_ids": [3, 4], "prompt": None, "completion": None}])
    >>> s.tokens.tolist(), s.offsets.tolist()
    ([1, 2, 3, 4], [0, 2, 4])
    >>> read_rows([[1, 2], {"length": 3}])
    Traceback (most recent call last):
    ...
    packing.errors.SampleError: sample 1: expected token ids like sample 0 (all rows have tokens or all have lengths only), got <a length only>
    """
    if isinstance(rows, Samples):
        return rows
    completion_only = LossRules.of(loss_rules, check_flag(completion_only_loss, "completion_only_loss")).masks_anything
    if tokenizer is not None:
        from packing.text.tokenizers import load_tokenizer

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
    if not isinstance(rows, (list, tuple)):
        rows = list(rows)  # read again from the start when a pair or group comes
    try:
        return _read_plain(rows, completion_only)
    except _UnitRows:  # pairs and groups: laid out by the unit reader, with their units
        return read_unit_rows(rows, completion_only, share_prompt=share_prompt)


def _read_plain(rows: Sequence[Any], completion_only: bool) -> Samples:
    """:func:`read_rows` of rows without a tokenizer, none of them a pair or group (:class:`_UnitRows` when one
    is). O(total tokens)."""
    lengths = token_array_lengths(rows)
    if lengths is not None and isinstance(rows, list):  # token arrays: checked all at once, in C
        tokens = np.empty(int(lengths.sum()), dtype=joined_dtype(rows))
        join_token_arrays(rows, tokens)
        return Samples(tokens, all_ones(len(tokens)), sample_offsets(lengths, len(rows)))
    pieces: list[npt.NDArray[np.integer[Any]]] = []
    masks: list[tuple[int, Int8Array]] = []
    given_labels: list[tuple[int, TokenArray]] = []
    first_kind: RowKind | None = None
    unchecked = False  # 1-D signed integer arrays are taken as they are; their signs are checked all at once
    try:
        for index, row in enumerate(rows):
            if type(row) is np.ndarray and row.ndim == 1 and row.dtype.kind == "i":
                kind: RowKind = "tokens"
                pieces.append(row)
                unchecked = True
            else:
                kind, values, mask, labels = read_row(row, index, completion_only)
                pieces.append(values)
                if mask is not None and not mask.all():
                    masks.append((index, mask))
                if labels is not None:
                    given_labels.append((index, labels))
            if first_kind is None:
                first_kind = kind
            elif kind != first_kind:
                raise mixed_kinds_error(index, first_kind, kind)
    except SampleError as error:
        if unchecked:  # a negative token in an earlier row comes first, as row by row
            earlier = pieces[: error.sample]
            _first_negative(joined(earlier), earlier)
        raise
    if first_kind == "length":
        return Samples(None, None, sample_offsets((int(p[0]) for p in pieces), len(pieces)))
    tokens = joined(pieces)
    if unchecked:
        _first_negative(tokens, pieces)
    offsets = sample_offsets(map(len, pieces), len(pieces))
    loss_mask = all_ones(len(tokens))
    if masks:
        loss_mask = np.ones(len(tokens), dtype=np.int8)
        for index, mask in masks:
            loss_mask[offsets[index] : offsets[index + 1]] = mask
    if not given_labels:
        return Samples(tokens, loss_mask, offsets)
    labels = tokens.astype(token_dtype([tokens.dtype, *(values.dtype for _, values in given_labels)]))
    for index, values in given_labels:  # a label of -100 is an untrained token's: it keeps the token
        lo, hi = offsets[index], offsets[index + 1]
        labels[lo:hi] = np.where(loss_mask[lo:hi] != 0, values, tokens[lo:hi])
    return Samples(tokens, loss_mask, offsets, labels)


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
    """Rows of any form as one :class:`~packing.core.samples.Samples`: text rows tokenized (:func:`encode_rows`),
    every other row read by :func:`packing.reading.reader.read_rows`; errors number rows from 0 in the input order.
    ``loss_rules`` and ``num_proc`` as :func:`encode_rows` takes them; pairs and groups of text are tokenized by
    :func:`packing.text.pairs_groups_encoding.encode_units` and laid out as ``share_prompt`` says. O(characters + tokens).

    >>> s = read_text_rows([{"text": "hi"}, [7, 8], {"prompt": "a", "completion": "b"}], "bytes")
    >>> s.tokens.tolist(), s.loss_mask.tolist(), s.lengths.tolist()
    ([104, 105, 256, 7, 8, 97, 98, 256], [1, 1, 1, 1, 1, 0, 1, 1], [3, 2, 3])
    """
    from packing.core.samples import Samples
    from packing.reading.reader import read_rows

    row_list = list(rows)
    units = [index for index, row in enumerate(row_list) if unit_kind(row) is not None and is_text_row(row)]
    if units:
        from packing.text.pairs_groups_encoding import encode_units

        encoded = encode_units(
            [row_list[i] for i in units], tokenizer, loss_rules=LossRules.of(loss_rules, completion_only_loss),
            indices=units, num_proc=num_proc,
        )  # fmt: skip
        for index, row in zip(units, encoded, strict=True):
            row_list[index] = row
    positions = [index for index, row in enumerate(row_list) if is_text_row(row)]
    if units and not positions:
        return read_rows(
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
    return read_rows(
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
    _first_negative(out, rows)


# ---------------------------------------------------------------- preference pairs and completion groups


class UnitRow(NamedTuple):
    """One row read: its ``kind`` (``pair``, ``group``, ``plain``), ``prompt`` tokens, ``completions`` and each
    completion's loss ``masks`` (None: every token trained)."""

    kind: UnitKind
    prompt: TokenArray
    completions: list[TokenArray]
    masks: list[Int8Array | None]


def _completion(index: int, field: str, value: Any, mask_field: str, mask: Any) -> tuple[Any, Any]:
    """One completion's tokens (refused when empty) and its mask (None when absent; refused when it trains no
    token: a pair whose chosen trains nothing is a broken pair). O(length).

    >>> _completion(2, "chosen", [4, 5], "chosen_mask", [0, 0])
    Traceback (most recent call last):
    ...
    packing.errors.UnitError: sample 2, 'chosen': expected a completion with at least one trained token (one that trains nothing leaves the unit nothing to compare), got <no trained token>
    """
    tokens = token_array(value, index, field)
    if not len(tokens):
        raise UnitError.empty_completion(index, field)
    checked = None if mask is None else mask_array(mask, index, mask_field, len(tokens))
    if checked is not None and not checked.any():
        raise UnitError.untrained_completion(index, field)
    return tokens, checked


def _first_text(row: Mapping[str, Any], kind: UnitKind) -> tuple[str, Any]:
    """The first part of a text unit that is text (a string or messages), by its field (``completions[i]`` in a
    group), and that text. O(completions)."""
    parts = [("prompt", row.get("prompt"))]
    if kind == "group":
        parts += [(f"completions[{i}]", part) for i, part in enumerate(row["completions"])]
    else:
        parts += [(field, row.get(field)) for field in ("chosen", "rejected")]
    return next((field, part) for field, part in parts if isinstance(part, str) or is_message_list(part))


def read_unit_row(row: Mapping[str, Any], index: int = 0) -> UnitRow:
    """A pair or group row checked (see the module). O(tokens).

    >>> read_unit_row({"prompt": [1], "completions": [[2], [3, 4]]}).completions[1].tolist()
    [3, 4]
    >>> read_unit_row({"prompt": [1], "chosen": [2]}, 3)
    Traceback (most recent call last):
    ...
    packing.errors.UnitError: sample 3, 'rejected': expected a completion (a pair has 'prompt', 'chosen' and 'rejected'), got None (NoneType)
    >>> read_unit_row({"prompt": [1], "completions": [[2], []]}, 5)
    Traceback (most recent call last):
    ...
    packing.errors.UnitError: sample 5, 'completions[1]': expected a completion of at least one token (nothing else is trained), got <no tokens>
    """
    kind = unit_kind(row)
    assert kind is not None  # callers read only units here
    if is_text_unit(row):
        field, text = _first_text(row, kind)
        raise NeedsTokenizer(index, field, text)
    own = "completions" if kind == "group" else "chosen"
    for other in ("input_ids", "completion", "length", *MASK_FIELDS, LABELS, *TEXT_FIELDS):
        if _present(row, other):
            raise UnitError.two_forms(index, other, own)
    if kind == "group":
        for other in ("chosen", "rejected", "chosen_mask", "rejected_mask"):
            if _present(row, other):
                raise UnitError.two_forms(index, other, own)
    elif _present(row, "completion_masks"):
        raise UnitError.two_forms(index, "completion_masks", own)
    if not _present(row, "prompt"):
        raise UnitError.missing(index, "prompt", kind)
    prompt = token_array(row["prompt"], index, "prompt")
    completions: list[TokenArray] = []
    masks: list[Int8Array | None] = []
    if kind == "pair":
        for field in ("chosen", "rejected"):
            if not _present(row, field):
                raise UnitError.missing(index, field, kind)
            tokens, mask = _completion(index, field, row[field], f"{field}_mask", row.get(f"{field}_mask"))
            completions.append(tokens)
            masks.append(mask)
        return UnitRow(kind, prompt, completions, masks)
    items = group_completions(as_numpy(row["completions"]), index)
    given = row.get("completion_masks")
    if given is not None and (not isinstance(given, (Sequence, np.ndarray)) or len(given) != len(items)):
        raise SampleError(index, "completion_masks", None, f"{len(items)} masks (one per completion)", given)
    for position, item in enumerate(items):
        mask = None if given is None else given[position]
        tokens, checked = _completion(index, f"completions[{position}]", item, f"completion_masks[{position}]", mask)
        completions.append(tokens)
        masks.append(checked)
    return UnitRow(kind, prompt, completions, masks)


def read_unit_rows(rows: Sequence[Any], completion_only_loss: bool = True, *, share_prompt: bool = False) -> Samples:
    """Rows among which some are pairs or groups, read and laid out (``share_prompt``: the prompt stored once) as
    one :class:`~packing.core.samples.Samples` with its :class:`~packing.core.pairs_groups.Units`; other rows are read by
    the row reader (``completion_only_loss`` for their prompt/completion pairs) and kept as units of their own.
    Errors number rows from 0. O(tokens), a Python step per row.

    >>> s = read_unit_rows([{"prompt": [1], "chosen": [2], "rejected": [3]}, [7, 8]])
    >>> s.tokens.tolist(), s.lengths.tolist(), s.units.kind.tolist()
    ([1, 2, 1, 3, 7, 8], [4, 2], [1, 0])
    """
    read: list[UnitRow] = []
    first_kind: RowKind | None = None
    for index, row in enumerate(rows):
        kind: RowKind
        if unit_kind(row) is not None:
            unit = read_unit_row(row, index)
            kind = "tokens"
        else:
            kind, tokens, mask, labels = read_row(row, index, completion_only_loss)
            if labels is not None:
                raise SampleError(index, LABELS, None, "labels equal to the tokens among pairs or groups", "<others>")
            unit = UnitRow("plain", tokens[:0], [tokens], [mask])
        if first_kind is None:
            first_kind = kind
        elif kind != first_kind:
            raise mixed_kinds_error(index, first_kind, kind)
        if kind == "length":
            raise mixed_kinds_error(index, "tokens", kind)
        read.append(unit)
    return unit_samples(read, share_prompt)


def unit_samples(read: Sequence[UnitRow], share_prompt: bool) -> Samples:
    """Units read (:func:`read_unit_row`) laid out: ``P c1 P c2 ...`` per unit, or ``P c1 c2 ...`` with a shared
    prompt; the prompt's loss mask 0, each completion's its own (1 where none was given). O(tokens).

    >>> unit_samples([UnitRow("group", np.array([1]), [np.array([2]), np.array([3])], [None, None])], False).tokens.tolist()
    [1, 2, 1, 3]
    """
    pieces: list[Any] = []
    masks: list[Any] = []
    for unit in read:
        zeros = np.zeros(len(unit.prompt), dtype=np.int8)
        for number, (tokens, mask) in enumerate(zip(unit.completions, unit.masks, strict=True)):
            if number == 0 or not share_prompt:
                pieces.append(unit.prompt)
                masks.append(zeros)
            pieces.append(tokens)
            masks.append(np.ones(len(tokens), dtype=np.int8) if mask is None else mask)
    units = Units(
        np.array([KINDS.index(unit.kind) for unit in read], dtype=np.int8),
        np.array([len(unit.prompt) for unit in read], dtype=np.int64),
        sample_offsets((len(unit.completions) for unit in read), len(read)),
        np.array([len(tokens) for unit in read for tokens in unit.completions], dtype=np.int64),
        bool(share_prompt),
    )
    dtype = joined_dtype(pieces) if pieces else np.int64
    tokens = np.concatenate(pieces, dtype=dtype, casting="unsafe") if pieces else np.zeros(0, dtype=np.int64)
    mask = np.concatenate(masks).astype(np.int8, copy=False) if masks else np.zeros(0, dtype=np.int8)
    offsets = sample_offsets(units.lengths(), len(read))
    return Samples(tokens, mask, offsets, None, units)


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
