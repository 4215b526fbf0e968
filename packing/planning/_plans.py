"""Planning: where every piece of every sequence goes, from lengths alone.

A :class:`PackingPlan` is the blocks' pieces, stored flat (CSR). Selecting, reordering and
shuffling blocks are methods of the plan, and each returns a plan whose statistics
describe exactly its blocks.

Internal: the public names are in ``packing`` and ``packing.planning``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from itertools import pairwise
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from packing.core._arrays import check_block_indexes, offsets_of, ranges, row_of
from packing.core._thd import document_multiple, padded_lengths
from packing.core._validation import INT32_MAX, OverflowPolicy, as_lengths, check_integer
from packing.errors import SettingError
from packing.recipe import Recipe, RecipeOptions
from packing.strategies._kernels import IntArray, split_pieces
from packing.strategies._overflow import Documents, documents_of
from packing.strategies._registry import STRATEGIES, Options, StrategyName, strategy_blocks
from packing.strategies._stats import PackingStats, compute_stats

if TYPE_CHECKING:  # pragma: no cover - typing only
    from typing import Unpack

Int64Array = npt.NDArray[np.int64]
Int32Array = npt.NDArray[np.int32]
MAX_SEQUENCES = INT32_MAX
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
    """The pieces of every block, stored flat (CSR): block ``b`` holds pieces
    ``block_starts[b]:block_starts[b + 1]``, in order, with no gaps; padding follows them.
    Piece arrays are int32 (a 16-million-sequence plan takes about 400 MB).

    >>> p = plan([2, 3, 1], 4, strategy="split")
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
    certificate: Any = field(default=None, compare=False)
    """For ``optimal``: the proof of how close the plan is to the fewest blocks possible."""
    _trusted: bool = field(default=False, repr=False, compare=False)
    """Skip the check for this one construction (the planner's own plans); never copied by ``replace``."""
    parallel_sizes: tuple[int, int] = field(default=(1, 1), repr=False)
    """The recipe's ``(context_parallel_size, tensor_parallel_size)`` the plan was made for: each document took
    the room of its length padded to :attr:`document_multiple`, the padding ``collate`` and the NeMo export lay
    out."""

    def __post_init__(self) -> None:
        if not self._trusted:
            check_pieces(self)
        object.__setattr__(self, "_trusted", False)  # ``dataclasses.replace`` of this plan is checked again

    @property
    def num_blocks(self) -> int:
        return len(self.block_starts) - 1

    @property
    def document_multiple(self) -> int:
        """What every document is padded to a multiple of (``packing.core._thd.document_multiple``); 1 by default."""
        return document_multiple(*self.parallel_sizes)

    def in_order(self) -> bool:
        """Whether the blocks hold every token of every sequence, in input order and back to back (as
        ``split`` does when nothing is cut): block ``b`` is then tokens ``b * max_seq_length`` up to the
        next block's of the sequences laid end to end, and only the last block has padding. O(pieces).

        >>> plan([3, 2, 4], 4, strategy="split").in_order(), plan([3, 2, 4], 4, strategy="ffd").in_order()
        (True, False)
        """
        if int(self.piece_length.sum(dtype=np.int64)) != int(self.lengths.sum()):
            return False
        target = self.piece_block() * self.max_seq_length + self.piece_position()
        source = offsets_of(self.lengths)[self.piece_sequence] + self.piece_start
        return bool(np.array_equal(source, target))

    def select(self, blocks: npt.ArrayLike) -> PackingPlan:
        """A plan of just these blocks, in this order; its statistics describe exactly them. O(pieces in them).

        The statistics count the selected pieces as the input: nothing in them was cut or
        lost, and a sample counts as split when its tokens span several selected blocks.

        >>> p = plan([4, 4, 2, 3], 4, strategy="ffd")
        >>> window = p.select([1, 2])
        >>> window.num_blocks, window.stats.num_blocks, window.stats.packed_tokens
        (2, 2, 7)
        """
        chosen = self._taken(check_block_indexes(blocks, self.num_blocks), certificate=None)
        return replace(chosen, stats=_selection_stats(chosen), _trusted=True)

    def permute(self, order: npt.ArrayLike) -> PackingPlan:
        """The same blocks in ``order`` (block ``i`` of the result is block ``order[i]``). O(pieces).

        >>> p = plan([4, 4, 2, 2], 4, strategy="ffd")
        >>> [[piece.sequence for piece in block] for block in p.permute([2, 0, 1]).blocks()]
        [[2, 3], [0], [1]]
        """
        rows = check_block_indexes(order, self.num_blocks, "order")
        if len(rows) != self.num_blocks or len(np.unique(rows)) != self.num_blocks:
            raise SettingError("order", f"a permutation of the {self.num_blocks} block indexes", "<another list>")
        return self._taken(rows, stats=replace(self.stats, block_utilization=self.stats.block_utilization[rows]))

    def _taken(self, rows: Int64Array, **changes: Any) -> PackingPlan:
        """The plan of blocks ``rows``, in this order, with ``changes`` (its statistics, its certificate). O(pieces
        in them)."""
        counts = np.diff(self.block_starts)[rows]
        pieces = ranges(self.block_starts[:-1][rows], counts)
        return replace(
            self,
            block_starts=offsets_of(counts),
            piece_sequence=self.piece_sequence[pieces],
            piece_start=self.piece_start[pieces],
            piece_length=self.piece_length[pieces],
            _trusted=True,
            **changes,
        )

    def shuffle(self, seed: int = 0) -> PackingPlan:
        """The blocks in a random order drawn from ``seed``: the one place blocks are shuffled. O(pieces).

        Decreasing strategies put the longest samples first; a trainer reading blocks in plan
        order would see a length curriculum. The order is
        ``numpy.random.default_rng(seed).permutation(num_blocks)``.

        >>> p = plan([4, 4, 2, 3], 4, strategy="ffd")
        >>> sorted(b[0].sequence for b in p.shuffle(7).blocks()) == sorted(b[0].sequence for b in p.blocks())
        True
        """
        seed = check_integer(seed, "seed", least=0)
        return self.permute(np.random.default_rng(seed).permutation(self.num_blocks))

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

    @cached_property
    def boundaries(self) -> tuple[Int64Array, Int32Array]:
        """``(starts, lengths)``: the documents a model sees in each block, in CSR form (block ``b`` holds
        ``lengths[starts[b]:starts[b + 1]]``). Every piece is a document, except for a strategy that keeps no
        boundaries (``wrapped``): then each block is one run of all its tokens. Positions, labels,
        ``seq_lengths`` and exports follow these; tokens follow the pieces. O(1), or O(pieces) once for ``wrapped``.

        >>> plan([3, 2, 4], 4, strategy="split").boundaries[1].tolist(), plan([3, 2, 4], 4, strategy="wrapped").boundaries[1].tolist()
        ([3, 1, 1, 3, 1], [4, 4, 1])
        """
        if STRATEGIES[self.strategy].keeps_boundaries:
            return self.block_starts, self.piece_length
        used = np.zeros(self.num_blocks, dtype=np.int64)
        np.add.at(used, self.piece_block(), self.piece_length)
        kept = used > 0
        return offsets_of(kept), used[kept].astype(np.int32)

    def seq_lengths(self, index: int) -> Int64Array:
        """Lengths of the documents in block ``index``, in order (:attr:`boundaries`)."""
        self._bounds(index)
        starts, lengths = self.boundaries
        index %= self.num_blocks
        return lengths[starts[index] : starts[index + 1]].astype(np.int64)

    def cu_seqlens(self, index: int) -> Int64Array:
        """0, then the cumulative document lengths of block ``index`` (flash-attention's form)."""
        return offsets_of(self.seq_lengths(index))

    def piece_block(self) -> Int64Array:
        """The block of every piece. O(pieces)."""
        return row_of(np.diff(self.block_starts))

    def piece_position(self) -> Int64Array:
        """The position inside its block where every piece starts. O(pieces)."""
        offsets = offsets_of(self.piece_length)  # the pieces laid end to end
        position: Int64Array = offsets[:-1] - np.repeat(offsets[self.block_starts[:-1]], np.diff(self.block_starts))
        return position

    def _bounds(self, index: int) -> tuple[int, int]:
        if not -self.num_blocks <= index < self.num_blocks:
            raise IndexError(f"block {index} does not exist; the plan has {self.num_blocks} blocks")
        index %= self.num_blocks
        return int(self.block_starts[index]), int(self.block_starts[index + 1])


