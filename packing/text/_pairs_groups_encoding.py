"""Preference pairs and completion groups of text, tokenized: every completion with its prompt, as the other text
rows are, then the prompt's tokens told apart from each completion's.

A text unit is ``{"prompt": str, "chosen": str, "rejected": str}`` (or ``"completions": [str, ...]``), or TRL's
conversational form, each part a list of messages (``{"prompt": [{"role": "user", ...}], "chosen": [{"role":
"assistant", ...}], ...}``). Each completion is encoded with its prompt exactly as a ``{"prompt", "completion"}``
row of the same form (:func:`packing.text._text_rows.encode_rows`), so the loss rules apply inside it as they do
there (:class:`packing.core._loss.LossRules`, the one owner):

- a text completion: all of it and the EOS after it (``train_on_eos="none"`` leaves the EOS out), under every
  ``loss``;
- a conversational completion: its messages are trained exactly as the same messages of a ``{"messages":
  prompt + completion}`` row are (``roles_to_train``, a message's ``weight``, ``train_on_eos`` for the ends;
  ``last_turn``: the completion's last turn of ``roles_to_train``), the prompt's messages being context;
- ``loss="all"``: every token of every completion.

The unit's prompt is the tokens every completion's encoding starts with as the prompt's own encoding does (a
text prompt with the tokenizer's special tokens; a chat prompt rendered with its generation prompt:
:func:`packing.text._text_rows.encode_prompts`), and before any trained token: it is never trained. The rest of
each encoding is that completion, with its loss mask; the tokens a completion still shares with the prompt's own
encoding after the unit's prompt (the generation prompt's header, when a sibling's rendering departs from it
sooner, as a sibling opening with a tool turn) are context, untrained under every rule: what a completion trains
never depends on its siblings. A token row is returned per unit, read by
:func:`packing.reading._reader.read_unit_rows`.

>>> row = encode_units([{"prompt": "Hi", "chosen": "yo", "rejected": "no"}], "bytes")[0]
>>> row["prompt"].tolist(), row["chosen"].tolist(), row["rejected"].tolist()
([72, 105], [121, 111, 256], [110, 111, 256])

Internal: the public names are in ``packing`` and ``packing.text``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from packing.core._forms import group_completions, is_message_list, unit_kind
from packing.core._loss import LossRules
from packing.errors import SampleError, UnitError
from packing.text._text_rows import encode_prompts, encode_rows
from packing.text._tokenizers import load_tokenizer

_FORMS = {"tokens": "a list of token ids", "text": "a string", "messages": "a list of messages"}
"""The forms of a unit's parts: every part of a unit has the same one."""


def _form(value: Any) -> str | None:
    """The form of one part of a unit (a key of ``_FORMS``), None for a value of none of them. O(1)."""
    if isinstance(value, str):
        return "text"
    if is_message_list(value):
        return "messages"
    if isinstance(value, (list, tuple, np.ndarray)) and len(value) and not isinstance(value[0], Mapping):
        return "tokens"
    return None


