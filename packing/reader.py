"""The one reader of samples: what a row is, for Python rows and Arrow tables alike.

A row (sample) is one of these forms:

- a token list: a list or 1-D integer array of token ids, every token trained on;
- ``{"input_ids": [...]}``, optionally with a per-token loss mask under ``loss_mask``
  (TRL's ``completion_mask`` and ``assistant_masks`` are read as loss masks too; when a
  row has several, a token is trained on only where all of them are 1), and optionally
  with ``labels`` as transformers tokenizes them (one per token, -100 where not trained):
  a token is trained on only where its label is not -100 (ANDed with any mask). Labels
  that differ from ``input_ids`` where trained are kept in ``Samples.labels``, for
  ``packing.torch.collate``; packed blocks train each token on itself and refuse them;
- ``{"prompt": [...], "completion": [...]}``: loss on the completion only (unless
  ``completion_only_loss=False``);
- ``{"length": n}``: a length alone, enough to plan but not to pack.

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
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from numbers import Integral
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Literal, TypedDict

import numpy as np
import numpy.typing as npt

from packing.arrays import copy_runs
from packing.errors import DatasetError, NeedsTokenizer, SampleError, SettingError
from packing.limits import scan_json
from packing.loss import LossRules
from packing.schema import MAX_ID
from packing.text import is_text_row
from packing.validation import INT64_MAX, has_bools

if TYPE_CHECKING:  # pragma: no cover - typing only
    import pyarrow as pa

Int64Array = npt.NDArray[np.int64]
Int8Array = npt.NDArray[np.int8]
TokenArray = npt.NDArray[np.signedinteger[Any]]
"""Flat token ids: int32 when read from 32-bit ids, else int64."""
RowKind = Literal["tokens", "length"]

TOKEN = "a non-negative integer token id"
FLAG = "0 or 1"
FORMS = "a list of token ids, or a dict with 'input_ids' (and a 'loss_mask'), 'prompt' and 'completion', or 'length'"
MASK_FIELDS = ("loss_mask", "completion_mask", "assistant_masks")
"""Columns read as a per-token loss mask (``loss_mask``, and TRL's names), ANDed when a row has several."""
LABELS = "labels"
"""The column of per-token labels (transformers' form): a token is trained where its label is not ``IGNORE_INDEX``."""
IGNORE_INDEX = -100
"""Label value that Hugging Face losses skip."""
LABEL = "a non-negative integer token id or -100"
TOKEN_FIELDS = ("input_ids", "prompt", "completion")
TEXT_FIELDS = ("text", "messages")
"""Columns of text rows (with ``prompt``/``completion`` as strings or messages): they need a tokenizer."""
FIELDS = (*TOKEN_FIELDS, *MASK_FIELDS, LABELS, "length", *TEXT_FIELDS)
"""Every column the reader looks at; others are ignored."""
CELLS: dict[str, Literal["ids", "flags", "integer", "text", "json"]] = {
    **dict.fromkeys((*TOKEN_FIELDS, LABELS), "ids"),
    **dict.fromkeys(MASK_FIELDS, "flags"),
    "length": "integer",
    "text": "text",
    "messages": "json",
}
"""What a text cell (CSV) of each column holds: a list of ids or of 0/1 flags (``1 2 3`` or ``[1, 2, 3]``), an
integer, text, or JSON (messages). ``prompt`` and ``completion`` hold text when a tokenizer is given."""
_INTEGER = re.compile(r"[+-]?\d{1,20}")
_SEPARATORS = re.compile(r"[\s,]+")


class PromptCompletion(TypedDict):
    """A prompt/completion sample: loss on the completion only by default."""

    prompt: Sequence[int]
    completion: Sequence[int]


class _MaskedBase(TypedDict):
    input_ids: Sequence[int]


class MaskedSample(_MaskedBase, total=False):
    """Token ids with a per-token 0/1 loss mask (absent: train on every token)."""

    loss_mask: Sequence[int]
    labels: Sequence[int]


TokenList = Sequence[int] | npt.NDArray[np.integer[Any]]
Sample = TokenList | PromptCompletion | MaskedSample
"""The sample forms ``pack`` accepts."""


@dataclass(frozen=True)
class Samples:
    """Samples read and checked, flat: sample ``i`` is ``tokens[offsets[i]:offsets[i + 1]]``.

    ``tokens`` and ``loss_mask`` are None for lengths-only data (rows of ``{"length": n}``),
    which can be planned but not packed. ``tokens`` is int32 when every source of ids was (at
    most) 32-bit signed, int64 otherwise; ``loss_mask`` is int8, a read-only broadcast of 1
    (no memory) when no token is masked. ``labels`` is None unless some row gave ``labels`` that differ
    from its ``input_ids`` where trained (no memory in the common case); then it is like ``tokens``, each
    token's label: the token itself but where a row gave another (only trained tokens' labels are read).
    ``pack`` and ``plan`` take a ``Samples`` as it is, without checking it again.

    >>> read_rows([{"length": 5}, {"length": 0}]).lengths.tolist()
    [5, 0]
    >>> read_rows([[1, 2], {"input_ids": [3, 4], "labels": [-100, 9]}]).labels.tolist()
    [1, 2, 3, 9]
    """

    tokens: TokenArray | None
    loss_mask: Int8Array | None
    offsets: Int64Array
    labels: TokenArray | None = None

    @property
    def lengths(self) -> Int64Array:
        """Tokens per sample. O(n)."""
        return np.diff(self.offsets)

    @property
    def has_tokens(self) -> bool:
        """False for lengths-only data."""
        return self.tokens is not None

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @staticmethod
    def join(parts: Sequence[Samples]) -> Samples:
        """The samples of ``parts``, one part after the other; all with tokens, or all lengths only.
        O(total tokens).

        >>> joined = Samples.join([read_rows([[1, 2], [3]]), read_rows([{"prompt": [4], "completion": [5]}])])
        >>> joined.tokens.tolist(), joined.loss_mask.tolist(), joined.offsets.tolist()
        ([1, 2, 3, 4, 5], [1, 1, 1, 0, 1], [0, 2, 3, 5])
        """
        if not parts:
            raise SettingError("parts", "at least one Samples", "<none>")
        if len(parts) == 1:
            return parts[0]
        if len({part.has_tokens for part in parts}) > 1:
            raise SettingError("parts", "samples all with tokens or all lengths only", "<both>")
        lengths = np.concatenate([part.lengths for part in parts])
        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        if not parts[0].has_tokens:
            return Samples(None, None, _no_overflow(offsets))
        tokens = np.concatenate([part.tokens for part in parts if part.tokens is not None])
        mask = np.concatenate([part.loss_mask for part in parts if part.loss_mask is not None])
        if all(part.labels is None for part in parts):
            return Samples(tokens, mask, offsets)
        labels = np.concatenate([part.tokens if part.labels is None else part.labels for part in parts])
        return Samples(tokens, mask, offsets, labels)

    def refuse_wide_ids(self, int64: bool = False) -> None:
        """Raise a ``SampleError`` at the first token id above 2**31 - 1 unless ``int64`` (the compact
        schema's ids are int32: such an id would wrap). O(1) for int32 tokens, O(tokens) otherwise.

        >>> read_rows([[1, 2**31]]).refuse_wide_ids()
        Traceback (most recent call last):
        ...
        packing.errors.SampleError: sample 0, position 1: expected a token id at most 2147483647 (the int32 schema; int64=True for larger ids), got 2147483648
        """
        tokens = self.tokens
        if int64 or tokens is None or tokens.dtype.itemsize <= 4 or not tokens.size or tokens.max() <= MAX_ID:
            return
        raise self.wide_id_error()

    def wide_id_error(self) -> SampleError:
        """The error for the first token id above 2**31 - 1 (input order). O(tokens)."""
        assert self.tokens is not None
        at = int(np.flatnonzero(self.tokens > MAX_ID)[0])
        sample = int(np.searchsorted(self.offsets, at, side="right")) - 1
        expected = f"a token id at most {MAX_ID} (the int32 schema; int64=True for larger ids)"
        return SampleError(sample, None, at - int(self.offsets[sample]), expected, int(self.tokens[at]))

    def refuse_other_labels(self) -> None:
        """Raise a ``SampleError`` at the first trained token whose given label is not the token itself:
        packed blocks train each token on itself (their labels are ``input_ids``). O(1) when ``labels`` is
        None, O(tokens) otherwise.

        >>> read_rows([{"input_ids": [3, 4], "labels": [3, 9]}]).refuse_other_labels()
        Traceback (most recent call last):
        ...
        packing.errors.SampleError: sample 0, 'labels', position 1: expected 4 (the token: packed blocks train each token on itself; other labels go through packing.torch.collate), got 9
        """
        if self.labels is None or self.tokens is None or self.loss_mask is None:
            return
        other = np.flatnonzero((self.labels != self.tokens) & (self.loss_mask != 0))
        if other.size:
            at = int(other[0])
            sample = int(np.searchsorted(self.offsets, at, side="right")) - 1
            expected = (
                f"{int(self.tokens[at])} (the token: packed blocks train each token on itself; other labels go "
                "through packing.torch.collate)"
            )
            raise SampleError(sample, LABELS, at - int(self.offsets[sample]), expected, int(self.labels[at]))


# ---------------------------------------------------------------- one row, from text cells (CSV)


def _number(part: str) -> int | str:
    """An integer when ``part`` is one of at most 20 digits; the text itself otherwise (the reader names it)."""
    return int(part) if _INTEGER.fullmatch(part) else part


def _json_cell(cell: str, index: int, field: str) -> Any:
    """The JSON value a cell holds, scanned for nesting before it is parsed; a SampleError otherwise."""
    try:
        scan_json(cell.encode("utf-8", "surrogatepass"), field)
        return json.loads(cell)
    except DatasetError as error:
        raise SampleError(index, field, None, "JSON text (a list of messages)", f"<{error.reason}>") from None
    except (ValueError, RecursionError):
        raise SampleError(index, field, None, "JSON text (a list of messages)", cell) from None


def cells_row(cells: Mapping[str, str], index: int = 0, *, text: bool = False) -> dict[str, Any]:
    """A row from text cells (a CSV line), each read as :data:`CELLS` says; other columns are left out, an
    empty cell is a null. With ``text``, ``prompt`` and ``completion`` cells are text. O(characters).

    >>> cells_row({"input_ids": " [1, 2,3] ", "prompt": "", "length": "7", "note": "x"})
    {'input_ids': [1, 2, 3], 'prompt': None, 'length': 7}
    >>> cells_row({"prompt": "Hi", "completion": "there"}, text=True)
    {'prompt': 'Hi', 'completion': 'there'}
    """
    row: dict[str, Any] = {}
    for column, cell in cells.items():
        kind = CELLS.get(column)
        stripped = cell.strip()
        if kind is None:
            continue
        if not stripped:
            row[column] = None
        elif kind == "text" or (text and column in ("prompt", "completion")):
            row[column] = cell
        elif kind == "json":
            row[column] = _json_cell(cell, index, column)
        elif kind == "integer":
            row[column] = _number(stripped)
        else:
            inner = stripped[1:-1] if stripped.startswith("[") and stripped.endswith("]") else stripped
            row[column] = [_number(part) for part in _SEPARATORS.split(inner) if part]
    return row


# ---------------------------------------------------------------- one row, in Python


def _values(value: Any, index: int | None, field: str | None, expected: str) -> npt.NDArray[Any]:
    """``value`` as a 1-D numpy array if it is a flat list or 1-D array; else a SampleError. O(length)."""
    if type(value) is np.ndarray and value.ndim == 1:
        return value
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
            if isinstance(item, (bool, np.bool_)) or (isinstance(item, Integral) and item in (0, 1)):
                continue
            return SampleError(index, field, position, FLAG, item)
        if isinstance(item, (bool, np.bool_)) or not isinstance(item, Integral) or int(item) < 0:
            return SampleError(index, field, position, TOKEN, item)
        if int(item) > INT64_MAX:
            return SampleError(index, field, position, "a token id that fits in 64 bits", item)
    raise AssertionError("no bad item found")  # pragma: no cover - callers checked that one exists


def _has_bools(values: Iterable[Any]) -> bool:
    """True if a list holds Python or numpy booleans (numpy reads them as 0 and 1). O(n), in C."""
    return not {bool, np.bool_}.isdisjoint(map(type, values))


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
    if has_ids and has_pair:
        raise SampleError(index, None, None, "one form, 'input_ids' or 'prompt'/'completion'", "<both>")
    if has_pair:
        for field in ("prompt", "completion"):
            if not _present(row, field):
                raise SampleError(index, field, None, "a list of token ids (a prompt needs a completion)", None)
        return "prompt"
    if has_ids:
        return "input_ids"
    if _present(row, "length"):
        return "length"
    keys = sorted(str(key) for key, value in row.items() if value is not None)
    raise SampleError(index, None, None, FORMS, f"<keys {', '.join(keys) or 'none'}>")


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
            if (
                isinstance(item, (bool, np.bool_))
                or not isinstance(item, Integral)
                or not (int(item) == IGNORE_INDEX or 0 <= int(item) <= INT64_MAX)
            ):
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
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, Integral) or not 0 <= int(value) <= INT64_MAX:
        raise SampleError(index, "length", None, "a non-negative integer", value)
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
    packing.errors.SampleError: sample 3: expected a list of token ids, or a dict with 'input_ids' (and a 'loss_mask'), 'prompt' and 'completion', or 'length', got 'hello' (str)
    """
    if not isinstance(row, Mapping):
        if isinstance(row, (str, bytes)) or not isinstance(row, (Sequence, np.ndarray)):
            raise SampleError(index, None, None, FORMS, row)
        return "tokens", token_array(row, index, None), None, None
    if is_text_row(row):
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


def _check_flag(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise SettingError(name, "True or False", value)
    return value


def _offsets(lengths: Iterable[int] | Int64Array, count: int) -> Int64Array:
    offsets = np.zeros(count + 1, dtype=np.int64)
    values = lengths if isinstance(lengths, np.ndarray) else np.fromiter(lengths, dtype=np.int64, count=count)
    np.cumsum(values, out=offsets[1:])
    return _no_overflow(offsets)


def _no_overflow(offsets: Int64Array) -> Int64Array:
    """``offsets`` (running sums of non-negative lengths, each below 2**63), unless their total passed 2**63 - 1:
    the first sum that did wraps to a negative number, and the row that made it is refused. O(n)."""
    if len(offsets) and int(offsets.min()) < 0:
        row = int(np.flatnonzero(offsets < 0)[0]) - 1
        raise SampleError(row, "length", None, "lengths adding up to less than 2**63", "<a larger sum>")
    return offsets


def _first_negative(tokens: TokenArray, pieces: Sequence[npt.NDArray[Any]]) -> None:
    """Raise the row reader's error for the first negative token, if any: one vectorized pass. O(tokens)."""
    if tokens.size and int(tokens.min()) < 0:
        position = int(np.flatnonzero(tokens < 0)[0])
        ends = np.cumsum([len(piece) for piece in pieces])
        row = int(np.searchsorted(ends, position, side="right"))
        token_array(pieces[row], row, None)  # raises the SampleError naming the row and the position


