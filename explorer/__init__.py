"""The packing explorer's building blocks: parsing, data, figures, tables, state and export.

Everything here is plain Python (no Streamlit calls) except ``explorer.cache`` and
``explorer.views``, so it can be unit-tested directly; ``app.py`` only lays the page out.
"""
