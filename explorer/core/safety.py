"""Showing what users typed, linked or uploaded without letting it become part of the page.

User text never goes into Markdown: ``quote`` cuts it to a few dozen characters and ``escape`` neutralises
every character Streamlit's Markdown (and the HTML it allows) would interpret. Library errors are worded from
their fields (``describe``), never parsed.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import packing
import packing.errors

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


_AUTOLINK = re.compile(r"(?i)(https?|ftp|mailto|file|data|javascript)(:)|\b(www)(\.)|(@)")
WORD_JOINER = "\u2060"
"""An invisible character put inside ``https:``, ``www.`` and ``@`` so Markdown's autolinking finds no address."""


def escape(text: str) -> str:
    """``text`` with every Markdown/HTML character escaped and autolinks broken: safe inside ``st.markdown``,
    ``st.warning`` and friends, shown exactly as typed.

    >>> escape("[Click](https://x.y) <b>").replace(WORD_JOINER, "~")
    '\\\\[Click\\\\]\\\\(https~\\\\://x\\\\.y\\\\) \\\\<b\\\\>'
    """
    joined = _AUTOLINK.sub(
        lambda m: WORD_JOINER.join(g for g in m.groups() if g) if not m.group(5) else "@" + WORD_JOINER, text
    )
    return _MARKDOWN.sub(r"\\\1", joined)


def one_line(text: str, limit: int = 300) -> str:
    """The first line of ``text``, cut to ``limit`` characters: a message never repeats the data.

    >>> one_line("a\\nb"), one_line("z" * 5, 3)
    ('a', 'zz…')
    """
    first = text.strip().splitlines()[0] if text.strip() else ""
    return first if len(first) <= limit else first[: limit - 1] + "…"


def describe(error: BaseException, where: str = "", name_sample: Callable[[int], str] | None = None) -> str:
    """One line for an error the library (or a parser) raised on purpose: the library's own wording
    (``packing.errors.one_line``, the one the command line prints), cut to a line; ``name_sample`` says how to
    call sample ``i`` (a pasted line); a parser's recursion or memory error in plain words.

    >>> describe(packing.SampleError(1, None, 1, "a non-negative integer token id", -4), name_sample=lambda i: f"line {i + 1}")
    'line 2, position 1: expected a non-negative integer token id, got -4'
    >>> describe(packing.DatasetError("a.csv", "line 3", "not valid UTF-8 text"))
    'a.csv, line 3: not valid UTF-8 text'
    """
    prefix = f"{where}: " if where else ""
    if isinstance(error, RecursionError):
        return one_line(f"{prefix}the data is nested too deeply to read")
    if isinstance(error, MemoryError):
        return one_line(f"{prefix}the data expands to more than this server can hold")
    message = one_line(packing.errors.one_line(error, sample=name_sample)) or type(error).__name__
    if not where or message.startswith(where):
        return message
    return f"{where}, {message}" if isinstance(error, packing.SampleError) else f"{where}: {message}"


def plot_text(text: str) -> str:
    """``text`` for a Plotly label or hover: ``&``, ``<`` and ``>`` as entities, so none of the tags Plotly
    renders (``<a href>``, ``<b>``, ``<br>``) can come from user text; Plotly shows the characters as typed.

    >>> plot_text("<a href='x'>&</a>")
    "&lt;a href='x'&gt;&amp;&lt;/a&gt;"
    """
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