def _parts(row: Mapping[str, Any], index: int) -> tuple[str, Any, list[tuple[str, Any]]]:
    """``(kind, prompt, [(field, completion), ...])`` of a text unit, each part checked to be of the prompt's form
    (a string, or a list of messages). The part named when they differ is the odd one: the prompt when it is of
    no form, or when every completion is of one other form; else the first completion not of the prompt's form.
    O(completions).

    >>> _parts({"prompt": [{"role": "user", "content": "a"}], "chosen": "b", "rejected": "c"}, 4)
    Traceback (most recent call last):
    ...
    packing.errors.SampleError: sample 4, 'prompt': expected a string, as the unit's completions are (one form in every part: token ids, text or messages), got [{'role': 'user', 'content': 'a'}] (list)
    """
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
    form, forms = _form(prompt), [_form(value) for _, value in fields]
    others = set(forms)
    if form is None or (form not in others and len(others) == 1 and None not in others):
        one = next(iter(others)) if len(others) == 1 and None not in others else None
        expected = f"{_FORMS[one] if one else 'token ids, text or messages'}, as the unit's completions are"
        raise SampleError(
            index, "prompt", None, f"{expected} (one form in every part: token ids, text or messages)", prompt
        )
    for (field, value), part in zip(fields, forms, strict=True):
        if value is None:
            raise UnitError.missing(index, field, kind)
        if part != form:
            raise SampleError(index, field, None, f"{_FORMS[form]}, like 'prompt'", value)
        if not len(value):
            raise UnitError.empty_completion(index, field)
    assert form != "tokens"  # a text unit: a text part among token ids is named above
    return kind, prompt, fields


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
    expanded: list[dict[str, Any]] = []
    owners: list[tuple[int, str]] = []
    for (_, prompt, fields), name in zip(read, names, strict=True):
        for field, completion in fields:
            expanded.append({"prompt": prompt, "completion": completion})
            owners.append((name, field))
    tokenizer = load_tokenizer(tokenizer)
    try:
        tokens, mask, offsets = encode_rows(expanded, tokenizer, loss_rules=rules, num_proc=num_proc)
    except SampleError as error:
        if error.sample is None or not 0 <= error.sample < len(owners):
            raise
        sample, field = owners[error.sample]  # the unit's sample, and its field for the completion's error
        raise error.moved(sample=sample, field=field if error.field == "completion" else error.field) from None
    prompts = encode_prompts(tokenizer, [prompt for _, prompt, _ in read], names)
    out: list[dict[str, Any]] = []
    at = 0
    for unit, ((kind, _, fields), name) in enumerate(zip(read, names, strict=True)):
        encoded = [
            (tokens[offsets[at + j] : offsets[at + j + 1]], mask[offsets[at + j] : offsets[at + j + 1]])
            for j in range(len(fields))
        ]
        at += len(fields)
        prompt_ids = prompts.ids[prompts.offsets[unit] : prompts.offsets[unit + 1]]
        ends = [_prompt_end(prompt_ids, ids, m, rules.masks_anything) for ids, m in encoded]
        prompt_length = min(ends)
        answers = [ids[prompt_length:] for ids, _ in encoded]
        masks = [_context_untrained(m, prompt_length, end) for (_, m), end in zip(encoded, ends, strict=True)]
        for (field, _), answer, trained in zip(fields, answers, masks, strict=True):
            if not len(answer):
                raise UnitError.empty_completion(name, field)
            if not trained.any():  # a pair whose chosen trains nothing is a broken pair
                raise UnitError.untrained_completion(name, field)
        row: dict[str, Any] = {"prompt": encoded[0][0][:prompt_length]}
        if kind == "pair":
            row.update(chosen=answers[0], rejected=answers[1], chosen_mask=masks[0], rejected_mask=masks[1])
        else:
            row.update(completions=answers, completion_masks=masks)
        out.append(row)
    return out


def _prompt_end(prompt: Any, ids: Any, mask: Any, masked: bool) -> int:
    """Where one completion's encoding (``ids``, ``mask``) departs from the prompt's own encoding (``prompt``):
    the tokens it starts with as ``prompt`` does, and (``masked``: rules that leave tokens out) no further than
    its first trained token. It depends on this completion alone, never on its siblings. O(tokens).

    >>> _prompt_end(np.array([1, 2, 9]), np.array([1, 2, 3]), np.array([0, 0, 1]), True)
    2
    >>> _prompt_end(np.array([1, 2, 9]), np.array([1, 2, 4, 5]), np.array([0, 1, 1, 1]), True)
    1
    """
    size = min(len(ids), len(prompt))
    differs = np.flatnonzero(prompt[:size] != ids[:size])
    end = int(differs[0]) if differs.size else size
    if masked and mask[:end].any():
        end = int(np.argmax(mask))
    return end


def _context_untrained(mask: Any, start: int, end: int) -> Any:
    """A completion's loss mask from the unit's prompt end ``start`` on, its tokens before its own prompt end
    ``end`` (:func:`_prompt_end`: the prompt's rendering it shares, as the generation prompt's header) context,
    untrained under every rule, so what it trains does not depend on its siblings. O(tokens).

    >>> _context_untrained(np.array([1, 1, 1, 1], dtype=np.int8), 1, 3).tolist()
    [0, 0, 1]
    """
    out = mask[start:].copy()
    out[: max(end - start, 0)] = 0
    return out
