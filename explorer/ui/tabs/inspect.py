"""Inspect: audit a packed file from any framework (``packing.audit``): its layout, counts and findings, and its
blocks with the findings marked on their cells. The content is ``explorer.core.audit`` and its views; this is its tab."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from explorer.core.audit import default_blocks
from explorer.core.context import Context
from explorer.core.model import MAX_UPLOAD_MB
from explorer.core.parsing import InputError
from explorer.core.safety import escape
from explorer.core.sources import Upload
from explorer.server import cache
from explorer.ui.tabs.common import cells_chart
from explorer.views import figures, tables
from packing.layouts import LAYOUT_TITLES
from packing.reading._files import PACKED_FORMATS, extensions, listed

MAX_SHOWN_BLOCKS = 16


def render(ctx: Context) -> None:
    st.caption(
        f"Upload a packed file ({listed(PACKED_FORMATS)}; {'; '.join(LAYOUT_TITLES.values())}) to check it: "
        "documents that attend to or predict each other, trained padding, positions that do not restart."
    )
    file = st.file_uploader(
        "Packed file", type=extensions(PACKED_FORMATS), key="inspect_file", help=f"Up to {MAX_UPLOAD_MB} MB."
    )
    if file is None:
        st.info("Upload a packed file to audit it (the Export tab writes one).")
        return
    upload = Upload.of(file.name, file.getvalue())
    try:
        with st.spinner(f"Auditing {escape(upload.name[:60])} (in a worker process)…", show_time=True):
            report = cache.audit(upload)
    except InputError as error:
        st.error(escape(f"Could not audit the file: {error}"))
        return
    summary = pd.DataFrame(tables.audit_summary_rows(report), columns=["", "value"])
    st.dataframe(summary, hide_index=True)
    for line in report.describe():
        if not line.startswith("- "):  # each finding is a row of the table below, its blocks numbered from 1
            st.text(line)
    findings = tables.audit_findings_rows(report)
    if findings:
        st.dataframe(pd.DataFrame(findings), hide_index=True)
    blocks = default_blocks(report, MAX_SHOWN_BLOCKS)
    if blocks:
        cells_chart(figures.inspect_figure(report, blocks), key="inspect")
