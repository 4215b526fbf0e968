"""The row forms: which columns a row may have and what each holds. Internal."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypedDict

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:  # pragma: no cover - typing only
    pass
RowKind = Literal["tokens", "length"]

TOKEN = "a non-negative integer token id"
FLAG = "0 or 1"
FORMS = "a list of token ids, or a dict with 'input_ids' (and a 'loss_mask'), 'prompt' and 'completion', or 'length'"
MASK_FIELDS = ("loss_mask", "completion_mask", "assistant_masks")
"""Columns read as a per-token loss mask (``loss_mask``, and TRL's names), ANDed when a row has several."""
LABELS = "labels"
"""The column of per-token labels (transformers' form): a token is trained where its label is not ``IGNORE_INDEX``."""
LABEL = "a non-negative integer token id or -100"
TOKEN_FIELDS = ("input_ids", "prompt", "completion")
TEXT_FIELDS = ("text", "messages")
"""Columns of text rows (with ``prompt``/``completion`` as strings or messages): they need a tokenizer."""
FIELDS = (*TOKEN_FIELDS, *MASK_FIELDS, LABELS, "length", *TEXT_FIELDS)
"""Every column the reader looks at; others are ignored."""


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
    return isinstance(value, (list, tuple, np.ndarray)) and not _is_message_list(value)


def _is_message_list(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and len(value) > 0 and isinstance(value[0], Mapping)


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
    forms: list[TextForm] = []
    if row.get("text") is not None:
        forms.append("text")
    if row.get("messages") is not None:
        forms.append("messages")
    prompt, completion = row.get("prompt"), row.get("completion")
    if isinstance(prompt, str) or isinstance(completion, str):
        forms.append("prompt_completion")
    elif _is_message_list(prompt) or _is_message_list(completion):
        forms.append("conversational")
    return forms


def is_text_row(row: Any) -> bool:
    """Whether a row is text (needs a tokenizer): any of the four forms, and no non-null ``input_ids``. O(1).

    >>> is_text_row({"text": "hello"}), is_text_row({"prompt": [1, 2], "completion": [3]}), is_text_row([1, 2])
    (True, False, False)
    """
    return bool(text_forms(row))
