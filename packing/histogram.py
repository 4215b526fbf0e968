"""Shortest-pack-first histogram packing (SPFHP).

Krell et al. 2021, "Efficient Sequence Packing without Cross-contamination"
(arXiv 2107.02027). The algorithm never looks at single sequences: it walks the
histogram of lengths from the longest length down, and puts all sequences of
one length at once into the open pack *types* with the most room left that
still fits (the "shortest" packs), splitting a group of identical packs when
only some of them receive a sequence. Its cost depends on the number of
distinct lengths and pack types, not on the number of sequences, which is what
makes it fast on huge datasets; sequences are dealt out to the packs afterwards.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import numpy.typing as npt

from packing.kernels import shortest_first_order

Int64Array = npt.NDArray[np.int64]
PackType = tuple[int, ...]


def spfhp_pack_types(
    histogram: Int64Array, capacity: int, max_per_block: int | None = None
) -> list[tuple[int, PackType]]:
    """Pack types and how often each is used, from ``histogram[l]`` = number of sequences of length ``l``.

    Lengths in a pack type are in the order they were placed (longest first).
    O(capacity × pack types).

    >>> spfhp_pack_types(np.array([0, 0, 2, 1, 0, 0]), 5)
    [(1, (3, 2)), (1, (2,))]
    """
    limit = max_per_block if max_per_block is not None else capacity + 1
    # open[room] = stack of [count, pack] groups with that much room left
    open_packs: dict[int, list[tuple[int, PackType]]] = defaultdict(list)
    done: list[tuple[int, PackType]] = []

    def add(pack: PackType, count: int, room: int) -> None:
        if room == 0 or len(pack) >= limit:
            done.append((count, pack))
        else:
            open_packs[room].append((count, pack))

    for length in range(capacity, 0, -1):
        remaining = int(histogram[length]) if length < len(histogram) else 0
        room = capacity
        while remaining > 0 and room >= length:
            groups = open_packs.get(room)
            if not groups:
                room -= 1
                continue
            count, pack = groups.pop()
            if not groups:
                del open_packs[room]
            placed = min(count, remaining)
            if count > placed:
                open_packs[room].append((count - placed, pack))
            remaining -= placed
            add((*pack, length), placed, room - length)
        if remaining > 0:
            add((length,), remaining, capacity - length)
    for groups in open_packs.values():
        done.extend(groups)
    return done


def spfhp_blocks(lengths: Int64Array, capacity: int, max_per_block: int | None = None) -> Int64Array:
    """Block of every document under SPFHP; sequences of one length fill packs in input order.

    O(n + capacity × pack types).

    >>> spfhp_blocks(np.array([2, 3, 2]), 5).tolist()
    [0, 0, 1]
    """
    histogram = np.bincount(lengths, minlength=capacity + 1).astype(np.int64)
    types = spfhp_pack_types(histogram, capacity, max_per_block)
    # Documents of each length in input order: a stable counting sort.
    order = shortest_first_order(lengths, capacity)
    first_of_length = np.zeros(capacity + 2, dtype=np.int64)
    np.cumsum(histogram, out=first_of_length[1:])
    taken = np.zeros(capacity + 1, dtype=np.int64)
    blocks = np.empty(len(lengths), dtype=np.int64)
    next_block = 0
    for count, pack in types:
        block_ids = np.arange(next_block, next_block + count, dtype=np.int64)
        for length in set(pack):
            per_block = pack.count(length)
            need = count * per_block
            start = first_of_length[length] + taken[length]
            items = order[start : start + need]
            blocks[items] = np.repeat(block_ids, per_block)
            taken[length] += need
        next_block += count
    return blocks