def _selection_stats(plan: PackingPlan) -> PackingStats:
    """Statistics of a plan's pieces (selected blocks), counting them as the whole input. O(pieces)."""
    block_starts, sequence, length = plan.block_starts, plan.piece_sequence, plan.piece_length
    touched, inverse = np.unique(sequence, return_inverse=True)
    per_sequence = np.bincount(inverse, weights=length, minlength=len(touched)).astype(np.int64)
    whole = bool(len(touched) == len(sequence)) and not STRATEGIES[plan.strategy].splits_sequences
    documents = None if STRATEGIES[plan.strategy].keeps_boundaries else int(np.count_nonzero(np.diff(block_starts)))
    stats = compute_stats(
        per_sequence, plan.max_seq_length, block_starts, inverse.astype(np.int32), length, whole, documents
    )
    return stats


def check_pieces(plan: PackingPlan) -> None:
    """Refuse a plan whose pieces would write outside its blocks or read outside its sequences. O(pieces)."""
    starts, sequence = plan.block_starts, plan.piece_sequence
    first, length = plan.piece_start.astype(np.int64), plan.piece_length.astype(np.int64)
    problem = ""
    if len(starts) == 0 or starts[0] != 0 or starts[-1] != len(sequence) or np.any(np.diff(starts) < 1):
        problem = "block_starts rising from 0 to the number of pieces, every block holding a piece"
    elif not (len(sequence) == len(first) == len(length)):
        problem = "piece arrays of one length"
    elif len(length) and (length.min() < 1 or first.min() < 0):
        problem = "pieces with a length >= 1 and a start >= 0"
    elif len(sequence) and (sequence.min() < 0 or sequence.max() >= len(plan.lengths)):
        problem = "pieces naming sequences the plan has"
    elif len(length) and np.any(first + length > plan.lengths[sequence]):
        problem = "pieces within their sequences"
    elif plan.num_blocks and np.add.reduceat(length, starts[:-1]).max(initial=0) > plan.max_seq_length:
        problem = f"blocks of at most max_seq_length={plan.max_seq_length} tokens"
    elif (
        plan.document_multiple > 1
        and plan.num_blocks
        and (
            np.add.reduceat(padded_lengths(length, plan.document_multiple), starts[:-1]).max(initial=0)
            > plan.max_seq_length
        )
    ):
        problem = f"blocks of at most max_seq_length={plan.max_seq_length} tokens with every document padded to a multiple of {plan.document_multiple}"
    if problem:
        raise SettingError("plan", problem, "<a plan that breaks this>")


