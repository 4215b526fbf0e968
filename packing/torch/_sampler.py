"""PackingSampler: a batch sampler that yields each rank's packed block of sample indices, step by step.
Internal: the public names are in ``packing.torch``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import torch
from torch.utils.data import Dataset, Sampler

from packing.batches._packed import TrainableCounts, entries_trainable
from packing.batches._units import UnitFit, fit_unit_lengths, fit_units
from packing.core._pairs_groups import Units
from packing.core._samples import IGNORE_INDEX, Int64Array, Samples
from packing.core._validation import OverflowPolicy, as_lengths, check_integer
from packing.errors import PackingError, SampleError, SettingError
from packing.planning._plans import Piece
from packing.reading._reader import read_samples
from packing.recipe import Recipe, RecipeOptions
from packing.strategies._registry import StrategyName
from packing.strategies._stats import PackingStats
from packing.text._prepare import prepare
from packing.weighting import LossMode, LossTotals, check_mode

if TYPE_CHECKING:  # pragma: no cover - typing only
    from typing import Unpack
from packing.torch._collate import StepDataset, StepIndices, StepLoader, collate
from packing.torch._resume import Progress, fingerprint, make_state, read_state
from packing.torch._schedule import CostFunction, RankBalance, Schedule, resume_schedule, schedule_of


def _world(num_replicas: int | None, rank: int | None) -> tuple[int, int]:
    """``(num_replicas, rank)``: the given values, else torch.distributed's, else a single process."""
    initialized = torch.distributed.is_available() and torch.distributed.is_initialized()
    if num_replicas is None:
        num_replicas = torch.distributed.get_world_size() if initialized else 1
    if rank is None:
        rank = torch.distributed.get_rank() if initialized else 0
    num_replicas, rank = check_integer(num_replicas, "num_replicas"), check_integer(rank, "rank", least=0)
    if rank >= num_replicas:
        raise SettingError("rank", f"a rank in 0..{num_replicas - 1}", rank)
    return num_replicas, rank


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
      epochs, as each epoch is packed anew; after ``load_state_dict``, the steps taken before it are counted, so
      a resumed pass yields ``len(sampler)`` less the steps taken); every sample (or piece) appears in exactly one block of one rank
      per epoch. No block is empty while there are at least as many non-empty samples as ranks × steps; with
      fewer (a small dataset, or the end of an epoch resumed on more ranks), every sample has a block of its own
      and each rank left over gets an empty step: an empty block (``[]``, or empty samples only), which
      ``sampler.collate`` makes a batch of padding alone (no target, loss weights 0: ``weighted_loss`` gives
      exactly 0 and a zero gradient), so every rank still takes every step, as DDP needs. A dataset with no
      token to train is refused.
    - ``set_epoch(epoch)`` repacks from ``(seed, epoch)``: the same on every rank and run, different between epochs.
    - The blocks of a step are chosen so the slowest rank's cost is close to the mean; the cost of a document of
      ``ℓ`` tokens is ``cost(ℓ)`` (vectorized over an int64 array), by default ``24576·ℓ + ℓ²``.
      ``imbalance`` reports it (``balance=False`` deals blocks in random order, the usual behaviour).
    - ``num_replicas`` and ``rank`` default to ``torch.distributed``'s world size and rank (1 and 0 without it).
    - ``state_dict()`` / ``load_state_dict(state)``: stop and resume, exactly on as many ranks, every sample still
      once per epoch on another number (the rest of the epoch packed anew, on any number of ranks: empty steps
      for the ranks beyond what is left); a state of other data is refused.
    - ``lengths`` may be a dataset of preference pairs or completion groups (``packing.read_dataset``'s, or a
      ``Samples`` with ``units``): every unit is one item, its length in the recipe's layout (``share_prompt``), fitted
      whole by the overflow policy as ``collate`` fits it (``truncate`` cuts its completions, never the prompt); a
      unit is never split over ranks or steps, and it costs what its documents do (with a shared prompt, the prompt's
      attention once and each completion's to it: ``prompt² + Σ (2·prompt·c + c²)``-shaped). Units refuse
      ``overflow="split"`` and context parallelism.
    - With ``context_parallel_size`` (a recipe option), every document takes the room of its THD padding: no
      block collated with the sampler's recipe exceeds ``max_seq_length``. ``cost=packing.planning.ModelCost.from_config(
      config)`` balances by the model's own FLOPs; ``balance_stats`` gives the imbalance per component.

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
    >>> [list(PackingSampler([3, 2], 8, num_replicas=3, rank=r, seed=0)) for r in range(3)]   # 2 samples, 3 ranks
    [[[]], [[0]], [[1]]]
    >>> sampler.collate([])["labels"].tolist()                                 # an empty step: padding, no target
    [[-100]]
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
        self.recipe = Recipe.at(
            "PackingSampler", recipe, max_seq_length, strategy=strategy, overflow=overflow, **options
        )
        self.units, self._planning = _units_of(lengths), self.recipe
        self._samples = _masked_samples(lengths)
        self._unit_fit: UnitFit | None = None
        if self.units is not None:  # pairs and groups: each unit's length in the recipe's layout, fitted whole
            self._unit_fit = fit_unit_lengths(self.units, self.recipe)
            self.units, self._planning = self._unit_fit.fitted, self._unit_fit.planning
            self.lengths = self.units.lengths()
        else:
            self.lengths = as_lengths(getattr(lengths, "lengths", lengths))  # checked (a copy)
        kept = self.lengths
        if self.recipe.overflow == "truncate":  # what collate keeps of an over-long sample
            kept = np.minimum(self.lengths, self.recipe.max_seq_length)
        self.trained_tokens = _trained_counts(trained_tokens, kept)
        self.gradient_accumulation_steps = check_integer(gradient_accumulation_steps, "gradient_accumulation_steps")
        self.num_replicas, self.rank = _world(num_replicas, rank)
        self.shuffle = shuffle
        self.cost = cost
        self.balance = balance
        self.epoch = 0
        self._resized: tuple[tuple[int, int], ...] = ()  # this epoch's earlier plans (resumes on other ranks)
        self._start = 0  # where the next pass begins (a loaded state's step)
        self._step = 0  # steps of the current plan yielded so far
        self._schedule: Schedule | None = None
        self._first: Schedule | None = None  # the epoch's first plan (before any resume re-deals its rest)
        self._trained: tuple[Schedule, TrainableCounts] | None = None  # the counts of that first plan
        self.schedule  # noqa: B018 - check the arguments now, not at the first step

    @property
    def max_seq_length(self) -> int:
        return self.recipe.max_seq_length

    @property
    def collate(self) -> Callable[[Sequence[Any]], dict[str, Any]]:
        """``collate`` with this sampler's recipe: rows read the same way, no batch over ``max_seq_length``
        (picklable, for DataLoader workers)."""
        if self.units is not None:  # every step a batch of units, with their columns (an empty step's too)
            return functools.partial(collate, recipe=self.recipe, _units=True)
        return functools.partial(collate, recipe=self.recipe, _quiet=True)  # its stats count what was cut

    def pieces(self, dataset: Any) -> Pieces:
        """``dataset`` read as this sampler's items: an index gives its row, a ``Piece`` the piece's tokens."""
        return Pieces(dataset, self.recipe)

    def set_epoch(self, epoch: int) -> None:
        """Pack epoch ``epoch`` next (call it before iterating, on every rank, with the same value)."""
        if epoch != self.epoch:
            self.epoch = epoch
            self._schedule = self._first = None
            self._resized, self._start, self._step = (), 0, 0

    @property
    def schedule(self) -> Schedule:
        """This epoch's current plan: blocks for every rank, with their costs (computed once per epoch)."""
        if self._schedule is None:
            self._schedule = self._plans()
        return self._schedule

    def _plans(self) -> Schedule:
        """The epoch's first plan and, for each resume on another number of ranks (``_resized``), what the plan
        before it left packed anew for the next ranks; each ``resized`` entry's steps are checked against its plan.
        An earlier plan is made on at most as many ranks as the epoch has items (samples, pieces): on more, its
        one step deals every item (the ranks beyond get empty blocks), so what it leaves is the same, and a
        state's number cannot set an allocation. O(plans × (n + the strategy's cost))."""
        items = len(self.lengths)
        if self._planning.overflow == "split":  # a sample of ℓ tokens in at most ⌈ℓ / max_seq_length⌉ pieces
            items += int((self.lengths // self.recipe.max_seq_length).sum())
        worlds = [min(world, max(items, 1)) for world, _ in self._resized] + [self.num_replicas]
        schedule = schedule_of(
            self.lengths,
            self._planning,
            worlds[0],
            self.epoch,
            shuffle=self.shuffle,
            cost=self.cost,
            balance=self.balance,
            units=self.units,
        )
        self._first = schedule
        for plan, (_, steps) in enumerate(self._resized, start=1):  # resumed on other ranks: the rest re-dealt
            if steps > schedule.num_steps:
                expected = f"at most the {schedule.num_steps} steps of its plan ('resized' entry {plan - 1})"
                raise SettingError("state", expected, steps)
            rng = np.random.default_rng([self.recipe.seed or 0, self.epoch, plan])
            schedule = resume_schedule(
                schedule,
                steps,
                worlds[plan],
                rng,
                shuffle=self.shuffle,
                cost=self.cost,
                balance=self.balance,
                recipe=self._planning,
                units=self.units,
            )
        return schedule

    @property
    def stats(self) -> PackingStats:
        """This epoch's plan's statistics: what the overflow policy cut, split or dropped, as ``pack`` counts it;
        its loss-mask counts (``trainable_tokens``, ``target_tokens``, ``samples_without_trainable_tokens``) are
        ``pack``'s when the sampler was given samples with their masks (``read_rows``, ``read_dataset``); with
        ``trained_tokens``, its ``target_tokens`` (= ``trainable_tokens``: a document's first token is never
        trained here) and ``samples_without_trainable_tokens`` are theirs, over the samples the plan keeps; for
        pairs and groups, ``stats.units`` counts them and what was cut or left out of them, as ``pack`` does.
        O(total tokens) the first time in an epoch, then O(1)."""
        stats = self.schedule.stats
        if self._unit_fit is not None:
            stats = self._unit_fit.stats(stats, self.recipe)
        if self.trained_tokens is None:
            trained = self._trained_of_masks()
            return stats if trained is None else stats.with_trainable(*trained)
        kept = self.lengths > 0
        if self._planning.overflow == "drop":
            kept &= self.lengths <= self.recipe.max_seq_length
        targets = int(self.trained_tokens[kept].sum())
        return stats.with_trainable(targets, targets, int((self.trained_tokens[kept] == 0).sum()))

    def _trained_of_masks(self) -> TrainableCounts | None:
        """The loss-mask counts of the epoch's first plan from the samples' masks (None without them), as ``pack``
        counts them: its pieces' masked tokens, their targets. O(total tokens), once an epoch."""
        if self._samples is None:
            return None
        self.schedule  # noqa: B018 - made with its first plan
        first = self._first
        assert first is not None
        if self._trained is None or self._trained[0] is not first:
            samples = self._samples
            if samples.units is not None:  # the units as planned: laid out and fitted
                samples = fit_units(samples, self.recipe).samples
            self._trained = (first, entries_trainable(samples, first.indices, first.starts, first.lengths))
        return self._trained[1]

    @property
    def imbalance(self) -> float:
        """This epoch's sum over steps of the slowest rank's cost over that of the mean rank, minus 1."""
        return self.schedule.imbalance

    @property
    def balance_stats(self) -> RankBalance:
        """The imbalance of this epoch's plan per component: ``cost`` (what blocks are balanced by, as
        :attr:`imbalance`), ``tokens`` (positions, context-parallel padding included), ``attention`` (the cost's
        attention part with a :class:`~packing.planning.ModelCost`, else ``Σ ℓ²``), and the ``worst_step``."""
        return self.schedule.balance

    def __len__(self) -> int:
        """The steps of the epoch, the same on every rank: after a resume too, those taken before it included
        (on another number of ranks, the earlier plans' steps taken plus the new plan's), as torch's samplers
        and ``StatefulDataLoader`` count an epoch: a pass after ``load_state_dict`` yields the steps not taken."""
        return sum(steps for _, steps in self._resized) + self.schedule.num_steps

    def __iter__(self) -> Iterator[list[int | Piece]]:
        schedule = self.schedule
        start, self._start = self._start, 0  # a loaded state applies to one pass
        self._step = start
        return self._steps(schedule, start, self.loss_totals())

    def _steps(self, schedule: Schedule, start: int, totals: list[LossTotals] | None) -> Iterator[list[int | Piece]]:
        for step in range(start, schedule.num_steps):
            items = schedule.items(step, self.rank)
            self._step = step + 1  # consumed once yielded: what state_dict() reports
            yield items if totals is None else StepIndices(items, totals[step])

    # ------------------------------------------------------------ resuming

    def _fingerprints(self) -> tuple[str | None, str | None, str, dict[str, Any]]:
        options = {"shuffle": bool(self.shuffle), "balance": bool(self.balance)}
        return fingerprint(self.lengths), fingerprint(self.trained_tokens), prepare(self.recipe).description, options

    def state_dict(self) -> dict[str, Any]:
        """The epoch's global progress, the same on every rank (any rank's restores all): the epoch, the steps
        every rank has consumed (yielded) of its current plan, the number of ranks, earlier plans of the epoch
        when it was resumed on another number of ranks, fingerprints of the lengths (and ``trained_tokens``),
        the recipe (its seed included) and ``shuffle``/``balance``. Plain ints, strings and lists. O(1) in the
        steps consumed (O(n) to fingerprint the lengths).

        With a ``DataLoader`` whose workers prefetch, the sampler runs ahead of training: use torchdata's
        ``StatefulDataLoader``, which keeps the sampler state that goes with each batch it returns."""
        progress = Progress(self.epoch, self._resized, self._step, self.num_replicas)
        return make_state(progress, *self._fingerprints())

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state`` (``state_dict()`` of this sampler or of any rank of the same run), at the next
        pass. On as many ranks as when saved, the steps are exactly those of the uninterrupted run, from the next
        one; on another number of ranks, the samples the epoch has not consumed are packed anew and dealt to
        this run's ranks, so every sample is trained exactly once in the epoch (``len(sampler)`` is then the
        steps taken before plus the new plan's). A state over other lengths, trained tokens, recipe or
        ``shuffle``/``balance`` is refused (:class:`~packing.errors.StateMismatch`, naming what differs); a field
        that no state holds (a wrong type, a negative or impossible number, steps beyond their plan, more than
        ``packing.torch._resume.MAX_RESIZED`` earlier plans) with a :class:`~packing.errors.SettingError`, the
        sampler left as it was. Plans are rebuilt, not replayed: O(n + the strategy's cost) per plan of the
        epoch, whatever the steps consumed or the numbers in the state."""
        progress = read_state(state, *self._fingerprints(), self.num_replicas)
        before = (self.epoch, self._resized, self._start, self._step, self._schedule, self._first)
        if (progress.epoch, progress.resized) != (self.epoch, self._resized):  # else the plan made is the one
            self.epoch, self._resized, self._schedule = progress.epoch, progress.resized, None
        self._start = self._step = progress.step
        try:
            steps = self.schedule.num_steps
        except PackingError:
            self.epoch, self._resized, self._start, self._step, self._schedule, self._first = before
            raise
        if progress.step > steps:
            self.epoch, self._resized, self._start, self._step, self._schedule, self._first = before
            raise SettingError("state", f"a 'step' of at most the {steps} steps of the plan it resumes", progress.step)

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
        collate_fn = functools.partial(collate, recipe=self.recipe, loss_weights=loss_weights, _quiet=True)
        return StepLoader(StepDataset(self.pieces(dataset)), batch_sampler=self, collate_fn=collate_fn, **kwargs)


def _masked_samples(lengths: Any) -> Samples | None:
    """The samples, with their loss mask, of what a sampler is given (``read_rows``' samples, or a
    ``read_dataset`` dataset's); None for plain lengths. O(1)."""
    samples = lengths if isinstance(lengths, Samples) else getattr(lengths, "samples", None)
    return samples if isinstance(samples, Samples) and samples.loss_mask is not None else None


def _units_of(lengths: Any) -> Units | None:
    """The units of what a sampler is given: a ``Samples`` with units, or a dataset holding one (``read_dataset``'s
    ``samples``); None otherwise. O(1)."""
    units = getattr(lengths, "units", None)
    if units is None:
        units = getattr(getattr(lengths, "samples", None), "units", None)
    return units if isinstance(units, Units) else None


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
        try:
            samples = read_samples([row], **prepare(self.recipe).read_options)
        except SampleError as error:  # the sample's own index, not the one row read here
            raise error.moved(sample=item.sequence) from None
        if samples.tokens is None or samples.loss_mask is None:
            raise SettingError("dataset", "samples with token ids", "<lengths only>")
        cut = slice(item.start, item.start + item.length)
        piece = {"input_ids": samples.tokens[cut].tolist(), "loss_mask": samples.loss_mask[cut].tolist()}
        if samples.labels is not None:  # labels other than the tokens, for collate
            piece["labels"] = np.where(samples.loss_mask[cut] != 0, samples.labels[cut], IGNORE_INDEX).tolist()
        return piece
