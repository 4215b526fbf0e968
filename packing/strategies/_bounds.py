"""Lower bounds on the number of blocks any packing needs.

Internal: the public names are in ``packing`` and ``packing.strategies``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from packing.core._arrays import offsets_of
from packing.core._validation import check_max_seq_length
from packing.strategies._overflow import documents

Int64Array = npt.NDArray[np.int64]


class LowerBounds(NamedTuple):
    """``simple`` = ceil(tokens / max_seq_length), exact for the splitting strategy;
    ``l2`` = Martello–Toth L2 (1990), valid when no document may be split; ``l2 >= simple``."""

    simple: int
    l2: int


def simple_bound(total_tokens: int, capacity: int) -> int:
    """ceil(total_tokens / capacity).

    >>> simple_bound(7, 4)
    2
    """
    return -(-int(total_tokens) // capacity)


def martello_toth_l2(lengths: Int64Array, capacity: int) -> int:
    """Martello–Toth L2 bound for packing documents (each 1..capacity) without splitting.

    For every threshold k in [0, capacity/2]: documents longer than capacity - k
    each need a block of their own; documents longer than capacity/2 cannot
    share a block with each other; documents of length in [k, capacity/2] can
    only go into the room the middle ones leave, or new blocks.
    O(n + capacity), vectorised over k.

    >>> martello_toth_l2(np.array([6, 6, 6, 4, 4, 4]), 10)
    3
    >>> martello_toth_l2(np.array([3, 3, 3, 3, 3, 3]), 10)
    2
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    if lengths.size == 0:
        return 0
    count = np.bincount(lengths, minlength=capacity + 1)[: capacity + 1].astype(np.int64)
    tokens = count * np.arange(capacity + 1, dtype=np.int64)
    # prefix sums so that range queries over lengths are O(1)
    count_upto = offsets_of(count)  # count_upto[v] = #docs with length < v
    tokens_upto = offsets_of(tokens)
    half = capacity // 2
    k = np.arange(0, half + 1, dtype=np.int64)

    def in_range(prefix: Int64Array, low: Int64Array | int, high: Int64Array | int) -> Int64Array:
        """Sum over lengths v with low <= v <= high (vectorised over arrays of bounds)."""
        low_a = np.clip(low, 0, capacity + 1)
        high_a = np.clip(np.asarray(high) + 1, 0, capacity + 1)
        result: Int64Array = np.maximum(prefix[high_a] - prefix[low_a], 0)
        return result

    n1 = in_range(count_upto, capacity - k + 1, capacity)
    n2 = in_range(count_upto, capacity // 2 + 1, capacity - k)
    n2_tokens = in_range(tokens_upto, capacity // 2 + 1, capacity - k)
    n3_tokens = in_range(tokens_upto, np.maximum(k, 1), half)
    free_in_n2 = n2 * capacity - n2_tokens
    extra = np.maximum(0, -(-(n3_tokens - free_in_n2) // capacity))
    return int(np.max(n1 + n2 + extra))


def lower_bounds(lengths: npt.ArrayLike, max_seq_length: int, *, overflow: str = "truncate") -> LowerBounds:
    """Both lower bounds for ``lengths`` once ``overflow`` has been applied to over-long ones. O(n + L).

    >>> lower_bounds([6, 6, 6, 4, 4, 4], 10)
    LowerBounds(simple=3, l2=3)
    >>> lower_bounds([7, 7, 7], 10)
    LowerBounds(simple=3, l2=3)
    """
    capacity = check_max_seq_length(max_seq_length)
    docs = documents(lengths, capacity, overflow)
    return LowerBounds(
        simple=simple_bound(int(docs.length.sum()), capacity),
        l2=martello_toth_l2(docs.length, capacity),
    )
