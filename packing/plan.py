"""Planning: where every piece of every sequence goes, from lengths alone."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from packing.kernels import IntArray
from packing.overflow import Documents, documents_of
from packing.stats import PackingStats, compute_stats
from packing.strategies import STRATEGIES, layout_blocks
from packing.validation import OVERFLOW_POLICIES, as_lengths, check_choice, check_max_seq_length, check_positive_int

Int64Array = npt.NDArray[np.int64]
Int32Array = npt.NDArray[np.int32]
MAX_SEQUENCES = 2**31 - 1
"""Pieces store sequence indices, offsets and lengths as int32 (half the memory of int64), which bounds
the number of sequences and documents in one plan and the length of a sequence that is split."""


@dataclass(frozen=True)
class Piece:
    """A run of ``length`` tokens of input sequence ``sequence``, starting at token ``start``."""

    sequence: int
    start: int
    length: int


@dataclass(frozen=True)
class PackingPlan:
    """The layout of every block, stored flat (CSR): block ``b`` holds pieces
    ``block_starts[b]:block_starts[b + 1]``, in order, with no gaps; padding follows them.
    Piece arrays are int32 (a 16-million-sequence plan takes about 400 MB).

    >>> p = plan([2, 3, 1], 4)
    >>> p.blocks()
    [[Piece(sequence=0, start=0, length=2), Piece(sequence=1, start=0, length=2)], [Piece(sequence=1, start=2, length=1), Piece(sequence=2, start=0, length=1)]]
    >>> p.stats.efficiency
    0.75
    """

    max_seq_length: int
    strategy: str
    overflow: str
    lengths: Int64Array
    block_starts: Int64Array
    piece_sequence: Int32Array
    piece_start: Int32Array
    piece_length: Int32Array
    stats: PackingStats

    @property
    def num_blocks(self) -> int:
        return len(self.block_starts) - 1

    def block(self, index: int) -> list[Piece]:
        """The pieces of block ``index``, in order. O(pieces in the block)."""
        lo, hi = self._bounds(index)
        return [
            Piece(int(s), int(o), int(n))
            for s, o, n in zip(
                self.piece_sequence[lo:hi], self.piece_start[lo:hi], self.piece_length[lo:hi], strict=True
            )
        ]

    def blocks(self) -> list[list[Piece]]:
        """Every block's pieces. O(pieces)."""
        return [self.block(b) for b in range(self.num_blocks)]

    def seq_lengths(self, index: int) -> Int64Array:
        """Lengths of the documents in block ``index``, in order."""
        lo, hi = self._bounds(index)
        return self.piece_length[lo:hi].astype(np.int64)

    def cu_seqlens(self, index: int) -> Int64Array:
        """0, then the cumulative document lengths of block ``index`` (flash-attention's form)."""
        return np.concatenate(([0], np.cumsum(self.seq_lengths(index)))).astype(np.int64)

    def piece_block(self) -> Int64Array:
        """The block of every piece. O(pieces)."""
        return np.repeat(np.arange(self.num_blocks, dtype=np.int64), np.diff(self.block_starts))

    def piece_position(self) -> Int64Array:
        """The position inside its block where every piece starts. O(pieces)."""
        ends = np.cumsum(self.piece_length)
        block_first = np.repeat(self.block_starts[:-1], np.diff(self.block_starts))
        before_block = np.where(block_first > 0, ends[block_first - 1], 0)
        return ends - self.piece_length - before_block

    def _bounds(self, index: int) -> tuple[int, int]:
        if not -self.num_blocks <= index < self.num_blocks:
            raise IndexError(f"block {index} does not exist; the plan has {self.num_blocks} blocks")
        index %= self.num_blocks
        return int(self.block_starts[index]), int(self.block_starts[index + 1])


