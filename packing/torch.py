"""Packing inside a PyTorch training loop: a batch sampler across data-parallel ranks, padding-free collates,
and a dataset over packed blocks.

``import packing`` never imports torch; ``import packing.torch`` does (``pip install torch``).

- ``PackingSampler(lengths, max_seq_length)``: a batch sampler; each step yields the sample indices of this rank's
  packed block. Every sample once per epoch across ranks, the same number of steps on every rank, no empty block,
  and the blocks of one step dealt so that the slowest rank's compute is close to the mean.
- ``collate(rows)``: the padding-free batch of ``transformers.DataCollatorWithFlattening`` (one row of all tokens,
  ``position_ids`` restarting per document; optionally flash-attention boundaries and ``seq_idx``). ``collate_fixed(max_seq_length)``: blocks
  of exactly ``max_seq_length`` tokens (static shapes), also without ``attention_mask``.
- ``PackedDataset(batch_or_path)``: a map-style dataset of packed blocks, from a ``PackedBatch`` or a packed Parquet
  file read one row group at a time through a memory map, or any other layout the auditor recognises, converted.

>>> import packing.torch as pt
>>> lengths = [5, 3, 2, 4, 6, 1]
>>> sampler = pt.PackingSampler(lengths, 6, num_replicas=2, rank=0, seed=1)
>>> len(sampler), sum(len(b) for b in sampler) > 0
(2, True)
>>> batch = pt.collate([[1, 2, 3], {"prompt": [4], "completion": [5, 6]}], return_flash_attn_kwargs=True)
>>> batch["input_ids"].tolist(), batch["labels"].tolist(), batch["position_ids"].tolist()
([[1, 2, 3, 4, 5, 6]], [[-100, 2, 3, -100, 5, 6]], [[0, 1, 2, 0, 1, 2]])
>>> batch["cu_seq_lens_q"].tolist(), batch["max_length_q"]
([0, 3, 6], 3)
"""

from __future__ import annotations

import functools
import heapq
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

try:
    import torch
    from torch.utils.data import Dataset, Sampler
except ImportError as error:  # pragma: no cover - exercised only without torch
    raise ImportError("packing.torch needs PyTorch: pip install torch") from error

from packing import IGNORE_INDEX, DatasetError, PackedBatch, SampleError, SettingError, materialize, plan, read_rows
from packing.auditing import AuditReport, audit
from packing.plans import Piece
from packing.reader import MASK_FIELDS, Samples
from packing.recipe import Recipe, RecipeOptions
from packing.schema import COLUMNS, LOSS_WEIGHTS
from packing.stats import PackingStats
from packing.strategies import STRATEGIES, StrategyName
from packing.validation import OverflowPolicy
from packing.weighting import LossMode, LossTotals, check_mode, token_weights

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


