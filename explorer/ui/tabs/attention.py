"""Attention & positions: for one block, plain causal vs block-diagonal attention, and position ids."""

from __future__ import annotations

import numpy as np
import streamlit as st

import packing
from explorer.core import preference
from explorer.core import runs as compute
from explorer.core.context import Context
from explorer.core.model import grammar_count
from explorer.server import cache
from explorer.ui.page import guard
from explorer.ui.tabs.common import cells_chart, need_plan
from explorer.ui.tabs.result import METRIC_WIDTH
from explorer.views import figures

MAX_ATTENTION_DRAW = 4_096
"""Widest block whose attention masks are built and drawn (in tiles above ``figures.MAX_ATTENTION_CELLS``)."""
MAX_LAYOUT_TOKENS = 2_000_000
"""Most tokens of pairs and groups packed twice (prompt duplicated and shared) for the side-by-side view."""


def render(ctx: Context) -> None:
    plan = need_plan(ctx, "attention")
    if plan is None:
        return
    st.caption(
        "A block holds several documents. A plain causal mask lets each token attend to the earlier documents "
        "of its block too (red); the block-diagonal mask keeps attention inside each document, and position ids "
        "restart at 0 for every document."
    )
    assert ctx.source is not None
    units = cache.has_units(ctx.source, ctx.recipe)
    if units:
        st.caption(
            "Pairs and groups: with a shared prompt a unit is one document whose completions may not see each "
            "other; red then also marks a completion attending to a sibling, which PackedBatch.attention_mask "
            "(right) removes."
        )
    _block(ctx, plan, units)


def _draw_layouts(ctx: Context, number: int) -> None:
    """The same pairs and groups packed with the prompt duplicated and shared: the library's numbers of each, and
    block ``number`` (the one chosen above, 1-based) of each layout's attention mask side by side."""
    assert ctx.source is not None and ctx.samples is not None
    st.subheader("A shared prompt beside the duplicated one")
    tokens = int(ctx.lengths.sum())
    if tokens > MAX_LAYOUT_TOKENS:
        st.info(
            f"The data holds {tokens:,} tokens; the two layouts are packed side by side for up to "
            f"{MAX_LAYOUT_TOKENS:,}. The sidebar's share_prompt packs it either way."
        )
        return
    with st.spinner("Packing the units with the prompt duplicated and shared…", show_time=True):
        both = cache.layouts(ctx.source, ctx.recipe)
    dup, shared = both.duplicated.stats, both.shared.stats
    tiles = st.container(horizontal=True, wrap=True, gap="medium")
    tiles.metric(
        "Tokens, duplicated",
        f"{dup.packed_tokens:,}",
        help="stats.packed_tokens with share_prompt=False.",
        width=METRIC_WIDTH,
    )
    tiles.metric(
        "Tokens, shared",
        f"{shared.packed_tokens:,}",
        help="stats.packed_tokens with share_prompt=True.",
        width=METRIC_WIDTH,
    )
    saved = f"{both.tokens_saved / dup.packed_tokens:.1%}" if dup.packed_tokens else "0%"
    tiles.metric(
        "Tokens saved",
        f"{both.tokens_saved:,}",
        delta=f"-{saved}" if both.tokens_saved else None,
        delta_color="inverse",
        help="The two layouts' packed tokens apart (the shared layout's stats.units.prompt_tokens_shared is "
        f"{shared.units.prompt_tokens_shared if shared.units else 0:,}: each unit's prompt stored once, not once "
        "per completion).",
        width=METRIC_WIDTH,
    )
    tiles.metric(
        "Blocks, duplicated",
        f"{dup.num_blocks:,}",
        help="stats.num_blocks with share_prompt=False.",
        width=METRIC_WIDTH,
    )
    tiles.metric(
        "Blocks, shared", f"{shared.num_blocks:,}", help="stats.num_blocks with share_prompt=True.", width=METRIC_WIDTH
    )
    size = ctx.recipe.max_seq_length
    if size > MAX_ATTENTION_DRAW:
        st.info(f"Attention masks are drawn for blocks of up to {MAX_ATTENTION_DRAW:,} tokens.")
        return
    st.caption(f"Block {number:,} of each layout, the block chosen above.")
    left, right = st.columns(2)
    for column, batch, words, key in (
        (left, both.duplicated, "prompt duplicated (share_prompt=False)", "layouts_duplicated"),
        (right, both.shared, "prompt shared (share_prompt=True)", "layouts_shared"),
    ):
        with column:
            block = int(number) - 1
            if block >= batch.num_blocks:
                st.info(f"This layout has {grammar_count(batch.num_blocks, 'block')}.")
                continue
            roles = preference.token_roles(batch)[block]
            figure = figures.unit_attention_figure(batch.attention_mask(block), roles, f"Block {block + 1}, {words}")
            st.plotly_chart(figure, key=key)
    st.caption(
        "Each row is a query token, each column a key it may attend to, coloured by the key's role (blank: "
        "blocked). Left, every completion is its own document with its own copy of the prompt; right, the prompt "
        "is stored once and each completion attends to it and to itself, never to a sibling: PackedBatch."
        "attention_mask of each layout, the numbers above its PackingStats."
    )


