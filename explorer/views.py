"""The tabs of the page. Each ``render_*`` lays out one tab from a ``Context``; the work is in
``explorer.cache`` (library calls), ``explorer.figures`` and ``explorer.tables``."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import streamlit as st

import packing
from explorer import cache, compute, export, figures, practice, state, tables
from explorer.compute import StrategyRun
from explorer.data import Dataset
from explorer.parsing import InputError, parse_blocks, parse_ids
from explorer.sidebar import Choice, Settings

TABS = ("Result", "Compare", "Sweep", "Attention & positions", "Step through", "Practice", "Export")
DEFAULT_WINDOW = 16
MAX_TEXT_WIDTH = 64
"""Widest block printed in the classic text form."""
MAX_ATTENTION_DRAW = 4_096
"""Widest block whose attention masks are drawn (in tiles above ``figures.MAX_ATTENTION_CELLS``)."""
MAX_SWEEP_SIZES = 16
MAX_MINI_CELLS = 1_024


@dataclass(frozen=True)
class Context:
    """Everything a tab needs: the data, its key, the settings and the chosen strategy's plan."""

    dataset: Dataset
    key: str
    settings: Settings
    flat: packing.Samples | None
    run: StrategyRun

    @property
    def lengths(self) -> np.ndarray:
        return self.dataset.lengths

    def with_settings(self) -> str:
        return f"{self.key}|{self.settings.key()}"


_KEPT_WIDGETS = ("result_first", "result_count", "attention_block", "sweep_strategies", "practice_answer")
_KEPT_PREFIXES = ("sweep_sizes_", "step_slider_")


def keep_widget_state() -> None:
    """Keep what was set in tabs that are closed now.

    Only the open tab is drawn, and Streamlit forgets the value of a widget that a run does not draw:
    without this, the block window, the sweep's choices, the step and a half-typed practice answer
    would reset whenever another tab is opened. Assigning a value marks it as the app's own.
    """
    for key in list(st.session_state.keys()):
        if key in _KEPT_WIDGETS or (isinstance(key, str) and key.startswith(_KEPT_PREFIXES)):
            st.session_state[key] = st.session_state[key]


@contextmanager
def guard(what: str) -> Iterator[None]:
    """Show an unexpected failure as a short message instead of a traceback; the rest of the page goes on."""
    try:
        yield
    except Exception as error:
        st.error(f"{what} could not be shown: {error}")


def build_context(choice: Choice) -> Context | None:
    """Load the data and plan it; a problem is reported in plain words and gives None."""
    if choice.spec is None:
        st.info("Upload a file in the sidebar (JSONL, JSON, CSV or Parquet) to pack it.")
        return None
    key = cache.spec_key(choice.spec)
    try:
        dataset = cache.load_dataset(key, choice.spec, choice.upload)
    except InputError as error:
        st.error(f"Could not read the sequences — {error}")
        return None
    if len(dataset.lengths) == 0:
        st.warning("The data holds no sequences.")
        return None
    s = choice.settings
    flat = cache.flat_samples(f"{key}|{s.completion_only}", dataset, s.completion_only)
    run = cache.plan(key, dataset.lengths, s.max_seq_length, s.strategy, s.overflow)
    return Context(dataset, key, s, flat, run)


def _use_strategy(name: str) -> None:
    st.session_state["strategy"] = name


def _need_plan(ctx: Context) -> packing.PackingPlan | None:
    if ctx.run.layout is None:
        st.warning(tables.refusal(ctx.settings.strategy, ctx.run.error, len(ctx.lengths)))
        if ctx.settings.strategy != "bfd":
            st.button(
                "Use best-fit decreasing instead",
                key=f"use_bfd_{st.session_state.get('tab', '')}",
                on_click=_use_strategy,
                args=("bfd",),
            )
        return None
    if ctx.run.layout.num_blocks == 0:
        st.warning("Nothing to pack: every sequence is empty or was dropped by the overflow policy.")
        return None
    return ctx.run.layout


# ------------------------------------------------------------------------------------------- Result


