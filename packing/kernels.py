"""Compiled inner loops of the no-split strategies.

Every function here works on documents that are already at most ``capacity``
tokens long and at least 1 token long (the planner guarantees both). Each loop
is compiled once by numba and cached on disk next to this file, so later
processes start without compiling.

Block numbers are given in the order blocks are opened.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from numba import njit

Int64Array = npt.NDArray[np.int64]


@njit(cache=True, nogil=True)
def next_fit_blocks(lengths: Int64Array, capacity: int) -> Int64Array:  # pragma: no cover - compiled
    """Block of every document when each one that does not fit closes the block. O(n)."""
    n = lengths.shape[0]
    blocks = np.empty(n, dtype=np.int64)
    block = -1
    room = 0
    for i in range(n):
        size = lengths[i]
        if size > room:
            block += 1
            room = capacity
        room -= size
        blocks[i] = block
    return blocks


@njit(cache=True, nogil=True)
def first_fit_blocks(lengths: Int64Array, order: Int64Array, capacity: int) -> Int64Array:  # pragma: no cover
    """Block of every document, placing them in ``order``, each into the first block with room.

    A max-segment tree over block rooms finds the leftmost block with enough
    room in O(log n); unopened blocks have full room, so the leftmost fitting
    block is a new one exactly when no open block fits. O(n log n).
    """
    n = order.shape[0]
    blocks = np.empty(lengths.shape[0], dtype=np.int64)
    size = 1
    while size < max(n, 1):
        size *= 2
    tree = np.full(2 * size, capacity, dtype=np.int64)
    for k in range(n):
        item = order[k]
        need = lengths[item]
        node = 1
        while node < size:
            node = 2 * node if tree[2 * node] >= need else 2 * node + 1
        blocks[item] = node - size
        tree[node] -= need
        node //= 2
        while node >= 1:
            left = tree[2 * node]
            right = tree[2 * node + 1]
            tree[node] = left if left > right else right
            node //= 2
    return blocks


@njit(cache=True, nogil=True)
def _first_nonempty_at_or_after(counts: Int64Array, size: int, start: int) -> int:  # pragma: no cover
    """Smallest leaf index >= ``start`` whose count is positive, or -1 (sum-segment tree)."""
    node = start + size
    if counts[node] > 0:
        return start
    while node > 1:
        if node % 2 == 0 and counts[node + 1] > 0:
            node += 1
            while node < size:
                node = 2 * node if counts[2 * node] > 0 else 2 * node + 1
            return node - size
        node //= 2
    return -1


@njit(cache=True, nogil=True)
def _add_count(counts: Int64Array, size: int, leaf: int, delta: int) -> None:  # pragma: no cover
    node = leaf + size
    while node >= 1:
        counts[node] += delta
        node //= 2


@njit(cache=True, nogil=True)
def best_fit_blocks(lengths: Int64Array, order: Int64Array, capacity: int) -> Int64Array:  # pragma: no cover
    """Block of every document, placing them in ``order``, each into the fullest block it fits.

    Open blocks are kept in one stack per amount of room left; a sum-segment
    tree over the room values finds the smallest room >= the document in
    O(log capacity). Among blocks with equal room, the one that reached that
    room most recently wins. O(n log capacity + capacity).
    """
    n = order.shape[0]
    blocks = np.empty(lengths.shape[0], dtype=np.int64)
    size = 1
    while size < capacity + 1:
        size *= 2
    counts = np.zeros(2 * size, dtype=np.int64)
    head = np.full(capacity + 1, -1, dtype=np.int64)
    below = np.empty(n, dtype=np.int64)  # next block down the same stack
    room = np.empty(n, dtype=np.int64)
    opened = 0
    for k in range(n):
        item = order[k]
        need = lengths[item]
        best = _first_nonempty_at_or_after(counts, size, need)
        if best == -1:
            block = opened
            opened += 1
            room[block] = capacity
        else:
            block = head[best]
            head[best] = below[block]
            _add_count(counts, size, best, -1)
        blocks[item] = block
        room[block] -= need
        left = room[block]
        if left > 0:
            below[block] = head[left]
            head[left] = block
            _add_count(counts, size, left, 1)
    return blocks


@njit(cache=True, nogil=True)
def stable_order_by_key(keys: Int64Array, num_keys: int) -> Int64Array:  # pragma: no cover
    """Indices sorting ``keys`` (each in ``[0, num_keys)``) ascending, ties in input order.

    A counting sort: O(n + num_keys).
    """
    counts = np.zeros(num_keys + 1, dtype=np.int64)
    for i in range(keys.shape[0]):
        counts[keys[i] + 1] += 1
    for v in range(1, num_keys + 1):
        counts[v] += counts[v - 1]
    order = np.empty(keys.shape[0], dtype=np.int64)
    for i in range(keys.shape[0]):
        key = keys[i]
        order[counts[key]] = i
        counts[key] += 1
    return order


def longest_first_order(lengths: Int64Array, capacity: int) -> Int64Array:
    """Indices of ``lengths`` (each in ``[0, capacity]``) longest first, ties in input order. O(n + capacity)."""
    return stable_order_by_key(capacity - lengths, capacity + 1)


def shortest_first_order(lengths: Int64Array, capacity: int) -> Int64Array:
    """Indices of ``lengths`` (each in ``[0, capacity]``) shortest first, ties in input order. O(n + capacity)."""
    return stable_order_by_key(lengths, capacity + 1)


@njit(cache=True, nogil=True)
def group_by_block(
    blocks: Int64Array, order: Int64Array, num_blocks: int
) -> tuple[Int64Array, Int64Array]:  # pragma: no cover
    """Documents grouped by block (stable in ``order``) and the CSR offsets of each block. O(n)."""
    starts = np.zeros(num_blocks + 1, dtype=np.int64)
    for k in range(order.shape[0]):
        starts[blocks[order[k]] + 1] += 1
    for b in range(num_blocks):
        starts[b + 1] += starts[b]
    fill = starts[:-1].copy()
    grouped = np.empty(order.shape[0], dtype=np.int64)
    for k in range(order.shape[0]):
        item = order[k]
        b = blocks[item]
        grouped[fill[b]] = item
        fill[b] += 1
    return grouped, starts
