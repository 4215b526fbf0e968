"""The pricing kernel: a bounded knapsack over the distinct lengths (numba). Internal."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from numba import njit

Int64Array = npt.NDArray[np.int64]


@njit(cache=True, nogil=True)
def bounded_knapsack(
    weights: Int64Array, values: Int64Array, counts: Int64Array, capacity: int
) -> tuple[int, Int64Array]:  # pragma: no cover - compiled
    """Best total value of at most ``counts[i]`` items ``i`` within ``capacity``, and how many of each.

    Each count splits into bundles of 1, 2, 4, ... items, each a 0/1 choice; a bit table remembers the
    choices for the way back. O(capacity × bundles), bundles = sum of log2(min(count, capacity / weight)).
    """
    m = weights.shape[0]
    bundles = 0
    for i in range(m):
        left = min(counts[i], capacity // weights[i]) if values[i] > 0 else 0
        step = 1
        while left > 0:
            left -= min(step, left)
            step *= 2
            bundles += 1
    bundle_item = np.empty(bundles, dtype=np.int64)
    bundle_size = np.empty(bundles, dtype=np.int64)
    j = 0
    for i in range(m):
        left = min(counts[i], capacity // weights[i]) if values[i] > 0 else 0
        step = 1
        while left > 0:
            take = min(step, left)
            bundle_item[j] = i
            bundle_size[j] = take
            left -= take
            step *= 2
            j += 1
    best = np.zeros(capacity + 1, dtype=np.int64)
    chosen = np.zeros((bundles, capacity + 1), dtype=np.bool_)
    for j in range(bundles):
        weight = weights[bundle_item[j]] * bundle_size[j]
        gain = values[bundle_item[j]] * bundle_size[j]
        for room in range(capacity, weight - 1, -1):
            candidate = best[room - weight] + gain
            if candidate > best[room]:
                best[room] = candidate
                chosen[j, room] = True
    take_count = np.zeros(m, dtype=np.int64)
    room = capacity
    for j in range(bundles - 1, -1, -1):
        if chosen[j, room]:
            take_count[bundle_item[j]] += bundle_size[j]
            room -= weights[bundle_item[j]] * bundle_size[j]
    return best[capacity], take_count