def token_dtype(dtypes: Iterable[np.dtype[Any]]) -> type[np.int32] | type[np.int64]:
    """int32 when every one of ``dtypes`` fits in it (signed up to 32 bits, unsigned up to 16), else int64.

    >>> token_dtype([np.dtype("int32"), np.dtype("uint8")]).__name__, token_dtype([np.dtype("uint32")]).__name__
    ('int32', 'int64')
    """
    narrow = all((d.kind == "i" and d.itemsize <= 4) or (d.kind == "u" and d.itemsize <= 2) for d in dtypes)
    return np.int32 if narrow else np.int64


def all_ones(count: int) -> Int8Array:
    """A loss mask of ``count`` ones that takes no memory (a read-only broadcast view). O(1)."""
    return np.broadcast_to(np.ones(1, dtype=np.int8), (count,))


def joined_dtype(pieces: Sequence[npt.NDArray[Any]]) -> type[np.int32] | type[np.int64]:
    """The dtype the reader joins ``pieces`` into (``token_dtype`` of those with values). O(pieces), in C."""
    dtypes = set(map(attrgetter("dtype"), pieces))  # in C: a handful of distinct dtypes among many pieces
    dtype = token_dtype(dtypes)
    if dtype == np.int64 and len(dtypes) > 1:  # empty lists read as int64: only pieces with values count
        dtype = token_dtype({piece.dtype for piece in pieces if piece.size})
    return dtype


