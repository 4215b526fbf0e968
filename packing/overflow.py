"""Turn sequence lengths into documents: what the strategies actually place.

A document is a run of tokens ``[offset, offset + length)`` of one input
sequence, with ``1 <= length <= max_seq_length``. Empty sequences give no
document; an over-long sequence gives one, several or none, by the overflow
policy.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from packing.validation import OVERFLOW_POLICIES, as_lengths, check_choice, check_max_seq_length

Int64Array = npt.NDArray[np.int64]


class Documents(NamedTuple):
    """Parallel arrays, one entry per document, in input order.

    ``whole`` is True when document i is all of sequence i (nothing empty, cut or left out).
    """

    sequence: Int64Array
    offset: Int64Array
    length: Int64Array
    whole: bool = False


def documents(lengths: npt.ArrayLike, max_seq_length: int, overflow: str = "truncate") -> Documents:
    """The documents that ``overflow`` makes of sequences with these ``lengths``. O(n + documents).

    >>> documents([3, 0, 9], 4, "split").length.tolist()
    [3, 4, 4, 1]
    >>> documents([3, 0, 9], 4, "split").offset.tolist()
    [0, 0, 4, 8]
    >>> documents([3, 0, 9], 4, "drop").sequence.tolist()
    [0]
    """
    capacity = check_max_seq_length(max_seq_length)
    check_choice(overflow, "overflow policy", OVERFLOW_POLICIES)
    return documents_of(as_lengths(lengths), capacity, overflow)


def documents_of(n: Int64Array, capacity: int, overflow: str) -> Documents:
    """``documents`` for arguments that are already checked."""
    index = np.arange(len(n), dtype=np.int64)
    if len(n) == 0 or (n.min() >= 1 and n.max() <= capacity):
        return Documents(index, np.zeros(len(n), dtype=np.int64), n, whole=True)
    if overflow == "truncate":
        keep = n > 0
        return Documents(index[keep], np.zeros(int(keep.sum()), dtype=np.int64), np.minimum(n[keep], capacity))
    if overflow == "drop":
        keep = (n > 0) & (n <= capacity)
        return Documents(index[keep], np.zeros(int(keep.sum()), dtype=np.int64), n[keep])
    pieces = -(-n // capacity)
    sequence = np.repeat(index, pieces)
    first_piece = np.repeat(np.cumsum(pieces) - pieces, pieces)
    offset = (np.arange(len(sequence), dtype=np.int64) - first_piece) * capacity
    length = np.minimum(n[sequence] - offset, capacity)
    return Documents(sequence, offset, length)
