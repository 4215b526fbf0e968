"""Loss weights: what each document weighs in the loss when a packed batch is averaged per token, per
document, or in between; the arithmetic in words (``packing.weighting``)."""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from explorer.core.context import Context
from explorer.core.weighting import arithmetic, trained_per_document, weight_view
from explorer.server import cache
from explorer.views import figures
from packing.weighting import LossMode

CHART_MODES: tuple[LossMode, ...] = ("token", "sequence", "sqrt")
"""Objectives whose weights are shares of 1, drawn on one axis (``sequence_sum`` sums to the mean length)."""


def render(ctx: Context) -> None:
    assert ctx.source is not None
    s = ctx.recipe
    st.caption(
        "Packing changes what a model is trained to minimise. A loss averaged over the tokens of a packed batch "
        "weighs each document by its trained tokens; unpacked training with a mean per sequence weighs every "
        "document the same. The same documents, under each objective:"
    )
    with st.spinner("Counting each document's trained tokens…", show_time=True):
        data = cache.dataset(ctx.source, s)
        view = weight_view(trained_per_document(data.lengths, data.samples, s.max_seq_length))
    if not view.documents:
        st.info("No document has a trained token: there is nothing to weigh.")
        return
    columns = st.columns(3)
    columns[0].metric("Documents", f"{view.documents:,}", help="Documents with at least one trained token.")
    columns[1].metric("Trained tokens", f"{view.tokens:,}")
    columns[2].metric(
        "Token-mean spread",
        f"{view.spread:,.0f}×",
        help="How many times the document with the most trained tokens outweighs the one with the fewest when "
        "the loss is a mean over tokens; under a mean over documents they weigh the same.",
    )
    labels = [f"#{i + 1} ({n:,} tokens)" for i, n in zip(view.index.tolist(), view.trained.tolist(), strict=True)]
    st.plotly_chart(
        figures.loss_weight_figure(labels, {mode: view.weights[mode].tolist() for mode in CHART_MODES}),
        key="loss_weights",
    )
    st.caption("Documents numbered as in the data, spread from the fewest trained tokens to the most.")
    for line in arithmetic(view):
        st.text(line)
    table = pd.DataFrame({"document": labels, **{str(mode): view.weights[mode] for mode in view.weights}})
    number: dict[str, Any] = {str(mode): st.column_config.NumberColumn(format="%.4f") for mode in view.weights}
    st.dataframe(table, hide_index=True, column_config=number)
    st.caption(
        "To train a packed model on the objective you choose: batch.loss_weights(mode), collate(rows, "
        "loss_weights=mode), or the sampler's step totals across micro-batches and ranks (docs: loss weighting)."
    )