def _world(num_replicas: int | None, rank: int | None) -> tuple[int, int]:
    """``(num_replicas, rank)``: the given values, else torch.distributed's, else a single process."""
    initialized = torch.distributed.is_available() and torch.distributed.is_initialized()
    if num_replicas is None:
        num_replicas = torch.distributed.get_world_size() if initialized else 1
    if rank is None:
        rank = torch.distributed.get_rank() if initialized else 0
    for name, value, low in (("num_replicas", num_replicas, 1), ("rank", rank, 0)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
            raise SettingError(name, f"an integer >= {low}", value)
    if rank >= num_replicas:
        raise SettingError("rank", f"a rank in 0..{num_replicas - 1}", rank)
    return int(num_replicas), int(rank)


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
        block_of = np.repeat(np.arange(len(self.block_starts) - 1), np.diff(self.block_starts))
        optimizer_step = block_of // group
        counts = trained[self.indices]
        steps = int(optimizer_step.max()) + 1 if len(optimizer_step) else 0
        documents = np.bincount(optimizer_step, weights=counts > 0, minlength=steps)
        tokens = np.bincount(optimizer_step, weights=counts, minlength=steps)
        roots = np.bincount(optimizer_step, weights=np.sqrt(counts), minlength=steps)
        per_group = [LossTotals(int(d), int(t), float(r)) for d, t, r in zip(documents, tokens, roots, strict=True)]
        return [per_group[step // gradient_accumulation_steps] for step in range(self.num_steps)]

    @property
    def imbalance(self) -> float:
        """How much longer an epoch takes than with perfectly even ranks: the sum over steps of the slowest rank's
        cost, over the sum of the mean rank's cost, minus 1 (0.0 = perfectly balanced)."""
        mean = float(self.costs.mean(axis=1).sum())
        return float(self.costs.max(axis=1).sum()) / mean - 1.0 if mean > 0 else 0.0

    @property
    def worst_step_imbalance(self) -> float:
        """The largest per-step ratio of the slowest rank's cost to the mean, minus 1."""
        mean = self.costs.mean(axis=1)
        ratios = np.divide(self.costs.max(axis=1), mean, out=np.ones_like(mean), where=mean > 0)
        return float(ratios.max(initial=1.0)) - 1.0


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
    **options: Unpack[RecipeOptions],
) -> Schedule:
    """Pack one epoch and deal its blocks to ``num_replicas`` ranks (what ``PackingSampler`` does on every rank).

    1. The samples are permuted with ``(seed, epoch)`` (when ``shuffle``; seed default 0) and planned with
       the recipe (strategy, its options, window), so neighbours change between epochs. The overflow policy
       applies as in ``pack``: a sample longer than ``max_seq_length`` is truncated to it (a block of its
       own), dropped, or split into pieces that may land in different blocks.
    2. When the blocks do not divide evenly into ``num_replicas``, the blocks with the most documents are split
       in two (halves of similar cost) until they do; empty samples join blocks round-robin.
    3. With ``balance``, the documents of the ``2 × num_replicas`` cheapest blocks (part-filled ones) are
       re-dealt over as many blocks, heaviest first into the cheapest block with room; then blocks are sorted by
       cost and every ``num_replicas`` consecutive ones form a step, which minimises the sum over steps of the
       slowest rank's cost for these blocks. Otherwise blocks are dealt in a random order (the baseline).
       Steps, and ranks within a step, are then shuffled.

    O(n + the strategy's cost + blocks log blocks).

    >>> s = build_schedule([5, 3, 2, 4, 6, 1], 6, 2, seed=0)
    >>> s.num_steps, sorted(s.indices.tolist())
    (2, [0, 1, 2, 3, 4, 5])
    >>> sorted(build_schedule([10, 3, 5], 8, overflow="split").lengths.tolist())
    [2, 3, 5, 8]
    """
    chosen = Recipe.of(recipe, max_seq_length, strategy=strategy, overflow=overflow, **options)
    capacity = chosen.max_seq_length
    sizes = np.asarray(getattr(lengths, "lengths", lengths))
    if sizes.ndim != 1 or (sizes.size and sizes.dtype.kind not in "iu"):
        raise SettingError("lengths", "a flat list of integers", f"<an array of shape {sizes.shape}>")
    sizes = sizes.astype(np.int64)
    if sizes.size and int(sizes.min()) < 0:
        raise SettingError("lengths", "non-negative lengths", int(sizes.min()))
    if STRATEGIES[chosen.strategy].splits_sequences:
        choices = ", ".join(name for name, s in STRATEGIES.items() if not s.splits_sequences)
        raise SettingError("strategy", f"a strategy that keeps samples whole ({choices})", chosen.strategy)
    rng = np.random.default_rng([chosen.seed or 0, epoch])
    order = rng.permutation(len(sizes)) if shuffle else np.arange(len(sizes))
    random_order = "seed" in STRATEGIES[chosen.strategy].options
    layout = plan(sizes[order], recipe=Recipe.of(chosen, seed=int(rng.integers(2**31))) if random_order else chosen)
    docs = order[layout.piece_sequence.astype(np.int64)]
    starts = layout.piece_start.astype(np.int64)
    tokens = layout.piece_length.astype(np.int64)
    block_of = layout.piece_block()
    weigh = cost if cost is not None else default_cost
    doc_cost = np.asarray(weigh(tokens), dtype=np.float64)
    if doc_cost.shape != docs.shape:
        raise SettingError("cost", "a function giving one value per length", f"<{doc_cost.size} values>")
    num_blocks = layout.num_blocks
    steps = -(-num_blocks // num_replicas)
    wanted = steps * num_replicas
    if len(docs) < wanted or num_blocks == 0:
        raise SettingError(
            "num_replicas",
            f"at most as many blocks ({num_replicas} ranks × {max(steps, 1)} steps) as non-empty samples ({len(docs)})",
            num_replicas,
        )
    if wanted > num_blocks:
        counts = np.bincount(block_of, minlength=num_blocks)
        candidates = np.argsort(-counts, kind="stable")[: wanted - num_blocks]
        heap = [(-int(counts[b]), int(b)) for b in candidates]
        heapq.heapify(heap)
        for new in range(num_blocks, wanted):
            _, donor = heapq.heappop(heap)  # the block with the most documents; at least 2 (checked above)
            members = np.flatnonzero(block_of == donor)
            keep, move = _halves(members, doc_cost[members])
            block_of[move] = new
            heapq.heappush(heap, (-len(keep), donor))
            heapq.heappush(heap, (-len(move), new))
    if balance:
        _even_out_cheapest(block_of, doc_cost, tokens, capacity, num_replicas)
    empties = np.flatnonzero(sizes == 0)
    if empties.size:
        empties = rng.permutation(empties) if shuffle else empties
        docs = np.concatenate((docs, empties))
        starts = np.concatenate((starts, np.zeros(len(empties), dtype=np.int64)))
        tokens = np.concatenate((tokens, np.zeros(len(empties), dtype=np.int64)))
        block_of = np.concatenate((block_of, np.arange(len(empties), dtype=np.int64) % wanted))
        doc_cost = np.concatenate((doc_cost, np.zeros(len(empties))))
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
    block_starts = np.zeros(wanted + 1, dtype=np.int64)
    np.cumsum(np.bincount(position, minlength=wanted), out=block_starts[1:])
    pieces = (sizes[docs] > capacity) & (chosen.overflow == "split")
    return Schedule(
        num_replicas,
        block_starts,
        docs[grouped].astype(np.int64),
        block_cost[dealt].astype(np.float64),
        starts[grouped],
        tokens[grouped],
        pieces[grouped],
        layout.stats,
    )


class PackingSampler(Sampler[list[int | Piece]]):
    """A batch sampler that packs samples into blocks of at most ``max_seq_length`` tokens, for
    ``DataLoader(dataset, batch_sampler=sampler, collate_fn=sampler.collate)``: each step yields the indices of
    the samples in this rank's block.

    - The options are every entry point's (:class:`~packing.Recipe`, or ``recipe=``); ``seed`` (default 0)
      draws the epochs' orders. ``lengths`` are the samples' token counts (or a dataset with ``.lengths``).
    - Never longer than ``max_seq_length``: the overflow policy applies as in ``pack`` and is counted the same
      way (``sampler.stats``: tokens lost, sequences truncated, split, dropped). ``truncate``: an over-long
      sample's index comes alone and ``sampler.collate`` keeps its first ``max_seq_length`` tokens. ``drop``: it
      never comes. ``split``: its pieces come as ``Piece(sample, start, length)`` items, possibly in different
      steps; read the dataset through ``sampler.pieces(dataset)``, which gives such an item the piece's tokens
      as a sample of its own (a document of its own, as in ``pack``).
    - ``len(sampler)`` is the number of steps of the epoch, the same on every rank (it may change by one between
      epochs, as each epoch is packed anew); every sample (or piece) appears in exactly one block of one rank
      per epoch; no block is empty. Fewer non-empty samples than ranks × steps is refused.
    - ``set_epoch(epoch)`` repacks from ``(seed, epoch)``: the same on every rank and run, different between epochs.
    - The blocks of a step are chosen so the slowest rank's cost is close to the mean; the cost of a document of
      ``ℓ`` tokens is ``cost(ℓ)`` (vectorized over an int64 array), by default ``24576·ℓ + ℓ²``.
      ``imbalance`` reports it (``balance=False`` deals blocks in random order, the usual behaviour).
    - ``num_replicas`` and ``rank`` default to ``torch.distributed``'s world size and rank (1 and 0 without it).

    Every rank computes the whole epoch's schedule: O(n + the strategy's cost + blocks log blocks) per epoch.

    >>> lengths = [7, 1, 3, 5, 2, 6, 4, 8]
    >>> ranks = [PackingSampler(lengths, 8, num_replicas=2, rank=r, seed=3) for r in range(2)]
    >>> [len(s) for s in ranks]
    [3, 3]
    >>> sorted(i for s in ranks for block in s for i in block)
    [0, 1, 2, 3, 4, 5, 6, 7]
    >>> sampler = PackingSampler([10, 3, 5], 8, shuffle=False)
    >>> rows = [[7] * 10, [1, 2, 3], [4] * 5]
    >>> [sampler.collate([rows[i] for i in b])["input_ids"].shape[1] for b in sampler]
    [8, 8]
    >>> sampler.stats.tokens_lost, sampler.stats.sequences_truncated
    (2, 1)
    """

    def __init__(
        self,
        lengths: npt.ArrayLike,
        max_seq_length: int | None = None,
        *,
        strategy: StrategyName | None = None,
        overflow: OverflowPolicy | None = None,
        num_replicas: int | None = None,
        rank: int | None = None,
        shuffle: bool = True,
        cost: CostFunction | None = None,
        balance: bool = True,
        recipe: Recipe | None = None,
        trained_tokens: npt.ArrayLike | None = None,
        gradient_accumulation_steps: int = 1,
        **options: Unpack[RecipeOptions],
    ) -> None:
        super().__init__()
        self.recipe = Recipe.of(recipe, max_seq_length, strategy=strategy, overflow=overflow, **options)
        self.lengths = np.asarray(getattr(lengths, "lengths", lengths)).copy()
        kept = self.lengths
        if self.recipe.overflow == "truncate":  # what collate keeps of an over-long sample
            kept = np.minimum(self.lengths, self.recipe.max_seq_length)
        self.trained_tokens = _trained_counts(trained_tokens, kept)
        if (
            isinstance(gradient_accumulation_steps, bool)
            or not isinstance(gradient_accumulation_steps, int)
            or (gradient_accumulation_steps < 1)
        ):
            raise SettingError("gradient_accumulation_steps", "an integer >= 1", gradient_accumulation_steps)
        self.gradient_accumulation_steps = gradient_accumulation_steps
        self.num_replicas, self.rank = _world(num_replicas, rank)
        self.shuffle = shuffle
        self.cost = cost
        self.balance = balance
        self.epoch = 0
        self._schedule: Schedule | None = None
        self.schedule  # noqa: B018 - check the arguments now, not at the first step

    @property
    def max_seq_length(self) -> int:
        return self.recipe.max_seq_length

    @property
    def collate(self) -> Callable[[Sequence[Any]], dict[str, Any]]:
        """``collate`` with this sampler's recipe: rows read the same way, no batch over ``max_seq_length``
        (picklable, for DataLoader workers)."""
        return functools.partial(collate, recipe=self.recipe)

    def pieces(self, dataset: Any) -> Pieces:
        """``dataset`` read as this sampler's items: an index gives its row, a ``Piece`` the piece's tokens."""
        return Pieces(dataset, self.recipe)

    def set_epoch(self, epoch: int) -> None:
        """Pack epoch ``epoch`` next (call it before iterating, on every rank, with the same value)."""
        if epoch != self.epoch:
            self.epoch = epoch
            self._schedule = None

    @property
    def schedule(self) -> Schedule:
        """This epoch's blocks for every rank, with their costs (computed once per epoch)."""
        if self._schedule is None:
            self._schedule = build_schedule(
                self.lengths,
                num_replicas=self.num_replicas,
                epoch=self.epoch,
                shuffle=self.shuffle,
                cost=self.cost,
                balance=self.balance,
                recipe=self.recipe,
            )
        return self._schedule

    @property
    def stats(self) -> PackingStats:
        """This epoch's plan's statistics: what the overflow policy cut, split or dropped, as ``pack`` counts it."""
        return self.schedule.stats

    @property
    def imbalance(self) -> float:
        """This epoch's sum over steps of the slowest rank's cost over that of the mean rank, minus 1."""
        return self.schedule.imbalance

    def __len__(self) -> int:
        return self.schedule.num_steps

    def __iter__(self) -> Iterator[list[int | Piece]]:
        schedule = self.schedule
        totals = self.loss_totals()
        for step in range(schedule.num_steps):
            items = schedule.items(step, self.rank)
            yield items if totals is None else Step(items, totals[step])

    def loss_totals(self) -> list[LossTotals] | None:
        """Each step's ``LossTotals`` over its optimizer step (``gradient_accumulation_steps`` steps × every
        rank), from ``trained_tokens``; None without them."""
        if self.trained_tokens is None:
            return None
        return self.schedule.loss_totals(self.trained_tokens, self.gradient_accumulation_steps)

    def loader(self, dataset: Any, loss_weights: LossMode, **kwargs: Any) -> StepLoader:
        """A ``DataLoader`` over ``dataset`` with this sampler whose batches (``collate``'s) carry ``loss_weights``
        for the objective ``loss_weights``, normalised over each optimizer step on every rank (needs
        ``trained_tokens``). ``kwargs`` go to the ``DataLoader`` (``num_workers``, ...)."""
        check_mode(loss_weights)
        if self.trained_tokens is None:
            raise SettingError("trained_tokens", "trained tokens per sample (packing.weighting.trained_tokens)", None)
        collate_fn = functools.partial(collate, recipe=self.recipe, loss_weights=loss_weights)
        return StepLoader(StepDataset(self.pieces(dataset)), batch_sampler=self, collate_fn=collate_fn, **kwargs)


class Pieces(Dataset[Any]):
    """A dataset read as ``PackingSampler`` items: an index gives ``dataset[index]`` unchanged; a
    ``Piece(sample, start, length)`` gives ``{"input_ids", "loss_mask"}`` of those tokens of the sample, read
    through the reader with the recipe (text rows tokenized). O(the sample's length) per piece.

    >>> import packing
    >>> Pieces([[1, 2, 3, 4, 5]], packing.Recipe(2))[packing.Piece(0, 2, 2)]
    {'input_ids': [3, 4], 'loss_mask': [1, 1]}
    """

    def __init__(self, dataset: Any, recipe: Recipe) -> None:
        self.dataset = dataset
        self.recipe = recipe

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, item: int | Piece) -> Any:
        if not isinstance(item, Piece):
            return self.dataset[item]
        row = self.dataset[item.sequence]
        row = {k: _numpy(v) for k, v in row.items()} if isinstance(row, Mapping) else _numpy(row)
        try:
            samples = read_rows([row], **self.recipe.read_options())
        except SampleError as error:
            error.sample = item.sequence
            error.args = (error.where_and_what(),)
            raise
        if samples.tokens is None or samples.loss_mask is None:
            raise SettingError("dataset", "samples with token ids", "<lengths only>")
        cut = slice(item.start, item.start + item.length)
        piece = {"input_ids": samples.tokens[cut].tolist(), "loss_mask": samples.loss_mask[cut].tolist()}
        if samples.labels is not None:  # labels other than the tokens, for collate
            piece["labels"] = np.where(samples.loss_mask[cut] != 0, samples.labels[cut], IGNORE_INDEX).tolist()
        return piece


# ---------------------------------------------------------------- collate


def _numpy(value: Any) -> Any:
    """Tensors as numpy arrays (the reader takes lists and arrays); anything else unchanged."""
    return value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else value


def _is_block(row: Any) -> bool:
    return isinstance(row, Mapping) and "seq_lengths" in row


def _documents(
    rows: Sequence[Any], recipe: Recipe, ignore_masks: bool = False
) -> tuple[Int64Array, Int64Array, Int64Array]:
    """Tokens, labels (-100 on masked tokens and every document's first token) and lengths of the non-empty
    documents of ``rows``, concatenated. Packed blocks (rows with ``seq_lengths``) give their documents.
    Rows are read by the reader: a row's ``labels`` are kept (``Samples.labels``), as transformers' collators
    keep them; with ``ignore_masks`` a row's loss masks are left out (its labels still say what is trained).
    O(tokens)."""
    if rows and all(_is_block(row) for row in rows):
        parts = []
        for row in rows:
            seq = np.asarray(_numpy(row["seq_lengths"]), dtype=np.int64)
            total = int(seq.sum())
            ids = np.asarray(_numpy(row["input_ids"]), dtype=np.int64)[:total]
            labels = np.asarray(_numpy(row["labels"]), dtype=np.int64)[:total]
            parts.append((ids, labels, seq[seq > 0]))
        return tuple(np.concatenate([p[k] for p in parts]) for k in range(3))  # type: ignore[return-value]
    if any(_is_block(row) for row in rows):
        raise SettingError("rows", "packed blocks (with 'seq_lengths') only, or samples only", "<both>")
    dropped = set(MASK_FIELDS) if ignore_masks else set()
    plain = [
        {key: _numpy(value) for key, value in row.items() if key not in dropped}
        if isinstance(row, Mapping)
        else _numpy(row)
        for row in rows
    ]
    samples = read_rows(plain, **recipe.read_options())
    if samples.tokens is None or samples.loss_mask is None:
        raise SettingError("rows", "samples with token ids", "<lengths only>")
    lengths = samples.lengths
    tokens = samples.tokens.astype(np.int64, copy=False)  # what torch takes
    targets = tokens if samples.labels is None else samples.labels.astype(np.int64, copy=False)
    labels = np.where(samples.loss_mask.astype(bool), targets, IGNORE_INDEX)
    labels[samples.offsets[:-1][lengths > 0]] = IGNORE_INDEX
    return tokens, labels, lengths[lengths > 0]


def _cap(
    tokens: Int64Array, labels: Int64Array, lengths: Int64Array, recipe: Recipe
) -> tuple[Int64Array, Int64Array, Int64Array]:
    """The documents with the overflow policy applied to each (``truncate`` keeps the first ``max_seq_length``
    tokens, ``drop`` leaves it out, ``split`` refuses it: its pieces come from the sampler), refused when they
    hold more than ``max_seq_length`` tokens in all. O(tokens)."""
    capacity, overflow = recipe.max_seq_length, recipe.overflow
    over = lengths > capacity
    if over.any():
        if overflow == "split":
            raise SettingError(
                "rows",
                f"samples of at most {capacity} tokens with overflow='split' (read the dataset through "
                "sampler.pieces(dataset))",
                f"<a sample of {int(lengths[over][0])} tokens>",
            )
        kept = np.where(over, capacity if overflow == "truncate" else 0, lengths)
        starts = np.repeat(np.cumsum(lengths) - lengths, lengths)
        within = np.arange(len(tokens), dtype=np.int64) - starts < np.repeat(kept, lengths)
        tokens, labels, lengths = tokens[within], labels[within], kept[kept > 0]
    if int(lengths.sum()) > capacity:
        raise SettingError(
            "rows", f"at most max_seq_length={capacity} tokens in all (a PackingSampler's block)", int(lengths.sum())
        )
    return tokens, labels, lengths


def collate(
    rows: Sequence[Any],
    max_seq_length: int | None = None,
    *,
    overflow: OverflowPolicy | None = None,
    return_position_ids: bool = True,
    return_flash_attn_kwargs: bool = False,
    return_seq_idx: bool = False,
    ignore_masks: bool = False,
    recipe: Recipe | None = None,
    loss_weights: LossMode | None = None,
    totals: LossTotals | float | None = None,
    **options: Unpack[RecipeOptions],
) -> dict[str, Any]:
    """The padding-free batch of ``rows``: every document's tokens in one row, as
    ``transformers.DataCollatorWithFlattening`` returns it for the same documents with the same three options
    and defaults (a drop-in ``collate_fn``), key for key.

    Rows are samples in any form ``packing.pack`` accepts (token lists, ``{"prompt", "completion"}``,
    ``{"input_ids", "loss_mask"}``, or ``{"input_ids", "labels"}`` whose labels are kept (-100 masks its token); text rows with a
    ``tokenizer``), or packed blocks (rows with ``seq_lengths``, such as ``PackedDataset`` items, passed as they
    are); tensors are accepted. Empty documents are skipped. The options are every entry point's
    (:class:`~packing.Recipe`, or ``recipe=``; ``PackingSampler.collate`` is this with the sampler's recipe).
    With ``max_seq_length`` (or a recipe), each sample gets the overflow policy (``truncate``, ``drop``;
    ``split`` refuses an over-long sample, whose pieces the sampler gives) and more than ``max_seq_length``
    tokens in all are refused: a batch is never longer. Returns ``input_ids`` and ``labels`` (-100 on masked
    tokens and each document's first token) as int64 tensors of shape ``(1, T)``, and:

    - ``return_position_ids`` (default ``True``): ``position_ids`` (int64, ``(1, T)``) restarting at 0 per document;
    - ``return_flash_attn_kwargs`` (default ``False``): ``cu_seq_lens_q`` = ``cu_seq_lens_k`` (int32, ``[0,
      ...cumulative lengths]``) and ``max_length_q`` = ``max_length_k`` (ints);
    - ``return_seq_idx`` (default ``False``): ``seq_idx`` (int32, ``(1, T)``), the document number of every token
      (0, 1, ...), which linear-attention layers need.

    One difference, on purpose: a mask in a row with ``input_ids`` (``completion_mask``, ``assistant_masks``,
    ``loss_mask``) is applied to the labels, where transformers' collator ignores it and trains every token but
    each document's first. ``ignore_masks=True`` gives transformers' exact labels (masks unused; labels given in
    a row are still kept, as transformers keeps them). Pass no ``attention_mask`` to the model. O(T).

    With ``loss_weights`` (``token``, ``sequence``, ``sequence_sum``, ``sqrt``; see ``packing.weighting``), also
    ``loss_weights``: float32 ``(1, T)``, aligned with ``labels``, such that ``weighted_loss`` is that objective.
    A document is a row (a sample), or for packed blocks a source sample (``sequence_ids``). ``totals`` is the
    optimizer step's normaliser (a ``LossTotals`` or a number); default: the ``totals`` of ``rows`` when they come
    from ``PackingSampler.loader`` (a ``Step``), else this batch's own. Packed blocks that carry a
    ``loss_weights`` column keep it when no mode is asked.

    >>> collate([[5, 6], {"input_ids": [7, 8, 9], "loss_mask": [0, 1, 1]}])["labels"].tolist()
    [[-100, 6, -100, 8, 9]]
    >>> sorted(collate([[5, 6], [7]], return_seq_idx=True, return_flash_attn_kwargs=True))
    ['cu_seq_lens_k', 'cu_seq_lens_q', 'input_ids', 'labels', 'max_length_k', 'max_length_q', 'position_ids', 'seq_idx']
    >>> collate([[5, 6], [7, 8, 9]], loss_weights="sequence")["loss_weights"].tolist()
    [[0.0, 0.5, 0.0, 0.25, 0.25]]
    >>> collate([[5, 6, 7, 8, 9]], 3)["input_ids"].tolist()
    [[5, 6, 7]]
    """
    chosen = Recipe.for_reading(recipe, max_seq_length, overflow=overflow, **options)
    capped = recipe is not None or max_seq_length is not None
    tokens, labels, lengths = _documents(rows, chosen, ignore_masks)
    if capped and not (rows and all(_is_block(row) for row in rows)):
        tokens, labels, lengths = _cap(tokens, labels, lengths, chosen)
    if len(lengths) == 0:
        raise SettingError("rows", "at least one token", "<only empty rows>")
    cu = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(lengths, out=cu[1:])
    batch: dict[str, Any] = {
        "input_ids": torch.from_numpy(tokens.astype(np.int64))[None],
        "labels": torch.from_numpy(labels.astype(np.int64))[None],
    }
    if return_position_ids:
        positions = np.arange(len(tokens), dtype=np.int64) - np.repeat(cu[:-1].astype(np.int64), lengths)
        batch["position_ids"] = torch.from_numpy(positions)[None]
    if return_seq_idx:
        batch["seq_idx"] = torch.from_numpy(np.repeat(np.arange(len(lengths), dtype=np.int32), lengths))[None]
    if return_flash_attn_kwargs:
        longest = int(lengths.max())
        cu_tensor = torch.from_numpy(cu)
        batch.update(cu_seq_lens_q=cu_tensor, cu_seq_lens_k=cu_tensor, max_length_q=longest, max_length_k=longest)
    weights = _collated_weights(rows, labels, lengths, loss_weights, totals)
    if weights is not None:
        batch[LOSS_WEIGHTS.name] = torch.from_numpy(weights)[None]
    return batch


def _collated_weights(
    rows: Sequence[Any],
    labels: Int64Array,
    lengths: Int64Array,
    mode: LossMode | None,
    totals: LossTotals | float | None,
) -> npt.NDArray[np.float32] | None:
    """``collate``'s ``loss_weights``: computed for ``mode``, or the blocks' own column, or None. O(T)."""
    blocks = bool(rows) and all(_is_block(row) for row in rows)
    if mode is None:
        if blocks and all(LOSS_WEIGHTS.name in row for row in rows):
            return np.concatenate(
                [np.asarray(_numpy(r[LOSS_WEIGHTS.name]), np.float32)[: int(np.sum(_numpy(r["seq_lengths"])))]
                 for r in rows]
            )  # fmt: skip
        return None
    check_mode(mode)
    if blocks and all("sequence_ids" in row for row in rows):
        documents = np.concatenate(
            [np.asarray(_numpy(r["sequence_ids"]), np.int64)[: int(np.sum(_numpy(r["seq_lengths"])))] for r in rows]
        )
    else:
        documents = np.repeat(np.arange(len(lengths)), lengths)
    return token_weights(labels != IGNORE_INDEX, documents, mode, totals if totals is not None else _totals_of(rows))


def _totals_of(rows: Sequence[Any]) -> LossTotals | None:
    totals = getattr(rows, "totals", None)
    return totals if isinstance(totals, LossTotals) else None


def weighted_loss(logits: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """``Σ weights × cross-entropy`` of a causal LM's ``logits`` ``(..., T, vocab)`` against ``labels`` and
    ``weights`` ``(..., T)`` as ``collate`` gives them (transformers' convention: ``labels[t]`` is the target of
    the prediction at ``t - 1``; this function shifts, as the model's own loss does). The token-mean objective is
    ``weighted_loss`` with ``collate(..., loss_weights="token")``; the result is the batch's share of the
    optimizer step's objective when the weights were normalised over the step. Computed in float32. O(T × vocab).

    >>> logits = torch.zeros(1, 3, 4)
    >>> round(float(weighted_loss(logits, torch.tensor([[-100, 1, 2]]), torch.tensor([[0.0, 0.5, 0.5]]))), 4)
    1.3863
    """
    if labels.shape != weights.shape or logits.shape[:-1] != labels.shape:
        raise SettingError(
            "weights", f"labels and weights of the logits' shape {tuple(logits.shape[:-1])}", tuple(weights.shape)
        )
    predictions = logits[..., :-1, :].float().reshape(-1, logits.shape[-1])
    targets = (
        labels[..., 1:].reshape(-1).to(predictions.device, torch.long)
    )  # the int32 schema: cross-entropy takes int64
    per_token = torch.nn.functional.cross_entropy(predictions, targets, ignore_index=IGNORE_INDEX, reduction="none")
    return (per_token * weights[..., 1:].reshape(-1).to(per_token)).sum()


class Step(list):  # type: ignore[type-arg]
    """A list (of a step's sample indices, or of its rows) that carries the optimizer step's ``totals``:
    what ``PackingSampler`` yields when given ``trained_tokens``, and what ``StepDataset`` hands ``collate``."""

    def __init__(self, items: Any, totals: LossTotals | None) -> None:
        super().__init__(items)
        self.totals = totals

    def __reduce__(self) -> Any:  # DataLoader workers receive the indices pickled
        return (Step, (list(self), self.totals))


class StepLoader(torch.utils.data.DataLoader[Any]):
    """``PackingSampler.loader``'s ``DataLoader``: ``set_epoch`` repacks its sampler (``transformers.Trainer``
    calls it at every epoch)."""

    def set_epoch(self, epoch: int) -> None:
        self.batch_sampler.set_epoch(epoch)  # type: ignore[union-attr]


class StepDataset(Dataset[Any]):
    """``dataset`` whose batches, fetched for a sampler's ``Step``, keep its ``totals`` for ``collate``
    (``DataLoader`` fetches a batch with ``__getitems__``). Items are ``dataset``'s, unchanged."""

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> Any:
        return self.dataset[index]

    def __getitems__(self, indices: Sequence[int]) -> Step:
        fetch = getattr(self.dataset, "__getitems__", None)
        items = fetch(list(indices)) if fetch else [self.dataset[i] for i in indices]
        return Step(items, getattr(indices, "totals", None))


def _trained_counts(trained: npt.ArrayLike | None, lengths: Int64Array) -> Int64Array | None:
    """``trained`` as int64 counts, one per sample, or None: each between 0 and the tokens collate keeps of its
    sample (``lengths``) less one (a sample's first token is never a target). O(samples)."""
    if trained is None:
        return None
    values = np.asarray(trained)
    count = len(lengths)
    if values.shape != (count,) or (values.size and values.dtype.kind not in "iu"):
        got = f"<an array of shape {values.shape} and dtype {str(values.dtype)[:20]}>"
        raise SettingError("trained_tokens", f"one integer per sample ({count})", got)
    if values.size and int(values.min()) < 0:
        raise SettingError("trained_tokens", "non-negative counts", int(values.min()))
    over = np.flatnonzero(values.astype(np.int64) > np.maximum(lengths.astype(np.int64) - 1, 0))
    if over.size:
        first = int(over[0])
        raise SettingError(
            "trained_tokens",
            f"at most the tokens kept of each sample less one (sample {first} keeps {int(lengths[first])}; "
            "trained_tokens(samples, max_seq_length))",
            int(values[first]),
        )
    return values.astype(np.int64)


def _collate_fixed(rows: Sequence[Any], *, recipe: Recipe) -> dict[str, torch.Tensor]:
    max_seq_length = recipe.max_seq_length
    if rows and all(_is_block(row) for row in rows):
        grids = {key: np.stack([np.asarray(_numpy(row[key]), dtype=np.int64) for row in rows]) for key in _FIXED_KEYS}
        if grids["input_ids"].shape[1] != max_seq_length:
            raise SettingError("max_seq_length", "the length of the blocks given", max_seq_length)
        return {key: torch.from_numpy(grid) for key, grid in grids.items()}
    tokens, labels, lengths = _documents(rows, recipe)
    if len(lengths) == 0:
        raise SettingError("rows", "at least one token", "<only empty rows>")
    starts = np.concatenate(([0], np.cumsum(lengths)))
    rows_as_samples = [{"input_ids": tokens[a:b], "loss_mask": (labels[a:b] != IGNORE_INDEX).astype(np.int8)}
                       for a, b in zip(starts[:-1].tolist(), starts[1:].tolist(), strict=True)]  # fmt: skip
    samples = read_rows(rows_as_samples)
    layout = plan(samples.lengths, max_seq_length, "next_fit", recipe.overflow)
    batch = materialize(layout, samples, recipe.pad_id)
    # labels: the documents' own labels (which may differ from input_ids) where the block has a target; the
    # same plan filled with each token's place in ``tokens`` says where each slot's token came from
    assert samples.loss_mask is not None
    places = Samples(np.arange(len(tokens), dtype=np.int64), samples.loss_mask, samples.offsets)
    source = materialize(layout, places).input_ids
    out_labels = np.full(batch.input_ids.shape, IGNORE_INDEX, dtype=np.int64)
    real = batch.sequence_ids >= 0
    out_labels[real] = labels[source[real]]
    return {
        "input_ids": torch.from_numpy(batch.input_ids.astype(np.int64)),
        "labels": torch.from_numpy(out_labels),
        "position_ids": torch.from_numpy(batch.position_ids.astype(np.int64)),
    }


_FIXED_KEYS = ("input_ids", "labels", "position_ids")


def collate_fixed(
    max_seq_length: int | None = None,
    *,
    overflow: OverflowPolicy | None = None,
    recipe: Recipe | None = None,
    **options: Unpack[RecipeOptions],
) -> Callable[[Sequence[Any]], dict[str, torch.Tensor]]:
    """A ``collate_fn`` giving blocks of exactly ``max_seq_length`` tokens (static shapes, e.g. for compiled
    models): ``input_ids``, ``labels``, ``position_ids`` of shape ``(blocks, max_seq_length)`` and **no**
    ``attention_mask``; documents restart ``position_ids`` at 0, so transformers keeps them apart, and padding
    (the recipe's pad id, label -100, position 0) comes last. The options are every entry point's. A sampler's
    block is one row; more documents than fit go on into further rows (next-fit; a document longer than a
    block gets the overflow policy, as in ``pack``). Packed blocks pass through, stacked. Picklable
    (DataLoader workers). O(rows × max_seq_length).

    >>> batch = collate_fixed(4)([[1, 2], [3]])
    >>> batch["input_ids"].tolist(), batch["labels"].tolist(), batch["position_ids"].tolist()
    ([[1, 2, 3, 0]], [[-100, 2, -100, -100]], [[0, 1, 0, 0]])
    """
    chosen = Recipe.of(recipe, max_seq_length, overflow=overflow, **options)
    return functools.partial(_collate_fixed, recipe=chosen)


# ---------------------------------------------------------------- dataset

BLOCK_COLUMNS = tuple(column.name for column in COLUMNS)
IPC_SUFFIXES = (".arrow", ".feather", ".ipc")
PARQUET_SUFFIXES = (".parquet", ".pq")
_DTYPES = {column.name: column.dtype_for(int64=True) for column in (*COLUMNS, LOSS_WEIGHTS)}
"""Item dtypes: the schema's, with ids, labels and positions as int64 (what embeddings and cross-entropy take),
whatever the dtype stored."""


class PackedDataset(Dataset[dict[str, torch.Tensor]]):
    """A map-style dataset of packed blocks: item ``i`` is block ``i`` as tensors ``input_ids``, ``labels``,
    ``position_ids`` (int64, whatever the stored dtype: what embeddings and cross-entropy take), ``loss_mask``
    (int8), ``sequence_ids`` (int32, -1 in padding), all of the block's length (``max_seq_length`` for this
    project's blocks), and ``seq_lengths`` (int32, the block's documents).

    ``source`` is a ``PackedBatch`` or the path of a packed file with the schema's columns: Parquet
    (``packing pack ... --output x.parquet``) or an Arrow IPC file (``.arrow``, ``.feather``, ``.ipc``; e.g.
    ``batch.to_arrow()`` written with ``pyarrow.ipc.new_file``). A file is opened through a memory map and never
    loaded whole: Parquet is decoded one row group at a time, on demand (the last few are kept); an Arrow IPC
    file is read in place (zero-copy). The dataset pickles without its open file, so DataLoader workers each open
    their own. ``collate`` turns a list of items into the padding-free batch, ``collate_fixed`` stacks them.
    Items also carry ``loss_weights`` (float32) when the file has that column, or for a ``PackedBatch`` with
    ``loss_weights=mode`` (normalised over every block; ``packing.weighting``).
    O(max_seq_length) per item, plus decoding a row group when it is first touched.

    Any other layout :func:`packing.audit` recognises (TRL, transformers flattening, torchtune, NeMo's ``.npy``,
    segment ids; a file, a ``pyarrow.Table``, a ``datasets.Dataset`` or a dict of columns) is read whole and
    converted to these columns block by block on the fly
    (:meth:`~packing.layouts.common.PackedLayout.block_columns`); ``format`` forces its layout. ``report`` is
    the audit of the source, the same findings ``packing audit`` gives.

    >>> import packing
    >>> data = PackedDataset(packing.pack([[1, 2], [3, 4, 5], [6]], 4, strategy="bfd"))
    >>> len(data), data[0]["input_ids"].tolist(), data[0]["seq_lengths"].tolist()
    (2, [3, 4, 5, 6], [3, 1])
    >>> import pyarrow as pa
    >>> trl = PackedDataset(pa.table({"input_ids": [[1, 2, 3, 4]], "seq_lengths": [[3, 1]]}))
    >>> trl[0]["labels"].tolist(), trl[0]["position_ids"].tolist(), trl.report.format, trl.report.findings
    ([-100, 2, 3, -100], [0, 1, 2, 0], 'trl', ())
    """

    def __init__(
        self,
        source: Any,
        *,
        cached_row_groups: int = 2,
        format: str | None = None,
        loss_weights: LossMode | None = None,
    ) -> None:
        self._weights: npt.NDArray[np.float32] | None = None
        self._columns: tuple[str, ...] = BLOCK_COLUMNS
        self._batch: PackedBatch | None = None
        self._path: str | None = None
        self._file: Any = None
        self._cache: dict[int, dict[str, tuple[Int64Array, npt.NDArray[Any]]]] = {}
        self._cached_row_groups = cached_row_groups
        self._report: AuditReport | None = None
        if isinstance(source, PackedBatch):
            self._batch = source
            self._length = source.num_blocks
            if loss_weights is not None:
                self._weights = source.loss_weights(loss_weights)
                self._columns = (*BLOCK_COLUMNS, LOSS_WEIGHTS.name)
            return
        if isinstance(source, (str, os.PathLike)) and format in (None, "packing") and self._open_native(source):
            if loss_weights is not None and LOSS_WEIGHTS.name not in self._columns:
                raise DatasetError(os.fspath(source), None, "no 'loss_weights' column (to_arrow(loss_weights=...))")
            return
        if loss_weights is not None:
            raise SettingError("loss_weights", "a PackedBatch or a file of this project's columns", loss_weights)
        self._report = audit(source, format=format)
        self._length = self._report.num_blocks

    def _open_native(self, source: str | os.PathLike[str]) -> bool:
        """Open a Parquet or Arrow IPC file with the schema's columns in place; ``False`` for anything else."""
        path = os.fspath(source)
        self._ipc = path.lower().endswith(IPC_SUFFIXES)
        if not (self._ipc or path.lower().endswith(PARQUET_SUFFIXES)):
            return False
        import pyarrow as pa

        self._path = path
        try:
            handle = self._open()
        except pa.ArrowInvalid as error:
            kind = "an Arrow IPC file" if self._ipc else "a Parquet file"
            raise DatasetError(path, None, f"not {kind} ({str(error)[:60]})") from error
        names = handle.schema.names if self._ipc else handle.schema_arrow.names
        if any(c not in names for c in BLOCK_COLUMNS):
            self._path = self._file = None
            return False
        if LOSS_WEIGHTS.name in names:
            self._columns = (*BLOCK_COLUMNS, LOSS_WEIGHTS.name)
        if self._ipc:
            rows = [handle.get_batch(g).num_rows for g in range(handle.num_record_batches)]
        else:
            rows = [handle.metadata.row_group(g).num_rows for g in range(handle.num_row_groups)]
        self._group_starts = np.concatenate(([0], np.cumsum(rows, dtype=np.int64)))
        self._length = int(self._group_starts[-1])
        return True

    @property
    def report(self) -> AuditReport:
        """The audit of the source (:func:`packing.audit`): its layout, documents and findings. O(tokens) the first
        time for this project's own files and batches, kept after."""
        if self._report is None:
            source = self._batch.to_arrow() if self._batch is not None else self._path
            self._report = audit(source, name=self._path)
        return self._report

    def _open(self) -> Any:
        if self._file is None:
            import pyarrow as pa
            import pyarrow.parquet as pq

            mapped = pa.memory_map(self._path, "r")
            self._file = pa.ipc.open_file(mapped) if self._ipc else pq.ParquetFile(mapped)
        return self._file

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_file"] = None
        state["_cache"] = {}
        return state

    def __len__(self) -> int:
        return self._length

    def _row_group(self, group: int) -> dict[str, tuple[Int64Array, npt.NDArray[Any]]]:
        if group not in self._cache:
            handle = self._open()
            if self._ipc:
                table = handle.get_batch(group).select(list(self._columns))  # zero-copy from the memory map
            else:
                table = handle.read_row_group(group, columns=list(self._columns))
            columns = {}
            for name in self._columns:
                column = table.column(name)
                array = column.combine_chunks() if hasattr(column, "combine_chunks") else column
                offsets = array.offsets.to_numpy().astype(np.int64)
                values = array.values.to_numpy(zero_copy_only=False)
                columns[name] = (offsets - offsets[0], values[offsets[0] : offsets[-1]])
            while len(self._cache) >= max(1, self._cached_row_groups):
                self._cache.pop(next(iter(self._cache)))
            self._cache[group] = columns
        return self._cache[group]

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        if not -self._length <= index < self._length:
            raise IndexError(f"PackedDataset: block {index} does not exist; there are {self._length}")
        index %= self._length
        arrays: dict[str, npt.NDArray[Any]]
        if self._batch is None and self._path is None:
            arrays = self.report.layout.block_columns(index)
        elif self._batch is not None:
            b = self._batch
            arrays = {
                "input_ids": b.input_ids[index],
                "labels": b.labels[index],
                "loss_mask": b.loss_mask[index],
                "position_ids": b.position_ids[index],
                "sequence_ids": b.sequence_ids[index],
                "seq_lengths": b.seq_lengths(index),
            }
            if self._weights is not None:
                arrays[LOSS_WEIGHTS.name] = self._weights[index]
        else:
            group = int(np.searchsorted(self._group_starts, index, side="right")) - 1
            local = index - int(self._group_starts[group])
            arrays = {}
            for name, (offsets, values) in self._row_group(group).items():
                arrays[name] = values[offsets[local] : offsets[local + 1]]
        return {name: torch.from_numpy(np.array(arrays[name], dtype=_DTYPES[name])) for name in self._columns}
