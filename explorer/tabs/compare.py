"""Compare: every strategy on the same data, as a table, small charts, a compute estimate and (small inputs)
side-by-side heatmaps."""

from __future__ import annotations

import streamlit as st

import packing
from explorer import cache, figures, tables
from explorer.model import Context, grammar_count
from explorer.safety import escape
from explorer.tabs.common import WHOLE

MAX_MINI_CELLS = 1_024
COLUMNS = {
    "strategy": st.column_config.TextColumn(width=190, pinned=True),  # bfd/1,000 (TRL's default) in full
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
    s = ctx.settings
    assert ctx.source is not None
    rows, costs = cache.compare(ctx.source, s.completion_only, s.max_seq_length, s.overflow)
    bounds = cache.bounds(ctx.source, s.completion_only, s.max_seq_length, s.overflow)
    st.caption(tables.compare_caption(rows, bounds, s.max_seq_length, s.overflow))
    frame = tables.compare_table(rows, costs)
    st.dataframe(tables.compare_display(frame), hide_index=True, column_config=COLUMNS)
    for row in rows:
        if row.refusal:
            st.caption(escape(f"{row.label} did not run: {row.refusal}"))
    charts = cache.compare_figures(ctx.source, s.completion_only, s.max_seq_length, s.overflow)
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
    with st.expander("What each strategy does"):
        st.markdown(
            "\n".join(
                f"- **{info.title}** — `{name}`, {info.complexity}. {info.description}"
                for name, info in packing.STRATEGIES.items()
            )
        )
    whole = [row for row in rows if row.stats is not None and row.contender.window is None]
    _mini_heatmaps(
        ctx,
        [row.contender.strategy for row in whole],
        max((row.stats.num_blocks for row in whole if row.stats is not None), default=0),
    )


def _mini_heatmaps(ctx: Context, strategies: list[str], most_blocks: int) -> None:
    if not strategies or most_blocks * ctx.settings.max_seq_length > MAX_MINI_CELLS:
        st.caption("Side-by-side heatmaps are drawn for small inputs only.")
        return
    assert ctx.source is not None
    st.subheader("Side by side")
    columns = st.columns(2)
    for i, strategy in enumerate(strategies):
        view = cache.window(ctx.source, ctx.settings, strategy, 0, most_blocks)
        tokens = view.batch.input_ids if view.has_tokens else None
        blocks = view.batch.num_blocks
        title = f"{strategy}: {grammar_count(blocks, 'block')}"
        columns[i % 2].plotly_chart(figures.grid_figure(view.sequence_ids, title, tokens), key=f"mini_{strategy}")