def _options(recipe: Recipe, seed: int | None = None) -> Options:
    """The strategy options of ``recipe`` (checked when it was made) for its strategy; ``seed``, when given, for the
    recipe's (a seed drawn per epoch or per buffer, for a strategy that draws)."""
    chosen = recipe.strategy_options()
    drawn = chosen.get("seed") if seed is None else seed
    return Options(chosen.get("max_sequences_per_block"), chosen.get("time_limit"), int(drawn or 0),
                   chosen.get("tie_break", "newest"))  # fmt: skip


def _blocks_of(
    docs: Documents, capacity: int, strategy: str, options: Options, multiple: int = 1
) -> tuple[Int64Array, IntArray, IntArray, IntArray, Any]:
    """``(block_starts, sequence, start, length, certificate)`` of the pieces of ``docs``, each document taking
    room for its length rounded up to ``multiple`` (the recipe's ``document_multiple``; the pieces keep their real
    lengths). The strategy's cost."""
    if STRATEGIES[strategy].blocks is None:  # the splitting strategy: the planner lays it out
        lengths = docs.length.astype(np.int64, copy=False)  # concatenated in order, cut at every multiple
        return (*split_pieces(docs.sequence, docs.offset, lengths, capacity), None)
    room = docs.length if multiple == 1 else padded_lengths(docs.length, multiple)
    block_starts, grouped, length, certificate = strategy_blocks(strategy, room, capacity, options)
    if multiple > 1:
        length = docs.length[grouped].astype(length.dtype, copy=False)
    if docs.whole:  # document i is sequence i, from its first token
        return block_starts, grouped, np.zeros(len(grouped), dtype=np.int32), length, certificate
    return block_starts, docs.sequence[grouped], docs.offset[grouped], length, certificate


