"""Turn sequence lengths into documents: what the strategies actually place.

A document is a run of tokens ``[offset, offset + length)`` of one input
sequence, with ``1 <= length <= max_seq_length``. Empty sequences give no
document; an over-long sequence gives one, several or none, by the overflow
policy, or (``error``) a :class:`~packing.errors.SequenceTooLong` naming the first one.

Internal: the public names are in ``packing`` and ``packing.strategies``.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from packing.core._arrays import ranges
from packing.core._validation import OVERFLOW_POLICIES, as_lengths, check_choice, check_max_seq_length
from packing.errors import SequenceTooLong
from packing.strategies._kernels import all_within

Int64Array = npt.NDArray[np.int64]


class Documents:
    """Parallel arrays, one entry per document, in input order: ``sequence``, ``offset``, ``length``.

    ``whole`` is True when document i is all of sequence i (nothing empty, cut or left out); then
    ``sequence`` and ``offset`` may be left out (``None``) and are made on first use.
    """

    __slots__ = ("_offset", "_sequence", "length", "whole")

    def __init__(
        self, sequence: Int64Array | None, offset: Int64Array | None, length: Int64Array, whole: bool = False
    ) -> None:
        if not whole and (sequence is None or offset is None):
            raise ValueError("only whole documents may leave out their sequences and offsets")
        self._sequence = sequence
        self._offset = offset
        self.length = length
        self.whole = whole

    @property
    def sequence(self) -> Int64Array:
        if self._sequence is None:
            self._sequence = np.arange(len(self.length), dtype=np.int64)
        return self._sequence

    @property
    def offset(self) -> Int64Array:
        if self._offset is None:
            self._offset = np.zeros(len(self.length), dtype=np.int64)
        return self._offset


def documents(lengths: npt.ArrayLike, max_seq_length: int, overflow: str = "truncate") -> Documents:
    """The documents that ``overflow`` makes of sequences with these ``lengths``. O(n + documents).

    >>> documents([3, 0, 9], 4, "split").length.tolist()
    [3, 4, 4, 1]
    >>> documents([3, 0, 9], 4, "split").offset.tolist()
    [0, 0, 4, 8]
    >>> documents([3, 0, 9], 4, "drop").sequence.tolist()
    [0]
    >>> documents([3, 0, 9], 4, "error")
    Traceback (most recent call last):
    ...
    packing.errors.SequenceTooLong: sample 2: expected at most max_seq_length=4 tokens (overflow='error'), got 9 tokens
    """
    capacity = check_max_seq_length(max_seq_length)
    check_choice(overflow, "overflow", OVERFLOW_POLICIES)
    return documents_of(as_lengths(lengths), capacity, overflow)


def documents_of(n: Int64Array, capacity: int, overflow: str) -> Documents:
    """``documents`` for arguments that are already checked."""
    if all_within(n, 1, capacity):  # the common case: sequences and offsets are made only if asked for
        return Documents(None, None, n, whole=True)
    index = np.arange(len(n), dtype=np.int64)
    if overflow == "error":
        check_within(n, capacity)
        keep = n > 0
        return Documents(index[keep], np.zeros(int(keep.sum()), dtype=np.int64), n[keep])
    if overflow == "truncate":
        keep = n > 0
        return Documents(index[keep], np.zeros(int(keep.sum()), dtype=np.int64), np.minimum(n[keep], capacity))
    if overflow == "drop":
        keep = (n > 0) & (n <= capacity)
        return Documents(index[keep], np.zeros(int(keep.sum()), dtype=np.int64), n[keep])
    pieces = -(-n // capacity)
    sequence = np.repeat(index, pieces)
    offset = ranges(np.zeros(len(pieces), dtype=np.int64), pieces) * capacity  # each piece's place in its sequence
    length = np.minimum(n[sequence] - offset, capacity)
    return Documents(sequence, offset, length)


def check_within(lengths: Int64Array, capacity: int) -> None:
    """Raise :class:`~packing.errors.SequenceTooLong` for the first of ``lengths`` above ``capacity``
    (``overflow="error"``). O(n).

    >>> check_within(np.array([2, 5, 7]), 4)
    Traceback (most recent call last):
    ...
    packing.errors.SequenceTooLong: sample 1: expected at most max_seq_length=4 tokens (overflow='error'), got 5 tokens
    """
    over = np.flatnonzero(lengths > capacity)
    if len(over):
        first = int(over[0])
        raise SequenceTooLong(first, int(lengths[first]), capacity)
