"""Block patterns: a multiset of distinct-length indices stored sparse, the distinct patterns of a packing
(grouped by a hash of their contents, checked exactly), and how many documents a plan of patterns covers.
Internal.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from packing.core._arrays import ranges, row_of

Int64Array = npt.NDArray[np.int64]


@dataclass
class Pattern:
    items: Int64Array  # indices into the distinct lengths
    counts: Int64Array


def pattern_of(take: Int64Array) -> Pattern:
    nz = np.flatnonzero(take)
    return Pattern(nz.astype(np.int64), take[nz].astype(np.int64))


def patterns_of_blocks(blocks: Int64Array, item_of_doc: Int64Array, m: int) -> tuple[list[Pattern], Int64Array]:
    """The distinct block contents of a packing and how many blocks have each. O(n log n)."""
    if blocks.size == 0:
        return [], np.zeros(0, dtype=np.int64)
    num_blocks = int(blocks.max()) + 1
    key = blocks * m + item_of_doc
    pairs, per_pair = np.unique(key, return_counts=True)
    pair_block, pair_item = pairs // m, pairs % m
    starts = np.searchsorted(pair_block, np.arange(num_blocks + 1))
    # a block's content, hashed: two random 64-bit sums (wrapping) over its (item, count) pairs
    rng = np.random.default_rng(12345)
    salt = rng.integers(0, 2**63, size=(2, m), dtype=np.int64).astype(np.uint64)
    with np.errstate(over="ignore"):
        h1 = np.add.reduceat(salt[0][pair_item] * per_pair.astype(np.uint64), starts[:-1])
        h2 = np.add.reduceat(salt[1][pair_item] * (per_pair.astype(np.uint64) + np.uint64(7)), starts[:-1])
    keys = np.stack([h1, h2], axis=1)
    _, first, times = np.unique(keys, axis=0, return_index=True, return_counts=True)

    def content(b: int) -> Pattern:
        return Pattern(
            pair_item[starts[b] : starts[b + 1]].copy(), per_pair[starts[b] : starts[b + 1]].astype(np.int64)
        )

    patterns = [content(b) for b in first.tolist()]
    counts = times.astype(np.int64)
    # two blocks of different content with equal hashes are astronomically unlikely; should it happen, the
    # documents would not add up: then every block stands for itself
    if not np.array_equal(coverage(patterns, counts, m), np.bincount(item_of_doc, minlength=m)):
        return [content(b) for b in range(num_blocks)], np.ones(num_blocks, dtype=np.int64)
    return patterns, counts


def sample_patterns(
    csr: tuple[Int64Array, Any, Any], item_index: Int64Array, m: int, limit: int = 100_000, keep: int = 2000
) -> list[Pattern]:
    """The ``keep`` most frequent block contents of CSR blocks (of an even sample of at most ``limit``
    of its blocks). O(limit × documents per block)."""
    block_starts, _, item_lengths = csr
    num_blocks = len(block_starts) - 1
    step = max(1, -(-num_blocks // limit))
    picked = np.arange(0, num_blocks, step, dtype=np.int64)
    sizes = block_starts[picked + 1] - block_starts[picked]
    where = ranges(block_starts[picked], sizes)
    sample_blocks = row_of(sizes)
    patterns, times = patterns_of_blocks(sample_blocks, item_index[np.asarray(item_lengths)[where]], m)
    top = np.argsort(-times, kind="stable")[:keep]
    return [patterns[i] for i in top.tolist()]


def coverage(patterns: list[Pattern], mult: Int64Array, m: int) -> Int64Array:
    cover = np.zeros(m, dtype=np.int64)
    for p, k in zip(patterns, mult.tolist(), strict=True):
        if k:
            cover[p.items] += p.counts * k
    return cover
