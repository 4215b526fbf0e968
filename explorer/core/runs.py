"""Calls into the packing library shaped for display: a window of blocks, strategy comparisons, sweeps.

No packing decisions are made here: every plan comes from ``packing.plan`` / ``packing.explain``
and every token array from ``packing.materialize``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any, cast

import numpy as np
import numpy.typing as npt

import packing
import packing.batches
import packing.core
import packing.recipe
import packing.strategies
from explorer.core.safety import describe
from packing.comparison import Contender, Row
from packing.comparison import compare as compare_contenders
from packing.core._arrays import offsets_of
from packing.core._loss import LossRules
from packing.core._validation import OverflowPolicy
from packing.strategies._registry import DEFAULT_TIME_LIMIT

Int64Array = npt.NDArray[np.int64]
MAX_DRAW_CELLS = 65_536
"""Most cells (blocks × max_seq_length) a heatmap draws at once."""


@dataclass(frozen=True)
class Window:
    """Blocks ``first .. first + count - 1`` of a plan, materialized; ``sequence_ids`` are global indices."""

    first: int
    batch: packing.PackedBatch
    sequence_ids: Int64Array
    has_tokens: bool

    @property
    def count(self) -> int:
        return self.batch.num_blocks


def placeholder_samples(lengths: Int64Array) -> packing.Samples:
    """Samples of these lengths whose every token is 0 and trained: what lengths-only data is drawn with. The token
    and mask arrays are broadcast views of one value, so they take no memory whatever the data's size. O(n)."""
    offsets = offsets_of(lengths)
    total = int(offsets[-1])
    return packing.Samples(
        np.broadcast_to(np.zeros(1, np.int64), (total,)), np.broadcast_to(np.ones(1, np.int8), (total,)), offsets
    )


def window(
    plan: packing.PackingPlan, flat: packing.Samples | None, first: int, count: int, pad_token_id: int
) -> Window:
    """Materialize only blocks ``first .. first + count - 1`` (clipped to the plan), through the plan's own
    ``select``. O(tokens in the window + sequences)."""
    first = max(0, min(first, plan.num_blocks - 1))
    stop = min(plan.num_blocks, first + max(1, count))
    samples = flat if flat is not None else placeholder_samples(plan.lengths)
    wide = samples.wide_ids()  # ids above 2**31 - 1 are drawn as they are, in int64 blocks
    batch = packing.materialize(plan, samples, pad_token_id=pad_token_id, blocks=np.arange(first, stop), int64=wide)
    return Window(first, batch, batch.sequence_ids.astype(np.int64), flat is not None)


