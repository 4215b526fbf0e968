"""Compiled inner loops of the no-split strategies.

Every function here works on documents that are already at most ``capacity``
tokens long and at least 1 token long (the planner guarantees both). Each loop
is compiled once by numba and cached on disk next to this file, so later
processes start without compiling.

Block numbers are given in the order blocks are opened.

The decreasing strategies (bfd, spfhp, ffd) never place documents one at a
time: they simulate a whole length class at once over groups of identical
blocks, recording "runs" (the next documents of this length go to these
blocks), and ``_deal`` turns the runs into blocks in one pass. Large arrays
are allocated with numpy, not inside compiled code: numpy asks the kernel for
huge pages, which makes first touching them several times cheaper.

Internal: the public names are in ``packing`` and ``packing.strategies``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
from numba import njit

from packing.core._arrays import row_of

Int64Array = npt.NDArray[np.int64]
Int32Array = npt.NDArray[np.int32]
IntArray = npt.NDArray[np.integer[Any]]
"""Any integer array (piece arrays are int32, inputs int64)."""
CsrBlocks = tuple[Int64Array, Int32Array, Int32Array]
"""``(block_starts, items, item_lengths)``: blocks in CSR form."""


@njit(cache=True, nogil=True)
def _all_within(values: Int64Array, low: int, high: int) -> bool:  # pragma: no cover
    smallest, largest = low, high
    for i in range(values.shape[0]):  # no early exit: a plain min/max loop vectorizes
        smallest = min(smallest, values[i])
        largest = max(largest, values[i])
    return smallest >= low and largest <= high


def all_within(values: Int64Array, low: int, high: int) -> bool:
    """Whether every value lies in ``[low, high]`` (True when there are none), in one pass. O(n).

    >>> all_within(np.array([3, 1, 4]), 1, 4), all_within(np.array([3, 0]), 1, 4)
    (True, False)
    """
    return bool(_all_within(values, low, high))


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
        block = _leftmost_with_room(tree, size, lengths[item])
        blocks[item] = block
        _set_room(tree, size, block, tree[block + size] - lengths[item])
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
def _grow(table: Int64Array) -> Int64Array:  # pragma: no cover
    """A copy of ``table`` (one record a row) with room for twice the records."""
    bigger = np.empty((2 * table.shape[0], table.shape[1]), dtype=table.dtype)
    bigger[: table.shape[0]] = table
    return bigger


@njit(cache=True, nogil=True)
def _last_nonempty(counts: Int64Array, size: int) -> int:  # pragma: no cover
    """Largest leaf index whose count is positive, or -1 (sum-segment tree)."""
    if counts[1] == 0:
        return -1
    node = 1
    while node < size:
        node = 2 * node + 1 if counts[2 * node + 1] > 0 else 2 * node
    return node - size


Simulation = tuple[int, int, Int64Array, int, Int64Array]
"""What a group simulation records: ``(opened, groups, group, runs, run)``: blocks opened, the groups (ranges of
blocks filled together, with the documents each then holds; a row of ``group`` each, columns ``_FIRST``,
``_COUNT``, ``_ITEMS``) and the runs (a row of ``run`` each: ``_PER`` documents of length ``_LENGTH`` into each of
``_TAKE`` blocks ``_FIRST + k × _STEP``, after the ``_BASE`` they already hold)."""
_FIRST, _COUNT, _ITEMS, _TOP_HIGH, _BELOW = range(5)
"""The columns of a simulation's ``group`` table (``_TOP_HIGH``, ``_BELOW``: its stacks, ``_simulate_groups`` only)."""
_STEP, _TAKE, _PER, _BASE, _LENGTH = range(1, 6)
"""The columns of a simulation's ``run`` table after ``_FIRST``."""


@njit(cache=True, nogil=True)
def length_histogram(lengths: Int64Array, capacity: int) -> Int64Array:  # pragma: no cover
    """``histogram[v]``: how many of ``lengths`` (each in ``[0, capacity]``) equal ``v``. O(n + capacity)."""
    histogram = np.zeros(capacity + 1, dtype=np.int64)
    for i in range(lengths.shape[0]):
        histogram[lengths[i]] += 1
    return histogram


