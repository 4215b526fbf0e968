"""The page: the only modules that import Streamlit (its plumbing, the sidebar, the tabs)."""
