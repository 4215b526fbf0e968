"""Attention & positions: for one block, plain causal vs block-diagonal attention, and position ids."""

from __future__ import annotations

import numpy as np
import streamlit as st

import packing
from explorer.core import runs as compute
from explorer.core.context import Context
from explorer.core.model import grammar_count
from explorer.server import cache
from explorer.ui.page import guard
from explorer.ui.tabs.common import cells_chart, need_plan
from explorer.views import figures

MAX_ATTENTION_DRAW = 4_096
"""Widest block whose attention masks are built and drawn (in tiles above ``figures.MAX_ATTENTION_CELLS``)."""


def render(ctx: Context) -> None:
    layout = need_plan(ctx, "attention")
    if layout is None:
        return
    st.caption(
        "A block holds several documents. A plain causal mask lets each token attend to the earlier documents "
        "of its block too (red); the block-diagonal mask keeps attention inside each document, and position ids "
        "restart at 0 for every document."
    )
    _block(ctx, layout)


@st.fragment
def _block(ctx: Context, layout: packing.PackingPlan) -> None:
    """The chosen block's masks and positions: a fragment, so that choosing another block reruns this part only."""
    with guard("Attention & positions"):
        _draw(ctx, layout)


def _draw(ctx: Context, layout: packing.PackingPlan) -> None:
    assert ctx.source is not None
    s = ctx.recipe
    busiest = int(np.argmax(np.diff(layout.block_starts))) + 1
    st.session_state["attention_block"] = min(int(st.session_state.get("attention_block", busiest)), layout.num_blocks)
    number = st.columns(3)[0].number_input(
        "Block",
        min_value=1,
        max_value=layout.num_blocks,
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
