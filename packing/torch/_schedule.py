"""The rank schedule: each optimizer step's blocks dealt to data-parallel ranks so the slowest rank's compute
is close to the mean. Internal: the public names are in ``packing.torch``.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import numpy.typing as npt

from packing.core._arrays import offsets_of, row_of
from packing.core._pairs_groups import Units
from packing.core._thd import padded_lengths
from packing.core._validation import OverflowPolicy, as_lengths
from packing.errors import SettingError
from packing.planning._plans import PackingPlan, Piece, drawn_plan_of
from packing.recipe import Recipe, RecipeOptions
from packing.strategies._overflow import check_within
from packing.strategies._registry import StrategyName, check_whole_samples
from packing.strategies._stats import PackingStats
from packing.weighting import LossTotals

if TYPE_CHECKING:  # pragma: no cover - typing only
    from typing import Unpack

Int64Array = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
CostFunction = Callable[[Int64Array], npt.ArrayLike]

LINEAR_COST_PER_TOKEN = 24576
"""Default weight of a token's linear work against attention's ``ℓ²`` (the per-document cost is
``24576·ℓ + ℓ²``, the weighting verl uses to balance sequences across ranks)."""


def default_cost(lengths: Int64Array) -> FloatArray:
    """Compute cost of documents of these lengths: ``24576·ℓ + ℓ²`` (linear work plus causal attention). O(n).

    >>> default_cost(np.array([1, 1000])).tolist()
    [24577.0, 25576000.0]
    """
    ell = np.asarray(lengths, dtype=np.float64)
    return LINEAR_COST_PER_TOKEN * ell + ell * ell


@dataclass(frozen=True)
class Schedule:
    """One epoch of blocks for every rank: step ``s`` gives rank ``r`` block ``s * num_replicas + r``, whose
    sample indices are ``indices[block_starts[b]:block_starts[b + 1]]``; ``costs[s, r]`` is that block's cost.
    Entry ``k`` is tokens ``starts[k]:starts[k] + lengths[k]`` of sample ``indices[k]`` (the overflow policy
    applied); ``pieces[k]`` says it is one piece of a sample cut by ``overflow="split"``. ``stats`` is the
    epoch's plan's (tokens lost, sequences truncated, split, dropped; its block counts are before dealing)."""

    num_replicas: int
    block_starts: Int64Array
    indices: Int64Array
    costs: FloatArray
    starts: Int64Array
    lengths: Int64Array
    pieces: npt.NDArray[np.bool_]
    stats: PackingStats
    tokens: FloatArray
    """``tokens[s, r]``: the positions of that block (each document padded to the recipe's ``document_multiple``)."""
    attention: FloatArray
    """``attention[s, r]``: that block's attention work (the cost's ``attention`` component when it has
    ``components``, like :class:`~packing.planning.ModelCost`; else ``Σ ℓ²``)."""

    @property
    def num_steps(self) -> int:
        return int(self.costs.shape[0])

    def block(self, step: int, rank: int) -> Int64Array:
        """Sample indices of rank ``rank``'s block at step ``step``."""
        b = step * self.num_replicas + rank
        return self.indices[self.block_starts[b] : self.block_starts[b + 1]]

    def items(self, step: int, rank: int) -> list[int | Piece]:
        """What the sampler yields for that block: a sample's index, or a ``Piece`` of a split sample."""
        b = step * self.num_replicas + rank
        lo, hi = int(self.block_starts[b]), int(self.block_starts[b + 1])
        return [
            Piece(int(self.indices[k]), int(self.starts[k]), int(self.lengths[k]))
            if self.pieces[k]
            else int(self.indices[k])
            for k in range(lo, hi)
        ]

    def loss_totals(self, trained: Int64Array, gradient_accumulation_steps: int = 1) -> list[LossTotals]:
        """For each step, the ``LossTotals`` of its optimizer step: the documents of every rank's blocks in the
        ``gradient_accumulation_steps`` consecutive steps it belongs to (the last one may be shorter), with
        ``trained[i]`` trained tokens for sample ``i``. O(n + steps).

        >>> s = build_schedule([3, 2, 4, 1], 4, 2, shuffle=False)
        >>> [t.tokens for t in s.loss_totals(np.array([2, 1, 3, 0]), 1)]
        [5, 1]
        >>> s.loss_totals(np.array([2, 1, 3, 0]), 2)
        [LossTotals(documents=3, tokens=6, sqrt_sum=4.14...), LossTotals(documents=3, tokens=6, sqrt_sum=4.14...)]
        """
        if self.pieces.any():
            raise SettingError("trained_tokens", "whole samples (overflow truncate or drop, not split)", "<pieces>")
        group = self.num_replicas * gradient_accumulation_steps
        block_of = row_of(np.diff(self.block_starts))
        optimizer_step = block_of // group
        counts = trained[self.indices]
        steps = -(-self.num_steps // gradient_accumulation_steps)  # optimizer steps, empty blocks' too
        documents = np.bincount(optimizer_step, weights=counts > 0, minlength=steps)
        tokens = np.bincount(optimizer_step, weights=counts, minlength=steps)
        roots = np.bincount(optimizer_step, weights=np.sqrt(counts), minlength=steps)
        per_group = [LossTotals(int(d), int(t), float(r)) for d, t, r in zip(documents, tokens, roots, strict=True)]
        return [per_group[step // gradient_accumulation_steps] for step in range(self.num_steps)]

    @property
    def imbalance(self) -> float:
        """How much longer an epoch takes than with perfectly even ranks: the sum over steps of the slowest rank's
        cost, over the sum of the mean rank's cost, minus 1 (0.0 = perfectly balanced)."""
        return _imbalance(self.costs)

    @property
    def balance(self) -> RankBalance:
        """The imbalance of the cost and of each of its parts: tokens (what every layer processes) and attention.
        O(steps × ranks)."""
        return RankBalance(
            self.imbalance, _imbalance(self.tokens), _imbalance(self.attention), self.worst_step_imbalance
        )

    def remaining(self, step: int) -> Entries:
        """The entries of the steps from ``step`` on (what is left of the epoch after ``step`` steps). O(1)."""
        lo = int(self.block_starts[min(step, self.num_steps) * self.num_replicas])
        return Entries(self.indices[lo:], self.starts[lo:], self.lengths[lo:], self.pieces[lo:])

    @property
    def worst_step_imbalance(self) -> float:
        """The largest per-step ratio of the slowest rank's cost to the mean, minus 1."""
        mean = self.costs.mean(axis=1)
        ratios = np.divide(self.costs.max(axis=1), mean, out=np.ones_like(mean), where=mean > 0)
        return float(ratios.max(initial=1.0)) - 1.0


def _imbalance(values: FloatArray) -> float:
    """The sum over steps of the largest value of a step over the sum of the steps' means, minus 1. O(values)."""
    mean = float(values.mean(axis=1).sum()) if values.size else 0.0
    return float(values.max(axis=1).sum()) / mean - 1.0 if mean > 0 else 0.0


class RankBalance(NamedTuple):
    """How uneven the ranks of an epoch are (:attr:`Schedule.imbalance` for each): ``cost`` (what the blocks were
    balanced by), ``tokens`` (positions, padding for context parallelism included), ``attention`` (its
    quadratic part), and ``worst_step`` (the largest cost ratio of one step, minus 1). 0.0 = even."""

    cost: float
    tokens: float
    attention: float
    worst_step: float


class Entries(NamedTuple):
    """What a schedule deals, one entry per document: tokens ``starts[k]:starts[k] + lengths[k]`` of sample
    ``indices[k]`` (``pieces[k]``: a piece of a sample cut by ``overflow="split"``)."""

    indices: Int64Array
    starts: Int64Array
    lengths: Int64Array
    pieces: npt.NDArray[np.bool_]

    def take(self, rows: Int64Array) -> Entries:
        return Entries(self.indices[rows], self.starts[rows], self.lengths[rows], self.pieces[rows])


def _halves(docs: Int64Array, costs: FloatArray) -> tuple[Int64Array, Int64Array]:
    """Split a block's documents into two non-empty parts of similar cost (heaviest first, each into the lighter
    part); each part keeps the block's order. O(d log d)."""
    order = np.argsort(-costs, kind="stable")
    side = np.zeros(len(docs), dtype=bool)
    load = [0.0, 0.0]
    for i in order.tolist():
        part = 0 if load[0] <= load[1] else 1
        side[i] = part == 1
        load[part] += float(costs[i])
    return docs[~side], docs[side]


def _even_out_cheapest(
    block_of: Int64Array, doc_cost: FloatArray, tokens: Int64Array, capacity: int, replicas: int, steps: int = 2
) -> None:
    """Re-deal the documents of the ``steps × replicas`` cheapest blocks (a plan's last, part-filled blocks and
    the halves made for extra blocks) over as many blocks, heaviest first into the cheapest block with room
    (longest processing time first), so the last steps' blocks cost about the same. In place; kept as it was
    when a document would fit nowhere. O(d log d + d × blocks) for the d documents of those blocks."""
    num_blocks = int(block_of.max()) + 1
    count = min(num_blocks, steps * replicas)
    if count < 2:
        return
    block_cost = np.bincount(block_of, weights=doc_cost, minlength=num_blocks)
    chosen = np.argsort(block_cost, kind="stable")[:count]
    members = np.flatnonzero(np.isin(block_of, chosen))
    load = np.zeros(count)
    fill = np.zeros(count, dtype=np.int64)
    target = np.empty(len(members), dtype=np.int64)
    for i in np.argsort(-doc_cost[members], kind="stable").tolist():
        room = fill + tokens[members[i]] <= capacity
        if not room.any():
            return
        bin_ = int(np.flatnonzero(room)[np.argmin(load[room])])
        target[i] = bin_
        load[bin_] += doc_cost[members[i]]
        fill[bin_] += tokens[members[i]]
    if int((fill > 0).sum()) == count:  # no block left empty
        block_of[members] = chosen[target]


def build_schedule(
    lengths: npt.ArrayLike,
    max_seq_length: int | None = None,
    num_replicas: int = 1,
    *,
    strategy: StrategyName | None = None,
    overflow: OverflowPolicy | None = None,
    epoch: int = 0,
    shuffle: bool = True,
    cost: CostFunction | None = None,
    balance: bool = True,
    recipe: Recipe | None = None,
    units: Units | None = None,
    **options: Unpack[RecipeOptions],
) -> Schedule:
    """Pack one epoch and deal its blocks to ``num_replicas`` ranks (what ``PackingSampler`` does on every rank).

    1. The samples are permuted with ``(seed, epoch)`` (when ``shuffle``; seed default 0) and planned with
       the recipe (strategy, its options, window), so neighbours change between epochs. The overflow policy
       applies as in ``pack``: a sample longer than ``max_seq_length`` is truncated to it (a block of its
       own), dropped, or split into pieces that may land in different blocks.
    2. When the blocks do not divide evenly into ``num_replicas``, the blocks with the most documents are split
       in two (halves of similar cost) until they do, or until every document has a block of its own: the blocks
       still missing stay empty (an empty step for their ranks). Empty samples join blocks round-robin.
       A plan with no document (no sample with tokens) is refused.
    3. With ``balance``, the documents of the ``2 × num_replicas`` cheapest blocks (part-filled ones) are
       re-dealt over as many blocks, heaviest first into the cheapest block with room; then blocks are sorted by
       cost and every ``num_replicas`` consecutive ones form a step, which minimises the sum over steps of the
       slowest rank's cost for these blocks. Otherwise blocks are dealt in a random order (the baseline).
       Steps, and ranks within a step, are then shuffled.

    With ``units`` (the samples' pairs and groups, ``packing.core._pairs_groups.Units``, whose laid-out lengths are
    ``lengths``), a unit's cost is its documents' (:meth:`~packing.core._pairs_groups.Units.costs`: with a shared prompt
    ``prompt² + Σ (2·prompt·c + c²)``-shaped attention), not that of one document of its length.

    O(n + the strategy's cost + blocks log blocks).

    >>> s = build_schedule([5, 3, 2, 4, 6, 1], 6, 2, seed=0)
    >>> s.num_steps, sorted(s.indices.tolist())
    (2, [0, 1, 2, 3, 4, 5])
    >>> sorted(build_schedule([10, 3, 5], 8, overflow="split").lengths.tolist())
    [2, 3, 5, 8]
    """
    chosen = Recipe.at("build_schedule", recipe, max_seq_length, strategy=strategy, overflow=overflow, **options)
    sizes = as_lengths(getattr(lengths, "lengths", lengths))
    return schedule_of(sizes, chosen, num_replicas, epoch, shuffle=shuffle, cost=cost, balance=balance, units=units)


def schedule_of(
    sizes: Int64Array,
    chosen: Recipe,
    num_replicas: int,
    epoch: int,
    *,
    shuffle: bool,
    cost: CostFunction | None,
    balance: bool,
    units: Units | None = None,
) -> Schedule:
    """:func:`build_schedule` of checked lengths with the door's recipe (``PackingSampler``'s, built once; not
    checked again). O(n + the strategy's cost + blocks log blocks)."""
    capacity = chosen.max_seq_length
    check_whole_samples(chosen.strategy)
    if chosen.overflow == "error":  # named by its index in the dataset, before the shuffle renumbers it
        check_within(sizes, capacity)
    rng = np.random.default_rng([chosen.seed or 0, epoch])
    order = rng.permutation(len(sizes)) if shuffle else np.arange(len(sizes))
    blocks = drawn_plan_of(sizes[order], chosen, rng)
    docs = order[blocks.piece_sequence.astype(np.int64)]
    planned = Entries(
        docs,
        blocks.piece_start.astype(np.int64),
        blocks.piece_length.astype(np.int64),
        (sizes[docs] > capacity) & (chosen.overflow == "split"),
    )
    if len(docs) == 0:  # an epoch that trains nothing is a mistake; a resumed remainder may be anything
        kept = f" of at most {capacity} tokens (overflow='drop')" if chosen.overflow == "drop" else ""
        raise SettingError("lengths", f"at least one sample with tokens{kept}", f"<none of {len(sizes)} samples>")
    empties = np.flatnonzero(sizes == 0)
    if empties.size and shuffle:
        empties = rng.permutation(empties)
    nothing = np.zeros(len(empties), dtype=np.int64)
    return _deal(
        planned,
        blocks,
        Entries(empties, nothing, nothing, np.zeros(len(empties), dtype=bool)),
        blocks.stats,
        num_replicas,
        rng,
        shuffle=shuffle,
        cost=cost,
        balance=balance,
        recipe=chosen,
        units=units,
    )


def resume_schedule(
    previous: Schedule,
    step: int,
    num_replicas: int,
    rng: np.random.Generator,
    *,
    shuffle: bool,
    cost: CostFunction | None,
    balance: bool,
    recipe: Recipe,
    units: Units | None = None,
) -> Schedule:
    """What is left of ``previous`` after its first ``step`` steps, packed anew and dealt to ``num_replicas``
    ranks (a resume on another number of ranks): every remaining entry exactly once, none of the consumed ones;
    with fewer entries left than ``num_replicas``, the ranks left over get empty blocks. The order and plan draw
    from ``rng``. An empty remainder gives a schedule of no steps. O(remaining + the strategy's cost).

    >>> first = build_schedule([3, 2, 4, 1, 5, 2, 1, 1, 2, 3, 4, 2], 6, 2, seed=0)   # 3 steps on 2 ranks
    >>> rest = resume_schedule(first, 1, 3, np.random.default_rng(0), shuffle=True, cost=None, balance=True,
    ...                        recipe=Recipe(6))                                  # 1 step done; 3 ranks now
    >>> done = {int(i) for r in range(2) for i in first.block(0, r)}
    >>> rest.num_steps, sorted(done | set(rest.indices.tolist())) == list(range(12)), done.isdisjoint(rest.indices)
    (2, True, True)
    >>> end = resume_schedule(first, 2, 8, np.random.default_rng(0), shuffle=True, cost=None, balance=True,
    ...                       recipe=Recipe(6))                                   # 1 step left; 8 ranks now
    >>> end.num_steps, sorted(len(end.block(0, r)) for r in range(8))            # one sample a rank, or none
    (1, [0, 0, 0, 0, 1, 1, 1, 1])
    """
    left = previous.remaining(step)
    real = np.flatnonzero(left.lengths > 0)
    if len(left.indices) == 0:
        return _empty_schedule(num_replicas, previous.stats)
    if shuffle:
        real = rng.permutation(real)
    blocks = drawn_plan_of(left.lengths[real], recipe, rng)  # every entry fits a block: one piece each, in plan order
    planned = left.take(real[blocks.piece_sequence.astype(np.int64)])
    empties = np.flatnonzero(left.lengths == 0)
    return _deal(
        planned,
        blocks,
        left.take(rng.permutation(empties) if shuffle else empties),
        previous.stats,
        num_replicas,
        rng,
        shuffle=shuffle,
        cost=cost,
        balance=balance,
        recipe=recipe,
        units=units,
    )


def _empty_schedule(num_replicas: int, stats: PackingStats) -> Schedule:
    none = np.zeros(0, dtype=np.int64)
    grid = np.zeros((0, num_replicas))
    return Schedule(num_replicas, np.zeros(1, np.int64), none, grid, none, none, np.zeros(0, bool), stats, grid, grid)


def _attention_of(
    cost: CostFunction | None, room: Int64Array, units: Units | None = None, indices: Int64Array | None = None
) -> FloatArray:
    """The attention part of each document's cost: the cost's own ``attention`` component, else ``ℓ²`` (with
    ``units``, each entry's unit's, over its documents)."""
    parts = getattr(cost, "components", None)

    def attention(lengths: Int64Array) -> FloatArray:
        if callable(parts):
            return np.asarray(parts(lengths)["attention"], dtype=np.float64)
        ell = np.asarray(lengths, dtype=np.float64)
        return ell * ell

    if units is not None and indices is not None:
        return np.asarray(_unit_cost(attention, units, indices)(room), dtype=np.float64)
    return attention(room)


def _unit_cost(cost: CostFunction, units: Units, indices: Int64Array) -> CostFunction:
    """``cost`` of the entries ``indices`` (whole units) as their documents' (``Units.costs``), whatever lengths
    it is handed (the entries' own). O(completions)."""
    per_unit = np.asarray(units.costs(cost), dtype=np.float64)
    return lambda lengths: per_unit[indices]


def _deal(
    planned: Entries,
    blocks: PackingPlan,
    empties: Entries,
    stats: PackingStats,
    num_replicas: int,
    rng: np.random.Generator,
    *,
    shuffle: bool,
    cost: CostFunction | None,
    balance: bool,
    recipe: Recipe,
    units: Units | None = None,
) -> Schedule:
    """Steps 2 and 3 of :func:`build_schedule`: the planned entries (one a piece of ``blocks``, in plan order) made
    into ``steps × num_replicas`` blocks and dealt; ``empties`` (samples of no tokens) join blocks round-robin; with
    ``units``, each entry (a whole unit) costs what its documents do."""
    capacity = recipe.max_seq_length
    room = padded_lengths(planned.lengths, recipe.document_multiple)  # what each document takes of a block
    weigh = cost if cost is not None else default_cost
    if units is not None:
        weigh = _unit_cost(weigh, units, planned.indices)
    doc_cost = np.asarray(weigh(room), dtype=np.float64)
    docs = planned.indices
    if doc_cost.shape != docs.shape:
        raise SettingError("cost", "a function giving one value per length", f"<{doc_cost.size} values>")
    num_blocks, block_of = blocks.num_blocks, blocks.piece_block()
    steps = max(1, -(-num_blocks // num_replicas))  # one step at least: something is left to deal
    wanted = steps * num_replicas
    if wanted > num_blocks:
        counts = np.bincount(block_of, minlength=num_blocks)
        candidates = np.argsort(-counts, kind="stable")[: wanted - num_blocks]
        heap = [(-int(counts[b]), int(b)) for b in candidates]
        heapq.heapify(heap)
        for new in range(num_blocks, wanted):
            if not heap or heap[0][0] > -2:  # every document has a block of its own: the rest stay empty
                break
            _, donor = heapq.heappop(heap)  # the block with the most documents
            members = np.flatnonzero(block_of == donor)
            keep, move = _halves(members, doc_cost[members])
            block_of[move] = new
            heapq.heappush(heap, (-len(keep), donor))
            heapq.heappush(heap, (-len(move), new))
    if balance and len(block_of):
        _even_out_cheapest(block_of, doc_cost, room, capacity, num_replicas)
    attention = _attention_of(cost, room, units, planned.indices)
    if len(empties.indices):
        planned = Entries(*(np.concatenate((a, b)) for a, b in zip(planned, empties, strict=True)))
        block_of = np.concatenate((block_of, np.arange(len(empties.indices), dtype=np.int64) % wanted))
        doc_cost = np.concatenate((doc_cost, np.zeros(len(empties.indices))))
        room = np.concatenate((room, np.zeros(len(empties.indices), dtype=np.int64)))
        attention = np.concatenate((attention, np.zeros(len(empties.indices))))
    block_cost = np.bincount(block_of, weights=doc_cost, minlength=wanted)
    if balance:
        dealt = np.argsort(-block_cost, kind="stable").reshape(steps, num_replicas)
    else:
        dealt = (rng.permutation(wanted) if shuffle else np.arange(wanted)).reshape(steps, num_replicas)
    if shuffle:
        dealt = rng.permuted(dealt[rng.permutation(steps)], axis=1)
    rank_of_block = np.empty(wanted, dtype=np.int64)
    rank_of_block[dealt.reshape(-1)] = np.arange(wanted)
    position = rank_of_block[block_of]
    grouped = np.argsort(position, kind="stable")  # keeps each block's documents in plan order
    block_starts = offsets_of(np.bincount(position, minlength=wanted))
    ordered = planned.take(grouped)
    return Schedule(
        num_replicas,
        block_starts,
        ordered.indices.astype(np.int64),
        block_cost[dealt].astype(np.float64),
        ordered.starts,
        ordered.lengths,
        ordered.pieces,
        stats,
        np.bincount(block_of, weights=room, minlength=wanted)[dealt].astype(np.float64),
        np.bincount(block_of, weights=attention, minlength=wanted)[dealt].astype(np.float64),
    )
