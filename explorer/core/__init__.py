"""What the page knows, in plain Python: no Streamlit, no threads, no side effects at import."""