def _windows(docs: Documents, count: int, window: int) -> list[Documents]:
    """The documents of each consecutive window of ``window`` input sequences. O(documents)."""
    edges = np.searchsorted(docs.sequence, np.arange(0, count + window, window), side="left")
    return [
        Documents(docs.sequence[lo:hi], docs.offset[lo:hi], docs.length[lo:hi]) for lo, hi in pairwise(edges) if hi > lo
    ]


def _windowed_blocks(
    docs: Documents, count: int, capacity: int, strategy: str, options: Options, window: int, multiple: int = 1
) -> tuple[Int64Array, IntArray, IntArray, IntArray]:
    """Each window of input sequences packed on its own, the windows' blocks one after another."""
    parts = [_blocks_of(part, capacity, strategy, options, multiple)[:4] for part in _windows(docs, count, window)]
    if not parts:
        return np.zeros(1, dtype=np.int64), *(np.zeros(0, dtype=np.int32) for _ in range(3))  # type: ignore[return-value]
    piece_counts = [len(part[1]) for part in parts]
    shift = np.repeat(offsets_of(piece_counts)[:-1], [len(part[0]) - 1 for part in parts])
    block_starts = np.concatenate([[0], np.concatenate([part[0][1:] for part in parts]) + shift])
    sequence, start, length = (
        np.concatenate([np.asarray(part[i], dtype=np.int64) for part in parts]) for i in (1, 2, 3)
    )
    return block_starts.astype(np.int64), sequence, start, length


def plan(
    lengths: npt.ArrayLike,
    max_seq_length: int | None = None,
    *,
    strategy: StrategyName | None = None,
    overflow: OverflowPolicy | None = None,
    recipe: Recipe | None = None,
    **options: Unpack[RecipeOptions],
) -> PackingPlan:
    """Lay out sequences with these ``lengths`` into blocks of ``max_seq_length`` tokens.

    The options are the planning ones (:class:`~packing.Recipe`; or a whole ``recipe=``, whose reading and filling
    options ``plan`` leaves to the other doors, while a reading option given here as a keyword is refused by
    name). ``strategy`` is a name from
    ``STRATEGIES`` (default ``bfd``); ``overflow`` one of ``truncate``, ``split``, ``drop``, ``error``. ``window``
    packs each consecutive window of that many input sequences on its own (what trainers that pack per map
    batch do; blocks never mix windows). Options a strategy reads (its ``options``):
    ``max_sequences_per_block`` (``spfhp``), ``time_limit`` in seconds (``optimal``), ``seed``
    (``first_fit_shuffle``), ``tie_break`` (``bfd``: ``oldest`` gives TRL's blocks exactly). ``lengths`` may be a ``Samples``. Complexity is the strategy's, plus O(n) to
    prepare.

    >>> plan([5, 3, 2, 4], 6).blocks()[0]
    [Piece(sequence=0, start=0, length=5)]
    >>> plan([3, 3, 3, 3], 6).num_blocks, plan([3, 3, 3, 3], 6, window=3).num_blocks
    (2, 3)
    >>> plan([3, 3, 3, 3], recipe=Recipe(6, window=3, tokenizer="bytes")).num_blocks
    3

    With ``context_parallel_size`` (and ``tensor_parallel_size``), a document takes the room of its length rounded
    up to the recipe's ``document_multiple`` (``2·cp·tp``): the padding ``collate`` adds for the THD layout fits.

    >>> [plan([3, 3, 3, 3], 8, context_parallel_size=cp).num_blocks for cp in (1, 2, 4)]  # rooms 3, 4, 8
    [2, 2, 4]
    """
    chosen = Recipe.at("plan", recipe, max_seq_length, strategy=strategy, overflow=overflow, **options)
    return plan_of(as_lengths(getattr(lengths, "lengths", lengths)), chosen)