def window_blocks(max_seq_length: int, wanted: int) -> int:
    """How many blocks of this length fit in one drawing (0 if not even one does)."""
    return min(wanted, MAX_DRAW_CELLS // max_seq_length)


def trainable_counts(plan: packing.PackingPlan, flat: packing.Samples | None) -> packing.batches.TrainableCounts:
    """Trainable tokens and training targets over the whole plan (lengths-only data: every token trains)."""
    if flat is None:
        stats = plan.stats
        return packing.batches.TrainableCounts(
            stats.trainable_tokens, stats.target_tokens, stats.samples_without_trainable_tokens
        )
    return packing.count_trainable(plan, flat)


def run_strategy(lengths: Int64Array, recipe: packing.Recipe) -> Row:
    """``packing.plan`` of ``lengths`` with ``recipe`` (its strategy, overflow and the strategy's own options), as
    one row of ``packing.compare`` (the run type the Compare tab shows too): its plan and statistics, the lower
    bound that applies, the seconds planning took, or the typed ``PackingError`` it refused with (``Row.error``,
    worded by ``explorer.core.safety.describe``). O(what the strategy costs).

    >>> run_strategy(np.array([3, 5, 2]), packing.Recipe(8, strategy="ffd")).stats.num_blocks
    2
    """
    contender = Contender(recipe.strategy)
    started, bound = time.perf_counter(), 0
    try:  # the bound refuses what the plan would (overflow='error' over a too-long sequence): one refusal
        bounds = packing.lower_bounds(lengths, recipe.max_seq_length, overflow=recipe.overflow)
        bound = bounds.simple if packing.strategies.STRATEGIES[recipe.strategy].bound == "simple" else bounds.l2
        plan = packing.plan(
            lengths,
            recipe.max_seq_length,
            strategy=recipe.strategy,
            overflow=recipe.overflow,
            **recipe.strategy_options(),
        )
    except packing.PackingError as error:  # a refusal, worded from its fields
        return Row(contender, None, bound, time.perf_counter() - started, describe(error), error=error)
    certificate = getattr(plan, "certificate", None)
    if certificate is not None:
        bound = max(bound, certificate.lower_bound)
    return Row(contender, plan.stats, bound, time.perf_counter() - started, plan=plan)


PAGE_TIME_LIMIT = 5
"""Seconds a strategy with a ``time_limit`` option (the proven optimum) may search inside the comparison and the
sweep; it then returns its best plan with a certified gap."""


MAX_TIME_LIMIT = 30
"""Most seconds the page lets one plan's search run, whatever a link asks (``capped``)."""


def with_strategy(recipe: packing.Recipe, name: str) -> packing.Recipe:
    """``recipe`` with the strategy ``name`` instead: the same recipe for its own strategy, else one whose strategy
    options (``time_limit``, ``max_sequences_per_block``, ``seed``) are the library's defaults, as the page runs the
    strategies it shows beside the chosen one. O(1).

    >>> chosen = packing.Recipe(8, strategy="optimal", time_limit=5)
    >>> with_strategy(chosen, "optimal") is chosen, with_strategy(chosen, "ffd").describe()
    (True, 'max_seq_length=8, strategy=ffd')
    """
    if name == recipe.strategy:
        return recipe
    return packing.Recipe.of(
        recipe, strategy=strategy_name(name), time_limit=None, max_sequences_per_block=None, seed=None
    )


def beside(recipe: packing.Recipe, name: str, max_seq_length: int | None = None) -> packing.Recipe:
    """``recipe`` with the strategy ``name`` (and ``max_seq_length``, if given) as the Sweep tab runs it beside the
    others: the strategy's options at the library's defaults, but a search (it takes a ``time_limit``) for
    ``PAGE_TIME_LIMIT`` seconds. O(1).

    >>> beside(packing.Recipe(8), "optimal", 16).describe()
    'max_seq_length=16, strategy=optimal, time_limit=5.0'
    >>> beside(packing.Recipe(8), "ffd").time_limit is None
    True
    """
    other = packing.Recipe.of(
        recipe, max_seq_length, strategy=strategy_name(name), time_limit=None, max_sequences_per_block=None, seed=None
    )
    if "time_limit" in packing.strategies.STRATEGIES[other.strategy].options:
        return packing.Recipe.of(other, time_limit=PAGE_TIME_LIMIT)
    return other


def seconds_asked(recipe: packing.Recipe) -> int | None:
    """The ``time_limit`` the recipe asks a search for, in whole seconds (None without one)."""
    return None if recipe.time_limit is None else int(recipe.time_limit)


def pad_id(recipe: packing.Recipe, tokenizer: Any = None) -> int:
    """The id the page pads blocks with: the library's rule for ``recipe`` read with ``tokenizer``
    (``packing.text.prepare(recipe).pad_id``): its ``pad_token_id``, else the tokenizer's pad id (its EOS id when
    it has none), else 0, so the page's blocks are ``packing.pack``'s. O(1).

    >>> from packing.text import ByteTokenizer
    >>> pad_id(packing.Recipe(8)), pad_id(packing.Recipe(8, pad_token_id=7)), pad_id(packing.Recipe(8), ByteTokenizer())
    (0, 7, 257)
    """
    from packing.text import prepare

    return prepare(packing.Recipe.of(recipe, tokenizer=tokenizer)).pad_id


def capped(recipe: packing.Recipe) -> packing.Recipe:
    """``recipe`` with its ``time_limit`` at most ``MAX_TIME_LIMIT``: what the page runs. O(1).

    >>> capped(packing.Recipe(8, strategy="optimal", time_limit=600)).time_limit
    30.0
    >>> capped(packing.Recipe(8, strategy="optimal", time_limit=5)).time_limit
    5.0
    """
    if recipe.time_limit is None or recipe.time_limit <= MAX_TIME_LIMIT:
        return recipe
    return packing.Recipe.of(recipe, time_limit=MAX_TIME_LIMIT)


def time_limit_note(recipe: packing.Recipe) -> str:
    """The sentence telling a visitor that the page searches for less time than the link asked ('' if it does not).

    >>> time_limit_note(packing.Recipe(8, strategy="optimal", time_limit=5))
    ''
    >>> time_limit_note(packing.Recipe(8, strategy="optimal", time_limit=600))[:61]
    'The link asks the search to run for up to 600 s; the explorer'
    """
    asked = seconds_asked(recipe) if search_lane(recipe) else None
    if asked is None or asked <= MAX_TIME_LIMIT:
        return ""
    return (
        f"The link asks the search to run for up to {asked:,} s; the explorer searches for at most "
        f"{MAX_TIME_LIMIT} s per plan and shows the best plan found by then, with its certified gap. For a longer "
        "search, run `packing.plan` yourself."
    )


def search_lane(recipe: packing.Recipe) -> str | None:
    """Which workers' lane (``explorer.server.workers``) plans ``recipe``: a search (its strategy takes a
    ``time_limit``) bounded by ``PAGE_TIME_LIMIT``, like every search of the Compare and Sweep tabs, goes to
    ``"search"``; a longer one a link asked for (capped at ``MAX_TIME_LIMIT``) to ``"long"``, so that it never holds
    a worker the others wait for; anything else (fast compiled kernels) is planned in the server (None).

    >>> [search_lane(packing.Recipe(8, strategy=name, time_limit=limit)) for name, limit in
    ...  (("bfd", None), ("optimal", 5), ("optimal", 600))]
    [None, 'search', 'long']
    """
    if "time_limit" not in packing.strategies.STRATEGIES[recipe.strategy].options:
        return None
    return "search" if _limit(recipe) <= PAGE_TIME_LIMIT else "long"


def _limit(recipe: packing.Recipe) -> float:
    """The recipe's ``time_limit``, else the library's default."""
    return DEFAULT_TIME_LIMIT if recipe.time_limit is None else recipe.time_limit


def search_seconds(recipe: packing.Recipe) -> int:
    """Whole seconds a search with this recipe may run on the page: its ``time_limit`` (``capped``), else the
    library's default."""
    return int(_limit(capped(recipe)))


def search_deadline(recipe: packing.Recipe) -> float:
    """Seconds a worker may take on a plan of this (capped) recipe before it is stopped: the search's own limit,
    then time to round and certify its plan."""
    return float(_limit(recipe)) + 30.0


def turn_lines(every: tuple[Any, ...], tokenizer: Any, rules: LossRules, rows: tuple[int, ...]) -> list[dict[str, Any]]:
    """One line per turn of each of ``rows`` (0-based) of the text rows ``every`` read with ``tokenizer`` (a
    ``Dataset``'s own) and trained as ``rules`` say: the row (1-based), role, tokens, trained tokens and texts (``explorer.core.text.turn_table``);
    renders the chat template once per row."""
    from explorer.core.text import turn_table, view_row

    table: list[dict[str, Any]] = []
    for row in rows:
        for line in turn_table(view_row(every[row], tokenizer, rules)):
            table.append({"sequence": row + 1, **line})
    return table


def compare(lengths: Int64Array, recipe: packing.Recipe) -> tuple[list[Row], dict[str, packing.ComputeCost]]:
    """``packing.compare``'s rows at the recipe's ``max_seq_length`` and ``overflow`` (every strategy, whatever the
    recipe's), with the plans dropped (statistics only, small whatever the data's size) and each row's compute
    estimate by label; the proven optimum searches up to ``PAGE_TIME_LIMIT``. O(every strategy)."""
    rows = compare_contenders(lengths, recipe.max_seq_length, overflow=recipe.overflow, time_limit=PAGE_TIME_LIMIT)
    costs = {row.label: packing.compute_cost(row.plan) for row in rows if row.plan is not None}
    worded = [replace(row, plan=None, refusal=describe(row.error) if row.error else row.refusal) for row in rows]
    return worded, costs


WARM_LENGTHS = (3, 5, 2, 4, 1, 6)
"""A tiny input every strategy packs (at max_seq_length 6) to compile its kernels."""
_HARD_FOR_GREEDY = [26, 26, 26, 25, 25, 24, 24, 23, 23] * 8 + [49, 50, 51] * 5


def warm_searches() -> None:
    """Compile (or load from numba's cache) the kernels of every search the Compare and Sweep tabs run: each
    strategy under each overflow policy, its compute estimate, the lower bounds, and the proven optimum's column
    generation (LP pricing) and the plan it rounds to, which tiny inputs never reach (on ``_HARD_FOR_GREEDY``
    greedy needs 28 blocks of 100 and the optimum 26). The page's first start and every search worker call it."""
    lengths = np.array(WARM_LENGTHS, dtype=np.int64)
    for overflow in packing.recipe.OVERFLOW_POLICIES:
        for name in packing.strategies.STRATEGIES:
            packing.compute_cost(
                packing.plan(lengths, 6, strategy=strategy_name(name), overflow=overflow_policy(overflow))
            )
        packing.lower_bounds(lengths, 6, overflow=overflow_policy(overflow))
    packing.plan(np.array([3] * 30 + [5] * 7 + [2] * 9), 8, strategy="optimal", time_limit=PAGE_TIME_LIMIT)
    packing.plan(np.array(_HARD_FOR_GREEDY), 100, strategy="optimal", time_limit=PAGE_TIME_LIMIT)


def sweep(lengths: Int64Array, recipe: packing.Recipe, sizes: list[int], strategies: list[str]) -> list[dict[str, Any]]:
    """Blocks and efficiency of each strategy at each max_seq_length, under the recipe's overflow policy (each run
    as ``beside`` makes it), as rows for a table or a chart. O(sizes × strategies × a plan)."""
    rows = []
    for size in sizes:
        for name in strategies:
            run = run_strategy(lengths, beside(recipe, name, size))
            stats = run.stats
            rows.append(
                {
                    "max_seq_length": size,
                    "strategy": name,
                    "blocks": stats.num_blocks if stats else None,
                    "efficiency": stats.efficiency if stats else None,
                    "tokens lost": stats.tokens_lost if stats else None,
                    "lost share": stats.tokens_lost / stats.input_tokens if stats and stats.input_tokens else None,
                    "note": run.refusal,
                }
            )
    return rows


def explain_steps(lengths: Int64Array, recipe: packing.Recipe) -> list[packing.strategies.Step]:
    """``packing.explain`` for these lengths with the recipe's length, strategy, overflow and seed (0 without one);
    raises ``ValueError`` with a plain message when it refuses."""
    if len(lengths) > packing.strategies.MAX_EXPLAIN_DOCUMENTS:
        raise ValueError(
            f"stepping through is limited to {packing.strategies.MAX_EXPLAIN_DOCUMENTS} sequences; this input has {len(lengths):,}"
        )
    seed = recipe.seed or 0
    return packing.explain(
        lengths, recipe.max_seq_length, strategy=recipe.strategy, overflow=recipe.overflow, seed=seed
    )


def strategy_name(strategy: str) -> packing.StrategyName:
    """A strategy name from a widget (checked by the library)."""
    return cast(packing.StrategyName, strategy)


def overflow_policy(overflow: str) -> packing.OverflowPolicy:
    """An overflow policy name from a widget (checked by the library)."""
    return cast(packing.OverflowPolicy, overflow)


def step_grid(steps: list[packing.strategies.Step], upto: int, max_seq_length: int) -> Int64Array:
    """Sequence index in each cell after steps ``0..upto`` (-1 where nothing is placed yet).

    Only blocks opened so far are included, whatever length ``Step.fill`` has.
    """
    done = steps[: upto + 1]
    blocks = max((p.block + 1 for step in done for p in step.placements), default=0)
    grid = np.full((blocks, max_seq_length), -1, dtype=np.int64)
    for step in done:
        for place in step.placements:
            grid[place.block, place.position : place.position + place.length] = step.sequence
    return grid


def step_tokens(
    steps: list[packing.strategies.Step], upto: int, max_seq_length: int, flat: packing.Samples
) -> Int64Array:
    """Token id in each cell after steps ``0..upto``, like ``step_grid`` (-1 where nothing is placed yet)."""
    done = steps[: upto + 1]
    blocks = max((p.block + 1 for step in done for p in step.placements), default=0)
    grid = np.full((blocks, max_seq_length), -1, dtype=np.int64)
    assert flat.tokens is not None, "step_tokens needs token data"
    for step in done:
        offset = int(flat.offsets[step.sequence]) + step.start
        for place in step.placements:
            grid[place.block, place.position : place.position + place.length] = flat.tokens[
                offset : offset + place.length
            ]
            offset += place.length
    return grid


@dataclass(frozen=True)
class AttentionView:
    """One block's attention: what a plain causal mask allows vs the block-diagonal mask."""

    causal: npt.NDArray[np.bool_]
    document: npt.NDArray[np.bool_]
    cross: npt.NDArray[np.bool_]
    position_plain: Int64Array
    position_restart: Int64Array
    real_tokens: int

    @property
    def cross_pairs(self) -> int:
        return int(self.cross.sum())


def positions(batch: packing.PackedBatch, block: int) -> tuple[Int64Array, Int64Array]:
    """Position ids of a block counted straight through (what a naive setup uses) and ``PackedBatch.position_ids``."""
    real = batch.sequence_ids[block] >= 0
    return np.where(real, np.arange(batch.max_seq_length), 0), batch.position_ids[block]


def attention_view(batch: packing.PackedBatch, block: int) -> AttentionView:
    """The naive causal mask over a block's real tokens, ``PackedBatch.attention_mask`` and their difference.

    O(max_seq_length²) memory: callers limit the block size.
    """
    document = batch.attention_mask(block)
    real = batch.sequence_ids[block] >= 0
    causal = np.tril(real[:, None] & real[None, :])
    plain, restart = positions(batch, block)
    return AttentionView(causal, document, causal & ~document, plain, restart, int(real.sum()))


@dataclass(frozen=True)
class Cut:
    """A response that ``split`` trains apart from its prompt: the sequence and the block its cut-off part lands in
    (both 0-based), that part's trained tokens and the masked prompt left behind in earlier blocks."""

    sequence: int
    block: int
    trained: Int64Array
    prompt: Int64Array


def responses_cut(
    samples: packing.Samples, max_seq_length: int, overflow: OverflowPolicy = "truncate", most: int = 3
) -> tuple[int, list[Cut]]:
    """What ``split`` (the classic answer's plan) does to ``samples`` in blocks of ``max_seq_length`` (sequences
    longer than a block under ``overflow``): how many
    pieces continue a sequence in a later block with trained tokens while its masked prompt stays behind, and the
    first ``most`` of them. Pairs and groups are never split: none. O(tokens).

    >>> samples = packing.read_rows([[1, 2], {"prompt": [10, 11], "completion": [12, 13]}])
    >>> count, cuts = responses_cut(samples, 4)
    >>> count, cuts[0].sequence, cuts[0].block, cuts[0].trained.tolist(), cuts[0].prompt.tolist()
    (1, 1, 1, [12, 13], [10, 11])
    """
    if samples.tokens is None or samples.loss_mask is None or samples.units is not None:
        return 0, []
    plan = packing.plan(samples.lengths, max_seq_length, strategy="split", overflow=overflow)
    mask = samples.loss_mask.astype(np.int64)
    trained_before = np.concatenate([[0], np.cumsum(mask)])  # mask-1 tokens before each flat position
    sequence = plan.piece_sequence.astype(np.int64)
    begin = samples.offsets[sequence]
    start = begin + plan.piece_start
    stop = start + plan.piece_length
    trained = trained_before[stop] - trained_before[start]
    prompt_behind = (start - begin) - (trained_before[start] - trained_before[begin])  # mask-0 tokens before the cut
    chosen = np.flatnonzero((plan.piece_start > 0) & (trained > 0) & (prompt_behind > 0))
    blocks = plan.piece_block()
    cuts = []
    for piece in chosen[:most].tolist():
        a, b, first = int(start[piece]), int(stop[piece]), int(begin[piece])
        cuts.append(
            Cut(
                int(sequence[piece]),
                int(blocks[piece]),
                samples.tokens[a:b][samples.loss_mask[a:b] != 0].astype(np.int64),
                samples.tokens[first:a][samples.loss_mask[first:a] == 0].astype(np.int64),
            )
        )
    return len(chosen), cuts
