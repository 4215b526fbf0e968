"""Step-by-step explanations of how a strategy places each document (for teaching).

The steps replay the real strategy: documents in the order the strategy placed
them, each into the block the planner chose, with the room every block had at
that moment, so the final step shows exactly ``plan``'s blocks.

Internal: the public names are in ``packing`` and ``packing.strategies``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from packing.core._validation import OVERFLOW_POLICIES, OverflowPolicy, as_lengths, check_choice, check_max_seq_length
from packing.errors import TooManyDocuments
from packing.strategies._overflow import Documents, documents_of
from packing.strategies._registry import DEFAULT_STRATEGY, STRATEGIES, Options, StrategyName, assign_blocks

MAX_EXPLAIN_DOCUMENTS = 500


@dataclass(frozen=True)
class Placement:
    """``length`` tokens written into ``block`` from ``position`` on."""

    block: int
    position: int
    length: int


@dataclass(frozen=True)
class Step:
    """One document placed: which tokens of which sequence, where they went, and why.

    ``fill[b]`` is the number of tokens in block ``b`` after this step, for every block opened so far
    (blocks are numbered in the order they open).
    """

    index: int
    sequence: int
    start: int
    length: int
    placements: tuple[Placement, ...]
    opened: bool
    fill: tuple[int, ...]
    reason: str


def _tokens(n: int) -> str:
    return f"{n} token{'s' if n != 1 else ''}"


def _split_steps(docs: Documents, capacity: int) -> list[Step]:
    steps: list[Step] = []
    fill: list[int] = []
    for index, (seq, start, length) in enumerate(zip(docs.sequence, docs.offset, docs.length, strict=True)):
        placements: list[Placement] = []
        left = int(length)
        opened = False
        while left:
            if not fill or fill[-1] == capacity:
                fill.append(0)
                opened = True
            take = min(left, capacity - fill[-1])
            placements.append(Placement(len(fill) - 1, fill[-1], take))
            fill[-1] += take
            left -= take
        first = placements[0]
        if len(placements) == 1:
            reason = f"Appended to block {first.block + 1} at position {first.position}: the classic method fills blocks in input order."
        else:
            reason = (
                f"Only {_tokens(first.length)} fit in block {first.block + 1}, so the sequence is cut: "
                f"the other {_tokens(int(length) - first.length)} "
                f"{'starts' if int(length) - first.length == 1 else 'start'} block {placements[-1].block + 1}."
            )
        steps.append(Step(index, int(seq), int(start), int(length), tuple(placements), opened, tuple(fill), reason))
    return steps


def _reason(strategy: str, size: int, block: int, new: bool, rooms: dict[int, int]) -> str:
    """Why a document of ``size`` went to ``block``, given the room of every open block before it: the strategy's
    :class:`~packing.strategies._registry.Reasons` filled in. O(blocks)."""
    entry = STRATEGIES[strategy]
    reasons, where = entry.reasons, f"block {block + 1}"
    room, most = rooms.get(block, 0), max(rooms.values(), default=0)
    tied = ", ".join(str(b + 1) for b, r in rooms.items() if r == room and b != block) if not new else ""
    words = {
        "where": where,
        "size": _tokens(size),
        "room": room,
        "most": most,
        "current": rooms[max(rooms)] if rooms else 0,
        "tie": f"; block {tied} had the same room, and the block that reached it last wins the tie" if tied else "",
    }
    if not new:
        return reasons.placed.format(**words)
    if not rooms:
        first = "The longest sequence goes first and" if entry.order == "longest_first" else "The first sequence"
        return (reasons.first or f"{first} opens {{where}}.").format(**words)
    return (reasons.opened if most >= size else reasons.full).format(**words)


def explain(
    lengths: npt.ArrayLike,
    max_seq_length: int,
    *,
    strategy: StrategyName = DEFAULT_STRATEGY,
    overflow: OverflowPolicy = "truncate",
    seed: int = 0,
) -> list[Step]:
    """Every placement step of ``strategy`` on these lengths, with a one-sentence reason each.

    Refuses more than ``MAX_EXPLAIN_DOCUMENTS`` documents (``TooManyDocuments``). ``seed`` is
    ``first_fit_shuffle``'s. O(documents × blocks).

    >>> steps = explain([2, 3, 1], 4, strategy="split")
    >>> [s.placements for s in steps][1]
    (Placement(block=0, position=2, length=2), Placement(block=1, position=0, length=1))
    >>> steps[1].reason
    'Only 2 tokens fit in block 1, so the sequence is cut: the other 1 token starts block 2.'
    >>> explain([3, 2, 2], 4, strategy="bfd")[1].reason
    'No open block has 2 tokens of room (the most is 1), so block 2 is opened.'
    """
    capacity = check_max_seq_length(max_seq_length)
    check_choice(strategy, "strategy", STRATEGIES)
    check_choice(overflow, "overflow", OVERFLOW_POLICIES)
    docs = documents_of(as_lengths(lengths), capacity, overflow)
    if len(docs.length) > MAX_EXPLAIN_DOCUMENTS:
        raise TooManyDocuments("explain", MAX_EXPLAIN_DOCUMENTS, len(docs.length))
    if STRATEGIES[strategy].splits_sequences:
        return _split_steps(docs, capacity)
    blocks, order = assign_blocks(strategy, docs.length, capacity, Options(seed=seed))
    num_blocks = int(blocks.max()) + 1 if len(blocks) else 0
    fill = np.zeros(num_blocks, dtype=np.int64)
    rooms: dict[int, int] = {}
    steps: list[Step] = []
    for index, item in enumerate(order.tolist()):
        block, size = int(blocks[item]), int(docs.length[item])
        new = block not in rooms
        reason = _reason(strategy, size, block, new, rooms)
        placement = Placement(block, int(fill[block]), size)
        fill[block] += size
        rooms[block] = capacity - int(fill[block])
        steps.append(
            Step(
                index,
                int(docs.sequence[item]),
                int(docs.offset[item]),
                size,
                (placement,),
                new,
                tuple(fill[: len(rooms)].tolist()),
                reason,
            )
        )
    return steps
