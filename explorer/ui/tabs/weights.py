"""Loss weights: what each document weighs in the loss when a packed batch is averaged per token, per
document, or in between; the arithmetic in words (``packing.weighting``). Every number is the packed batch's:
a document's training targets are its labels that are not -100 in the blocks the Result tab shows."""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from explorer.core.context import Context
from explorer.core.model import grammar_count
from explorer.core.weighting import arithmetic, weight_view
from explorer.server import cache
from explorer.ui.tabs.common import need_plan
from explorer.views import figures
from packing.weighting import LossMode

CHART_MODES: tuple[LossMode, ...] = ("token", "sequence", "sqrt")
"""Objectives whose weights are shares of 1, drawn on one axis (``sequence_sum`` sums to the mean length)."""


def render(ctx: Context) -> None:
    plan = need_plan(ctx, "weights")
    if plan is None:
        return
    assert ctx.source is not None
    st.caption(
        "Packing changes what a model is trained to minimise. A loss averaged over the tokens of a packed batch "
        "weighs each document by its training targets (its labels that are not -100 in the packed blocks: a "
        "document's first token in a block never is one); unpacked training with a mean per sequence weighs every "
        "document the same. The same documents, under each objective:"
    )
    with st.spinner("Counting each document's training targets…", show_time=True):
        view = weight_view(cache.document_targets(ctx.source, ctx.recipe))
    if not view.documents:
        st.info("No document has a training target: there is nothing to weigh.")
        return
    columns = st.columns(3)
    columns[0].metric("Documents", f"{view.documents:,}", help="Documents with at least one training target.")
    columns[1].metric(
        "Training targets", f"{view.total_targets:,}", help="Labels that are not -100, as on the Result tab."
    )
    columns[2].metric(
        "Token-mean spread",
        f"{view.spread:,.0f}×",
        help="How many times the document with the most training targets outweighs the one with the fewest when "
        "the loss is a mean over tokens; under a mean over documents they weigh the same.",
    )
    labels = [
        f"#{i + 1} ({grammar_count(n, 'training target')})"
        for i, n in zip(view.index.tolist(), view.targets.tolist(), strict=True)
    ]
    st.plotly_chart(
        figures.loss_weight_figure(labels, {mode: view.weights[mode].tolist() for mode in CHART_MODES}),
        key="loss_weights",
    )
    st.caption(
        "Documents numbered as in the data (the source sequences of the Result tab), spread from the fewest "
        "training targets to the most. Below, n_d is a document's training targets and a trained token is one."
    )
    for line in arithmetic(view):
        st.text(line)
    table = pd.DataFrame({"document": labels, **{str(mode): view.weights[mode] for mode in view.weights}})
    number: dict[str, Any] = {str(mode): st.column_config.NumberColumn(format="%.4f") for mode in view.weights}
    st.dataframe(table, hide_index=True, column_config=number)
    st.caption(
        "The same weights per token, to train a packed model on the objective you choose: "
        "batch.loss_weights(mode) (summed over a document's tokens, they are the numbers above), collate(rows, "
        "loss_weights=mode), or the sampler's step totals across micro-batches and ranks (docs: loss weighting)."
    )