@njit(cache=True, nogil=True)
def _deal(
    lengths: Int64Array,
    capacity: int,
    histogram: Int64Array,
    simulation: Simulation,
    by_length: Int32Array,
    block_starts: Int64Array,
    items: Int32Array,
    item_lengths: Int32Array,
) -> None:  # pragma: no cover
    """Write the CSR blocks of a group simulation into ``block_starts``, ``items`` and ``item_lengths``:
    block sizes from the groups, then the j-th document of each length (in input order) takes that
    length's j-th slot among the recorded runs. ``by_length`` is scratch room for n indices.
    O(n + runs + blocks)."""
    n = lengths.shape[0]
    opened, groups, group, runs, run = simulation
    block_starts[0] = 0
    for g in range(groups):  # every block ends in exactly one group: the last one it joined
        size = group[g, _ITEMS]
        for block in range(group[g, _FIRST] + 1, group[g, _FIRST] + group[g, _COUNT] + 1):
            block_starts[block] = size
    for b in range(opened):
        block_starts[b + 1] += block_starts[b]
    next_of_length = np.zeros(capacity + 2, dtype=np.int64)
    for v in range(1, capacity + 1):
        next_of_length[v + 1] = next_of_length[v] + histogram[v]
    for i in range(n):  # indices grouped by length, each group in input order
        v = lengths[i]
        by_length[next_of_length[v]] = i
        next_of_length[v] += 1
    cursor = np.zeros(capacity + 1, dtype=np.int64)
    for r in range(runs):
        length = run[r, _LENGTH]
        source = next_of_length[length] - histogram[length] + cursor[length]
        per_block = run[r, _PER]
        block = run[r, _FIRST]
        base = run[r, _BASE]
        step = run[r, _STEP]
        take = run[r, _TAKE]
        if per_block == 1:
            for _ in range(take):
                slot = block_starts[block] + base
                items[slot] = by_length[source]
                item_lengths[slot] = length
                source += 1
                block += step
        else:
            for _ in range(take):
                slot = block_starts[block] + base
                for k in range(per_block):
                    items[slot + k] = by_length[source + k]
                    item_lengths[slot + k] = length
                source += per_block
                block += step
        cursor[length] += take * per_block


def _csr_blocks(lengths: Int64Array, capacity: int, histogram: Int64Array, simulation: Simulation) -> CsrBlocks:
    """Allocate the CSR arrays of a simulation and deal. O(n + runs + blocks).

    The large arrays come from numpy rather than from compiled code: numpy asks the kernel for huge
    pages, which makes first touching them several times cheaper."""
    n = lengths.shape[0]
    block_starts = np.empty(simulation[0] + 1, dtype=np.int64)
    items = np.empty(n, dtype=np.int32)
    item_lengths = np.empty(n, dtype=np.int32)
    by_length = np.empty(n, dtype=np.int32)
    _deal(lengths, capacity, histogram, simulation, by_length, block_starts, items, item_lengths)
    return block_starts, items, item_lengths


