"""Figures and tables as plain functions of core values (Plotly and pandas; no Streamlit)."""
