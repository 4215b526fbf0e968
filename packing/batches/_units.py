"""Pairs and groups in blocks: each unit fitted to ``max_seq_length`` by the overflow policy, then the columns a
trainer reads from its blocks (``packing.core._pairs_groups`` holds the unit structure).

Overflow acts on the whole unit, never on a piece of it (a unit is never split):

- ``truncate``: the prompt is kept whole and the completions are cut to one common length, the largest that lets
  the unit fit (the longest cut first); a unit whose prompt leaves no room for one token of each completion is
  dropped (a plain sample among units keeps its first ``max_seq_length`` tokens, as ever);
- ``drop``: a unit longer than ``max_seq_length`` is left out whole;
- ``error``: the first such unit is refused (:class:`~packing.errors.UnitTooLong`, naming it);
- ``split``, and strategies that cut samples (``split``, ``wrapped``), are refused with units, as are context and
  tensor parallelism (their THD layout pads every document on its own), and ``spfhp``'s
  ``max_sequences_per_block`` without ``share_prompt=True`` (the cap counts documents; the planner places a unit
  as one sequence, which is one document only when its prompt is shared).

Everything cut is counted: ``PackingStats`` in tokens and sequences (a unit is one sequence), ``stats.units``
(:class:`~packing.strategies._stats.UnitStats`) in pairs, groups and completions.

>>> from packing import Recipe, read_rows
>>> samples = read_rows([{"prompt": [1, 2], "chosen": [3, 4, 5, 6], "rejected": [7]}])
>>> fitted = fit_units(samples, Recipe(7))
>>> fitted.samples.tokens.tolist(), fitted.tokens_cut, fitted.planning.overflow
([1, 2, 3, 4, 1, 2, 7], 2, 'drop')

Internal: the public names are in ``packing`` and ``packing.batches``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from packing.core._arrays import offsets_of, ranges
from packing.core._pairs_groups import KINDS, PLAIN, TokenArrays, Units
from packing.core._samples import IGNORE_INDEX, Samples
from packing.errors import SettingError, refuse_with_units
from packing.planning._plans import PackingPlan
from packing.recipe import Recipe
from packing.strategies._registry import STRATEGIES
from packing.strategies._stats import PackingStats, UnitStats, compute_stats

Int64Array = npt.NDArray[np.int64]


MAX_SEQUENCES_WHY = (
    "it caps the documents in a block, and without share_prompt=True a unit of k completions is k documents "
    "placed as one; with share_prompt=True each unit is one document"
)
"""Why ``max_sequences_per_block`` (``spfhp``) needs ``share_prompt=True`` with units: the planner places a unit as
one sequence, which is one document only in the shared layout."""


def check_unit_recipe(recipe: Recipe) -> None:
    """Refuse, by name, a recipe option that cannot keep every unit whole in one block or its completions apart
    (see the module). O(1).

    >>> check_unit_recipe(Recipe(8, overflow="split"))
    Traceback (most recent call last):
    ...
    packing.errors.SettingError: overflow: expected another value with preference pairs or completion groups (a pair or group is never cut across blocks: truncate, drop or error), got 'split' (str)
    """
    if STRATEGIES[recipe.strategy].splits_sequences:
        raise refuse_with_units("strategy", recipe.strategy, "a pair or group is never cut across blocks")
    if recipe.overflow == "split":
        raise refuse_with_units(
            "overflow", recipe.overflow, "a pair or group is never cut across blocks: truncate, drop or error"
        )
    if recipe.max_sequences_per_block is not None and not recipe.share_prompt:
        raise refuse_with_units("max_sequences_per_block", recipe.max_sequences_per_block, MAX_SEQUENCES_WHY)
    for name in ("context_parallel_size", "tensor_parallel_size"):
        if getattr(recipe, name) > 1:
            raise refuse_with_units(name, getattr(recipe, name), "the THD layout pads each document apart")


@dataclass(frozen=True)
class UnitFit:
    """What fitting units into ``max_seq_length`` did (:func:`fit_unit_lengths`), the one count of what overflow
    cut and left out of pairs and groups at every door: the units laid out as the recipe says (``laid``), then
    fitted (``fitted``: over-long units cut under ``truncate``), the recipe to plan them with (``planning``:
    ``drop`` under ``truncate``, so a unit that still does not fit is left out whole, never cut at a block's end),
    and per unit the completions cut, whether it was cut, and the tokens cut."""

    laid: Units
    fitted: Units
    planning: Recipe
    completions_cut: Int64Array
    units_cut: npt.NDArray[np.bool_]
    tokens_cut: int

    def stats(self, stats: PackingStats, recipe: Recipe, packed: npt.NDArray[np.bool_] | None = None) -> PackingStats:
        """``stats`` of the plan of the fitted units with what fitting cut counted in (input tokens, tokens and
        sequences truncated) and the unit counts (:class:`~packing.strategies._stats.UnitStats`); ``packed`` says
        which units are in the blocks (default: every unit that fits). O(units).

        >>> fit = fit_unit_lengths(Units.of([2], [[5, 1]], kinds=["pair"]), Recipe(8))
        >>> fit.tokens_cut, fit.fitted.lengths().tolist()
        (2, [8])
        """
        units = self.fitted
        counted = units.kind != PLAIN
        if packed is None:
            packed = units.lengths() <= recipe.max_seq_length
        packed = packed & (units.lengths() > 0)
        shared = (units.counts - 1) * units.prompt_lengths if units.share_prompt else np.zeros(len(units), np.int64)
        per_kind = np.bincount(units.kind, minlength=len(KINDS))
        unit_stats = UnitStats(
            pairs=int(per_kind[1]),
            groups=int(per_kind[2]),
            completions=self.laid.num_completions,
            units_truncated=int((self.units_cut & counted).sum()),
            completions_truncated=int(self.completions_cut.sum()),
            units_dropped=int((counted & ~packed).sum()),
            prompt_tokens_shared=int(shared[packed & counted].sum()),
            share_prompt=units.share_prompt,
        )
        return stats.with_fit(self.tokens_cut, int(self.units_cut.sum()), unit_stats)

    def kept_stats(self, recipe: Recipe) -> PackingStats:
        """:meth:`stats` for a door that plans no blocks (``collate``): every fitted unit that fits kept, each as a
        block of its own, the others dropped. O(units).

        >>> fit = fit_unit_lengths(Units.of([9, 1], [[1], [2]]), Recipe(8))
        >>> stats = fit.kept_stats(Recipe(8))
        >>> stats.tokens_dropped, stats.packed_tokens, stats.units.units_dropped
        (10, 3, 1)
        """
        lengths = self.fitted.lengths()
        kept = np.flatnonzero((lengths <= recipe.max_seq_length) & (lengths > 0))
        stats = compute_stats(
            lengths,
            recipe.max_seq_length,
            np.arange(len(kept) + 1, dtype=np.int64),
            kept.astype(np.int32),
            lengths[kept].astype(np.int32),
        )
        return self.stats(stats, recipe)


def unit_planning(recipe: Recipe) -> Recipe:
    """The recipe pairs and groups are planned with once fitted: ``drop`` under ``truncate`` (fitting cut them
    first, so a unit that still does not fit is left out whole, never cut at a block's end), else ``recipe``. O(1).

    >>> unit_planning(Recipe(8)).overflow, unit_planning(Recipe(8, overflow="error")).overflow
    ('drop', 'error')
    """
    return Recipe.of(recipe, overflow="drop") if recipe.overflow == "truncate" else recipe


def fit_unit_lengths(units: Units, recipe: Recipe) -> UnitFit:
    """``units`` fitted to ``recipe`` (see :class:`UnitFit` and the module): laid out as ``recipe.share_prompt``
    says, every unit longer than ``max_seq_length`` cut (``truncate``) or refused (``error``); the options that
    cannot keep a unit whole are refused. What every door (``pack``, the sampler, ``collate``, ``stream``,
    ``packing.hf``) fits units with and counts their losses by. O(units).

    >>> fit_unit_lengths(Units.of([3], [[1, 1]]), Recipe(7, overflow="error"))
    Traceback (most recent call last):
    ...
    packing.errors.UnitTooLong: sample 0: expected a group of at most max_seq_length=7 tokens (overflow='error'; a group is never split), got 8 tokens
    """
    check_unit_recipe(recipe)
    laid = units.relaid(recipe.share_prompt)[1]
    nothing = np.zeros(len(laid), dtype=bool)
    if recipe.overflow == "error":
        laid.refuse_longer(recipe.max_seq_length)
    if recipe.overflow != "truncate":
        return UnitFit(laid, laid, recipe, np.zeros(len(laid), np.int64), nothing, 0)
    fit = laid.fit_lengths(recipe.max_seq_length)
    cut_completions = np.bincount(
        laid.unit_of_completion, weights=fit.completion_lengths < laid.completion_lengths, minlength=len(laid)
    ).astype(np.int64)
    cut_completions[laid.kind == PLAIN] = 0
    fitted = laid.with_completion_lengths(fit.completion_lengths) if fit.cut.any() else laid
    return UnitFit(laid, fitted, unit_planning(recipe), cut_completions, fit.cut, int(fit.tokens_cut.sum()))


@dataclass(frozen=True)
class Fitted:
    """Samples with units made ready to plan (:func:`fit_units`): the ``samples`` (laid out as the recipe says,
    over-long units cut under ``truncate``) and what fitting their units did (``fit``, which counts it)."""

    samples: Samples
    fit: UnitFit

    @property
    def planning(self) -> Recipe:
        """The recipe to plan :attr:`samples` with (:attr:`UnitFit.planning`)."""
        return self.fit.planning

    @property
    def tokens_cut(self) -> int:
        """The tokens fitting cut (laid out)."""
        return self.fit.tokens_cut

    def stats(self, stats: PackingStats, recipe: Recipe, packed: npt.NDArray[np.bool_] | None = None) -> PackingStats:
        """:meth:`UnitFit.stats`. O(units)."""
        return self.fit.stats(stats, recipe, packed)


def relaid(samples: Samples, share_prompt: bool) -> Samples:
    """``samples`` (with units) laid out with ``share_prompt``: the prompt once, or once per completion (the same
    units and tokens). O(tokens).

    >>> from packing import read_rows
    >>> relaid(read_rows([{"prompt": [1], "completions": [[2], [3]]}]), True).tokens.tolist()
    [1, 2, 3]
    """
    units = samples.units
    assert units is not None and samples.tokens is not None and samples.loss_mask is not None
    if units.share_prompt == share_prompt:
        return samples
    index, target = units.relaid(share_prompt)
    return _taken(samples, index, target)


def _taken(samples: Samples, index: npt.NDArray[Any], units: Units) -> Samples:
    """The tokens ``index`` of ``samples`` (with their masks and labels) as samples of ``units``. O(index)."""
    assert samples.tokens is not None and samples.loss_mask is not None
    labels = None if samples.labels is None else samples.labels[index]
    return Samples(samples.tokens[index], samples.loss_mask[index], offsets_of(units.lengths()), labels, units)


def fit_units(samples: Samples, recipe: Recipe) -> Fitted:
    """``samples`` with units made ready to plan with ``recipe`` (see :class:`Fitted` and the module): laid out as
    ``recipe.share_prompt`` says, every unit longer than ``max_seq_length`` cut (``truncate``) or refused
    (``error``) by :func:`fit_unit_lengths`; the options that cannot keep a unit whole are refused. O(tokens).

    >>> from packing import read_rows
    >>> fit_units(read_rows([{"prompt": [1, 2, 3], "completions": [[4], [5]]}]), Recipe(7, overflow="error"))
    Traceback (most recent call last):
    ...
    packing.errors.UnitTooLong: sample 0: expected a group of at most max_seq_length=7 tokens (overflow='error'; a group is never split), got 8 tokens
    """
    assert samples.units is not None
    fit = fit_unit_lengths(samples.units, recipe)
    samples = relaid(samples, recipe.share_prompt)
    if not fit.units_cut.any():
        return Fitted(samples, fit)
    return Fitted(_taken(samples, fit.laid.kept_tokens(fit.fitted.completion_lengths), fit.fitted), fit)


# ---------------------------------------------------------------- the columns of blocks of units


def check_whole_units(plan: PackingPlan, units: Units) -> None:
    """Refuse a plan that cuts a unit (a piece that is not a whole sample): units are planned whole
    (:func:`fit_units`). O(pieces)."""
    whole = (plan.piece_start == 0) & (plan.piece_length.astype(np.int64) == plan.lengths[plan.piece_sequence])
    if not bool(whole.all()) or len(plan.lengths) != len(units):
        raise SettingError(
            "plan",
            "a plan that keeps every pair and group whole (pack them with packing.pack, or plan packing.batches._units.fit_units' "
            "samples with its recipe)",
            "<a plan that cuts a unit>",
        )


def slot_sources(plan: PackingPlan) -> Int64Array:
    """Per slot of the blocks ``(num_blocks, max_seq_length)``: the index of its token among the samples' laid-out
    tokens, -1 in padding. O(blocks × max_seq_length).

    >>> from packing import plan
    >>> slot_sources(plan([2, 1], 4, strategy="ffd")).tolist()
    [[0, 1, 2, -1]]
    """
    width = plan.max_seq_length
    source = np.full(plan.num_blocks * width, -1, dtype=np.int64)
    length = plan.piece_length.astype(np.int64)
    at = plan.piece_block() * width + plan.piece_position()
    starts = offsets_of(plan.lengths)[plan.piece_sequence] + plan.piece_start
    source[ranges(at, length)] = ranges(starts, length)
    return source.reshape(plan.num_blocks, width)


@dataclass(frozen=True)
class UnitGrids:
    """The columns of blocks of units, each ``(num_blocks, max_seq_length)`` (see ``UNIT_COLUMNS``)."""

    labels: npt.NDArray[Any]
    position_ids: npt.NDArray[Any]
    completion_ids: npt.NDArray[np.int32]
    prediction_positions: npt.NDArray[Any]
    document: Int64Array
    """Per slot the document's number among the units' (``Units.documents``), -1 in padding."""
    kinds: npt.NDArray[np.int8]
    """Per slot the kind of its unit (``Units.kind``), -1 in padding."""


def unit_grids(
    plan: PackingPlan, units: Units, input_ids: npt.NDArray[Any], loss_mask: npt.NDArray[np.int8]
) -> UnitGrids:
    """Labels, positions, completion ids and prediction positions of blocks of units (``input_ids`` and
    ``loss_mask`` filled): a token is a target where it is trained and something predicts it; ``labels`` hold it
    only where the token before it does (a shifted loss may read them), ``prediction_positions`` say where its
    predictor is in every case. O(blocks × max_seq_length).

    >>> from packing import pack
    >>> b = pack([{"prompt": [1, 2], "completions": [[3], [4, 5]]}], 6, share_prompt=True)
    >>> b.labels.tolist(), b.position_ids.tolist(), b.prediction_positions.tolist()
    ([[-100, -100, 3, -100, 5, -100]], [[0, 1, 2, 2, 3, 0]], [[-1, -1, 1, 1, 3, -1]])
    """
    arrays: TokenArrays = units.token_arrays()
    source = slot_sources(plan)
    real = source >= 0
    where = np.where(real, source, 0)
    predictor = np.where(real, arrays.predictor[where], 0)
    trained = real & (loss_mask != 0) & (predictor > 0)
    labels = np.where(trained & (predictor == 1), input_ids, IGNORE_INDEX).astype(input_ids.dtype)
    positions = np.where(real, arrays.positions[where], 0).astype(input_ids.dtype)
    completion = np.where(real, arrays.completion[where], -1).astype(np.int32)
    column = np.arange(plan.max_seq_length, dtype=np.int64)[None, :]
    prediction = np.where(trained, column - predictor, -1).astype(input_ids.dtype)
    document = np.where(real, arrays.document[where], -1)
    unit_of_token = np.repeat(np.arange(len(units), dtype=np.int64), units.lengths())
    kinds = np.where(real, units.kind[unit_of_token[where]] if len(unit_of_token) else 0, -1).astype(np.int8)
    return UnitGrids(labels, positions, completion, prediction, document, kinds)


def unit_boundaries(plan: PackingPlan, units: Units) -> tuple[Int64Array, Int64Array]:
    """``(starts, lengths)``: the documents a model sees in each block of units, in CSR form (block ``b`` holds
    ``lengths[starts[b]:starts[b + 1]]``): a document per completion in the duplicated layout (its prompt and
    it), a unit in the shared one. O(documents).

    >>> from packing import plan
    >>> unit_boundaries(plan([5], 8), Units.of([1], [[2, 1]]))[1].tolist()
    [3, 2]
    """
    doc_offsets, doc_lengths = units.documents()
    sequence = plan.piece_sequence.astype(np.int64)
    counts = doc_offsets[sequence + 1] - doc_offsets[sequence]
    lengths = doc_lengths[ranges(doc_offsets[sequence], counts)]
    per_block = np.add.reduceat(counts, plan.block_starts[:-1]) if len(counts) else np.zeros(0, np.int64)
    per_block = np.where(np.diff(plan.block_starts) > 0, per_block, 0)
    return offsets_of(per_block), lengths.astype(np.int64)


def unit_mask(segment: npt.NDArray[Any], completion: npt.NDArray[Any]) -> npt.NDArray[np.bool_]:
    """The attention of one row of units: ``mask[q, k]`` is True when query ``q`` may attend to key ``k``: an
    earlier (or the same) token of its segment (a document, or a shared prompt's unit) that is not another
    completion's (a prompt's, or its own completion's). ``segment`` is -1 in padding (which attends to nothing
    here). O(T²).

    >>> unit_mask(np.array([0, 0, 0, 0]), np.array([-1, 0, 1, 1])).astype(int).tolist()
    [[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 0, 1, 1]]
    """
    same = (segment[:, None] == segment[None, :]) & (segment[:, None] >= 0)
    own = (completion[None, :] < 0) | (completion[None, :] == completion[:, None])
    return np.tril(same & own)
