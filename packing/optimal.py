"""The proven minimum number of blocks for small inputs (exact bin packing).

Branch and bound: documents longest first; each goes into an open block with
room (trying each distinct amount of room only once, since blocks with equal
room are interchangeable) or a new block. Best-fit decreasing gives the first
upper bound; the Martello–Toth L2 bound gives the target, and the search stops
as soon as a packing meets it. A branch is cut when even perfectly filling the
open blocks' room could not beat the best packing found. Exponential in the
worst case, so it refuses more than ``MAX_OPTIMAL_DOCUMENTS`` documents and
gives up (with a clear error) after ``MAX_OPTIMAL_NODES`` search steps.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from packing.bounds import martello_toth_l2, simple_bound
from packing.kernels import best_fit_decreasing_layout, blocks_of_items, longest_first_order

Int64Array = npt.NDArray[np.int64]

MAX_OPTIMAL_DOCUMENTS = 40
MAX_OPTIMAL_NODES = 2_000_000


class _SearchTooLarge(Exception):
    pass


def optimal_blocks(lengths: Int64Array, capacity: int) -> Int64Array:
    """Block of every document in a packing with the fewest blocks possible.

    >>> int(optimal_blocks(np.array([4, 3, 3, 2, 2, 2]), 8).max()) + 1
    2
    """
    n = len(lengths)
    if n > MAX_OPTIMAL_DOCUMENTS:
        raise ValueError(
            f"strategy 'optimal' proves the minimum only for up to {MAX_OPTIMAL_DOCUMENTS} sequences "
            f"(counted after the overflow policy); this input has {n:,}. Use 'bfd', which is within a few "
            f"blocks of optimal on real data."
        )
    order = longest_first_order(lengths, capacity)
    best = blocks_of_items(*best_fit_decreasing_layout(lengths, capacity))
    if n == 0:
        return best
    target = max(simple_bound(int(lengths.sum()), capacity), martello_toth_l2(lengths, capacity))
    best_count = int(best.max()) + 1
    if best_count == target:
        return best
    sizes = lengths[order].tolist()
    suffix = np.concatenate((np.cumsum(np.asarray(sizes)[::-1])[::-1], [0])).tolist()
    rooms: list[int] = []
    chosen = [0] * n
    best_choice: list[int] | None = None
    nodes = 0

    def search(i: int, free: int) -> bool:
        """Place documents i.. ; True once a packing with ``target`` blocks is found."""
        nonlocal best_count, best_choice, nodes
        nodes += 1
        if nodes > MAX_OPTIMAL_NODES:
            raise _SearchTooLarge
        if i == n:
            best_count, best_choice = len(rooms), chosen.copy()
            return best_count == target
        overflow_tokens = suffix[i] - free
        if len(rooms) + max(0, -(-overflow_tokens // capacity)) >= best_count:
            return False
        size = sizes[i]
        tried: set[int] = set()
        for b, room in enumerate(rooms):
            if room >= size and room not in tried:
                tried.add(room)
                rooms[b] -= size
                chosen[i] = b
                if search(i + 1, free - size):
                    return True
                rooms[b] += size
        if len(rooms) + 1 < best_count:
            rooms.append(capacity - size)
            chosen[i] = len(rooms) - 1
            found = search(i + 1, free + capacity - size)
            rooms.pop()
            if found:
                return True
        return False

    try:
        search(0, 0)
    except _SearchTooLarge:
        raise ValueError(
            f"strategy 'optimal' could not prove the minimum within {MAX_OPTIMAL_NODES:,} search steps "
            f"for these {n} documents; use 'bfd' instead"
        ) from None
    if best_choice is None:
        return best
    blocks = np.empty(n, dtype=np.int64)
    blocks[order] = best_choice
    return blocks
