"""The library calls of the page, shared by every session through ``explorer.server.memo`` (byte budget, time to live).

Every function takes a source and a ``packing.Recipe`` (the sidebar's choices, validated once by the library),
plus the window or sizes a tab asks for, and loads what it needs through ``dataset``. Each is kept under the part of
the recipe it depends on (``under``), so an option only ever changes a result, never just a key: changing the
strategy reuses the comparison, changing the pad id the plan.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

import packing
import packing.batches
import packing.core
import packing.strategies
from explorer.core import preference
from explorer.core import runs as compute
from explorer.core.audit import load_report
from explorer.core.model import Dataset
from explorer.core.parsing import InputError
from explorer.core.runs import Window
from explorer.core.safety import describe, plot_text
from explorer.core.sources import Source, Text, Upload
from explorer.core.weighting import targets_per_document
from explorer.server import workers
from explorer.server.memo import memoized
from explorer.views import figures, tables
from packing.comparison import Row
from packing.core._loss import DEFAULT_RULES, LossRules

SWEEP_SECONDS = 120.0
"""Seconds the Sweep tab's searches may take in their worker (16 sizes of every strategy, the optimum's 5 s each)."""


LOAD_SECONDS = 60.0
"""Seconds reading and tokenizing an upload or pasted text rows may take in its worker."""
S = TypeVar("S", bound=Source)
P = ParamSpec("P")
R = TypeVar("R")


def under(
    part: Callable[[packing.Recipe], Any],
) -> Callable[[Callable[Concatenate[S, Any, P], R]], Callable[Concatenate[S, packing.Recipe, P], R]]:
    """Memoize a function of ``(source, recipe, *rest)`` under ``part(recipe)``, the part of the recipe it
    depends on, and call it with that part (``part`` is idempotent: a projected recipe projects to itself).

    >>> @under(lambda recipe: recipe.max_seq_length)
    ... def length(source: str, max_seq_length: int) -> int:
    ...     return max_seq_length
    >>> length("x", packing.Recipe(8, strategy="ffd")) == length("x", packing.Recipe(8)) == 8
    True
    """

    def decorate(function: Callable[Concatenate[S, Any, P], R]) -> Callable[Concatenate[S, packing.Recipe, P], R]:
        stored = memoized(function)

        @functools.wraps(function)
        def projected(source: S, recipe: packing.Recipe, /, *args: P.args, **kwargs: P.kwargs) -> R:
            return stored(source, part(recipe), *args, **kwargs)

        return projected

    return decorate


def _planning(recipe: packing.Recipe) -> packing.Recipe:
    """What a plan of a source depends on: the recipe as the page runs it (``compute.capped``), without the options
    that act only when blocks are filled (``pad_token_id``, ``int64``), so that these share one plan."""
    return packing.Recipe.of(compute.capped(recipe), pad_token_id=None, int64=False)


def _lengths_only(recipe: packing.Recipe) -> packing.Recipe:
    """What the Compare and Sweep tabs and the lower bounds depend on: the recipe's length, overflow and loss rules
    (they run every strategy themselves, with the page's own options)."""
    return packing.Recipe(
        recipe.max_seq_length,
        overflow=recipe.overflow,
        share_prompt=recipe.share_prompt,
        **dataclasses.asdict(recipe.loss_rules),
    )


def dataset(source: Source, recipe: packing.Recipe) -> Dataset:
    """The dataset of ``source``, trained as the recipe's loss rules say and kept under them (a text row's masks are
    the library's for these rules); lengths-only sources train nothing, so they keep one entry whatever the rules.
    Raises ``InputError`` on bad input (not stored)."""
    return _dataset(source, recipe.loss_rules if source.has_tokens else DEFAULT_RULES)


@memoized
def _dataset(source: Source, rules: LossRules) -> Dataset:
    """``dataset``: an upload or text rows are read in a worker of the load lane (a parser that crashes, a chat
    template that loops, a tokenizer that takes minutes: stopped after ``LOAD_SECONDS`` or when the visitor
    leaves); the other sources are small and read here."""
    return _loading(_load, source, rules) if isinstance(source, Upload | Text) else source.load(rules)


def _loading(function: Callable[..., R], *args: Any) -> R:
    """``function(*args)`` in a worker of the load lane, bounded by ``LOAD_SECONDS`` and ``workers.LOAD_MEMORY_MB``
    (stopped, dead or out of memory: one line, an ``InputError``)."""
    try:
        return workers.run(function, *args, lane_name="load", seconds=LOAD_SECONDS)
    except (workers.TimedOut, workers.WorkerDied) as error:
        raise InputError(str(error)) from None
    except MemoryError:  # the worker's memory limit (``workers.LOAD_MEMORY_MB``): an upload that decodes too large
        raise InputError(
            f"it needed more than the {workers.LOAD_MEMORY_MB:,} MB of memory the explorer gives it, and was stopped"
        ) from None


def _load(source: Upload | Text, rules: LossRules) -> Dataset:
    """In the load lane's worker: ``source`` read, its progress reported to the waiting page (``workers.report``)."""
    return source.load(rules, workers.report)


def _lengths(source: Source, recipe: packing.Recipe) -> Any:
    """What the planner sees of the source: its lengths, a pair's or group's in the recipe's layout."""
    data = dataset(source, recipe)
    if data.samples is not None and data.samples.units is not None:
        return preference.unit_lengths(data.samples, recipe.share_prompt)
    return data.lengths


def has_units(source: Source, recipe: packing.Recipe) -> bool:
    """Whether the source's rows hold preference pairs or completion groups (planned and filled whole)."""
    samples = dataset(source, recipe).samples
    return samples is not None and samples.units is not None


def packed_samples(source: Source, recipe: packing.Recipe) -> packing.Samples | None:
    """The samples the recipe's plan is filled with: the source's, or its units laid out and fitted by the library
    (``preference.run_units``)."""
    if has_units(source, recipe):
        return _units(source, _planning(recipe)).samples
    return dataset(source, recipe).samples


@under(_planning)
def plan(source: Source, recipe: packing.Recipe) -> Row:
    """``packing.plan`` of the source with ``recipe`` (timed; a refusal is reported in ``error``); a link's search
    time is capped at ``compute.MAX_TIME_LIMIT`` seconds and a search runs in a worker (``compute.search_lane``)."""
    if has_units(source, recipe):
        return _units(source, recipe).row
    lengths = _lengths(source, recipe)
    lane = compute.search_lane(recipe)
    if lane is None:  # the compiled greedy kernels: in the server
        return compute.run_strategy(lengths, recipe)
    seconds = compute.search_deadline(recipe)
    return workers.run(compute.run_strategy, lengths, recipe, lane_name=lane, seconds=seconds)


@under(_planning)
def _units(source: Source, recipe: packing.Recipe) -> preference.UnitRun:
    """The library's plan of pairs and groups (``preference.run_units``), a search in its worker lane."""
    samples = dataset(source, recipe).samples
    assert samples is not None
    lane = compute.search_lane(recipe)
    if lane is None:
        return preference.run_units(samples, recipe)
    seconds = compute.search_deadline(recipe)
    return workers.run(preference.run_units, samples, recipe, lane_name=lane, seconds=seconds)


@under(lambda recipe: packing.Recipe.of(_planning(recipe), share_prompt=False))
def layouts(source: Source, recipe: packing.Recipe) -> preference.Layouts:
    """The source's units packed with the prompt duplicated and shared (``preference.both_layouts``)."""
    samples = dataset(source, recipe).samples
    assert samples is not None
    return preference.both_layouts(samples, recipe)


@under(_lengths_only)
def bounds(source: Source, recipe: packing.Recipe) -> packing.LowerBounds:
    """``packing.lower_bounds`` at the recipe's length and overflow."""
    return packing.lower_bounds(_lengths(source, recipe), recipe.max_seq_length, overflow=recipe.overflow)


@under(_planning)
def trainable(source: Source, recipe: packing.Recipe) -> packing.batches.TrainableCounts:
    """Trainable tokens and training targets over the whole plan."""
    chosen = plan(source, recipe).plan
    assert chosen is not None
    return compute.trainable_counts(chosen, packed_samples(source, recipe))


@under(_planning)
def document_targets(source: Source, recipe: packing.Recipe) -> Any:
    """Training targets (labels that are not -100) of every document in the recipe's plan: what
    ``PackedBatch.loss_weights`` weighs (``explorer.core.weighting.targets_per_document``)."""
    chosen = plan(source, recipe).plan
    assert chosen is not None
    return targets_per_document(chosen, packed_samples(source, recipe))


@memoized
def window(source: Source, recipe: packing.Recipe, first: int, count: int) -> Window:
    """Blocks ``first .. first + count - 1`` of the recipe's plan, materialized (padded as ``pad_id`` says)."""
    chosen = plan(source, recipe).plan
    assert chosen is not None
    return compute.window(chosen, packed_samples(source, recipe), first, count, pad_id(source, recipe))


def pad_id(source: Source, recipe: packing.Recipe) -> int:
    """The id the recipe's blocks of ``source`` are padded with: the library's rule with the tokenizer that read the
    data (``compute.pad_id``), as ``packing.pack`` and the command line pad them."""
    return compute.pad_id(recipe, dataset(source, recipe).tokenizer)


@under(_lengths_only)
def responses_cut(source: Source, recipe: packing.Recipe) -> tuple[int, list[compute.Cut]]:
    """The responses ``split`` would train apart from their prompts in the recipe's blocks (``compute.responses_cut``;
    none for lengths only)."""
    samples = dataset(source, recipe).samples
    if samples is None:
        return 0, []
    return compute.responses_cut(samples, recipe.max_seq_length, recipe.overflow)


@memoized
def block_figure(source: Source, recipe: packing.Recipe, first: int, count: int) -> Any:
    """The Result tab's blocks and loss mask for a window (built once for every session that shows it)."""
    view = window(source, recipe, first, count)
    pieces = None
    if isinstance(source, Text) and view.batch.input_ids.size <= figures.MAX_MASK_HOVER_CELLS:
        try:
            pieces = text_cells(source, recipe, first, count)
        except (ValueError, TypeError, InputError):  # a tokenizer that cannot decode these ids: ids only
            pieces = None
    return figures.window_figure(view, pieces)


@memoized
def text_cells(source: Text, recipe: packing.Recipe, first: int, count: int) -> tuple[list[list[str]], list[list[str]]]:
    """Cell labels and hover texts (decoded pieces with their ids) of a window of text data, safe for Plotly."""
    from explorer.core.text import window_cells

    view = window(source, recipe, first, count)
    data = dataset(source, recipe)
    samples = packed_samples(source, recipe)
    limit = max(1, min(figures.PIECE_CHARACTERS // recipe.max_seq_length, 10))  # what a cell's width holds
    labels, hovers = window_cells(view.batch, samples, data.tokenizer, limit=limit)
    return [[plot_text(t) for t in row] for row in labels], [[plot_text(t) for t in row] for row in hovers]


@under(lambda recipe: recipe.loss_rules)  # what the recipe trains: all reading a chat depends on
def turns(source: Text, rules: LossRules, rows: tuple[int, ...]) -> list[dict[str, Any]]:
    """One line per turn of each of ``rows`` (0-based): the row (1-based), role, tokens, trained tokens and texts."""
    data = _dataset(source, rules)  # the chat template renders again: in the load lane, bounded like the reading
    return _loading(compute.turn_lines, data.rows, data.tokenizer, rules, rows)


@under(_planning)
def summary_figures(source: Source, recipe: packing.Recipe) -> tuple[Any, Any]:
    """The Result tab's utilization and length charts."""
    chosen = plan(source, recipe).plan
    assert chosen is not None
    return figures.plan_figure(chosen), figures.length_histogram(_lengths(source, recipe), recipe.max_seq_length)


@under(_lengths_only)
def compare_figures(source: Source, recipe: packing.Recipe) -> list[Any]:
    """The Compare tab's charts."""
    runs, costs = compare(source, recipe)
    lower = bounds(source, recipe).simple
    return figures.compare_figures(tables.compare_table(runs, costs), lower)


@under(_lengths_only)
def sweep_figure(source: Source, recipe: packing.Recipe, sizes: tuple[int, ...], strategies: tuple[str, ...]) -> Any:
    """The Sweep tab's chart."""
    xs, series, lost = tables.sweep_series(sweep(source, recipe, sizes, strategies))
    return figures.sweep_figure(xs, series, lost)


@memoized
def audit(upload: Upload) -> Any:
    """``packing.audit`` of an uploaded packed file (``explorer.core.audit.load_report``), keyed by its digest;
    read in a worker of the load lane, like an upload to pack."""
    upload.check_size()
    try:  # in the load lane: a reader that crashes on a crafted file takes only its worker down
        return _loading(load_report, upload.data, upload.name)
    except (packing.PackingError, ValueError, TypeError, OSError, RecursionError, MemoryError) as error:
        raise InputError(describe(error)) from None


@under(_lengths_only)
def compare(source: Source, recipe: packing.Recipe) -> tuple[list[Row], dict[str, packing.ComputeCost]]:
    """``packing.compare``'s rows at the recipe's length and overflow (every strategy, and bfd per window of 1,000
    rows as TRL packs), each with the lower bound that applies to it (the optimum's proven one for strategies that
    keep sequences whole), and each row's compute estimate by label. Statistics only: the plans are not kept, so
    the entry stays small whatever the data's size. Runs in a worker process (``explorer.server.workers``)."""
    return workers.run(compute.compare, _lengths(source, recipe), recipe)


@under(_lengths_only)
def sweep(
    source: Source, recipe: packing.Recipe, sizes: tuple[int, ...], strategies: tuple[str, ...]
) -> list[dict[str, Any]]:
    """Blocks, efficiency and tokens lost per strategy and max_seq_length, under the recipe's overflow (in a worker
    process)."""
    lengths = _lengths(source, recipe)
    planned = packing.Recipe.of(recipe, share_prompt=False)  # the lengths are already laid out (``_lengths``)
    return workers.run(compute.sweep, lengths, planned, list(sizes), list(strategies), seconds=SWEEP_SECONDS)


@under(_planning)
def explain(source: Source, recipe: packing.Recipe) -> list[packing.strategies.Step]:
    """``packing.explain`` steps of the recipe's strategy (raises ``ValueError`` when the input is too large)."""
    return compute.explain_steps(_lengths(source, recipe), recipe)
