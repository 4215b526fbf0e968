"""The packing explorer: paste or load sequences, choose how to pack them, and see every consequence.

Run with ``streamlit run app.py``. Layout and wiring only; the work lives in ``explorer/``.

The file is read three ways:
- ``streamlit run app.py`` imports it (as ``app``) and finds ``app``, the server (``st.App``), whose lifespan
  loads the page's modules and kernels as it starts (``explorer.server.warmup``, ``explorer.ui.page.preload``);
- the server runs it as ``__main__`` for every visit: ``main`` draws the page;
- the search workers (``explorer.server.workers``) start with ``spawn``, which imports it as ``__mp_main__``: nothing
  runs, and the imports inside ``main`` keep them from loading the page's modules.
"""

from __future__ import annotations

from explorer.server.warmup import offline

offline()  # before anything loads transformers, in the server and in every worker


def main() -> None:
    """One run of the page: the sidebar, the data's headline and the open tab."""
    import streamlit as st

    from explorer.core.safety import escape
    from explorer.ui import page, sidebar
    from explorer.ui.tabs import TAB_STYLE, TABS, TITLES

    st.set_page_config(page_title="packing explorer", page_icon="📦", layout="wide")
    page.warm_up()
    sidebar.check_link(TITLES)
    source, recipe, problem = sidebar.render()

    st.title("Sample packing explorer")
    for warning in st.session_state.get("_link_warnings", []):
        st.warning(f"Ignored a link parameter: {escape(warning)}")
    if page.limits_note(recipe):
        st.info(page.limits_note(recipe))

    context = page.build_context(source, recipe, problem)
    if context.dataset is not None:
        st.caption(f"**Data:** {escape(context.dataset.label)}. {context.dataset.note}")
    if context.problem:
        (st.info if source is None else st.error)(escape(context.problem))

    st.html(TAB_STYLE)  # the tab bar wraps onto a second line on narrow screens: no tab hidden behind a scroller
    for tab, spec in zip(st.tabs(TITLES, key="tab", on_change="rerun", bind="query-params"), TABS, strict=True):
        if not tab.open:
            continue
        with tab, page.guard(spec.title):
            if spec.needs_data and context.problem:
                st.info("Fix or choose the data and settings in the sidebar to see this tab.")
            else:
                spec.render(context)


if __name__ == "__main__":
    main()
elif __name__ != "__mp_main__":  # imported by `streamlit run` (under whatever name the file has)
    import streamlit as st

    from explorer.server.warmup import warming

    def _preload() -> None:
        from explorer.ui.page import preload

        preload()

    LIFESPAN = warming(_preload)
    app = st.App(__file__, lifespan=LIFESPAN)