def _metrics(ctx: Context, layout: packing.PackingPlan) -> None:
    s = ctx.settings
    bounds = cache.bounds(ctx.key, ctx.lengths, s.max_seq_length, s.overflow)
    trained = cache.trainable(ctx.with_settings(), layout, ctx.flat, s.pad_token_id)
    numbers = tables.headline(layout.stats, bounds, s.strategy, trained)
    for row in (numbers[:4], numbers[4:]):
        for column, metric in zip(st.columns(4), row, strict=False):
            column.metric(metric.label, metric.value, help=metric.help)


def _window_controls(layout: packing.PackingPlan, prefix: str) -> tuple[int, int]:
    """First block (0-based) and how many to draw; the numbers elsewhere always cover every block."""
    per_drawing = compute.window_blocks(layout.max_seq_length, 200)
    total = layout.num_blocks
    if total <= min(DEFAULT_WINDOW, per_drawing):
        return 0, total
    first_key, count_key = f"{prefix}_first", f"{prefix}_count"
    st.session_state[first_key] = min(st.session_state.get(first_key, 1), total)
    st.session_state[count_key] = min(st.session_state.get(count_key, min(DEFAULT_WINDOW, per_drawing)), per_drawing)
    left, right = st.columns(2)
    first = left.number_input("First block shown", min_value=1, max_value=total, step=1, key=first_key)
    count = right.number_input("Blocks shown", min_value=1, max_value=per_drawing, step=1, key=count_key)
    last = min(total, first + count - 1)
    st.caption(f"Showing blocks {first:,}–{last:,} of {total:,}. The numbers above cover all of them.")
    return int(first) - 1, int(count)


def render_result(ctx: Context) -> None:
    """Headline numbers, block and loss-mask heatmaps, utilization, lengths, classic text and a table."""
    layout = _need_plan(ctx)
    if layout is None:
        return
    _metrics(ctx, layout)
    s = ctx.settings
    lost = tables.loss_note(layout.stats, int(ctx.lengths.max()))
    if lost:
        st.warning(lost)
    if compute.window_blocks(s.max_seq_length, 1) == 0:
        st.warning(
            f"A block of {s.max_seq_length:,} tokens is too large to draw (the limit is {compute.MAX_DRAW_CELLS:,} "
            "cells per drawing); the numbers above and the charts below cover everything."
        )
        view = None
    else:
        first, count = _window_controls(layout, "result")
        view = cache.window(ctx.with_settings(), layout, ctx.flat, first, count, s.pad_token_id)
        batch = view.batch
        tokens = batch.input_ids if view.has_tokens else None
        st.plotly_chart(
            figures.block_figure(view.sequence_ids, batch.loss_mask, batch.position_ids, tokens, first), key="blocks"
        )
    left, right = st.columns(2)
    pieces = (layout.piece_block(), layout.piece_sequence, layout.piece_length) if layout.num_blocks <= 60 else None
    left.plotly_chart(figures.utilization_figure(layout.stats.block_utilization, pieces, s.max_seq_length), key="util")
    right.plotly_chart(figures.length_histogram(ctx.lengths, s.max_seq_length), key="lengths")
    if view is not None:
        _result_text(view)


def _result_text(view: compute.Window) -> None:
    batch = view.batch
    if view.has_tokens and batch.max_seq_length <= MAX_TEXT_WIDTH:
        st.subheader("Classic form")
        st.code(tables.classic_text(batch.input_ids, batch.loss_mask, view.first), language=None, wrap_lines=True)
    elif view.has_tokens:
        st.caption(f"The classic text form is printed for blocks of up to {MAX_TEXT_WIDTH} tokens; see the table.")
    st.subheader("Blocks")
    table = tables.blocks_table(batch.input_ids, batch.loss_mask, view.sequence_ids, view.first, view.has_tokens)
    wide = st.column_config.TextColumn(width="medium")
    st.dataframe(
        table,
        hide_index=True,
        column_config={
            "block": st.column_config.NumberColumn(width="small"),
            "sequences": st.column_config.TextColumn(help="Source sequences in the block, numbered from 1."),
            "tokens": _WHOLE,
            "padding": _WHOLE,
            "trained": st.column_config.NumberColumn(format="localized", help="Tokens with loss mask 1."),
            "input_ids": wide,
            "loss_mask": wide,
        },
    )