def drawn_plan_of(sizes: Int64Array, recipe: Recipe, rng: np.random.Generator) -> PackingPlan:
    """:func:`plan_of` with, for a strategy that draws (``seed`` among its options), a seed drawn from ``rng`` (one
    draw; nothing is drawn for the others): each epoch or buffer planned anew. The strategy's cost.

    >>> drawn_plan_of(np.array([2, 2]), Recipe(4, strategy="first_fit_shuffle"), np.random.default_rng(0)).num_blocks
    1
    """
    drawn = int(rng.integers(2**31)) if "seed" in STRATEGIES[recipe.strategy].options else None
    return plan_of(sizes, recipe, drawn)


def plan_of(sizes: Int64Array, chosen: Recipe, seed: int | None = None) -> PackingPlan:
    """:func:`plan` of checked lengths with a checked recipe: what every door plans with, its recipe built once
    (``Recipe.at``) and not checked again here; ``seed`` (a strategy that draws: drawn per epoch or buffer) for the
    recipe's. The strategy's cost, plus O(n).

    >>> plan_of(np.array([3, 3, 3, 3]), Recipe(6, window=3)).num_blocks
    3
    """
    capacity, strategy, overflow, window = chosen.max_seq_length, chosen.strategy, chosen.overflow, chosen.window
    strategy_options = _options(chosen, seed)
    if len(sizes) > MAX_SEQUENCES:
        raise SettingError("lengths", f"at most {MAX_SEQUENCES:,} sequences", f"<{len(sizes):,} sequences>")
    if overflow == "split" and len(sizes) and int(sizes.max()) > MAX_SEQUENCES:
        raise SettingError("overflow", f"'split' of sequences of at most {MAX_SEQUENCES:,} tokens", int(sizes.max()))
    docs = documents_of(sizes, capacity, overflow)
    if len(docs.length) > MAX_SEQUENCES:
        raise SettingError("lengths", f"at most {MAX_SEQUENCES:,} documents", f"<{len(docs.length):,} documents>")
    if window is not None and window < len(sizes):
        block_starts, sequence, start, length = _windowed_blocks(
            docs, len(sizes), capacity, strategy, strategy_options, window, chosen.document_multiple
        )
        certificate = None
    else:
        block_starts, sequence, start, length, certificate = _blocks_of(
            docs, capacity, strategy, strategy_options, chosen.document_multiple
        )
    piece_sequence, piece_start, piece_length = (a.astype(np.int32, copy=False) for a in (sequence, start, length))
    one_piece_each = docs.whole and not STRATEGIES[strategy].splits_sequences  # no sequence was cut, lost or left empty
    documents = None if STRATEGIES[strategy].keeps_boundaries else int(np.count_nonzero(np.diff(block_starts)))
    stats = compute_stats(sizes, capacity, block_starts, piece_sequence, piece_length, one_piece_each, documents)
    return PackingPlan(
        capacity,
        strategy,
        overflow,
        sizes,
        block_starts,
        piece_sequence,
        piece_start,
        piece_length,
        stats,
        certificate,
        _trusted=True,
        parallel_sizes=(chosen.context_parallel_size, chosen.tensor_parallel_size),
    )