@st.fragment
def _block(ctx: Context, plan: packing.PackingPlan, units: bool) -> None:
    """The chosen block's masks and positions and, for pairs and groups, the same block of both layouts (one
    picker for all): a fragment, so that choosing another block reruns this part only."""
    with guard("Attention & positions"):
        number = _draw(ctx, plan)
        if units:
            _draw_layouts(ctx, number)


def _draw(ctx: Context, plan: packing.PackingPlan) -> int:
    """The chosen block's masks and positions; returns its number (1-based)."""
    assert ctx.source is not None
    s = ctx.recipe
    busiest = int(np.argmax(np.diff(plan.block_starts))) + 1
    st.session_state["attention_block"] = min(int(st.session_state.get("attention_block", busiest)), plan.num_blocks)
    number = st.columns(3)[0].number_input(
        "Block",
        min_value=1,
        max_value=plan.num_blocks,
        step=1,
        key="attention_block",
        persist_state="session",
        help=f"Block {busiest} holds the most documents.",
    )
    with st.spinner(f"Building block {int(number):,}…", show_time=True):
        view = cache.window(ctx.source, s, int(number) - 1, 1)
    lengths = view.batch.seq_lengths(0).tolist()
    columns = st.columns(3)
    columns[0].metric("Documents in the block", f"{len(lengths)}", help=f"seq_lengths = {lengths}")
    drawn = s.max_seq_length <= MAX_ATTENTION_DRAW
    if drawn:
        att = compute.attention_view(view.batch, 0)
        columns[1].metric(
            "Cross-document pairs",
            f"{att.cross_pairs:,}",
            help="Pairs in which a token attends to another document: what a plain causal mask allows and the "
            "block-diagonal mask removes (red on the left below).",
        )
        columns[2].metric(
            "Pairs kept", f"{int(att.document.sum()):,}", help="Pairs the block-diagonal mask keeps (right below)."
        )
    st.caption(f"cu_seqlens (for flash-attention's variable-length kernels) = {view.batch.cu_seqlens(0).tolist()}")
    if drawn:
        causal, document = figures.attention_figures(att.causal, att.document)
        left, right = st.columns(2)
        with left:
            cells_chart(causal, key="attention_causal")
        with right:
            cells_chart(document, key="attention_document")
        st.caption(
            f"Left: what a plain causal mask allows; red marks {grammar_count(att.cross_pairs, 'pair')} in which a "
            "token attends to another document. Right: PackedBatch.attention_mask, the block-diagonal mask."
        )
    else:
        st.info(
            f"Attention masks are built and drawn for blocks of up to {MAX_ATTENTION_DRAW:,} tokens "
            f"(a {s.max_seq_length:,}-token block has {s.max_seq_length**2:,} pairs)."
        )
    plain, restart = compute.positions(view.batch, 0)
    cells_chart(figures.positions_figure(plain, restart, view.sequence_ids[0]), key="positions")
    st.caption(
        "Without restarts, the second document's first token sits at position "
        "len(first document): the model sees it as a continuation. With restarts every document starts at 0."
    )
    return int(number)
