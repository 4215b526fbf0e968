"""Pieces several tabs share: the refusal notice with its way out, and number columns."""

from __future__ import annotations

import streamlit as st

import packing
from explorer.core.context import Context
from explorer.core.safety import escape

WHOLE = st.column_config.NumberColumn(format="localized")


def _use_strategy(name: str) -> None:
    st.session_state["strategy"] = name


def need_plan(ctx: Context, where: str) -> packing.PackingPlan | None:
    """The plan of the chosen strategy, or None after saying (in plain words) why there is none."""
    if ctx.layout is None:
        st.warning(escape(ctx.refusal))
        if ctx.settings.strategy != "bfd":
            st.button("Use best-fit decreasing instead", key=f"use_bfd_{where}", on_click=_use_strategy, args=("bfd",))
        return None
    if ctx.layout.num_blocks == 0:
        st.warning("Nothing to pack: every sequence is empty or was dropped by the overflow policy.")
        return None
    return ctx.layout
