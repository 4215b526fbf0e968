"""Showing what users typed, linked or uploaded without letting it become part of the page.

User text never goes into Markdown: ``quote`` cuts it to a few dozen characters and ``escape`` neutralises
every character Streamlit's Markdown (and the HTML it allows) would interpret. Library errors are worded from
their fields (``describe``), never parsed.
"""

from __future__ import annotations

import re
from collections.abc import Callable

QUOTE_LIMIT = 40
_MARKDOWN = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~:$&=\"'])")


def quote(value: object, limit: int = QUOTE_LIMIT) -> str:
    """``repr`` of ``value`` cut to ``limit`` characters with an ellipsis.

    >>> quote("x" * 100, 10)
    "'xxxxxxxx…"
    >>> quote(12)
    '12'
    """
    text = value if isinstance(value, str) and value.startswith(("'", '"')) else _safe_repr(value, limit)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _safe_repr(value: object, limit: int) -> str:
    if isinstance(value, str):
        return repr(value[: limit + 1])
    if isinstance(value, int) and not isinstance(value, bool):
        digits = len(str(abs(value))) if abs(value) < 10**400 else 401
        return str(value) if digits <= limit else f"an integer of {'more than 400' if digits > 400 else digits} digits"
    try:
        return repr(value)[: limit + 1]
    except Exception:  # a repr that fails (recursion, huge ints) must not take the message down
        return type(value).__name__


def escape(text: str) -> str:
    """``text`` with every Markdown/HTML character escaped, safe inside ``st.markdown`` and friends.

    >>> escape("[Click](https://x.y) ![i](u) <b>")
    '\\\\[Click\\\\]\\\\(https\\\\://x\\\\.y\\\\) \\\\!\\\\[i\\\\]\\\\(u\\\\) \\\\<b\\\\>'
    """
    return _MARKDOWN.sub(r"\\\1", text)


def one_line(text: str, limit: int = 300) -> str:
    """The first line of ``text``, cut to ``limit`` characters: a message never repeats the data.

    >>> one_line("a\\nb"), one_line("z" * 5, 3)
    ('a', 'zz…')
    """
    first = text.strip().splitlines()[0] if text.strip() else ""
    return first if len(first) <= limit else first[: limit - 1] + "…"


def describe(error: BaseException, where: str = "", name_sample: Callable[[int], str] | None = None) -> str:
    """One line for an error the library (or a parser) raised on purpose, formatted from its fields when it has
    them (``packing.SampleError``: sample, field, position, expected, got), else its own short message.

    >>> describe(ValueError("sample 1, position 1: expected a non-negative integer token id, got -4"))
    'sample 1, position 1: expected a non-negative integer token id, got -4'
    """
    expected = getattr(error, "expected", None)
    if isinstance(expected, str) and hasattr(error, "got"):
        parts = [where] if where else []
        sample = getattr(error, "sample", None)
        if isinstance(sample, int):
            parts.append(name_sample(sample) if name_sample else f"sample {sample}")
        field = getattr(error, "field", None)
        if field:
            parts.append(f"'{field}'")
        position = getattr(error, "position", None)
        if isinstance(position, int):
            parts.append(f"position {position}")
        return one_line(f"{', '.join(parts)}: expected {expected}, got {getattr(error, 'got', '')}".lstrip(": "))
    if isinstance(error, RecursionError):
        return one_line(f"{where + ': ' if where else ''}the data is nested too deeply to read")
    if isinstance(error, MemoryError):
        return one_line(f"{where + ': ' if where else ''}the data expands to more than this server can hold")
    message = one_line(str(error)) or type(error).__name__
    return f"{where}: {message}" if where and not message.startswith(where) else message
