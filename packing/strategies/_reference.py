"""Straightforward plain-Python versions of the strategies, written for reading, not speed.

They take document lengths (each 1..capacity) and return the block of every
document, with the same tie-breaking rules as the fast versions, so tests can
check the fast paths against them and benchmarks can measure the speed-up; each
strategy's entry in :data:`packing.strategies._registry.STRATEGIES` names its own
(``Strategy.reference``). Each is O(n × blocks) or worse.

Internal: the public names are in ``packing`` and ``packing.strategies``.
"""

from __future__ import annotations

from collections.abc import Sequence


def longest_first(lengths: Sequence[int]) -> list[int]:
    """Indices longest first, ties in input order."""
    return sorted(range(len(lengths)), key=lambda i: -lengths[i])


def next_fit(lengths: Sequence[int], capacity: int) -> list[int]:
    """>>> next_fit([3, 2, 2, 4], 5)
    [0, 0, 1, 2]
    """
    blocks, block, room = [], -1, 0
    for size in lengths:
        if size > room:
            block, room = block + 1, capacity
        room -= size
        blocks.append(block)
    return blocks


def first_fit(lengths: Sequence[int], capacity: int, order: Sequence[int] | None = None) -> list[int]:
    """>>> first_fit([3, 4, 2, 1], 5)
    [0, 1, 0, 1]
    """
    rooms: list[int] = []
    blocks = [0] * len(lengths)
    for item in order if order is not None else range(len(lengths)):
        size = lengths[item]
        for b, room in enumerate(rooms):
            if room >= size:
                rooms[b] -= size
                blocks[item] = b
                break
        else:
            rooms.append(capacity - size)
            blocks[item] = len(rooms) - 1
    return blocks


def first_fit_decreasing(lengths: Sequence[int], capacity: int) -> list[int]:
    """>>> first_fit_decreasing([1, 4, 3, 2], 5)
    [0, 0, 1, 1]
    """
    return first_fit(lengths, capacity, longest_first(lengths))


def best_fit_decreasing(lengths: Sequence[int], capacity: int, tie_break: str = "newest") -> list[int]:
    """Fullest block that fits; among equally full ones, the one that reached that room most recently
    (``tie_break="oldest"``: the one that reached it first).

    >>> best_fit_decreasing([2, 4, 3, 1], 5)
    [1, 0, 1, 0]
    >>> best_fit_decreasing([3, 3, 1], 4), best_fit_decreasing([3, 3, 1], 4, "oldest")
    ([0, 1, 1], [0, 1, 0])
    """
    sign = -1 if tie_break == "newest" else 1
    rooms: list[int] = []
    touched: list[int] = []
    blocks = [0] * len(lengths)
    for step, item in enumerate(longest_first(lengths)):
        size = lengths[item]
        fits = [b for b, room in enumerate(rooms) if size <= room < capacity]
        if fits:
            b = min(fits, key=lambda b: (rooms[b], sign * touched[b]))
            rooms[b] -= size
            touched[b] = step
        else:
            rooms.append(capacity - size)
            touched.append(step)
            b = len(rooms) - 1
        blocks[item] = b
    return blocks


def shortest_pack_first(lengths: Sequence[int], capacity: int, max_per_block: int | None = None) -> list[list[int]]:
    """The packs (lists of lengths) of shortest-pack-first histogram packing, as Krell et al. 2021 describe it.

    Lengths from longest to shortest; all sequences of one length are placed at once, each pack taking at
    most one, into the packs with the most room that fits (a group of identical packs is split when only
    some of it is needed; among packs with equal room, the group made last goes first); the sequences left
    over open a pack each. A pack leaves play when full or holding ``max_per_block`` sequences.

    >>> shortest_pack_first([2, 3, 2, 1], 5)
    [[3, 2], [2, 1]]
    """
    limit = max_per_block if max_per_block is not None else capacity + 1
    open_packs: dict[int, list[tuple[int, list[int]]]] = {}  # room -> stack of (count, pack)
    closed: list[tuple[int, list[int]]] = []

    def add(count: int, pack: list[int]) -> None:
        room = capacity - sum(pack)
        if room == 0 or len(pack) >= limit:
            closed.append((count, pack))
        else:
            open_packs.setdefault(room, []).append((count, pack))

    for length in range(capacity, 0, -1):
        left = sum(1 for n in lengths if n == length)
        while left:
            fitting = [room for room, stack in open_packs.items() if stack and room >= length]
            if not fitting:
                add(left, [length])
                break
            room = max(fitting)
            count, pack = open_packs[room].pop()
            placed = min(count, left)
            if count > placed:
                open_packs[room].append((count - placed, pack))
            left -= placed
            add(placed, [*pack, length])
    everything = closed + [group for stack in open_packs.values() for group in stack]
    return sorted((pack for count, pack in everything for _ in range(count)), key=lambda p: (-sum(p), p))


def no_packing(lengths: Sequence[int], capacity: int) -> list[int]:
    """>>> no_packing([3, 1], 5)
    [0, 1]
    """
    return list(range(len(lengths)))


def documents(lengths: Sequence[int], capacity: int, overflow: str) -> list[tuple[int, int, int]]:
    """``(sequence, offset, length)`` of every document an overflow policy makes, in input order.

    >>> documents([3, 0, 9], 4, "split")
    [(0, 0, 3), (2, 0, 4), (2, 4, 4), (2, 8, 1)]
    """
    docs = []
    for i, n in enumerate(lengths):
        if overflow == "truncate" and n:
            docs.append((i, 0, min(n, capacity)))
        elif overflow == "drop" and 0 < n <= capacity:
            docs.append((i, 0, n))
        elif overflow == "split":
            docs += [(i, start, min(capacity, n - start)) for start in range(0, n, capacity)]
    return docs
