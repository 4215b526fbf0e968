"""Compare: every strategy on the same data, as a table, small charts, a compute estimate and (small inputs)
side-by-side heatmaps."""

from __future__ import annotations

import streamlit as st

import packing
import packing.strategies
from explorer.core import runs as compute
from explorer.core.context import Context
from explorer.core.model import grammar_count
from explorer.core.safety import escape
from explorer.server import cache
from explorer.ui.tabs.common import WHOLE, cells_chart
from explorer.views import figures, tables
from packing.comparison import Row

MAX_MINI_CELLS = 1_024
COLUMNS = {
    "strategy": st.column_config.TextColumn(width=170, pinned=True),  # bfd/1,000 (TRL's default) in full
    "blocks": WHOLE,
    "above the bound": st.column_config.NumberColumn(
        format="localized",
        help="Blocks more than the lower bound that applies: tokens / max_seq_length for strategies that cut "
        "sequences; for those that keep them whole, Martello–Toth L2 or the optimum's proven bound, if higher. "
        "0 means the strategy is optimal here.",
    ),
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
        help="Planning time on this machine (one run, compiled code already loaded); differences under a few "
        "milliseconds are noise.",
    ),
    "token slots": st.column_config.NumberColumn(format="localized", help="blocks × max_seq_length."),
    "attention (masked)": st.column_config.NumberColumn(
        format="compact", help="Sum of squared document lengths: attention kept within documents."
    ),
    "attention (full)": st.column_config.NumberColumn(
        format="compact", help="blocks × max_seq_length²: every token attends across its whole block."
    ),
}


def render(ctx: Context) -> None:
    s = ctx.recipe
    assert ctx.source is not None
    running = (
        f"Running every strategy on {grammar_count(ctx.dataset.sequences if ctx.dataset else 0, 'sequence')} "
        f"(blocks of {s.max_seq_length:,}); the proven optimum searches for up to {compute.PAGE_TIME_LIMIT} s…"
    )
    with st.spinner(running, show_time=True):
        rows, costs = cache.compare(ctx.source, s)
        bounds = cache.bounds(ctx.source, s)
    st.caption(tables.compare_caption(rows, bounds, s.max_seq_length, s.overflow))
    _optimum(ctx, rows)
    frame = tables.compare_table(rows, costs)
    plans, compute_cost = tables.compare_parts(frame)
    st.dataframe(plans, hide_index=True, column_config=COLUMNS)
    for row in rows:
        if row.refusal:
            st.caption(escape(f"{row.label} did not run: {row.refusal}"))
    with st.spinner("Drawing the comparison…", show_time=True):
        charts = cache.compare_figures(ctx.source, s)
    if any(row.label == figures.BASELINE for row in rows if row.stats is not None):
        st.caption(
            "'none' is the no-packing baseline (one block per sequence). When it is far above the others its bar "
            "runs off the scale, with its value printed, so the strategies stay comparable."
        )
    for i in range(0, len(charts), 2):
        for column, fig, j in zip(st.columns(2), charts[i : i + 2], range(i, i + 2), strict=False):
            column.plotly_chart(fig, key=f"compare_{j}")
    st.markdown(
        "**Compute estimate.** *Token slots* = blocks × max_seq_length: what every layer processes. "
        "*Attention (masked)* = sum of squared document lengths (each token attends within its document); "
        "*attention (full)* = blocks × max_seq_length² (every token attends across the whole block). "
        "Large numbers are abbreviated: K = thousand, M = million, B = billion."
    )
    st.dataframe(compute_cost, hide_index=True, column_config=COLUMNS)
    with st.expander("What each strategy does"):
        st.markdown(
            "\n".join(
                f"- **{info.title}** — `{name}`, {info.complexity}. {info.description}"
                for name, info in packing.strategies.STRATEGIES.items()
            )
        )
    whole = [row for row in rows if row.stats is not None and row.contender.window is None]
    if cache.has_units(ctx.source, s):  # pairs and groups are packed only by the strategies that keep them whole
        st.caption(
            "Pairs and groups: the table plans each unit's length in the chosen layout; the library packs units "
            "only with the strategies that keep every unit whole, drawn below."
        )
        whole = [row for row in whole if not packing.strategies.STRATEGIES[row.contender.strategy].splits_sequences]
    _mini_heatmaps(
        ctx,
        [row.contender.strategy for row in whole],
        max((row.stats.num_blocks for row in whole if row.stats is not None), default=0),
    )


def _search_longer(key: str) -> None:
    st.session_state[key] = True


def _optimum(ctx: Context, rows: list[Row]) -> None:
    """When the proven optimum's search ran out of time: its blocks, the proven bound and the gap, and a longer
    search (up to ``MAX_TIME_LIMIT`` seconds, in the long lane's worker) on request."""
    row = next((r for r in rows if r.contender.strategy == "optimal" and r.contender.window is None), None)
    if row is None or row.stats is None or not row.gap:
        return
    s = ctx.recipe
    st.info(tables.optimum_note(row, compute.PAGE_TIME_LIMIT))
    key = f"longer_search_{s.max_seq_length}_{s.overflow}"
    if not st.session_state.get(key):
        st.button(
            f"Search up to {compute.MAX_TIME_LIMIT} s",
            key=f"{key}_button",
            on_click=_search_longer,
            args=(key,),
            help="Runs the optimum's search again with a longer time limit, in a worker process of its own; "
            "it stops when you leave the page.",
        )
        return
    assert ctx.source is not None
    longer_recipe = packing.Recipe.of(compute.with_strategy(s, "optimal"), time_limit=compute.MAX_TIME_LIMIT)
    with st.spinner(
        f"Searching for the optimum for up to {compute.MAX_TIME_LIMIT} s (in a worker process)…", show_time=True
    ):
        longer = cache.plan(ctx.source, longer_recipe)
    st.success(tables.optimum_note(longer, compute.MAX_TIME_LIMIT))


def _mini_heatmaps(ctx: Context, strategies: list[str], most_blocks: int) -> None:
    if not strategies or most_blocks * ctx.recipe.max_seq_length > MAX_MINI_CELLS:
        st.caption("Side-by-side heatmaps are drawn for small inputs only.")
        return
    assert ctx.source is not None
    st.subheader("Side by side")
    columns = st.columns(2)
    for i, strategy in enumerate(strategies):
        view = cache.window(ctx.source, compute.with_strategy(ctx.recipe, strategy), 0, most_blocks)
        tokens = view.batch.input_ids if view.has_tokens else None
        blocks = view.batch.num_blocks
        title = f"{strategy}: {grammar_count(blocks, 'block')}"
        with columns[i % 2]:
            cells_chart(figures.grid_figure(view.sequence_ids, title, tokens), key=f"mini_{strategy}")
