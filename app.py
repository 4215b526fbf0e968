"""The packing explorer: paste or load sequences, choose how to pack them, and see every consequence.

Run with ``streamlit run app.py``. Layout and wiring only; the work lives in ``explorer/``.
"""

from __future__ import annotations

import streamlit as st

from explorer import sidebar, views

st.set_page_config(page_title="packing explorer", page_icon="📦", layout="wide")
sidebar.restore_from_url()
views.keep_widget_state()
choice = sidebar.render()
sidebar.share_in_url()

st.title("Sample packing explorer")
for warning in st.session_state.get("_url_warnings", []):
    st.warning(f"Ignored a link parameter: {warning}")

context = views.build_context(choice)
if context is not None:
    st.caption(f"**Data:** {context.dataset.label}. {context.dataset.note}")

tabs = st.tabs(views.TABS, key="tab", on_change="rerun", bind="query-params")
for tab, name in zip(tabs, views.TABS, strict=True):
    if not tab.open:
        continue
    with tab, views.guard(name):
        if name == "Practice":
            views.render_practice()
        elif context is None:
            st.info("Fix or choose the data in the sidebar to see this tab.")
        elif name == "Result":
            views.render_result(context)
        elif name == "Compare":
            views.render_compare(context)
        elif name == "Sweep":
            views.render_sweep(context)
        elif name == "Attention & positions":
            views.render_attention(context)
        elif name == "Step through":
            views.render_steps(context)
        else:
            views.render_export(context, choice)
