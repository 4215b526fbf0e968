"""The packing explorer, in four layers; a module imports only from its own layer and those listed before it.

- ``explorer.core``: what the page knows (sources, parsing, examples, links, practice, export, safety, the model
  of settings and data, runs of the library, what the first start compiles): plain Python, no Streamlit, no threads, no side effects at import.
- ``explorer.views``: figures and tables as plain functions of core values (Plotly, pandas; no Streamlit).
- ``explorer.server``: what one server process shares between sessions (the cache and its byte budget, worker
  processes, the warm-up and the server's lifespan); nothing starts before its explicit start function.
- ``explorer.ui``: the only modules that import Streamlit (the page's plumbing, the sidebar, the tabs).

``app.py`` only lays the page out. ``tests/explorer/test_layers.py`` enforces the order.
"""
