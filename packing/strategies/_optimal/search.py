"""The exhaustive search for small inputs: branch and bound over the documents, longest first. Internal."""

from __future__ import annotations

import time

import numpy as np
import numpy.typing as npt

from packing.strategies._kernels import longest_first_order

Int64Array = npt.NDArray[np.int64]

MAX_OPTIMAL_DOCUMENTS = 40
"""Inputs up to this many documents are solved by an exhaustive search (then proven even where no bound is tight)."""
MAX_OPTIMAL_NODES = 2_000_000
"""Search steps the exhaustive search may take before the general method takes over."""


class SearchTooLarge(Exception):
    pass


def branch_and_bound(lengths: Int64Array, capacity: int, best: Int64Array, target: int, deadline: float) -> Int64Array:
    """Fewest blocks by exhaustive search (documents longest first; equal rooms tried once).

    Raises ``SearchTooLarge`` after ``MAX_OPTIMAL_NODES`` steps or past the deadline. Exponential in the worst case.
    """
    n = len(lengths)
    order = longest_first_order(lengths, capacity)
    best_count = int(best.max()) + 1
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
        if nodes > MAX_OPTIMAL_NODES or (nodes % 4096 == 0 and time.perf_counter() > deadline):
            raise SearchTooLarge
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

    search(0, 0)
    if best_choice is None:
        return best
    blocks = np.empty(n, dtype=np.int64)
    blocks[order] = best_choice
    return blocks
