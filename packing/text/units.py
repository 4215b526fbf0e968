"""Preference pairs and completion groups of text, tokenized: every completion with its prompt, as the other text
rows are, then the prompt's tokens told apart from each completion's.

A text unit is ``{"prompt": str, "chosen": str, "rejected": str}`` (or ``"completions": [str, ...]``), or TRL's
conversational form, each part a list of messages (``{"prompt": [{"role": "user", ...}], "chosen": [{"role":
"assistant", ...}], ...}``). Each completion is encoded with its prompt exactly as a ``{"prompt", "completion"}``
row of the same form (:func:`packing.text.text_rows.encode_rows`: the chat template renders the prompt with its
generation prompt, then the whole conversation; the loss rules mark the completion's trained tokens, its end of
turn as ``train_on_eos`` says). The unit's prompt is the tokens every completion's encoding starts with, up to its
first trained token; the rest of each encoding is that completion (``loss="all"`` trains all of it: a unit's prompt
is never trained). A token row is returned per unit, read by :func:`packing.reading.reader.read_unit_rows`.

>>> row = encode_units([{"prompt": "Hi", "chosen": "yo", "rejected": "no"}], "bytes")[0]
>>> row["prompt"].tolist(), row["chosen"].tolist(), row["rejected"].tolist()
([72, 105], [121, 111, 256], [110, 111, 256])

Internal: the public names are in ``packing`` and ``packing.text``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from packing.core.forms import group_completions, is_message_list, unit_kind
from packing.core.loss import LossRules
from packing.errors import SampleError, UnitError
from packing.text.text_rows import encode_rows

TEXT_PROMPT = "text or messages, as the unit's other parts are (token ids in every part, or text in every part)"


def _parts(row: Mapping[str, Any], index: int) -> tuple[str, Any, list[tuple[str, Any]]]:
    """``(kind, prompt, [(field, completion), ...])`` of a text unit, each part checked to be of the prompt's form
    (a string, or a list of messages). O(completions)."""
    kind = unit_kind(row)
    assert kind is not None
    prompt = row.get("prompt")
    if prompt is None:
        raise UnitError.missing(index, "prompt", kind)
    if kind == "pair":
        fields = [("chosen", row.get("chosen")), ("rejected", row.get("rejected"))]
    else:
        items = group_completions(row["completions"], index)
        fields = [(f"completions[{position}]", item) for position, item in enumerate(items)]
    text = isinstance(prompt, str)
    if not text and not is_message_list(prompt):  # token ids among text parts: the unit is one or the other
        raise SampleError(index, "prompt", None, TEXT_PROMPT, prompt)
    for field, value in fields:
        if value is None:
            raise UnitError.missing(index, field, kind)
        if text and not isinstance(value, str):
            raise SampleError(index, field, None, "a string, like 'prompt'", value)
        if not text and not is_message_list(value):
            raise SampleError(index, field, None, "a list of messages, like 'prompt'", value)
        if (text and not value) or (not text and not len(value)):
            raise UnitError.empty_completion(index, field)
    return kind, prompt, fields


def _renamed(error: SampleError, sample: int, field: str | None) -> SampleError:
    """``error`` about an encoded completion row, about the unit's sample and field instead. O(1)."""
    renamed = copy.copy(error)
    renamed.sample = sample
    if field is not None and error.field == "completion":
        renamed.field = field
    renamed.args = (renamed.where_and_what(),)
    return renamed


def encode_units(
    rows: Sequence[Mapping[str, Any]],
    tokenizer: Any,
    *,
    loss_rules: LossRules | None = None,
    indices: Sequence[int] | None = None,
    num_proc: int | None = None,
) -> list[dict[str, Any]]:
    """Text pairs and groups as token units (see the module), one dict per row: ``prompt``, then ``chosen`` and
    ``rejected`` (with ``chosen_mask`` and ``rejected_mask``) or ``completions`` (with ``completion_masks``), numpy
    arrays. ``indices[i]`` is how errors number row ``i`` (default ``i``). O(characters + tokens).

    >>> chat = {"prompt": [{"role": "user", "content": "a"}], "completions": [[{"role": "assistant", "content": "b"}]]}
    >>> from packing.text import ByteTokenizer
    >>> row = encode_units([chat], "bytes")[0]
    >>> ByteTokenizer().decode(row["prompt"].tolist())[-22:], ByteTokenizer().decode(row["completions"][0].tolist())
    ('<|im_start|>assistant\\n', 'b<|im_end|>\\n')
    """
    rules = loss_rules or LossRules()
    names = list(indices) if indices is not None else list(range(len(rows)))
    read = [_parts(row, name) for row, name in zip(rows, names, strict=True)]
    split = LossRules("completion" if rules.loss == "all" else rules.loss, rules.roles_to_train, rules.train_on_eos)
    expanded: list[dict[str, Any]] = []
    owners: list[tuple[int, str]] = []
    for (_, prompt, fields), name in zip(read, names, strict=True):
        for field, completion in fields:
            expanded.append({"prompt": prompt, "completion": completion})
            owners.append((name, field))
    try:
        tokens, mask, offsets = encode_rows(expanded, tokenizer, loss_rules=split, num_proc=num_proc)
    except SampleError as error:
        if error.sample is None or not 0 <= error.sample < len(owners):
            raise
        raise _renamed(error, *owners[error.sample]) from None
    out: list[dict[str, Any]] = []
    at = 0
    for (kind, _, fields), name in zip(read, names, strict=True):
        encoded = [
            (tokens[offsets[at + j] : offsets[at + j + 1]], mask[offsets[at + j] : offsets[at + j + 1]])
            for j in range(len(fields))
        ]
        at += len(fields)
        prompt_length = _prompt_length(encoded)
        answers = [ids[prompt_length:] for ids, _ in encoded]
        masks = [
            np.ones(len(ids) - prompt_length, dtype=np.int8) if rules.loss == "all" else m[prompt_length:]
            for ids, m in encoded
        ]
        for (field, _), answer in zip(fields, answers, strict=True):
            if not len(answer):
                raise UnitError.empty_completion(name, field)
        row: dict[str, Any] = {"prompt": encoded[0][0][:prompt_length]}
        if kind == "pair":
            row.update(chosen=answers[0], rejected=answers[1], chosen_mask=masks[0], rejected_mask=masks[1])
        else:
            row.update(completions=answers, completion_masks=masks)
        out.append(row)
    return out


def _prompt_length(encoded: list[tuple[Any, Any]]) -> int:
    """The tokens every encoding starts with, up to the first trained token of any. O(tokens).

    >>> _prompt_length([(np.array([1, 2, 3]), np.array([0, 0, 1])), (np.array([1, 2, 4, 5]), np.array([0, 0, 1, 1]))])
    2
    """
    first = min(int(np.argmax(m)) if m.any() else len(ids) for ids, m in encoded)
    reference = encoded[0][0]
    for ids, _ in encoded[1:]:
        size = min(len(reference), len(ids), first)
        differs = np.flatnonzero(reference[:size] != ids[:size])
        first = int(differs[0]) if differs.size else size
    return first
