"""Pieces several tabs share: the refusal notice with its way out, and number columns."""

from __future__ import annotations

import html
from typing import Any

import numpy as np
import streamlit as st

import packing
from explorer.core.context import Context
from explorer.core.safety import escape

WHOLE = st.column_config.NumberColumn(format="localized")
CHARACTER_EM = 0.5
"""Width of one character of cell text in font sizes (measured in Chromium: "<|i…" is 19.3 px at 10 px)."""
DEFAULT_FONT = 12
"""Plotly's font size where a trace sets none."""
AXIS_PX = 90
"""Pixels a chart gives its y-axis labels ("Block 12") and margins."""


def cell_text_width(fig: Any) -> int:
    """Narrowest chart (px) whose heatmap cells hold their printed text: columns × (longest text + a margin),
    plus the axis; 0 when no heatmap prints text. O(cells)."""
    needed = 0.0
    for trace in fig.data:
        if getattr(trace, "type", "") != "heatmap" or trace.text is None or trace.z is None:
            continue
        texts = np.asarray(trace.text, dtype=object).ravel()
        longest = max((len(html.unescape(str(t))) for t in texts), default=0)  # "&lt;" prints one character
        columns = np.asarray(trace.z).shape[-1]
        font = trace.textfont.size or DEFAULT_FONT
        needed = max(needed, columns * (longest * font * CHARACTER_EM + 3) + AXIS_PX)
    return int(-(-needed // 100) * 100)


def cells_chart(fig: Any, key: str) -> None:
    """``st.plotly_chart``, whose cell text is hidden (hover still shows it) wherever the chart is narrower than
    the text needs: a container query on the chart's own width, so a phone never sees labels spill into their
    neighbours and a wide screen keeps them."""
    needed = cell_text_width(fig)
    if not needed:
        st.plotly_chart(fig, key=key)
        return
    where = f"[class*='st-key-cells{needed}_']"  # this chart's container, named after the width it needs
    st.html(
        f"<style>{where} {{container-type: inline-size;}} @container (max-width: {needed}px) "
        f"{{{where} .heatmaplayer text {{display: none;}}}}</style>"
    )
    with st.container(key=f"cells{needed}_{key}"):
        st.plotly_chart(fig, key=key)


def _use_strategy(name: str) -> None:
    st.session_state["strategy"] = name


def need_plan(ctx: Context, where: str) -> packing.PackingPlan | None:
    """The plan of the chosen strategy, or None after saying (in plain words) why there is none."""
    if ctx.plan is None:
        st.warning(escape(ctx.refusal))
        if ctx.recipe.strategy != "bfd":
            st.button("Use best-fit decreasing instead", key=f"use_bfd_{where}", on_click=_use_strategy, args=("bfd",))
        return None
    if ctx.plan.num_blocks == 0:
        st.warning("Nothing to pack: every sequence is empty or was dropped by the overflow policy.")
        return None
    return ctx.plan
