"""Reading what a user pastes: sequences of token ids in several forms, and practice answers.

Every problem raises ``InputError`` with a message that names the line and says what was expected.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

FORMAT_HELP = (
    "One of: a JSON list of lists, like `[[1, 2], [3, 4, 5], [6]]`; one sequence per line, ids separated by "
    "spaces or commas (`1 2 3`); one instruction/response pair per line with `|` between prompt and completion "
    '(`5 6 7 | 8 9`); or JSON objects, one per line, with `prompt`/`completion` or `input_ids`/`loss_mask` (`{"prompt": '
    '[5, 6], "completion": [7]}`).'
)
TOKEN_IDS = "token ids (non-negative integers separated by spaces or commas)"
MAX_TOKEN_ID = 2**63 - 1
_SEPARATORS = re.compile(r"[\s,]+")
_BRACKETS = re.compile(r"\[[^\[\]]*\]")
_LIST_OF_LISTS = re.compile(r"\[\s*[\[{\]]")
"""Text that opens a JSON list of lists or objects (``[[``, ``[{``, ``[]``); other text is read line by line."""


class InputError(ValueError):
    """Input that cannot be read; the message says where and what was expected."""


@dataclass(frozen=True)
class ParsedInput:
    """Samples in a form ``packing.pack`` accepts, and the line each one came from."""

    samples: list[Any]
    lines: list[int]

    @property
    def has_prompts(self) -> bool:
        """True if any sample masks part of its tokens (prompt/completion or an explicit loss mask)."""
        return any(isinstance(s, dict) and ("prompt" in s or "loss_mask" in s) for s in self.samples)


def _line_of(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1


def parse_ids(field: str, where: str) -> list[int]:
    """Token ids separated by spaces or commas; an empty field is an empty list.

    >>> parse_ids("1, 2 3", "line 1")
    [1, 2, 3]
    """
    items = [item for item in _SEPARATORS.split(field.strip()) if item]
    for item in items:
        if not item.isascii() or not item.isdigit():
            raise InputError(f"{where}: expected {TOKEN_IDS}, got {item!r}")
        if int(item) > MAX_TOKEN_ID:
            raise InputError(f"{where}: token id {item} is too large (the largest is {MAX_TOKEN_ID})")
    return [int(item) for item in items]


def _check_ids(value: Any, where: str) -> list[int]:
    if not isinstance(value, list):
        raise InputError(f"{where}: expected a list of token ids, got {json.dumps(value)}")
    for item in value:
        if isinstance(item, bool) or not isinstance(item, int) or item < 0:
            raise InputError(f"{where}: expected a non-negative integer token id, got {json.dumps(item)}")
        if item > MAX_TOKEN_ID:
            raise InputError(f"{where}: token id {item} is too large (the largest is {MAX_TOKEN_ID})")
    return value


def _check_object(value: dict[str, Any], where: str) -> dict[str, Any]:
    if "prompt" in value or "completion" in value:
        for key in ("prompt", "completion"):
            if key not in value:
                raise InputError(f"{where}: a prompt/completion object needs both keys; {key!r} is missing")
        return {"prompt": _check_ids(value["prompt"], where), "completion": _check_ids(value["completion"], where)}
    if "input_ids" in value:
        sample: dict[str, Any] = {"input_ids": _check_ids(value["input_ids"], where)}
        mask = value.get("loss_mask")
        if mask is not None:
            mask = _check_ids(mask, where)
            if len(mask) != len(sample["input_ids"]) or any(m not in (0, 1) for m in mask):
                raise InputError(f"{where}: expected 'loss_mask' to be 0/1 values, one per token")
            sample["loss_mask"] = mask
        return sample
    raise InputError(
        f"{where}: expected an object with 'prompt' and 'completion', or 'input_ids'; got keys {sorted(value)}"
    )


def _check_sample(value: Any, where: str) -> Any:
    if isinstance(value, dict):
        return _check_object(value, where)
    return _check_ids(value, where)


def _json_array_items(text: str) -> list[tuple[Any, int]]:
    """Items of a JSON array with the line each starts on (the text is already known to be valid JSON)."""
    decoder = json.JSONDecoder()
    index = text.index("[") + 1
    items: list[tuple[Any, int]] = []
    while True:
        while text[index] in " \t\r\n,":
            index += 1
        if text[index] == "]":
            return items
        value, end = decoder.raw_decode(text, index)
        items.append((value, _line_of(text, index)))
        index = end


def _parse_json_array(text: str) -> ParsedInput:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        where = f"line {error.lineno}, column {error.colno}"
        if error.msg == "Extra data":
            raise InputError(
                f"{where}: unexpected text after the end of the JSON list; paste one list of lists like "
                "[[1, 2], [3]], or one sequence per line"
            ) from None
        raise InputError(f"{where}: invalid JSON ({error.msg})") from None
    if not isinstance(value, list):
        raise InputError("line 1: expected a JSON list of sequences")
    samples, lines = [], []
    for position, (item, line) in enumerate(_json_array_items(text)):
        samples.append(_check_sample(item, f"line {line} (sequence {position + 1})"))
        lines.append(line)
    return ParsedInput(samples, lines)


def _parse_line(line: str, where: str) -> Any:
    if line.startswith("{"):
        try:
            value = json.loads(line)
        except json.JSONDecodeError as error:
            raise InputError(f"{where}, column {error.colno}: invalid JSON object ({error.msg})") from None
        if not isinstance(value, dict):
            raise InputError(f"{where}: expected a JSON object")
        return _check_object(value, where)
    if line.startswith("["):
        try:
            return _check_ids(json.loads(line), where)
        except json.JSONDecodeError as error:
            raise InputError(
                f"{where}: expected a JSON list of token ids like [1, 2, 3] (invalid JSON at column {error.colno}: "
                f"{error.msg})"
            ) from None
    if "|" in line:
        parts = line.split("|")
        if len(parts) != 2:
            raise InputError(f"{where}: expected one '|' between prompt and completion, found {len(parts) - 1}")
        return {"prompt": parse_ids(parts[0], f"{where} (prompt)"), "completion": parse_ids(parts[1], f"{where}")}
    return parse_ids(line, where)


def parse_sequences(text: str) -> ParsedInput:
    """Read pasted sequences in any supported form (see ``FORMAT_HELP``). Blank lines and ``#`` comments are skipped.

    >>> parse_sequences("[[1, 2], [3, 4, 5], [6]]").samples
    [[1, 2], [3, 4, 5], [6]]
    >>> parse_sequences("[1, 2, 3]\\n4 5").samples
    [[1, 2, 3], [4, 5]]
    >>> parse_sequences("5 6 7 | 8 9").samples
    [{'prompt': [5, 6, 7], 'completion': [8, 9]}]
    """
    stripped = text.strip()
    if not stripped:
        raise InputError("no sequences: paste at least one sequence. " + FORMAT_HELP)
    if _LIST_OF_LISTS.match(stripped):
        return _parse_json_array(text)
    samples, lines = [], []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        samples.append(_parse_line(line, f"line {number}"))
        lines.append(number)
    return ParsedInput(samples, lines)


def parse_blocks(text: str) -> list[list[int]]:
    """Read blocks a user typed: one per line as ``1 2 3 4``, ``[1, 2, 3, 4]`` or the classic
    ``Block 1: [1, 2, 3, 4] -> mask: [1, 1, 1, 1]`` (the mask is ignored), or one JSON list of lists.

    >>> parse_blocks("Block 1: [1, 2, 3, 4] -> mask: [1, 1, 1, 1]\\n5 6")
    [[1, 2, 3, 4], [5, 6]]
    """
    stripped = text.strip()
    if not stripped:
        raise InputError("no blocks: type one block per line, e.g. 1 2 3 4")
    if stripped.startswith("[["):
        parsed = _parse_json_array(stripped)
        return [s for s in parsed.samples if isinstance(s, list)]
    blocks = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        where = f"line {number}"
        if ":" in line or "[" in line:
            found = _BRACKETS.search(line)
            if found is None:
                raise InputError(f"{where}: expected a block like [1, 2, 3, 4] or 1 2 3 4")
            line = found.group(0)[1:-1]
        blocks.append(parse_ids(line, where))
    return blocks
