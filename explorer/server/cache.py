"""The library calls of the page, shared by every session through ``explorer.server.memo`` (byte budget, time to live).

Every function takes the real inputs (a source, numbers, names) and loads what it needs through ``dataset``, so
an argument only ever changes a result, never just a key.
"""

from __future__ import annotations

from typing import Any

import packing
from explorer.core import runs as compute
from explorer.core.audit import load_report
from explorer.core.model import DEFAULT_RULES, MAX_UPLOAD_MB, Dataset, Settings
from explorer.core.parsing import InputError
from explorer.core.runs import Window
from explorer.core.safety import describe, plot_text
from explorer.core.sources import Source, Text, Upload
from explorer.server import workers
from explorer.server.memo import memoized
from explorer.views import figures, tables
from packing.comparison import Row
from packing.core.loss import LossRules

SWEEP_SECONDS = 120.0
"""Seconds the Sweep tab's searches may take in their worker (16 sizes of every strategy, the optimum's 5 s each)."""
MAX_TURN_ROWS = 20
"""Most rows whose turns the Result tab tabulates (the rows of the blocks shown, in order)."""


LOAD_SECONDS = 60.0
"""Seconds reading and tokenizing an upload or pasted text rows may take in its worker."""


def dataset(source: Source, rules: LossRules) -> Dataset:
    """The dataset of ``source``, trained as ``rules`` say and kept under them (a text row's masks are the
    library's for these rules); lengths-only sources train nothing, so they keep one entry whatever the rules.
    Raises ``InputError`` on bad input (not stored)."""
    return _dataset(source, rules if source.has_tokens else DEFAULT_RULES)


@memoized
def _dataset(source: Source, rules: LossRules) -> Dataset:
    """``dataset``: an upload or text rows are read in a worker of the load lane (a parser that crashes, a chat
    template that loops, a tokenizer that takes minutes: stopped after ``LOAD_SECONDS`` or when the visitor
    leaves); the other sources are small recipes."""
    if not isinstance(source, Upload | Text):
        return source.load(rules)
    try:
        return workers.run(_load, source, rules, lane_name="load", seconds=LOAD_SECONDS)
    except (workers.TimedOut, workers.WorkerDied) as error:
        raise InputError(str(error)) from None


def _load(source: Upload | Text, rules: LossRules) -> Dataset:
    """In the load lane's worker: ``source`` read, its progress reported to the waiting page (``workers.report``)."""
    return source.load(rules, workers.report)


def _lengths(source: Source, rules: LossRules) -> Any:
    return dataset(source, rules).lengths


@memoized
def plan(
    source: Source,
    rules: LossRules,
    max_seq_length: int,
    strategy: str,
    overflow: str,
    options: tuple[tuple[str, int], ...] = (),
) -> Row:
    """``packing.plan`` (timed; a refusal is reported in ``error``); a search runs in a worker, for at most
    ``compute.MAX_TIME_LIMIT`` seconds (``compute.search_lane``)."""
    lengths = _lengths(source, rules)
    options = compute.capped(options)  # a link may ask for minutes
    lane = compute.search_lane(strategy, options)
    if lane is None:  # the compiled greedy kernels: in the server
        return compute.run_strategy(lengths, max_seq_length, strategy, overflow, options=options)
    seconds = compute.search_deadline(options)
    args = (lengths, max_seq_length, strategy, overflow, options)
    return workers.run(compute.run_strategy, *args, lane_name=lane, seconds=seconds)


def settings_plan(source: Source, settings: Settings) -> Row:
    s = settings
    return plan(source, s.rules, s.max_seq_length, s.strategy, s.overflow, s.options)


@memoized
def bounds(source: Source, rules: LossRules, max_seq_length: int, overflow: str) -> packing.LowerBounds:
    """``packing.lower_bounds``."""
    return packing.lower_bounds(_lengths(source, rules), max_seq_length, overflow)


@memoized
def trainable(source: Source, settings: Settings) -> packing.TrainableCounts:
    """Trainable tokens and training targets over the whole plan."""
    layout = settings_plan(source, settings).layout
    assert layout is not None
    return compute.trainable_counts(layout, dataset(source, settings.rules).samples)


@memoized
def window(source: Source, settings: Settings, strategy: str, first: int, count: int) -> Window:
    """Blocks ``first .. first + count - 1`` of ``strategy``'s plan, materialized."""
    s = settings
    options = s.options if strategy == s.strategy else ()
    layout = plan(source, s.rules, s.max_seq_length, strategy, s.overflow, options).layout
    assert layout is not None
    return compute.window(layout, dataset(source, s.rules).samples, first, count, s.pad_token_id)


@memoized
def block_figure(source: Source, settings: Settings, first: int, count: int) -> Any:
    """The Result tab's blocks and loss mask for a window (built once for every session that shows it)."""
    view = window(source, settings, settings.strategy, first, count)
    batch = view.batch
    tokens = batch.input_ids if view.has_tokens else None
    labels = batch.labels if view.has_tokens else None
    pieces = None
    if isinstance(source, Text) and batch.num_blocks * batch.max_seq_length <= figures.MAX_MASK_HOVER_CELLS:
        try:
            pieces = text_cells(source, settings, first, count)
        except (ValueError, TypeError, InputError):  # a tokenizer that cannot decode these ids: ids only
            pieces = None
    return figures.block_figure(view.sequence_ids, batch.loss_mask, batch.position_ids, tokens, first, labels, pieces)


