"""The packing explorer's building blocks: parsing, data, figures, tables, state and export.

Everything here is plain Python (no Streamlit calls), so it can be unit-tested directly, except the page's
plumbing (``explorer.page``), the sidebar (``explorer.sidebar``) and the tabs (``explorer.tabs``); ``app.py``
only lays the page out.
"""

import os

# The server runs with the Hugging Face hub off: a tokenizer name never downloads anything (set before any
# import of transformers or huggingface_hub, which read these once).
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