@njit(cache=True, nogil=True)
def _simulate_groups(
    histogram: Int64Array, capacity: int, max_per_block: int, most_room: bool, oldest_first: bool = False
) -> Simulation:  # pragma: no cover
    """Decreasing packing simulated a whole length class at a time: ``(block_starts, items, item_lengths)``.

    Lengths are taken longest first (documents of one length in input order).
    With ``most_room=False`` (best-fit decreasing) a document goes into the open
    block with the least room that fits, so a block with room r takes r // length
    documents of that length in a row, and new blocks take as many as fit. With
    ``most_room=True`` (shortest-pack-first) it goes into the block with the most
    room, one document per block per step, and the documents that fit no block
    get a new block each. Among blocks with equal room, the one that reached that
    room most recently goes first (``oldest_first=True``: the one that reached it
    first, as TRL's best-fit decreasing does). A block is closed when full or when it holds
    ``max_per_block`` documents.

    Identical blocks that share a room form a group, so all documents of one
    length are placed with a few group operations instead of one search each.
    Blocks are numbered as they open, and taking blocks off either end of a group
    leaves ranges, so every group is a range of block numbers with the end its
    stack top is at. Groups sit in one stack per room (a queue with
    ``oldest_first``: groups join at the tail, blocks leave a group from the end
    filled first); a sum-segment tree over
    rooms finds the room to use. The simulation needs only the length histogram
    and records "runs" (the next documents of this length go to these blocks),
    which ``_deal`` turns into blocks. O(capacity + runs × log capacity).
    """
    size = 1
    while size < capacity + 1:
        size *= 2
    tree = np.zeros(2 * size, dtype=np.int64)  # number of groups per room
    head = np.full(capacity + 1, -1, dtype=np.int64)  # top group of each room's stack (head of its queue)
    tail = np.full(capacity + 1, -1, dtype=np.int64)  # last group of each room's queue (oldest_first only)
    # group g: blocks group[g, _FIRST] .. + group[g, _COUNT] - 1, each holding group[g, _ITEMS] documents; its
    # top (the block that reached the room last) is the highest number if group[g, _TOP_HIGH], else the lowest
    group = np.empty((1024, 5), dtype=np.int64)
    run = np.empty((1024, 6), dtype=np.int64)
    groups = 0
    runs = 0
    opened = 0
    for length in range(capacity, 0, -1):
        left = histogram[length]
        while left > 0:
            if groups + 2 > group.shape[0]:
                group = _grow(group)
            if runs + 2 > run.shape[0]:
                run = _grow(run)
            if most_room:
                room = _last_nonempty(tree, size)
                room = room if room >= length else -1
            else:
                room = _first_nonempty_at_or_after(tree, size, length)
            if room == -1:  # nothing fits: open blocks
                per_block = 1 if most_room else min(left, capacity // length)
                take = left // per_block
                first, step, base = opened, 1, 0
                opened += take
                new_room = capacity - per_block * length
            else:  # the top blocks of the top group in that room
                source = head[room]
                per_block = 1 if most_room else room // length
                take = min(group[source, _COUNT], left // per_block)
                if take == 0:
                    take, per_block = 1, left
                base = group[source, _ITEMS]
                # newest first: from the end filled last (the top); oldest first: from the end filled first
                if (group[source, _TOP_HIGH] != 0) != oldest_first:
                    first, step = group[source, _FIRST] + group[source, _COUNT] - 1, -1
                else:
                    first, step = group[source, _FIRST], 1
                    group[source, _FIRST] += take
                group[source, _COUNT] -= take
                if group[source, _COUNT] == 0:
                    head[room] = group[source, _BELOW]
                    if head[room] == -1:
                        tail[room] = -1
                    _add_count(tree, size, room, -1)
                new_room = room - per_block * length
            run[runs, _FIRST], run[runs, _STEP], run[runs, _TAKE] = first, step, take
            run[runs, _PER], run[runs, _BASE], run[runs, _LENGTH] = per_block, base, length
            runs += 1
            left -= take * per_block
            # the blocks just filled form a new group; the last one filled is its top
            group[groups, _FIRST] = first if step == 1 else first - take + 1
            group[groups, _COUNT] = take
            group[groups, _ITEMS] = base + per_block
            group[groups, _TOP_HIGH] = 1 if step == 1 else 0
            if new_room > 0 and base + per_block < max_per_block:
                if not oldest_first:  # on top of the stack
                    group[groups, _BELOW] = head[new_room]
                    head[new_room] = groups
                else:  # at the tail of the queue
                    group[groups, _BELOW] = -1
                    if tail[new_room] == -1:
                        head[new_room] = groups
                    else:
                        group[tail[new_room], _BELOW] = groups
                    tail[new_room] = groups
                _add_count(tree, size, new_room, 1)
            groups += 1
    return opened, groups, group, runs, run


def best_fit_decreasing_blocks(
    lengths: Int64Array, capacity: int, oldest_first: bool = False
) -> tuple[Int64Array, Int32Array, Int32Array]:
    """Best-fit decreasing: ``(block_starts, items, item_lengths)``, block ``b`` holding
    ``items[block_starts[b]:block_starts[b + 1]]`` in placement order. Longest first (ties in input
    order), each document into the open block with the least room that fits; among equal rooms, the
    block that reached it last (``oldest_first``: the one that reached it first, TRL's choice).
    O(n + capacity + runs × log capacity), see ``_simulate_groups``.

    >>> [a.tolist() for a in best_fit_decreasing_blocks(np.array([2, 4, 3, 1]), 5)]
    [[0, 2, 4], [1, 3, 2, 0], [4, 1, 3, 2]]
    >>> [a.tolist() for a in best_fit_decreasing_blocks(np.array([3, 3, 1]), 4, oldest_first=True)][:2]
    [[0, 2, 3], [0, 2, 1]]
    """
    histogram = length_histogram(lengths, capacity)
    simulation = _simulate_groups(histogram, capacity, capacity + 1, False, oldest_first)
    return _csr_blocks(lengths, capacity, histogram, simulation)


def spfhp_blocks(lengths: Int64Array, capacity: int, max_per_block: int) -> tuple[Int64Array, Int32Array, Int32Array]:
    """Shortest-pack-first histogram packing (Krell et al. 2021), in the form of ``best_fit_decreasing_blocks``.

    Longest length first; every sequence of a length goes into the open pack with the most room that
    fits, one per pack per step, and those that fit no pack open a pack each (two of them never share
    one, as in the published algorithm); a pack closes when full or holding ``max_per_block`` sequences.
    O(n + capacity + runs × log capacity), see ``_simulate_groups``.

    >>> [a.tolist() for a in spfhp_blocks(np.array([2, 3, 2, 1]), 5, 6)]
    [[0, 2, 4], [1, 0, 2, 3], [3, 2, 2, 1]]
    """
    histogram = length_histogram(lengths, capacity)
    return _csr_blocks(lengths, capacity, histogram, _simulate_groups(histogram, capacity, max_per_block, True))


@njit(cache=True, nogil=True)
def _leftmost_with_room(tree: Int64Array, size: int, need: int) -> int:  # pragma: no cover
    """Smallest leaf index whose value is at least ``need``, or -1 (max-segment tree). O(log size)."""
    if tree[1] < need:
        return -1
    node = 1
    while node < size:
        node = 2 * node if tree[2 * node] >= need else 2 * node + 1
    return node - size


@njit(cache=True, nogil=True)
def _set_room(tree: Int64Array, size: int, leaf: int, room: int) -> None:  # pragma: no cover
    """Set one leaf of a max-segment tree and update its ancestors (until one does not change)."""
    node = leaf + size
    tree[node] = room
    node //= 2
    while node >= 1:
        best = max(tree[2 * node], tree[2 * node + 1])
        if tree[node] == best:
            break
        tree[node] = best
        node //= 2


@njit(cache=True, nogil=True)
def _simulate_first_fit(
    histogram: Int64Array, capacity: int, tree: Int64Array, group_blocks: Int64Array, group_items: Int64Array
) -> Simulation:  # pragma: no cover
    """First-fit decreasing simulated a whole length class at a time, recorded as in ``_simulate_groups``.

    Lengths are taken longest first. The first block with room r >= length takes r // length
    documents of that length in a row (the blocks before it still have no room for one), so
    consecutive blocks opened together and filled alike stay together as a group: a range of blocks
    with one room, which takes its documents with one operation. Placing into a group may split it
    in two ranges (the blocks filled, the blocks left as they were); groups never interleave.

    A max-segment tree over block numbers holds each group's room at its first block (0 elsewhere),
    so the first group with room for a length is a search from the root; ``group_blocks`` and
    ``group_items`` hold, at a group's first block, how many blocks it spans and how many documents
    each holds. ``tree`` (zeros, twice a power of two at least the number of blocks) and the other
    two (zeros, that power of two long) are given by the caller. O(capacity + runs × log blocks).
    """
    size = tree.shape[0] // 2
    group = np.empty((1024, 3), dtype=np.int64)
    run = np.empty((1024, 6), dtype=np.int64)
    groups = 0
    runs = 0
    opened = 0
    for length in range(capacity, 0, -1):
        left = histogram[length]
        while left > 0:
            if runs + 1 > run.shape[0]:
                group, run = _grow(group), _grow(run)
            first = _leftmost_with_room(tree, size, length)
            if first == -1:  # no block has room: open blocks, as many documents in each as fit
                per_block = min(left, capacity // length)
                take = left // per_block
                first, base, room, blocks = opened, 0, capacity, take
                if opened + take > size:
                    raise RuntimeError("first-fit simulation: more blocks than its bound")
                opened += take
            else:  # the first blocks of the first group with room
                room, blocks, base = tree[first + size], group_blocks[first], group_items[first]
                per_block = room // length
                take = min(blocks, left // per_block)
                if take == 0:  # fewer documents left than one block takes: all into its first block
                    take, per_block = 1, left
            group_blocks[first] = take
            group_items[first] = base + per_block
            _set_room(tree, size, first, room - per_block * length)
            if blocks > take:  # the rest of the group stays as it was
                group_blocks[first + take] = blocks - take
                group_items[first + take] = base
                _set_room(tree, size, first + take, room)
            run[runs, _FIRST], run[runs, _STEP], run[runs, _TAKE] = first, 1, take
            run[runs, _PER], run[runs, _BASE], run[runs, _LENGTH] = per_block, base, length
            runs += 1
            group[groups, _FIRST], group[groups, _COUNT], group[groups, _ITEMS] = first, take, base + per_block
            groups += 1
            left -= take * per_block
    return opened, groups, group, runs, run


def first_fit_decreasing_blocks(lengths: Int64Array, capacity: int) -> CsrBlocks:
    """First-fit decreasing in the form of ``best_fit_decreasing_blocks``: longest first (ties in input
    order), each document into the first block (in opening order) with room for it.

    Any two blocks of a first-fit packing hold more than ``capacity`` tokens together, so there are
    at most 2 × tokens / capacity + 1 blocks, which sizes the simulation's tree.
    O(n + capacity + runs × log blocks), see ``_simulate_first_fit``.

    >>> [a.tolist() for a in first_fit_decreasing_blocks(np.array([1, 4, 3, 2]), 5)]
    [[0, 2, 4], [1, 0, 2, 3], [4, 1, 3, 2]]
    """
    histogram = length_histogram(lengths, capacity)
    tokens = int(np.dot(histogram, np.arange(capacity + 1, dtype=np.int64)))
    bound = min(len(lengths), 2 * (-(-tokens // capacity)) + 1)
    size = 1
    while size < bound:
        size *= 2
    tree = np.zeros(2 * size, dtype=np.int64)
    group_blocks = np.zeros(size, dtype=np.int64)
    group_items = np.zeros(size, dtype=np.int64)
    simulation = _simulate_first_fit(histogram, capacity, tree, group_blocks, group_items)
    return _csr_blocks(lengths, capacity, histogram, simulation)


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


@njit(cache=True, nogil=True)
def group_by_block(
    blocks: Int64Array, order: Int64Array, num_blocks: int
) -> tuple[Int64Array, Int64Array]:  # pragma: no cover
    """CSR offsets of each block and the documents grouped by block (stable in ``order``). O(n).

    Block ``b`` holds ``grouped[starts[b]:starts[b + 1]]``.
    """
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
    return starts, grouped


@njit(cache=True, nogil=True)
def _tally(
    lengths: Int64Array,
    block_starts: Int64Array,
    piece_sequence: IntArray,
    piece_length: IntArray,
    whole: bool,
    counts: Int64Array,
    fill: Int64Array,
    kept: Int64Array,
    pieces: Int64Array,
) -> None:  # pragma: no cover
    """``tally_plan`` into arrays it is given (``kept`` and ``pieces`` zeroed, unused when ``whole``)."""
    n = lengths.shape[0]
    total = 0
    for p in range(piece_length.shape[0]):
        size = piece_length[p]
        total += size
        if whole and size == 1:
            counts[8] += 1
    counts[0] = total
    for b in range(block_starts.shape[0] - 1):
        tokens = 0
        for p in range(block_starts[b], block_starts[b + 1]):
            tokens += piece_length[p]
        fill[b] = tokens
    if whole:
        counts[7] = total
        return
    for p in range(piece_sequence.shape[0]):
        kept[piece_sequence[p]] += piece_length[p]
        pieces[piece_sequence[p]] += 1
    counts[0] = 0
    for i in range(n):
        counts[0] += kept[i]
        counts[7] += lengths[i]
        if lengths[i] == 0:
            counts[6] += 1
        elif pieces[i] == 0:
            counts[2] += lengths[i]
            counts[4] += 1
        elif kept[i] < lengths[i]:
            counts[1] += lengths[i] - kept[i]
            counts[3] += 1
        if pieces[i] > 1:
            counts[5] += 1
        if pieces[i] > 0 and kept[i] == pieces[i]:
            counts[8] += 1


def tally_plan(
    lengths: Int64Array,
    block_starts: Int64Array,
    piece_sequence: IntArray,
    piece_length: IntArray,
    whole: bool,
) -> tuple[Int64Array, Int64Array]:
    """Counts for the statistics of a plan and the tokens in every block. O(n + pieces).

    Counts, in order: packed tokens, tokens truncated, tokens dropped, sequences
    truncated, sequences dropped, sequences split, empty sequences, input tokens,
    samples whose every piece is one token long (so none of their tokens is a
    training target). ``whole`` says every sequence is one whole piece, which
    skips the per-sequence tally.

    >>> [a.tolist() for a in tally_plan(np.array([3, 1]), np.array([0, 1, 2]), np.array([0, 1]), np.array([3, 1]), True)]
    [[4, 0, 0, 0, 0, 0, 0, 4, 1], [3, 1]]
    """
    counts = np.zeros(9, dtype=np.int64)
    fill = np.empty(len(block_starts) - 1, dtype=np.int64)
    size = 0 if whole else len(lengths)
    kept = np.zeros(size, dtype=np.int64)
    pieces = np.zeros(size, dtype=np.int64)
    _tally(lengths, block_starts, piece_sequence, piece_length, whole, counts, fill, kept, pieces)
    return counts, fill


@njit(cache=True, nogil=True)
def fill_tokens(
    tokens: IntArray,
    mask: npt.NDArray[np.int8],
    unmasked: bool,
    check: bool,
    offsets: Int64Array,
    block_starts: Int64Array,
    piece_sequence: IntArray,
    piece_start: IntArray,
    piece_length: IntArray,
    pad_token_id: int,
    input_ids: IntArray,
    loss_mask: npt.NDArray[np.int8],
) -> int:  # pragma: no cover - compiled
    """Write every block's tokens and loss mask (all ones when ``unmasked``; ``mask`` is then not read),
    then its padding, a piece at a time as contiguous copies; with ``check``, return the largest token id
    written (so a narrow ``input_ids`` can be checked in the same pass), else 0. O(blocks × capacity),
    one sequential pass over the output.

    Serial on purpose: a threaded kernel would make packing unsafe in forked workers (data loaders,
    ``Dataset.map(num_proc=...)``).
    """
    largest = 0
    for b in range(block_starts.shape[0] - 1):
        ids = input_ids[b]
        trained = loss_mask[b]
        pos = 0
        for p in range(block_starts[b], block_starts[b + 1]):
            source = offsets[piece_sequence[p]] + piece_start[p]
            length = piece_length[p]
            if check:
                for k in range(source, source + length):
                    largest = max(largest, tokens[k])
            ids[pos : pos + length] = tokens[source : source + length]
            if unmasked:
                trained[pos : pos + length] = 1
            else:
                trained[pos : pos + length] = mask[source : source + length]
            pos += length
        ids[pos:] = pad_token_id
        trained[pos:] = 0
    return largest


@njit(cache=True, nogil=True)
def split_pieces(
    sequence: Int64Array, offset: Int64Array, length: Int64Array, capacity: int
) -> tuple[Int64Array, Int64Array, Int64Array, Int64Array]:  # pragma: no cover - compiled
    """Documents (each at most ``capacity`` tokens) laid end to end and cut at every multiple of
    ``capacity``: ``(block_starts, piece_sequence, piece_offset, piece_length)``, a document cut in two
    where it crosses a block's end. O(documents), one pass."""
    n = length.shape[0]
    total = 0
    for i in range(n):
        total += length[i]
    block_starts = np.zeros((total + capacity - 1) // capacity + 1, dtype=np.int64)
    pieces = np.empty((3, 2 * n), dtype=np.int64)
    count = 0
    used = 0
    block = 0
    for i in range(n):
        rest = length[i]
        start = offset[i]
        while rest > 0:
            take = min(rest, capacity - used)
            pieces[0, count] = sequence[i]
            pieces[1, count] = start
            pieces[2, count] = take
            count += 1
            start += take
            rest -= take
            used += take
            if used == capacity:
                block += 1
                block_starts[block] = count
                used = 0
    if used > 0:
        block_starts[block + 1] = count
    return block_starts, pieces[0, :count].copy(), pieces[1, :count].copy(), pieces[2, :count].copy()


@njit(cache=True, nogil=True)
def fill_labels(
    input_ids: IntArray,
    loss_mask: npt.NDArray[np.int8],
    block_starts: Int64Array,
    piece_length: IntArray,
    ignore_index: int,
    labels: IntArray,
) -> None:  # pragma: no cover - compiled
    """The training targets of filled blocks: the id where the mask is 1, ``ignore_index`` where it is 0,
    at every document's first token and in padding. O(blocks × capacity), one sequential pass."""
    for b in range(block_starts.shape[0] - 1):
        ids = input_ids[b]
        trained = loss_mask[b]
        out = labels[b]
        for k in range(ids.shape[0]):  # branch-free: vectorizes
            out[k] = ids[k] if trained[k] != 0 else ignore_index
        pos = 0
        for p in range(block_starts[b], block_starts[b + 1]):
            out[pos] = ignore_index
            pos += piece_length[p]


@njit(cache=True, nogil=True)
def fill_positions(
    block_starts: Int64Array, piece_length: IntArray, position_ids: IntArray
) -> None:  # pragma: no cover
    """0, 1, 2, ... restarting at every piece of a block; 0 in padding. O(blocks × capacity): every piece
    is a contiguous copy of the start of one ramp 0, 1, ..., capacity - 1."""
    ramp = np.arange(position_ids.shape[1]).astype(position_ids.dtype)
    for b in range(block_starts.shape[0] - 1):
        out = position_ids[b]
        pos = 0
        for p in range(block_starts[b], block_starts[b + 1]):
            length = piece_length[p]
            out[pos : pos + length] = ramp[:length]
            pos += length
        out[pos:] = 0


@njit(cache=True, nogil=True)
def fill_sequences(
    block_starts: Int64Array,
    piece_sequence: IntArray,
    piece_length: IntArray,
    names: Int64Array,
    sequence_ids: Int32Array,
) -> None:  # pragma: no cover - compiled
    """``names[sequence]`` of every token's source sequence (``names`` empty: the sequence itself); -1 in
    padding. O(blocks × capacity)."""
    named = names.shape[0] > 0
    for b in range(block_starts.shape[0] - 1):
        out = sequence_ids[b]
        pos = 0
        for p in range(block_starts[b], block_starts[b + 1]):
            name = names[piece_sequence[p]] if named else piece_sequence[p]
            out[pos : pos + piece_length[p]] = name
            pos += piece_length[p]
        out[pos:] = -1


def blocks_of_items(block_starts: Int64Array, items: IntArray, *_: IntArray) -> Int64Array:
    """The block of every item, from CSR blocks. O(n).

    >>> blocks_of_items(np.array([0, 2, 3]), np.array([2, 0, 1])).tolist()
    [0, 1, 0]
    """
    blocks = np.empty(len(items), dtype=np.int64)
    blocks[items] = row_of(np.diff(block_starts))
    return blocks


@njit(cache=True, nogil=True)
def piece_mask_sums(
    loss_mask: npt.NDArray[np.int8], offsets: Int64Array, sequence: IntArray, start: IntArray, length: IntArray
) -> tuple[Int64Array, Int64Array]:  # pragma: no cover - compiled
    """Per piece: masked tokens in it, and masked tokens after its first (the training targets). O(tokens)."""
    pieces = len(length)
    trained = np.zeros(pieces, dtype=np.int64)
    targets = np.zeros(pieces, dtype=np.int64)
    for p in range(pieces):
        first = offsets[sequence[p]] + start[p]
        total = 0
        for t in range(first, first + length[p]):
            total += loss_mask[t]
        trained[p] = total
        targets[p] = total - (loss_mask[first] if length[p] > 0 else 0)
    return trained, targets