# ------------------------------------------------------------------------------------------ Compare


_WHOLE = st.column_config.NumberColumn(format="localized")
_COMPARE_COLUMNS = {
    "blocks": _WHOLE,
    "efficiency (%)": st.column_config.NumberColumn(format="%.2f%%", help="Real tokens / (blocks × max_seq_length)."),
    "padding": st.column_config.NumberColumn(format="localized", help="Pad tokens added to fill the blocks."),
    "tokens lost": st.column_config.NumberColumn(
        format="localized", help="Truncated or dropped by the overflow policy."
    ),
    "sequences cut": st.column_config.NumberColumn(
        format="localized", help="Sequences whose tokens are spread over more than one block."
    ),
    "time (ms)": st.column_config.NumberColumn(
        format="%.2f",
        help="Planning time on this machine, measured once; the first run of a strategy may include loading its "
        "compiled code, so differences under a few milliseconds are noise.",
    ),
    "token slots": st.column_config.NumberColumn(format="localized", help="blocks × max_seq_length."),
    "attention (masked)": st.column_config.NumberColumn(
        format="compact", help="Sum of squared document lengths: attention kept within documents."
    ),
    "attention (full)": st.column_config.NumberColumn(
        format="compact", help="blocks × max_seq_length²: every token attends across its whole block."
    ),
}


def render_compare(ctx: Context) -> None:
    """Every strategy on the same data: table, chart, compute estimate and (small inputs) heatmaps."""
    s = ctx.settings
    runs, costs = cache.compare(ctx.key, ctx.lengths, s.max_seq_length, s.overflow)
    bounds = cache.bounds(ctx.key, ctx.lengths, s.max_seq_length, s.overflow)
    st.caption(
        f"Every strategy at max_seq_length {s.max_seq_length:,} with overflow '{s.overflow}'. Lower bounds: "
        f"{bounds.simple:,} blocks if sequences may be cut, {max(bounds.simple, bounds.l2):,} if not (Martello–Toth L2)."
    )
    frame = tables.compare_table(runs, costs)
    st.dataframe(tables.compare_display(frame), hide_index=True, column_config=_COMPARE_COLUMNS)
    for run in runs:
        if run.error:
            st.caption(f"**{run.strategy}** did not run. {tables.refusal(run.strategy, run.error, len(ctx.lengths))}")
    ok = [r for r in runs if r.layout is not None]
    st.plotly_chart(figures.compare_figure(frame, bounds.simple), key="compare")
    st.markdown(
        "**Compute estimate.** *Token slots* = blocks × max_seq_length: what every layer processes. "
        "*Attention (masked)* = sum of squared document lengths (each token attends within its document); "
        "*attention (full)* = blocks × max_seq_length² (every token attends across the whole block). "
        "Large numbers are abbreviated: K = thousand, M = million, B = billion."
    )
    with st.expander("What each strategy does"):
        st.markdown(
            "\n".join(
                f"- **{info.title}** (`{name}`, {info.complexity}): {info.description}"
                for name, info in packing.STRATEGIES.items()
            )
        )
    _mini_heatmaps(ctx, [(r.strategy, r.layout) for r in ok if r.layout is not None])


def _mini_heatmaps(ctx: Context, layouts: list[tuple[str, packing.PackingPlan]]) -> None:
    cells = max(layout.num_blocks for _, layout in layouts) * ctx.settings.max_seq_length
    if cells > MAX_MINI_CELLS:
        st.caption("Side-by-side heatmaps are drawn for small inputs only.")
        return
    st.subheader("Side by side")
    columns = st.columns(2)
    for i, (strategy, layout) in enumerate(layouts):
        view = cache.window(
            f"{ctx.key}|{strategy}|{ctx.settings.key()}",
            layout,
            ctx.flat,
            0,
            layout.num_blocks,
            ctx.settings.pad_token_id,
        )
        tokens = view.batch.input_ids if view.has_tokens else None
        title = f"{packing.STRATEGIES[strategy].title}: {layout.num_blocks} blocks"
        columns[i % 2].plotly_chart(figures.grid_figure(view.sequence_ids, title, tokens), key=f"mini_{strategy}")


