"""Reading preference pairs and completion groups of token ids: every row checked, then laid out.

The unit forms (``packing.core.units``) are read here, for every door, as the row reader reads the other forms:

- a pair ``{"prompt": [...], "chosen": [...], "rejected": [...]}`` and a group ``{"prompt": [...], "completions":
  [[...], ...]}``, each part a list (or 1-D array, or tensor) of token ids; optionally ``chosen_mask`` and
  ``rejected_mask`` (a pair) or ``completion_masks`` (a group), a 0/1 loss mask per completion token;
- the prompt is never trained; a completion's tokens are, but where its mask says 0;
- plain rows may come among units (each a unit of its own, one document), so a dataset may mix them.

Text units (strings or messages) are tokenized first (:mod:`packing.text.units`) and read here as token units.

>>> samples = read_unit_rows([{"prompt": [1, 2], "chosen": [3], "rejected": [4, 5]}], share_prompt=True)
>>> samples.tokens.tolist(), samples.loss_mask.tolist(), samples.units.completion_lengths.tolist()
([1, 2, 3, 4, 5], [0, 0, 1, 1, 1], [1, 2])
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from packing.core.forms import LABELS, MASK_FIELDS, TEXT_FIELDS, UNIT_MASK_FIELDS, RowKind, is_text_unit, unit_kind
from packing.core.samples import Int8Array, Samples, TokenArray, _offsets, joined_dtype
from packing.core.units import KINDS, UnitKind, Units
from packing.errors import NeedsTokenizer, SampleError, UnitError
from packing.reading.rows import as_numpy, mask_array, mixed_kinds_error, read_row, token_array


class UnitRow(NamedTuple):
    """One row read: its ``kind`` (``pair``, ``group``, ``plain``), ``prompt`` tokens, ``completions`` and each
    completion's loss ``masks`` (None: every token trained)."""

    kind: UnitKind
    prompt: TokenArray
    completions: list[TokenArray]
    masks: list[Int8Array | None]


def _present(row: Mapping[str, Any], field: str) -> bool:
    return row.get(field) is not None


def _completion(index: int, field: str, value: Any, mask_field: str, mask: Any) -> tuple[Any, Any]:
    """One completion's tokens (refused when empty) and its mask (None when absent). O(length)."""
    tokens = token_array(value, index, field)
    if not len(tokens):
        raise UnitError.empty_completion(index, field)
    checked = None if mask is None else mask_array(mask, index, mask_field, len(tokens))
    return tokens, checked


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
        field = next(name for name in ("prompt", "chosen", "rejected", "completions") if _present(row, name))
        raise NeedsTokenizer(index, field, row[field])
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
    items = as_numpy(row["completions"])
    if isinstance(items, np.ndarray) and items.ndim == 2:
        items = list(items)
    if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, (Sequence, np.ndarray)) or not len(items):
        raise UnitError.no_completions(index, items if isinstance(items, (str, bytes, Mapping)) else "<no completions>")
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
    one :class:`~packing.core.samples.Samples` with its :class:`~packing.core.units.Units`; other rows are read by
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
        _offsets((len(unit.completions) for unit in read), len(read)),
        np.array([len(tokens) for unit in read for tokens in unit.completions], dtype=np.int64),
        bool(share_prompt),
    )
    dtype = joined_dtype(pieces) if pieces else np.int64
    tokens = np.concatenate(pieces, dtype=dtype, casting="unsafe") if pieces else np.zeros(0, dtype=np.int64)
    mask = np.concatenate(masks).astype(np.int8, copy=False) if masks else np.zeros(0, dtype=np.int8)
    offsets = _offsets(units.lengths(), len(read))
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


__all__ = ["UNIT_MASK_FIELDS", "UnitRow", "read_unit_row", "read_unit_rows", "unit_row", "unit_samples"]
