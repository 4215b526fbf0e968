"""The packing strategies: names, what they do, and how each assigns documents to blocks.

Every no-split strategy is one function ``(lengths, capacity, max_per_block) ->
(block_starts, items, item_lengths)``: its blocks in CSR form, numbered in the
order they opened, each holding its documents in the order they were placed.
The splitting strategy cuts documents, so the planner handles it apart.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from packing.kernels import (
    IntArray,
    best_fit_decreasing_layout,
    blocks_of_items,
    first_fit_blocks,
    first_fit_decreasing_layout,
    group_by_block,
    longest_first_order,
    next_fit_blocks,
    spfhp_layout,
)
from packing.optimal import MAX_OPTIMAL_DOCUMENTS, optimal_blocks

Int64Array = npt.NDArray[np.int64]
Layout = tuple[Int64Array, IntArray, IntArray]


@dataclass(frozen=True)
class Strategy:
    """One packing strategy as shown to users."""

    name: str
    title: str
    description: str
    complexity: str
    splits_sequences: bool


STRATEGIES: dict[str, Strategy] = {
    s.name: s
    for s in (
        Strategy(
            "split",
            "Split (classic)",
            "Concatenate in input order and cut into blocks; a sequence may continue in the next block.",
            "O(n + blocks)",
            True,
        ),
        Strategy(
            "next_fit",
            "Next-fit",
            "Input order; a sequence that does not fit closes the block and starts a new one.",
            "O(n)",
            False,
        ),
        Strategy(
            "first_fit",
            "First-fit",
            "Input order; each sequence goes into the first open block with room.",
            "O(n log n)",
            False,
        ),
        Strategy(
            "ffd",
            "First-fit decreasing",
            "Longest first; each sequence goes into the first open block with room.",
            "O(n log n)",
            False,
        ),
        Strategy(
            "bfd",
            "Best-fit decreasing",
            "Longest first; each sequence goes into the block with the least room that still fits "
            "(on a tie, the block that reached that room last).",
            "O(n + L + groups × log L), L = max_seq_length",
            False,
        ),
        Strategy(
            "spfhp",
            "Shortest-pack-first histogram packing",
            "Krell et al. 2021: longest length first, each sequence into the pack with the most room; "
            "sequences of a length that fit no pack get a pack each; optional cap on sequences per block.",
            "O(n + L + groups × log L)",
            False,
        ),
        Strategy(
            "optimal",
            "Optimal (proven minimum)",
            f"Branch and bound to the fewest blocks possible; small inputs only "
            f"(at most {MAX_OPTIMAL_DOCUMENTS} sequences).",
            "exponential worst case",
            False,
        ),
        Strategy(
            "none",
            "No packing",
            "Every sequence padded to a block of its own: the baseline packing improves on.",
            "O(n)",
            False,
        ),
    )
}


def _grouped(lengths: Int64Array, blocks: Int64Array, order: Int64Array) -> Layout:
    """CSR form of a block per document, documents in each block in ``order``. O(n)."""
    num_blocks = int(blocks.max()) + 1 if len(blocks) else 0
    block_starts, items = group_by_block(blocks, order, num_blocks)
    return block_starts, items, lengths[items]


def _none(lengths: Int64Array, capacity: int, max_per_block: int) -> Layout:
    order = np.arange(len(lengths), dtype=np.int64)
    return _grouped(lengths, order, order)


def _next_fit(lengths: Int64Array, capacity: int, max_per_block: int) -> Layout:
    return _grouped(lengths, next_fit_blocks(lengths, capacity), np.arange(len(lengths), dtype=np.int64))


def _first_fit(lengths: Int64Array, capacity: int, max_per_block: int) -> Layout:
    order = np.arange(len(lengths), dtype=np.int64)
    return _grouped(lengths, first_fit_blocks(lengths, order, capacity), order)


def _ffd(lengths: Int64Array, capacity: int, max_per_block: int) -> Layout:
    return first_fit_decreasing_layout(lengths, capacity)


def _bfd(lengths: Int64Array, capacity: int, max_per_block: int) -> Layout:
    return best_fit_decreasing_layout(lengths, capacity)


def _spfhp(lengths: Int64Array, capacity: int, max_per_block: int) -> Layout:
    return spfhp_layout(lengths, capacity, max_per_block)


def _optimal(lengths: Int64Array, capacity: int, max_per_block: int) -> Layout:
    return _grouped(lengths, optimal_blocks(lengths, capacity), longest_first_order(lengths, capacity))


LAYOUTS: dict[str, Callable[[Int64Array, int, int], Layout]] = {
    "next_fit": _next_fit,
    "first_fit": _first_fit,
    "ffd": _ffd,
    "bfd": _bfd,
    "spfhp": _spfhp,
    "optimal": _optimal,
    "none": _none,
}
"""Every no-split strategy as ``(lengths, capacity, max_per_block) -> (block_starts, items, item_lengths)``."""

LONGEST_FIRST = frozenset({"ffd", "bfd", "spfhp", "optimal"})
"""Strategies that place documents longest first (ties in input order); the others keep input order."""


def layout_blocks(strategy: str, lengths: Int64Array, capacity: int, max_per_block: int | None = None) -> Layout:
    """Run a no-split strategy in CSR form: ``(block_starts, items, item_lengths)``.

    Block b holds documents ``items[block_starts[b]:block_starts[b + 1]]`` in the order they were
    placed; blocks are numbered in the order they opened. Complexity: the strategy's.

    >>> [a.tolist() for a in layout_blocks("bfd", np.array([5, 3, 2, 4]), 6)]
    [[0, 1, 3, 4], [0, 3, 2, 1], [5, 4, 2, 3]]
    """
    return LAYOUTS[strategy](lengths, capacity, max_per_block if max_per_block is not None else capacity + 1)


def assign_blocks(
    strategy: str, lengths: Int64Array, capacity: int, max_per_block: int | None = None
) -> tuple[Int64Array, Int64Array]:
    """Run a no-split strategy: ``(block of each document, placement order)``. O(n) beyond the strategy.

    >>> [a.tolist() for a in assign_blocks("ffd", np.array([5, 3, 2, 4]), 6)]
    [[0, 2, 1, 1], [0, 3, 1, 2]]
    """
    block_starts, items, _ = layout_blocks(strategy, lengths, capacity, max_per_block)
    if strategy in LONGEST_FIRST:
        order = longest_first_order(lengths, capacity)
    else:
        order = np.arange(len(lengths), dtype=np.int64)
    return blocks_of_items(block_starts, items), order