# -------------------------------------------------------------------------------------------- Sweep


def _default_sizes(size: int) -> str:
    values = sorted({max(1, round(size * f)) for f in (0.25, 0.5, 0.75, 1, 1.5, 2, 4)})
    return ", ".join(map(str, values))


def render_sweep(ctx: Context) -> None:
    """Efficiency and blocks against max_seq_length, one line per strategy."""
    s = ctx.settings
    st.caption(
        f"How the number of blocks and the efficiency change with max_seq_length, for every strategy "
        f"(overflow '{s.overflow}'). Efficiency = real tokens / (blocks × max_seq_length)."
    )
    default_strategies = [n for n in packing.STRATEGIES if n != "optimal"]
    st.session_state.setdefault("sweep_strategies", default_strategies)
    st.session_state.setdefault(f"sweep_sizes_{s.max_seq_length}", _default_sizes(s.max_seq_length))
    names = st.multiselect("Strategies", list(packing.STRATEGIES), key="sweep_strategies")
    text = st.text_input("max_seq_length values", key=f"sweep_sizes_{s.max_seq_length}")
    try:
        sizes = sorted(set(parse_ids(text, "max_seq_length values")))
    except InputError as error:
        st.error(str(error))
        return
    sizes = [v for v in sizes if v >= 1]
    if not sizes or not names:
        st.info("Choose at least one strategy and one max_seq_length.")
        return
    if len(sizes) > MAX_SWEEP_SIZES:
        st.warning(f"Using the first {MAX_SWEEP_SIZES} of {len(sizes)} values.")
        sizes = sizes[:MAX_SWEEP_SIZES]
    rows = cache.sweep(ctx.key, ctx.lengths, tuple(sizes), tuple(names), s.overflow)
    xs, series = tables.sweep_series(rows)
    st.plotly_chart(figures.sweep_figure(xs, series), key="sweep")
    notes = sorted({r["note"] for r in rows if r["note"]})
    for note in notes:
        st.caption(f"Not shown: {note}")
    st.dataframe(
        tables.sweep_display(rows),
        hide_index=True,
        column_config={
            "max_seq_length": _WHOLE,
            "blocks": _WHOLE,
            "efficiency (%)": st.column_config.NumberColumn(format="%.2f%%"),
            "tokens lost": _WHOLE,
        },
    )


# ------------------------------------------------------------------------------ Attention & positions


def render_attention(ctx: Context) -> None:
    """For one block: plain causal vs block-diagonal attention, and position ids with and without restarts."""
    layout = _need_plan(ctx)
    if layout is None:
        return
    s = ctx.settings
    st.caption(
        "A block holds several documents. A plain causal mask lets each token attend to the earlier documents "
        "of its block too (red); the block-diagonal mask keeps attention inside each document, and position ids "
        "restart at 0 for every document."
    )
    busiest = int(np.argmax(np.diff(layout.block_starts))) + 1
    st.session_state["attention_block"] = min(st.session_state.get("attention_block", busiest), layout.num_blocks)
    number = st.columns(3)[0].number_input(
        "Block",
        min_value=1,
        max_value=layout.num_blocks,
        step=1,
        key="attention_block",
        help=f"Block {busiest} holds the most documents.",
    )
    view = cache.window(ctx.with_settings(), layout, ctx.flat, int(number) - 1, 1, s.pad_token_id)
    lengths = view.batch.seq_lengths(0).tolist()
    columns = st.columns(3)
    columns[0].metric("Documents in the block", f"{len(lengths)}", help=f"seq_lengths = {lengths}")
    if s.max_seq_length <= MAX_ATTENTION_DRAW:
        att = compute.attention_view(view.batch, 0)
        columns[1].metric("Cross-document pairs a plain causal mask allows", f"{att.cross_pairs:,}")
        columns[2].metric("Pairs the block-diagonal mask keeps", f"{int(att.document.sum()):,}")
    st.caption(f"cu_seqlens (for flash-attention's variable-length kernels) = {view.batch.cu_seqlens(0).tolist()}")
    if s.max_seq_length <= MAX_ATTENTION_DRAW:
        st.plotly_chart(figures.attention_figure(att.causal, att.document), key="attention")
    else:
        st.info(
            f"Attention masks are built and drawn for blocks of up to {MAX_ATTENTION_DRAW:,} tokens "
            f"(a {s.max_seq_length:,}-token block has {s.max_seq_length**2:,} pairs)."
        )
    plain, restart = compute.positions(view.batch, 0)
    st.plotly_chart(figures.positions_figure(plain, restart, view.sequence_ids[0]), key="positions")
    st.caption(
        "Without restarts, the second document's first token sits at position "
        "len(first document): the model sees it as a continuation. With restarts every document starts at 0."
    )