def _split_layout(docs: Documents, capacity: int) -> tuple[Int64Array, IntArray, IntArray, IntArray]:
    """Concatenate documents in order and cut at every multiple of ``capacity``. O(documents)."""
    end = np.cumsum(docs.length)
    start = end - docs.length
    crosses = (start // capacity) != ((end - 1) // capacity)  # a document is at most capacity long
    first_len = np.where(crosses, capacity - start % capacity, docs.length)
    count = 1 + crosses.astype(np.int64)
    sequence = np.repeat(docs.sequence, count)
    offset = np.repeat(docs.offset, count)
    length = np.repeat(first_len, count)
    second = np.cumsum(count) - 1  # index of each document's last piece
    second = second[crosses]
    offset[second] += first_len[crosses]
    length[second] = docs.length[crosses] - first_len[crosses]
    num_blocks = -(-int(end[-1]) // capacity) if len(end) else 0
    piece_start_token = np.repeat(start, count)
    piece_start_token[second] += first_len[crosses]
    piece_block = piece_start_token // capacity
    block_starts = np.searchsorted(piece_block, np.arange(num_blocks + 1), side="left").astype(np.int64)
    return block_starts, sequence, offset, length


def plan(
    lengths: npt.ArrayLike,
    max_seq_length: int,
    strategy: str = "split",
    overflow: str = "truncate",
    max_sequences_per_block: int | None = None,
) -> PackingPlan:
    """Lay out sequences with these ``lengths`` into blocks of ``max_seq_length`` tokens.

    ``strategy`` is a name from ``STRATEGIES``; ``overflow`` one of ``truncate``,
    ``split``, ``drop``; ``max_sequences_per_block`` caps documents per block
    (``spfhp`` only). Complexity is the strategy's, plus O(n) to prepare.

    >>> plan([5, 3, 2, 4], 6, "bfd").blocks()[0]
    [Piece(sequence=0, start=0, length=5)]
    >>> plan([5, 3, 2, 4], 6, "bfd").num_blocks
    3
    """
    capacity = check_max_seq_length(max_seq_length)
    check_choice(strategy, "strategy", STRATEGIES)
    check_choice(overflow, "overflow policy", OVERFLOW_POLICIES)
    if max_sequences_per_block is not None:
        check_positive_int(max_sequences_per_block, "max_sequences_per_block")
        if strategy != "spfhp":
            raise ValueError("max_sequences_per_block is supported by strategy 'spfhp' only")
    sizes = as_lengths(lengths)
    if len(sizes) > MAX_SEQUENCES:
        raise ValueError(f"plan takes at most {MAX_SEQUENCES:,} sequences at once; got {len(sizes):,}")
    if overflow == "split" and len(sizes) and int(sizes.max()) > MAX_SEQUENCES:
        raise ValueError(f"overflow 'split' handles sequences of up to {MAX_SEQUENCES:,} tokens")
    docs = documents_of(sizes, capacity, overflow)
    if len(docs.length) > MAX_SEQUENCES:
        raise ValueError(f"plan takes at most {MAX_SEQUENCES:,} documents at once; got {len(docs.length):,}")
    sequence: IntArray
    start: IntArray
    length: IntArray
    if strategy == "split":
        block_starts, sequence, start, length = _split_layout(docs, capacity)
    else:
        block_starts, grouped, length = layout_blocks(strategy, docs.length, capacity, max_sequences_per_block)
        if docs.whole:  # document i is sequence i, from its first token
            sequence, start = grouped, np.zeros(len(grouped), dtype=np.int32)
        else:
            sequence, start = docs.sequence[grouped], docs.offset[grouped]
    piece_sequence, piece_start, piece_length = (a.astype(np.int32, copy=False) for a in (sequence, start, length))
    one_piece_each = docs.whole and strategy != "split"  # no sequence was cut, lost or left empty
    stats = compute_stats(sizes, capacity, block_starts, piece_sequence, piece_length, one_piece_each)
    return PackingPlan(
        capacity, strategy, overflow, sizes, block_starts, piece_sequence, piece_start, piece_length, stats
    )
