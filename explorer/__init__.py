"""The packing explorer's building blocks: parsing, data, figures, tables, state and export.

Everything here is plain Python (no Streamlit calls), so it can be unit-tested directly, except the page's
plumbing (``explorer.page``), the sidebar (``explorer.sidebar``) and the tabs (``explorer.tabs``); ``app.py``
only lays the page out.
"""