# ------------------------------------------------------------------------------------- Step through


def render_steps(ctx: Context) -> None:
    """A slider over ``packing.explain`` steps: blocks so far, the sequence being placed and why."""
    s = ctx.settings
    try:
        steps = cache.explain(ctx.key, ctx.lengths, s.max_seq_length, s.strategy, s.overflow)
    except ValueError as error:
        st.warning(
            f"Cannot step through this input: {error}. Paste a few sequences, or use a small synthetic dataset "
            "or sample, to replay a strategy."
        )
        return
    if not steps:
        st.info("Nothing to place: every sequence is empty or was dropped.")
        return
    info = packing.STRATEGIES[s.strategy]
    st.caption(f"{info.title} replayed one sequence at a time: move the slider to see where each one goes, and why.")
    number = 1 if len(steps) == 1 else st.slider("Step", 1, len(steps), key=f"step_slider_{ctx.with_settings()}")
    step = steps[number - 1]
    pieces = ", ".join(f"block {p.block + 1} at position {p.position}" for p in step.placements)
    st.markdown(
        f"**Step {number} of {len(steps)}** — sequence {step.sequence + 1}, tokens {step.start}–{step.start + step.length - 1} "
        f"({step.length} tokens) → {pieces}."
    )
    st.info(step.reason)
    if len(step.fill) * s.max_seq_length > compute.MAX_DRAW_CELLS:
        st.plotly_chart(figures.utilization_figure(np.asarray(step.fill) / s.max_seq_length), key="step_fill")
        return
    grid = compute.step_grid(steps, number - 1, s.max_seq_length)
    tokens = None if ctx.flat is None else compute.step_tokens(steps, number - 1, s.max_seq_length, ctx.flat)
    runs = [(p.block, p.position, p.length) for p in step.placements]
    shown = "token ids" if tokens is not None else "sequence numbers"
    title = f"Blocks so far ({shown}; colour = sequence; outlined: this step)"
    st.plotly_chart(figures.grid_figure(grid, title, tokens, runs), key="step_grid")
    if number == len(steps):
        st.caption("Last step: these are the blocks of the Result tab (the empty cells become padding).")


# ----------------------------------------------------------------------------------------- Practice


