"""The packing strategies: names, what they do, and how each assigns documents to blocks.

Every no-split strategy is one function ``(lengths, capacity, max_per_block) ->
(blocks, order)``: the block of every document (numbered in order of opening)
and the order documents were placed in, which is also their order inside a
block. The splitting strategy cuts documents, so the planner handles it apart.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from packing.histogram import spfhp_blocks
from packing.kernels import (
    IntArray,
    best_fit_decreasing_layout,
    blocks_of_items,
    first_fit_blocks,
    group_by_block,
    longest_first_order,
    next_fit_blocks,
)
from packing.optimal import MAX_OPTIMAL_DOCUMENTS, optimal_blocks

Int64Array = npt.NDArray[np.int64]
Assigner = Callable[[Int64Array, int], tuple[Int64Array, Int64Array]]


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
            "O(n log L + L), L = max_seq_length",
            False,
        ),
        Strategy(
            "spfhp",
            "Shortest-pack-first histogram packing",
            "Krell et al. 2021: works on the length histogram, longest length first, into the pack "
            "with the most room; optional cap on sequences per block.",
            "O(n + L × pack types)",
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


def _in_order(lengths: Int64Array) -> Int64Array:
    return np.arange(len(lengths), dtype=np.int64)


def _none(lengths: Int64Array, capacity: int) -> tuple[Int64Array, Int64Array]:
    order = _in_order(lengths)
    return order, order


def _next_fit(lengths: Int64Array, capacity: int) -> tuple[Int64Array, Int64Array]:
    return next_fit_blocks(lengths, capacity), _in_order(lengths)


def _first_fit(lengths: Int64Array, capacity: int) -> tuple[Int64Array, Int64Array]:
    order = _in_order(lengths)
    return first_fit_blocks(lengths, order, capacity), order


def _ffd(lengths: Int64Array, capacity: int) -> tuple[Int64Array, Int64Array]:
    order = longest_first_order(lengths, capacity)
    return first_fit_blocks(lengths, order, capacity), order


def _bfd(lengths: Int64Array, capacity: int) -> tuple[Int64Array, Int64Array]:
    return blocks_of_items(*best_fit_decreasing_layout(lengths, capacity)), longest_first_order(lengths, capacity)


def _optimal(lengths: Int64Array, capacity: int) -> tuple[Int64Array, Int64Array]:
    return optimal_blocks(lengths, capacity), longest_first_order(lengths, capacity)


ASSIGNERS: dict[str, Assigner] = {
    "none": _none,
    "next_fit": _next_fit,
    "first_fit": _first_fit,
    "ffd": _ffd,
    "bfd": _bfd,
    "optimal": _optimal,
}


def assign_blocks(
    strategy: str, lengths: Int64Array, capacity: int, max_per_block: int | None = None
) -> tuple[Int64Array, Int64Array]:
    """Run a no-split strategy: ``(block of each document, placement order)``."""
    if strategy == "spfhp":
        order = longest_first_order(lengths, capacity)
        return _number_by_opening(spfhp_blocks(lengths, capacity, max_per_block), order), order
    return ASSIGNERS[strategy](lengths, capacity)


def layout_blocks(
    strategy: str, lengths: Int64Array, capacity: int, max_per_block: int | None = None
) -> tuple[Int64Array, IntArray, IntArray]:
    """Run a no-split strategy in CSR form: ``(block_starts, items, item_lengths)``.

    Block b holds documents ``items[block_starts[b]:block_starts[b + 1]]``, in order.
    """
    if strategy == "bfd":
        return best_fit_decreasing_layout(lengths, capacity)
    blocks, order = assign_blocks(strategy, lengths, capacity, max_per_block)
    num_blocks = int(blocks.max()) + 1 if len(blocks) else 0
    block_starts, items = group_by_block(blocks, order, num_blocks)
    return block_starts, items, lengths[items]


def _number_by_opening(blocks: Int64Array, order: Int64Array) -> Int64Array:
    """Renumber blocks so that block k is the k-th to receive a document in ``order``. O(n + B log B)."""
    if len(blocks) == 0:
        return blocks
    first_use = np.full(int(blocks.max()) + 1, len(blocks), dtype=np.int64)
    np.minimum.at(first_use, blocks[order], np.arange(len(order), dtype=np.int64))
    rank = np.empty_like(first_use)
    rank[np.argsort(first_use, kind="stable")] = np.arange(len(first_use), dtype=np.int64)
    return rank[blocks]