@memoized
def text_cells(source: Text, settings: Settings, first: int, count: int) -> tuple[list[list[str]], list[list[str]]]:
    """Cell labels and hover texts (decoded pieces with their ids) of a window of text data, safe for Plotly."""
    from explorer.core.text import window_cells

    view = window(source, settings, settings.strategy, first, count)
    data = dataset(source, settings.rules)
    samples = data.samples
    limit = max(1, min(figures.PIECE_CHARACTERS // settings.max_seq_length, 10))  # what a cell's width holds
    labels, hovers = window_cells(view.batch, samples, data.tokenizer, limit=limit)
    return [[plot_text(t) for t in row] for row in labels], [[plot_text(t) for t in row] for row in hovers]


@memoized
def turns(source: Text, rules: LossRules, rows: tuple[int, ...]) -> list[dict[str, Any]]:
    """One line per turn of each of ``rows`` (0-based): the row (1-based), role, tokens, trained tokens and texts."""
    try:  # the chat template renders again: in the load lane, bounded like the reading
        data = dataset(source, rules)
        args = (data.rows, data.tokenizer, rules, rows)
        return workers.run(compute.turn_lines, *args, lane_name="load", seconds=LOAD_SECONDS)
    except (workers.TimedOut, workers.WorkerDied) as error:
        raise InputError(str(error)) from None


@memoized
def summary_figures(source: Source, settings: Settings) -> tuple[Any, Any]:
    """The Result tab's utilization and length charts."""
    layout = settings_plan(source, settings).layout
    assert layout is not None
    pieces = (layout.piece_block(), layout.piece_sequence, layout.piece_length) if layout.num_blocks <= 60 else None
    lengths = _lengths(source, settings.rules)
    return (
        figures.utilization_figure(layout.stats.block_utilization, pieces, settings.max_seq_length),
        figures.length_histogram(lengths, settings.max_seq_length),
    )


@memoized
def compare_figures(source: Source, rules: LossRules, max_seq_length: int, overflow: str) -> list[Any]:
    """The Compare tab's charts."""
    runs, costs = compare(source, rules, max_seq_length, overflow)
    lower = bounds(source, rules, max_seq_length, overflow).simple
    return figures.compare_figures(tables.compare_table(runs, costs), lower)


@memoized
def sweep_figure(
    source: Source, rules: LossRules, sizes: tuple[int, ...], strategies: tuple[str, ...], overflow: str
) -> Any:
    """The Sweep tab's chart."""
    xs, series, lost = tables.sweep_series(sweep(source, rules, sizes, strategies, overflow))
    return figures.sweep_figure(xs, series, lost)


@memoized
def audit(upload: Upload) -> Any:
    """``packing.audit`` of an uploaded packed file (``explorer.core.audit.load_report``), keyed by its digest;
    read in a worker of the load lane, like an upload to pack."""
    if len(upload.data) > MAX_UPLOAD_MB * 2**20:
        raise InputError(f"the file is {len(upload.data) / 2**20:,.0f} MB; files up to {MAX_UPLOAD_MB} MB can be read")
    try:  # in the load lane: a reader that crashes on a crafted file takes only its worker down
        return workers.run(load_report, upload.data, upload.name, lane_name="load", seconds=LOAD_SECONDS)
    except (workers.TimedOut, workers.WorkerDied) as error:
        raise InputError(str(error)) from None
    except (packing.PackingError, ValueError, TypeError, OSError, RecursionError, MemoryError) as error:
        raise InputError(describe(error)) from None


@memoized
def compare(
    source: Source, rules: LossRules, max_seq_length: int, overflow: str
) -> tuple[list[Row], dict[str, packing.ComputeCost]]:
    """``packing.compare``'s rows (every strategy, and bfd per window of 1,000 rows as TRL packs), each with the
    lower bound that applies to it (the optimum's proven one for strategies that keep sequences whole), and each
    row's compute estimate by label. Statistics only: the plans are not kept, so the entry stays small whatever
    the data's size. Runs in a worker process (``explorer.server.workers``)."""
    return workers.run(compute.compare, _lengths(source, rules), max_seq_length, overflow)


@memoized
def sweep(
    source: Source, rules: LossRules, sizes: tuple[int, ...], strategies: tuple[str, ...], overflow: str
) -> list[dict[str, Any]]:
    """Blocks, efficiency and tokens lost per strategy and max_seq_length (in a worker process)."""
    lengths = _lengths(source, rules)
    return workers.run(compute.sweep, lengths, list(sizes), list(strategies), overflow, seconds=SWEEP_SECONDS)


@memoized
def explain(
    source: Source, rules: LossRules, max_seq_length: int, strategy: str, overflow: str, seed: int = 0
) -> list[packing.Step]:
    """``packing.explain`` steps (raises ``ValueError`` when the input is too large)."""
    return compute.explain_steps(_lengths(source, rules), max_seq_length, strategy, overflow, seed)
