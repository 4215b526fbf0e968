"""The row forms: which columns a row may have and what each holds. Internal."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypedDict

import numpy as np
import numpy.typing as npt

RowKind = Literal["tokens", "length"]

TOKEN = "a non-negative integer token id"
FLAG = "0 or 1"
FORMS = (
    "a list of token ids, or a dict with 'input_ids' (and a 'loss_mask'), 'prompt' and 'completion', or 'length', "
    "or a pair ('prompt', 'chosen', 'rejected') or group ('prompt', 'completions')"
)
UNIT_FIELDS = ("chosen", "rejected", "completions")
"""Columns of the unit forms: a preference pair ``{"prompt", "chosen", "rejected"}`` and a completion group
``{"prompt", "completions": [c1, ..., ck]}``, as token ids, text or messages (``packing.core._pairs_groups``)."""
UNIT_MASK_FIELDS = ("chosen_mask", "rejected_mask", "completion_masks")
"""Optional per-token loss masks of a token unit's completions (what ``read_dataset``'s items carry when a
completion has an untrained token, e.g. an end of turn left out by ``train_on_eos``)."""
MASK_FIELDS = ("loss_mask", "completion_mask", "assistant_masks")
"""Columns read as a per-token loss mask (``loss_mask``, and TRL's names), ANDed when a row has several."""
LABELS = "labels"
"""The column of per-token labels (transformers' form): a token is trained where its label is not ``IGNORE_INDEX``."""
LABEL = "a non-negative integer token id or -100"
TOKEN_FIELDS = ("input_ids", "prompt", "completion")
TEXT_FIELDS = ("text", "messages")
"""Columns of text rows (with ``prompt``/``completion`` as strings or messages): they need a tokenizer."""
FIELDS = (*TOKEN_FIELDS, *MASK_FIELDS, LABELS, "length", *TEXT_FIELDS, *UNIT_FIELDS, *UNIT_MASK_FIELDS)
"""Every column the reader looks at; others are ignored."""
IMAGE_GRIDS = ("image_grid_thw", "video_grid_thw")
"""The columns that say a row holds images or videos (``packing.vision``): read beside the reader's, so that such a
row is refused where no vision config reads it; the pixels they describe are never read for that."""
READ_FIELDS = (*FIELDS, *IMAGE_GRIDS)
"""The columns a door reads from a file or a table: the reader's and the image grids."""


class PreferencePair(TypedDict):
    """A preference pair: one prompt, a chosen and a rejected completion (token ids, text or messages)."""

    prompt: Any
    chosen: Any
    rejected: Any


class CompletionGroup(TypedDict):
    """A completion group: one prompt and ``k >= 1`` completions of it (RL rollouts)."""

    prompt: Any
    completions: Sequence[Any]


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
Sample = TokenList | PromptCompletion | MaskedSample | PreferencePair | CompletionGroup
"""The sample forms ``pack`` accepts."""


TextForm = Literal["text", "prompt_completion", "messages", "conversational"]
Message = Mapping[str, Any]

TEXT_FORMS: dict[str, str] = {
    "text": "{'text': str}",
    "prompt_completion": "{'prompt': str, 'completion': str}",
    "messages": "{'messages': [{'role': str, 'content': str}, ...]}",
    "conversational": "{'prompt': [messages], 'completion': [messages]}",
}
"""The text row forms, each with its shape."""


# ---------------------------------------------------------------- row forms


def _is_token_list(value: Any) -> bool:
    return isinstance(value, (list, tuple, np.ndarray)) and not is_message_list(value)


def is_message_list(value: Any) -> bool:
    """Whether ``value`` is a chat: a non-empty list of message mappings. O(1).

    >>> is_message_list([{"role": "user", "content": "hi"}]), is_message_list([1, 2])
    (True, False)
    """
    return isinstance(value, (list, tuple)) and len(value) > 0 and isinstance(value[0], Mapping)


def unit_kind(row: Any) -> Literal["pair", "group"] | None:
    """Whether a row is a preference pair (``chosen``/``rejected``) or a completion group (``completions``), by
    its non-null keys; None for any other row. O(1).

    >>> unit_kind({"prompt": [1], "chosen": [2], "rejected": [3]}), unit_kind({"prompt": [1], "completion": [2]})
    ('pair', None)
    """
    if not isinstance(row, Mapping):
        return None
    if row.get("completions") is not None:
        return "group"
    if row.get("chosen") is not None or row.get("rejected") is not None:
        return "pair"
    return None


def unit_field_at(
    kind: int, prompt: int, lengths: Sequence[int], shared: bool, position: int
) -> tuple[str | None, int]:
    """The field of a unit a token of its laid-out sample is in, and its position there: ``prompt``, ``chosen``,
    ``rejected`` or ``completions[j]`` of a unit of ``kind`` (1 pair, 2 group; 0 plain: no field, the position
    as it is) laid out ``P c1 P c2 ...`` (``P c1 c2 ...`` when ``shared``), its prompt of ``prompt`` tokens and
    its completions of ``lengths``. O(completions).

    >>> unit_field_at(2, 1, [1, 1], False, 3), unit_field_at(1, 2, [3, 1], True, 5), unit_field_at(0, 0, [4], False, 2)
    (('completions[1]', 0), ('rejected', 0), (None, 2))
    """
    if kind == 0:
        return None, position
    at = 0
    for number, length in enumerate(lengths):
        if number == 0 or not shared:
            if position < at + prompt:
                return "prompt", position - at
            at += prompt
        if position < at + length:
            return (("chosen", "rejected")[number] if kind == 1 else f"completions[{number}]"), position - at
        at += length
    return None, position


def group_completions(items: Any, index: int | None) -> Sequence[Any]:
    """A group's ``completions`` as a sequence of completions (a 2-D or deeper array as its rows), refused
    (:class:`~packing.errors.UnitError`, the value quoted) unless a non-empty list: the one rule for token and text
    groups. O(1), O(completions) for an array.

    >>> [c.tolist() for c in group_completions(np.array([[1, 2], [3, 4]]), 0)]
    [[1, 2], [3, 4]]
    >>> group_completions({"a": [1]}, 2)
    Traceback (most recent call last):
    ...
    packing.errors.UnitError: sample 2, 'completions': expected at least one completion (a group has 'prompt' and 'completions': [c1, ..., ck]), got {'a': [1]} (dict)
    """
    from packing.errors import UnitError

    if isinstance(items, np.ndarray) and items.ndim >= 2:
        items = list(items)
    listed = isinstance(items, (Sequence, np.ndarray)) and not isinstance(items, (str, bytes))
    if not listed or (isinstance(items, np.ndarray) and items.ndim != 1):
        raise UnitError.no_completions(index, items)  # a dict, a string, a number, a set, a generator: quoted
    if not len(items):
        raise UnitError.no_completions(index)
    return items  # type: ignore[no-any-return]


def null_unit(row: Mapping[str, Any]) -> str | None:
    """The field of a unit whose every completion is null, in a row that has a ``prompt`` and no completion:
    ``completions`` (a group with null ``completions``), ``chosen`` (a pair with null ``chosen`` and
    ``rejected``), None when it has no such key or a ``completion`` key (a prompt/completion row): its error
    names that field, not the ``completion`` of a prompt/completion row. O(1).

    >>> null_unit({"prompt": "2+2=", "completions": None}), null_unit({"prompt": [5], "chosen": None, "rejected": None})
    ('completions', 'chosen')
    >>> null_unit({"prompt": "2+2="}) is None
    True
    """
    if "completion" in row:
        return None
    if "completions" in row and row["completions"] is None:
        return "completions"
    return next((field for field in ("chosen", "rejected") if field in row and row[field] is None), None)


def null_unit_error(sample: int | None, field: str) -> Exception:
    """The error for a unit whose completions are null (:func:`null_unit` names ``field``). O(1).

    >>> str(null_unit_error(3, "chosen"))
    "sample 3, 'chosen': expected a completion (a pair has 'prompt', 'chosen' and 'rejected'), got None (NoneType)"
    """
    from packing.errors import UnitError

    if field == "completions":
        return UnitError.no_completions(sample, None)
    return UnitError.missing(sample, field, "pair")


def is_text_unit(row: Any) -> bool:
    """Whether a row is a pair or group of text (strings or messages: it needs a tokenizer). O(completions).

    >>> is_text_unit({"prompt": "2+2=", "chosen": "4", "rejected": "5"}), is_text_unit({"prompt": [1], "completions": [[2]]})
    (True, False)
    """
    kind = unit_kind(row)
    if kind is None or row.get("input_ids") is not None:
        return False
    parts = [row.get("prompt")]
    parts += list(row["completions"]) if kind == "group" and isinstance(row["completions"], (list, tuple)) else []
    parts += [row.get("chosen"), row.get("rejected")] if kind == "pair" else []
    return any(isinstance(part, str) or is_message_list(part) for part in parts)


def text_forms(row: Any) -> list[TextForm]:
    """The text forms a row has (more than one is an error for :func:`encode_rows`). O(1).

    >>> text_forms({"messages": [{"role": "user", "content": "hi"}]}), text_forms({"input_ids": [1]})
    (['messages'], [])
    """
    if not isinstance(row, Mapping) or row.get("input_ids") is not None:
        return []
    prompt, completion = row.get("prompt"), row.get("completion")
    if _is_token_list(prompt) and _is_token_list(completion):
        return []  # a token prompt/completion pair: other text columns are extra data
    if unit_kind(row) is not None:
        return []  # a pair or group is read by the unit reader, its text by ``packing.text._pairs_groups_encoding``
    forms: list[TextForm] = []
    if row.get("text") is not None:
        forms.append("text")
    if row.get("messages") is not None:
        forms.append("messages")
    if isinstance(prompt, str) or isinstance(completion, str):
        forms.append("prompt_completion")
    elif is_message_list(prompt) or is_message_list(completion):
        forms.append("conversational")
    return forms


def is_text_row(row: Any) -> bool:
    """Whether a row is text (needs a tokenizer): any of the four forms, or a pair or group of text, and no
    non-null ``input_ids``. O(1).

    >>> is_text_row({"text": "hello"}), is_text_row({"prompt": [1, 2], "completion": [3]}), is_text_row([1, 2])
    (True, False, False)
    """
    if not isinstance(row, Mapping) or row.get("input_ids") is not None:
        return False
    if _is_token_list(row.get("prompt")) and _is_token_list(row.get("completion")):
        return False  # the common token prompt/completion row, decided before any text or unit form is looked for
    return bool(text_forms(row)) or is_text_unit(row)