def _joined(pieces: list[npt.NDArray[np.integer[Any]]]) -> TokenArray:
    if not pieces:
        return np.zeros(0, dtype=np.int64)
    joined: TokenArray = np.concatenate(pieces, dtype=joined_dtype(pieces), casting="unsafe")
    return joined


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


def read_rows(
    rows: Iterable[Any],
    completion_only_loss: bool = True,
    *,
    tokenizer: Any = None,
    loss_rules: LossRules | None = None,
    num_proc: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Samples:
    """Check and flatten Python rows of any form. O(total tokens); never modifies the input.

    All rows have tokens, or all have lengths only. A ``Samples`` is returned as it is.
    With a ``tokenizer`` (anything ``packing.load_tokenizer`` takes), text rows (``text``,
    ``messages``, ``prompt``/``completion`` as strings or messages) are tokenized with their
    chat template and masks (``packing.text``) by ``num_proc`` processes (default one);
    ``progress(done, total)`` follows them. ``loss_rules`` (:class:`packing.loss.LossRules`,
    ``Recipe.loss_rules``) say what is trained, else ``completion_only_loss`` does.

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
    completion_only = LossRules.of(loss_rules, _check_flag(completion_only_loss, "completion_only_loss")).masks_anything
    if tokenizer is not None:
        from packing.text import load_tokenizer, read_text_rows

        text_rows = read_text_rows(
            rows,
            load_tokenizer(tokenizer),
            completion_only_loss=completion_only,
            loss_rules=loss_rules,
            num_proc=num_proc,
            progress=progress,
        )
        return text_rows
    if isinstance(rows, (str, bytes, Mapping)) or not isinstance(rows, Iterable):
        raise SettingError("samples", f"a list of samples ({FORMS})", rows)
    lengths = token_array_lengths(rows)
    if lengths is not None and isinstance(rows, list):  # token arrays: checked all at once, in C
        tokens = np.empty(int(lengths.sum()), dtype=joined_dtype(rows))
        join_token_arrays(rows, tokens)
        return Samples(tokens, all_ones(len(tokens)), _offsets(lengths, len(rows)))
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
            _first_negative(_joined(earlier), earlier)
        raise
    if first_kind == "length":
        return Samples(None, None, _offsets((int(p[0]) for p in pieces), len(pieces)))
    tokens = _joined(pieces)
    if unchecked:
        _first_negative(tokens, pieces)
    offsets = _offsets(map(len, pieces), len(pieces))
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


# ---------------------------------------------------------------- Arrow tables, column by column


@dataclass(frozen=True)
class _ListColumn:
    """A list column's flat values, each row's length and which rows are null."""

    values: npt.NDArray[Any]
    lengths: Int64Array
    null: npt.NDArray[np.bool_]


def _list_column(table: pa.Table, name: str, flags: bool) -> _ListColumn | None:
    """The column as flat numpy arrays, or None when its type needs the row-by-row reader to judge it."""
    import pyarrow as pa
    import pyarrow.compute as pc

    column = table.column(name)
    rows = len(column)
    if pa.types.is_null(column.type):
        return _ListColumn(np.zeros(0, dtype=np.int64), np.zeros(rows, dtype=np.int64), np.ones(rows, dtype=bool))
    kind = column.type
    if not (pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind)):
        return None
    value_type = kind.value_type
    if not (
        pa.types.is_integer(value_type) or pa.types.is_null(value_type) or (flags and pa.types.is_boolean(value_type))
    ):
        return None
    values = pc.list_flatten(column)
    if values.null_count:
        return None  # a null inside a list: the row reader names it
    null = pc.is_null(column).to_numpy(zero_copy_only=False).astype(bool)
    lengths = pc.list_value_length(column).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    flat = values.to_numpy(zero_copy_only=False) if len(values) else np.zeros(0, dtype=np.int64)
    if flat.dtype.kind == "u" and flat.size and int(flat.max()) > INT64_MAX:
        return None
    return _ListColumn(flat, lengths, null)


def _row_error(table: pa.Table, row: int, completion_only_loss: bool) -> SampleError:
    """The error ``read_row`` gives for row ``row`` of ``table``: one row read in Python, so both readers agree."""
    names = [name for name in FIELDS if name in table.column_names]
    record = table.select(names).slice(row, 1).to_pylist()[0]
    try:
        read_row(record, row, completion_only_loss)
    except SampleError as error:
        return error
    raise AssertionError(f"row {row} was refused by the table reader but not by the row reader")  # pragma: no cover


def _first(rows: npt.NDArray[np.bool_]) -> int | None:
    found = np.flatnonzero(rows)
    return int(found[0]) if found.size else None


def _rows_flagged(column: _ListColumn, flagged: npt.NDArray[np.bool_]) -> npt.NDArray[np.bool_]:
    """Which rows hold a flagged value. O(values) when any value is flagged, O(1) otherwise."""
    rows = np.zeros(len(column.lengths), dtype=bool)
    if flagged.any():
        lengths = np.where(column.null, 0, column.lengths)
        rows[np.repeat(np.arange(len(lengths)), lengths)[flagged]] = True
    return rows


def read_table(
    table: pa.Table,
    *,
    completion_only_loss: bool = True,
    tokenizer: Any = None,
    loss_rules: LossRules | None = None,
    num_proc: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Samples:
    """Check and flatten the rows of a ``pyarrow.Table``, column by column. O(total tokens + rows).

    Same rules and same errors as :func:`read_rows` on ``table.to_pylist()``, without a
    Python loop per row. Columns other than the reader's (``FIELDS``) are ignored.

    >>> import pyarrow as pa
    >>> t = pa.table({"input_ids": [[1, 2], None], "prompt": [None, [3]], "completion": [None, [4, 5]]})
    >>> s = read_table(t)
    >>> s.tokens.tolist(), s.loss_mask.tolist(), s.lengths.tolist()
    ([1, 2, 3, 4, 5], [1, 1, 0, 1, 1], [2, 3])
    """
    completion_only = LossRules.of(loss_rules, _check_flag(completion_only_loss, "completion_only_loss")).masks_anything
    rows = table.num_rows
    names = set(table.column_names)
    if tokenizer is not None or names & set(TEXT_FIELDS):  # text rows: tokenized (or refused) row by row
        records = table.select([n for n in FIELDS if n in names]).to_pylist()
        return read_rows(
            records, completion_only, tokenizer=tokenizer, loss_rules=loss_rules, num_proc=num_proc, progress=progress
        )
    columns: dict[str, _ListColumn] = {}
    for name in FIELDS:
        if name in names and name != "length":
            column = _list_column(table, name, flags=name in MASK_FIELDS)
            if column is None:  # a type only the row reader can judge (floats, strings, nested lists, nulls inside)
                return read_rows(
                    table.select([n for n in FIELDS if n in names]).to_pylist(), completion_only_loss=completion_only
                )
            columns[name] = column

    def given(name: str) -> npt.NDArray[np.bool_]:
        return ~columns[name].null if name in columns else np.zeros(rows, dtype=bool)

    ids, prompt, completion = given("input_ids"), given("prompt"), given("completion")
    pair = prompt | completion
    any_mask = np.zeros(rows, dtype=bool)
    for name in (*MASK_FIELDS, LABELS):
        any_mask |= given(name)
    length_given = np.zeros(rows, dtype=bool)
    if "length" in names:
        length_given = ~table.column("length").is_null().to_numpy(zero_copy_only=False).astype(bool)
    tokens_rows = ids | pair
    bad = (ids & pair) | (pair & ~(prompt & completion)) | ~(tokens_rows | length_given) | (~ids & any_mask)
    id_len = np.where(ids, columns["input_ids"].lengths, 0) if "input_ids" in columns else np.zeros(rows, np.int64)
    for name in TOKEN_FIELDS:  # a reduction first: no temporary array unless a value is bad
        values = columns[name].values if name in columns else None
        if values is not None and values.dtype.kind == "i" and values.size and values.min() < 0:
            bad |= _rows_flagged(columns[name], values < 0)
    for name in MASK_FIELDS:
        if name in columns:
            column = columns[name]
            bad |= given(name) & (column.lengths != id_len)
            flags = column.values
            if flags.dtype.kind != "b" and flags.size and (flags.min() < 0 or flags.max() > 1):
                bad |= _rows_flagged(column, (flags != 0) & (flags != 1))
    if LABELS in columns:
        column = columns[LABELS]
        bad |= given(LABELS) & (column.lengths != id_len)
        if column.values.dtype.kind == "i" and column.values.size and column.values.min() < 0:
            bad |= _rows_flagged(column, (column.values < 0) & (column.values != IGNORE_INDEX))
    if rows and not tokens_rows.any() and not bad.any():
        return _lengths_table(table, completion_only)
    if not rows:
        return _no_samples()
    first_kind: RowKind = "tokens" if tokens_rows[0] else "length"
    mixed = _first((tokens_rows != tokens_rows[0]) & ~bad)
    first_bad = _first(bad)
    if mixed is not None and (first_bad is None or mixed < first_bad) and not bad[0]:
        raise mixed_kinds_error(mixed, first_kind, "length" if first_kind == "tokens" else "tokens")
    if first_bad is not None:
        raise _row_error(table, first_bad, completion_only)

    zero = np.zeros(rows, dtype=np.int64)
    p_len = np.where(pair, columns["prompt"].lengths, 0) if "prompt" in columns else zero
    c_len = np.where(pair, columns["completion"].lengths, 0) if "completion" in columns else zero
    offsets = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum(id_len + p_len + c_len, out=offsets[1:])
    starts = offsets[:-1]
    given_ids = [columns[name].values for name in TOKEN_FIELDS if name in columns]
    dtype = token_dtype(values.dtype for values in given_ids if values.size)  # a column of no values: no type
    tokens: TokenArray
    if ids.all():  # one form: the column's values are the tokens, in order
        tokens = columns["input_ids"].values.astype(dtype, copy=False)
    else:
        tokens = np.empty(int(offsets[-1]), dtype=dtype)
        if "input_ids" in columns:
            copy_runs(columns["input_ids"].values, tokens, starts[ids], id_len[ids])
        if pair.any():
            copy_runs(columns["prompt"].values, tokens, starts[pair], p_len[pair])
            copy_runs(columns["completion"].values, tokens, starts[pair] + p_len[pair], c_len[pair])
    masked = (pair.any() and completion_only) or any(
        name in columns and given(name).any() for name in (*MASK_FIELDS, LABELS)
    )
    if not masked:
        return Samples(tokens, all_ones(len(tokens)), offsets)
    loss_mask: Int8Array | None = None
    if pair.any() and completion_only:
        loss_mask = np.ones(len(tokens), dtype=np.int8)
        copy_runs(np.zeros(int(p_len.sum()), dtype=np.int8), loss_mask, starts[pair], p_len[pair])
    for name in MASK_FIELDS:
        rows_with = given(name)
        if name in columns and rows_with.any():
            values = columns[name].values.astype(np.int8, copy=False)
            if rows_with.all() and ids.all():  # the column is the mask: taken as it is when it is the first
                mask = values
            else:
                mask = np.ones(len(tokens), dtype=np.int8)
                copy_runs(values, mask, starts[rows_with], id_len[rows_with])
            if loss_mask is None:
                loss_mask = mask if mask.flags.writeable else mask.copy()  # a flattened copy is ours to keep
            else:
                loss_mask &= mask
    if LABELS not in columns or not given(LABELS).any():
        assert loss_mask is not None  # some row is masked (``masked``)
        return Samples(tokens, loss_mask, offsets)
    labels = _placed_labels(columns[LABELS].values, tokens, starts, id_len, given(LABELS), bool(ids.all()))
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


def flat_batches(schema: pa.Schema, tokenizer: bool = False) -> bool:
    """Whether tables of ``schema`` can be read batch by batch (:func:`read_batches`) with the same result as
    whole: without a ``tokenizer``, its reader columns are token, mask and label columns of integer lists
    (boolean masks too), with a token column among them; with one, any columns but ``length`` (a length row
    among token rows is refused by the whole table's first row). O(columns).

    >>> import pyarrow as pa
    >>> flat_batches(pa.schema([("input_ids", pa.list_(pa.int32()))])), flat_batches(pa.schema([("length", pa.int64())]))
    (True, False)
    >>> flat_batches(pa.schema([("text", pa.string())])), flat_batches(pa.schema([("text", pa.string())]), tokenizer=True)
    (False, True)
    """
    import pyarrow as pa

    def plain(name: str) -> bool:
        kind = schema.field(name).type
        listed = pa.types.is_list(kind) or pa.types.is_large_list(kind)
        values = kind.value_type if listed else None
        return values is not None and (
            pa.types.is_integer(values) or (name in MASK_FIELDS and pa.types.is_boolean(values))
        )

    used = [name for name in schema.names if name in FIELDS]
    if tokenizer:
        return "length" not in used
    flat = {*TOKEN_FIELDS, *MASK_FIELDS, LABELS}
    return bool(set(used) & set(TOKEN_FIELDS)) and set(used) <= flat and all(map(plain, used))


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


def read_batches(
    tables: Iterable[pa.Table],
    size: int,
    *,
    rows: int = 0,
    completion_only_loss: bool = True,
    loss_rules: LossRules | None = None,
    tokenizer: Any = None,
    num_proc: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    **_: Any,
) -> Samples:
    """The samples of ``tables`` read one after the other (each by :func:`read_table`, text rows tokenized
    with ``tokenizer``), written straight into arrays of ``size`` tokens (an upper bound, such as a Parquet
    file's value counts; grown when short; with a ``tokenizer``, none): what :func:`read_table` gives for the tables joined (tokens,
    offsets, loss mask and labels alike), without holding them all. A bad row is named by its index over all
    tables; ``progress(done, total)`` counts rows over all tables (``rows``: their number, when known).
    O(total tokens + rows); memory: the samples and one table.

    >>> import pyarrow as pa
    >>> parts = [pa.table({"input_ids": [[1, 2]], "loss_mask": [[0, 1]]}), pa.table({"input_ids": [[3], [4, -5]]})]
    >>> s = read_batches(parts, 5)
    Traceback (most recent call last):
    ...
    packing.errors.SampleError: sample 2, 'input_ids', position 1: expected a non-negative integer token id, got -5
    >>> s = read_batches([parts[0], pa.table({"input_ids": [[3, 4]], "labels": [[-100, 9]]})], 3)
    >>> s.tokens.tolist(), s.loss_mask.tolist(), s.offsets.tolist(), s.labels.tolist()
    ([1, 2, 3, 4], [0, 1, 0, 1], [0, 2, 4], [1, 2, 3, 9])
    """
    reading = {"completion_only_loss": completion_only_loss, "loss_rules": loss_rules, "num_proc": num_proc}
    if tokenizer is not None:
        size = 0  # no bound known: the arrays grow as text rows are tokenized
    parts = _parts(tables, rows, progress, tokenizer=tokenizer, **reading)
    tokens, mask, labels = _Flat(size), _Flat(size), _Flat(size)  # mask, labels: made at the first that needs
    offsets = [np.zeros(1, dtype=np.int64)]
    total = 0
    for part in parts:
        assert part.tokens is not None and part.loss_mask is not None  # token rows only (``flat_batches``)
        tokens.put(part.tokens, total)
        if mask.array is not None or (len(part.tokens) and part.loss_mask.strides[0] != 0):
            mask.put(part.loss_mask, total)
        if labels.array is not None or part.labels is not None:
            assert tokens.array is not None
            labels.put(part.tokens if part.labels is None else part.labels, total, before=tokens.array)
        offsets.append(part.offsets[1:] + total)
        total += len(part.tokens)
    if tokens.array is None:
        return _no_samples()
    loss_mask = all_ones(total) if mask.array is None else mask.done(total)
    other = None if labels.array is None else labels.done(total)
    return Samples(tokens.done(total), loss_mask, np.concatenate(offsets), other)


def _parts(
    tables: Iterable[pa.Table], rows: int, progress: Callable[[int, int], None] | None, **reading: Any
) -> Iterator[Samples]:
    """Each table's samples (:func:`read_table`), a bad row named and progress counted over all tables."""
    done = 0
    for table in tables:
        shown = None if progress is None else _progress_after(progress, done, rows)
        try:
            part = read_table(table, progress=shown, **reading)
        except SampleError as error:
            raise _shifted(error, done) from None
        done += len(part)
        yield part


def _no_samples() -> Samples:
    return Samples(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int8), np.zeros(1, dtype=np.int64))


def _progress_after(progress: Callable[[int, int], None], done: int, rows: int) -> Callable[[int, int], None]:
    """``progress`` for a table after ``done`` rows of ``rows`` (at least what is known so far)."""
    return lambda count, total: progress(done + count, max(rows, done + total))


def _shifted(error: SampleError, rows: int) -> SampleError:
    """``error`` about a row of a table that comes after ``rows`` rows: about that row over all tables."""
    if error.sample is None or not rows:
        return error
    shifted = copy.copy(error)
    shifted.sample = error.sample + rows
    shifted.args = (shifted.where_and_what(),)
    return shifted


def _lengths_table(table: pa.Table, completion_only_loss: bool) -> Samples:
    """A table of lengths only. O(rows)."""
    import pyarrow as pa

    column = table.column("length")
    if not pa.types.is_integer(column.type) or column.null_count:
        return read_rows(table.select(["length"]).to_pylist(), completion_only_loss=completion_only_loss)
    values = column.to_numpy().astype(np.int64, copy=False) if len(column) else np.zeros(0, dtype=np.int64)
    bad = np.flatnonzero(values < 0) if values.dtype.kind == "i" else np.zeros(0, dtype=np.int64)
    if column.type == pa.uint64() and values.size and int(column.to_numpy().max()) > INT64_MAX:
        return read_rows(table.select(["length"]).to_pylist(), completion_only_loss=completion_only_loss)
    if bad.size:
        raise _row_error(table, int(bad[0]), completion_only_loss)
    offsets = np.zeros(len(values) + 1, dtype=np.int64)
    np.cumsum(values, out=offsets[1:])
    return Samples(None, None, _no_overflow(offsets))


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
