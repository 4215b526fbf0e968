"""Images: a bundled multimodal example (documents with 0–3 images, Qwen2-VL-style mRoPE positions) packed whole
into blocks: which block holds which image, and one block's four position rows beside the 1-D positions a
text-only packing gives. The content is ``explorer.core.multimodal`` and its views; this is its tab."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from explorer.core import multimodal
from explorer.core.context import Context
from explorer.core.model import grammar_count
from explorer.ui.page import guard
from explorer.ui.tabs.common import WHOLE, cells_chart
from explorer.ui.tabs.result import METRIC_WIDTH
from explorer.views import multimodal as views


def render(ctx: Context) -> None:
    st.caption(
        "A vision-language model of the Qwen2-VL family places every token with four position rows: the text "
        "row, then temporal, height and width (mRoPE), where an image's tokens take its grid of heights and "
        "widths. Packed correctly (packing.torch.collate(rows, vision=config)) every row restarts at each "
        "document and no image is ever cut. This example is ten synthetic documents with 0 to 3 images each "
        "(grids [1, h, w], merge size 2), packed whole with first-fit decreasing (ffd)."
    )
    size = st.columns(3)[0].number_input(
        "max_seq_length",
        min_value=multimodal.MIN_MAX_SEQ_LENGTH,
        max_value=multimodal.MAX_MAX_SEQ_LENGTH,
        value=multimodal.DEFAULT_MAX_SEQ_LENGTH,
        step=16,
        key="images_max_seq_length",
        help="Block size of this example. A document longer than a block is cut, never inside an image: a cut "
        "that falls in one moves back to before its vision start token.",
    )
    packed = multimodal.example(int(size))
    _counts(packed)
    cells_chart(views.blocks_figure(packed), key="images_blocks")
    st.dataframe(
        pd.DataFrame(views.block_table_rows(packed)),
        hide_index=True,
        column_config={name: WHOLE for name in ("block", "text tokens", "image tokens", "padding")},
    )
    st.caption("Images are named document·image: 3·2 is the second image of document 3.")
    _block(packed)


def _counts(packed: multimodal.MultimodalPacking) -> None:
    tiles = st.container(horizontal=True, wrap=True, gap="medium")
    tiles.metric("Documents", f"{packed.documents:,}", width=METRIC_WIDTH)
    tiles.metric(
        "Images", f"{packed.images:,}", help=f"{packed.images_kept:,} of them in the blocks.", width=METRIC_WIDTH
    )
    tiles.metric("Blocks", f"{packed.num_blocks:,}", help="packing.plan(lengths, strategy='ffd').", width=METRIC_WIDTH)
    tiles.metric("Padding", f"{packed.padding:,}", help="Tokens of padding at the blocks' ends.", width=METRIC_WIDTH)
    tiles.metric(
        "Tokens cut",
        f"{packed.tokens_cut:,}",
        help="Tokens of documents longer than a block left out by truncation.",
        width=METRIC_WIDTH,
    )
    tiles.metric(
        "Images left out",
        f"{packed.images_left_out:,}",
        help="Images left out whole with the end of a truncated document: never half an image.",
        width=METRIC_WIDTH,
    )


@st.fragment
def _block(packed: multimodal.MultimodalPacking) -> None:
    """The chosen block's position rows: a fragment, so that choosing another block reruns this part only."""
    with guard("Images"):
        st.session_state["images_block"] = min(int(st.session_state.get("images_block", 1)), packed.num_blocks)
        pickers = st.columns(3)
        number = pickers[0].number_input("Block", min_value=1, max_value=packed.num_blocks, step=1, key="images_block")
        block = int(number) - 1
        used = int((packed.kind[block] != multimodal.PADDING).sum())
        last = max(used - multimodal.WINDOW, 0)
        if st.session_state.get("_images_window_of") != (packed.max_seq_length, block):
            st.session_state["_images_window_of"] = (packed.max_seq_length, block)
            st.session_state["images_from"] = multimodal.default_window(packed, block)
        start = pickers[1].number_input(
            "From token",
            min_value=0,
            max_value=last,
            step=8,
            key="images_from",
            help=f"The block's position rows are printed {multimodal.WINDOW} tokens at a time.",
        )
        start = min(int(start), last)
        documents = packed.block_documents[block]
        st.caption(
            f"Block {block + 1} holds {grammar_count(len(documents), 'document')} "
            f"({', '.join(str(d + 1) for d in documents)}), in this order."
        )
        cells_chart(views.block_rows_figure(packed, block, start, start + multimodal.WINDOW), key="images_rows")
        st.caption(
            "Each cell prints its position. The top row is what a text-only packing gives; the four below are "
            "position_ids (4, 1, T): text, temporal, height, width. Image tiles are the dark cells. Where the "
            "chart is too narrow for the numbers, hover or tap a cell."
        )
        left, right = st.columns(2)
        with left:
            st.plotly_chart(views.plain_figure(packed, block), key="images_plain")
        with right:
            st.plotly_chart(views.rope_figure(packed, block), key="images_rope")
        st.caption(
            "Left, what a text-only packing gives: one row of positions counting straight through the block, so "
            "each document continues the one before it and the model sees one long sample. Right, position_ids "
            "of shape (4, 1, T): the text row restarts at every document (dotted lines; transformers isolates the "
            "documents by it), and inside an image (shaded) height and width walk its grid while temporal stays."
        )
