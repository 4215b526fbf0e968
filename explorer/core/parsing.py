"""Reading what a user pastes into rows, and practice answers into blocks and masks.

Text is only split into rows here (a list of ids, a prompt/completion pair, or a JSON object as typed); whether
a row is valid (token ids, masks, which keys) is decided by the library's reader, once, as for files.
Every problem raises ``InputError`` with one line that names the line and says what was expected, quoting at
most a few dozen characters of the text.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from explorer.core.model import MAX_PASTE_CHARS, MAX_SEQUENCES
from explorer.core.safety import quote

FORMAT_HELP = (
    "One of: a JSON list of lists, like `[[1, 2], [3, 4, 5], [6]]`; one sequence per line, ids separated by "
    "spaces or commas (`1 2 3`); one instruction/response pair per line with `|` between prompt and completion "
    '(`5 6 7 | 8 9`); or JSON objects, one per line, with `prompt`/`completion` or `input_ids`/`loss_mask` (`{"prompt": '
    '[5, 6], "completion": [7]}`).'
)
TOKEN_IDS = "token ids (non-negative integers separated by spaces or commas)"
MAX_ID_DIGITS = 19
"""Digits of the largest int64 token id (9,223,372,036,854,775,807); longer numbers are refused unread."""
_SEPARATORS = re.compile(r"[\s,]+")
_BRACKETS = re.compile(r"\[[^\[\]]*\]")
_LIST_OF_LISTS = re.compile(r"\[\s*[\[{\]]")
"""Text that opens a JSON list of lists or objects (``[[``, ``[{``, ``[]``); other text is read line by line."""


class InputError(ValueError):
    """Input that cannot be read; the one-line message says where and what was expected."""


@dataclass(frozen=True)
class ParsedInput:
    """Rows as typed (lists of ids, or objects), and the line each one came from."""

    samples: list[Any]
    lines: list[int]

    @property
    def has_prompts(self) -> bool:
        """True if any row is an object (a prompt/completion pair or ids with a mask)."""
        return any(isinstance(s, dict) for s in self.samples)

    def where(self, sample: int) -> str:
        """How messages name row ``sample`` (0-based): its line and its number."""
        if 0 <= sample < len(self.lines):
            return f"line {self.lines[sample]} (sequence {sample + 1})"
        return f"sequence {sample + 1}"


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
            raise InputError(f"{where}: expected {TOKEN_IDS}, got {quote(item)}")
        if len(item.lstrip("0")) > MAX_ID_DIGITS or int(item) > 2**63 - 1:
            raise InputError(f"{where}: token id {quote(item)} is too large (the largest is {2**63 - 1:,})")
    return [int(item) for item in items]


def _loads(text: str, where: str, expected: str) -> Any:
    """``json.loads`` whose every failure is an ``InputError`` (invalid JSON, nesting, numbers of thousands of
    digits)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        line = error.lineno if where == "line 1" or where.startswith("line 1,") else None
        place = f"line {line}, column {error.colno}" if line is not None else f"{where}, column {error.colno}"
        if error.msg == "Extra data" and where == "line 1":
            raise InputError(
                f"{place}: unexpected text after the end of the JSON list; paste one list of lists like "
                "[[1, 2], [3]], or one sequence per line"
            ) from None
        raise InputError(f"{place}: expected {expected} (invalid JSON: {error.msg})") from None
    except RecursionError:
        raise InputError(f"{where}: expected {expected}; the JSON is nested too deeply") from None
    except ValueError:  # integers longer than Python's 4,300-digit conversion limit
        raise InputError(f"{where}: a number has too many digits (token ids have at most {MAX_ID_DIGITS})") from None


def _check_row(value: Any, where: str) -> Any:
    if isinstance(value, dict | list):
        return value
    raise InputError(f"{where}: expected a list of token ids or an object, got {quote(value)}")


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
    value = _loads(text, "line 1", "a JSON list of sequences")
    if not isinstance(value, list):
        raise InputError("line 1: expected a JSON list of sequences")
    _check_count(len(value))
    samples, lines = [], []
    for position, (item, line) in enumerate(_json_array_items(text)):
        samples.append(_check_row(item, f"line {line} (sequence {position + 1})"))
        lines.append(line)
    return ParsedInput(samples, lines)


def _parse_line(line: str, where: str) -> Any:
    if line.startswith("{"):
        value = _loads(line, where, "a JSON object")
        if not isinstance(value, dict):
            raise InputError(f"{where}: expected a JSON object")
        return value
    if line.startswith("["):
        value = _loads(line, where, "a JSON list of token ids like [1, 2, 3]")
        if not isinstance(value, list):
            raise InputError(f"{where}: expected a JSON list of token ids like [1, 2, 3]")
        return value
    if "|" in line:
        parts = line.split("|")
        if len(parts) != 2:
            raise InputError(f"{where}: expected one '|' between prompt and completion, found {len(parts) - 1}")
        return {"prompt": parse_ids(parts[0], f"{where} (prompt)"), "completion": parse_ids(parts[1], where)}
    return parse_ids(line, where)


def _check_count(count: int) -> None:
    if count > MAX_SEQUENCES:
        raise InputError(f"{count:,} sequences; the explorer reads up to {MAX_SEQUENCES:,} at a time")


def parse_sequences(text: str) -> ParsedInput:
    """Read pasted sequences in any supported form (see ``FORMAT_HELP``). Blank lines and ``#`` comments are skipped.

    >>> parse_sequences("[[1, 2], [3, 4, 5], [6]]").samples
    [[1, 2], [3, 4, 5], [6]]
    >>> parse_sequences("[1, 2, 3]\\n4 5").samples
    [[1, 2, 3], [4, 5]]
    >>> parse_sequences("5 6 7 | 8 9").samples
    [{'prompt': [5, 6, 7], 'completion': [8, 9]}]
    """
    if len(text) > MAX_PASTE_CHARS:
        raise InputError(
            f"the text has {len(text):,} characters; up to {MAX_PASTE_CHARS:,} can be pasted (upload a file instead)"
        )
    stripped = text.strip()
    if not stripped:
        raise InputError("no sequences: paste at least one sequence, for example [[1, 2], [3, 4, 5], [6]]")
    if _LIST_OF_LISTS.match(stripped):
        return _parse_json_array(text)
    samples, lines = [], []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        samples.append(_parse_line(line, f"line {number}"))
        lines.append(number)
    _check_count(len(samples))
    return ParsedInput(samples, lines)


@dataclass(frozen=True)
class TypedBlock:
    """One block of a practice answer: its token ids and, when given, its loss mask."""

    ids: list[int]
    mask: list[int] | None


def parse_blocks(text: str) -> list[TypedBlock]:
    """Read blocks a user typed, one per line: ``1 2 3 4``, ``[1, 2, 3, 4]``, ``1 2 3 4 -> 0 1 1 1`` or the classic
    ``Block 1: [1, 2, 3, 4] -> mask: [1, 1, 1, 1]``; what follows ``->`` is the loss mask.

    >>> [(b.ids, b.mask) for b in parse_blocks("Block 1: [1, 2, 3, 4] -> mask: [1, 1, 1, 1]\\n5 6")]
    [([1, 2, 3, 4], [1, 1, 1, 1]), ([5, 6], None)]
    """
    stripped = text.strip()
    if not stripped:
        raise InputError("no blocks: type one block per line, e.g. 1 2 3 4 -> 1 1 1 1")
    if len(text) > 100_000:
        raise InputError(f"the answer has {len(text):,} characters; a practice answer is a few short lines")
    blocks = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        where = f"line {number}"
        ids_part, arrow, mask_part = line.partition("->")
        ids = _typed_ids(ids_part, where)
        mask = _typed_ids(mask_part.replace("mask", "").replace(":", " "), f"{where} (mask)") if arrow else None
        blocks.append(TypedBlock(ids, mask))
    return blocks


def _typed_ids(part: str, where: str) -> list[int]:
    part = part.strip()
    if ":" in part or "[" in part:
        found = _BRACKETS.search(part)
        if found is None:
            raise InputError(f"{where}: expected a block like [1, 2, 3, 4] or 1 2 3 4")
        part = found.group(0)[1:-1]
    return parse_ids(part, where)