def render_practice() -> None:
    """A random small problem; the user types the blocks and the app checks them."""
    if "practice_seed" not in st.session_state:
        st.session_state["practice_seed"] = 1
    if st.button("New problem"):
        st.session_state["practice_seed"] = int(np.random.default_rng().integers(1, 1_000_000))
        st.session_state["practice_answer"] = ""
    problem = practice.new_problem(st.session_state["practice_seed"])
    info = packing.STRATEGIES[problem.strategy]
    st.markdown(
        f"Pack these sequences into blocks of **{problem.max_seq_length}** tokens with **{info.title}** "
        f"(`{problem.strategy}`): {info.description}"
    )
    st.code(str(problem.sequences), language=None)
    answer = st.text_area(
        "Your blocks, one per line (padding zeros may be left out)", key="practice_answer", placeholder="1 2 3 4\n5 6"
    )
    if not st.button("Check", type="primary") and not answer.strip():
        return
    try:
        given = parse_blocks(answer)
    except InputError as error:
        st.error(f"Could not read your answer — {error}")
        return
    expected = problem.expected()
    feedback = practice.check_answer(expected, given, problem.max_seq_length)
    (st.success if feedback.correct else st.error)(feedback.message)
    rows = feedback.rows.assign(match=feedback.rows["match"].map({True: "✓", False: "✗"}))
    if feedback.correct:
        st.dataframe(rows, hide_index=True)
        return
    st.dataframe(rows.drop(columns="expected"), hide_index=True)
    left, right = st.columns(2)
    with left.expander("Show the expected blocks"):
        st.code("\n".join(" ".join(map(str, block)) for block in expected), language=None)
    right.button(
        "Replay this problem step by step",
        on_click=_load_problem,
        args=(problem,),
        help="Loads the problem into the sidebar; then open the Step through tab.",
    )


def _load_problem(problem: practice.Problem) -> None:
    st.session_state.update(practice.sidebar_values(problem))
    st.session_state["tab"] = "Step through"


# ------------------------------------------------------------------------------------------- Export


def render_export(ctx: Context, choice: Choice) -> None:
    """Downloads of the packed result, a Python snippet and the shareable link."""
    layout = _need_plan(ctx)
    s = ctx.settings
    if layout is not None:
        cells = layout.num_blocks * s.max_seq_length
        if ctx.flat is None:
            st.info("This data has lengths only (no token ids), so the download is the layout: one row per piece.")
            st.download_button(
                "Download layout (CSV)", lambda: export.layout_csv(layout), "layout.csv", "text/csv", on_click="ignore"
            )
        elif cells > export.MAX_EXPORT_CELLS:
            st.warning(
                f"The packed result has {cells:,} token slots, more than this page builds for download "
                f"({export.MAX_EXPORT_CELLS:,}). Run the snippet below to write it with the library."
            )
        else:
            flat, pad = ctx.flat, s.pad_token_id
            st.markdown(
                "One row per block: `input_ids`, `labels` (-100 where no loss), `loss_mask`, `position_ids`, "
                "`sequence_ids` (the source sample, counted from 0; -1 in padding) and `seq_lengths`."
            )
            left, right, _ = st.columns([1, 1, 3])
            left.download_button(
                "Download JSON lines",
                lambda: export.jsonl_bytes(packing.materialize(layout, flat, pad)),
                "packed.jsonl",
                "application/jsonl",
                on_click="ignore",
            )
            right.download_button(
                "Download Parquet",
                lambda: export.parquet_bytes(packing.materialize(layout, flat, pad)),
                "packed.parquet",
                "application/vnd.apache.parquet",
                on_click="ignore",
            )
    st.subheader("Reproduce with the library")
    code = export.snippet(
        _recipe(ctx.dataset, choice),
        s.max_seq_length,
        s.strategy,
        s.overflow,
        s.pad_token_id,
        s.completion_only,
        ctx.flat is not None,
    )
    st.code(code, language="python")
    st.subheader("Share")
    st.code(state.share_link(st.context.url, st.session_state.to_dict()), language=None, wrap_lines=True)
    st.caption(
        "This link opens the same data and settings on the Result tab (copy it with the button at its right). "
        "The address bar holds the same link, with the open tab."
    )


def _recipe(dataset: Dataset, choice: Choice) -> export.DataRecipe:
    spec = choice.spec or ("",)
    if spec[0] == "upload":
        return export.DataRecipe(upload_name=str(spec[1]))
    if spec[0] == "synthetic":
        return export.DataRecipe(synthetic=(int(spec[1]), str(spec[2]), int(spec[3]), int(spec[4])))
    if spec[0] == "workload":
        # what the user asked for, which may be more than the page handles at once (0 = all)
        requested = int(st.session_state.get("workload_count", spec[2]))
        return export.DataRecipe(workload=(str(spec[1]), requested))
    return export.DataRecipe(samples=dataset.samples)
