"""What the page works with: the limits it enforces and the ``Dataset`` a source reads (how it is packed is a
``packing.Recipe``, the library's own).

Plain Python (no Streamlit), so every rule here is unit-tested directly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

import packing
from explorer.core.formatting import plural
from packing.core._validation import INT32_MAX, MAX_SEQ_LENGTH

Int64Array = npt.NDArray[np.int64]

MAX_SEQUENCES = 1_000_000
"""Most sequences any source may expand to (pasted, uploaded, generated or sampled)."""
MAX_TOKENS = 16_000_000
"""Most tokens pasted or uploaded token data may hold (about 150 MB as arrays)."""
MAX_LENGTH_TOKENS = 10_000_000_000
"""Most tokens lengths-only data may stand for (generated, sampled or uploaded lengths): the plan of more is
refused before it is built."""
MAX_PIECES = 4_000_000
"""Most pieces (a document, or a part of one cut by ``split``) a plan may expand to, counted from the lengths
before packing: a piece costs a few arrays' entries, so this keeps one plan to some hundred MB."""
MAX_UPLOAD_MB = 200
MAX_PASTE_CHARS = 2_000_000
"""Longest pasted text read (about 400,000 short token ids)."""
MAX_PAD_TOKEN_ID = INT32_MAX
"""The compact schema's largest token id."""
MAX_SEED = INT32_MAX


def grammar_count(count: int, noun: str, nouns: str | None = None) -> str:
    """``count`` with the noun in the right number, thousands separated (``plural`` for every page module).

    >>> grammar_count(0, "block"), grammar_count(1, "block"), grammar_count(2_000, "block")
    ('0 blocks', '1 block', '2,000 blocks')
    """
    return plural(count, noun, nouns)


def seq_length_problem(value: Any) -> str | None:
    """Why ``value`` cannot be a ``max_seq_length``, in plain words (None when it can).

    >>> print(seq_length_problem(0))
    max_seq_length must be a whole number from 1 to 16,777,216 tokens; 0 is too small.
    >>> seq_length_problem(4) is None
    True
    """
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
        return f"max_seq_length must be a whole number from 1 to {MAX_SEQ_LENGTH:,} tokens."
    if value < 1:
        return (
            f"max_seq_length must be a whole number from 1 to {MAX_SEQ_LENGTH:,} tokens; {int(value):,} is too small."
        )
    if value > MAX_SEQ_LENGTH:
        return (
            f"max_seq_length must be a whole number from 1 to {MAX_SEQ_LENGTH:,} tokens (the library's limit); "
            f"{int(value):,} is too large."
        )
    return None


def pieces_of(lengths: Int64Array, max_seq_length: int, strategy: str, overflow: str) -> int:
    """Pieces a plan of ``lengths`` expands to, from the lengths alone (an upper bound): one per sequence, or
    ``ceil(length / max_seq_length)`` per sequence when over-long ones are split (``overflow="split"``), one per
    sequence and per block for the ``split`` strategy (it cuts the stream at every block's end). O(n), in floats so no product overflows.

    >>> pieces_of(np.array([10, 3]), 4, "bfd", "split"), pieces_of(np.array([10, 3]), 4, "bfd", "truncate")
    (4, 2)
    >>> pieces_of(np.array([10, 3]), 4, "split", "truncate")
    6
    """
    values, size = np.asarray(lengths, dtype=np.float64), max(1, max_seq_length)
    if strategy in ("split", "wrapped"):  # the stream cut at every block's end: a piece per sequence and per cut
        pieces = len(values) + float(np.ceil(np.sum(values) / size))
    elif overflow == "split":
        pieces = float(np.sum(np.ceil(values / size)))
    else:
        return len(values)
    return int(min(pieces, 2.0**62))


def plan_problem(lengths: Int64Array, max_seq_length: int, strategy: str, overflow: str) -> str:
    """Why a plan of ``lengths`` is refused before it is built (empty when it is not): more than ``MAX_PIECES``
    pieces (blocks are never more than pieces). One plain line. O(n).

    >>> plan_problem(np.array([2**24] * 10), 1, "bfd", "split")[:60]
    'These settings cut the data into about 167,772,160 pieces; t'
    >>> plan_problem(np.array([5, 3]), 4, "bfd", "split")
    ''
    """
    pieces = pieces_of(lengths, max_seq_length, strategy, overflow)
    if pieces > MAX_PIECES:
        return (
            f"These settings cut the data into about {pieces:,} pieces; the explorer plans up to {MAX_PIECES:,} "
            "at a time. Choose a larger max_seq_length, overflow truncate, or fewer or shorter sequences."
        )
    return ""


@dataclass(frozen=True)
class Dataset:
    """What gets packed: ``lengths`` always; ``samples`` (flat tokens and loss masks) unless lengths only.
    Only arrays are kept, except for text rows: the ``tokenizer`` that read them (resolved once, when the source is
    read, and handed down to every view of it) and, for pasted text rows (at most ``MAX_PASTE_CHARS``), the
    ``rows`` themselves, which the per-turn view renders again."""

    label: str
    lengths: Int64Array
    samples: packing.Samples | None = None
    note: str = ""
    tokenizer: Any = field(default=None, compare=False)
    rows: tuple[Any, ...] = field(default=(), compare=False)

    @property
    def has_tokens(self) -> bool:
        return self.samples is not None

    @property
    def has_masked_tokens(self) -> bool:
        """True if some real token is left out of the loss (a prompt or an explicit 0 in a loss mask)."""
        mask = None if self.samples is None else self.samples.loss_mask
        return mask is not None and bool(np.any(mask == 0))

    @property
    def sequences(self) -> int:
        return len(self.lengths)
