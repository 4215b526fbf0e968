"""Export: downloads of the packed result, a Python snippet that reproduces it, and an honest share link."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import streamlit as st

import packing
from explorer.core import export
from explorer.core.context import Context
from explorer.server import cache
from explorer.ui import sidebar
from explorer.ui.tabs.common import need_plan


def share_link(base_url: str | None, params: dict[str, str | list[str]]) -> str:
    """The page address with a query string that reopens these choices (just the query string without an address).

    >>> share_link("http://localhost:8501", {"max_seq_length": "8", "strategy": "ffd"})
    'http://localhost:8501/?max_seq_length=8&strategy=ffd'
    >>> share_link(None, {"roles_to_train": ["assistant", "tool"]})
    '?roles_to_train=assistant&roles_to_train=tool'
    >>> share_link(None, {})
    '?'
    """
    base = (base_url or "").split("?")[0].split("#")[0]
    if base and not base.endswith("/"):
        base += "/"
    return f"{base}?{urlencode(params, doseq=True)}"


def _documents(tokenizer: Any, plan: packing.PackingPlan, samples: packing.Samples, pad: int) -> None:
    """The round trip: every packed document decoded back to text through the same tokenizer (the one that read
    the rows, resolved once with the data)."""
    st.download_button(
        "Download decoded documents (JSON lines)",
        lambda: export.documents_jsonl(packing.materialize(plan, samples, pad_token_id=pad), tokenizer),
        "documents.jsonl",
        "application/jsonl",
        on_click="ignore",
    )
    st.caption(
        "One line per packed document, in block order: block and sample (numbered from 0 in the file, as "
        "Python counts; the page numbers them from 1), tokens, loss_mask (tokens with "
        "loss mask 1), targets (labels that are not -100), and its "
        "text decoded with the same tokenizer (packing.decode_documents), special tokens included."
    )


def render(ctx: Context) -> None:
    plan = need_plan(ctx, "export")
    s = ctx.recipe
    assert ctx.source is not None
    samples = ctx.samples
    if plan is not None:
        if samples is not None:  # what the plan is filled with (pairs and groups: laid out and fitted)
            samples = cache.packed_samples(ctx.source, s)
        cells = plan.num_blocks * s.max_seq_length
        if samples is None:
            st.info("This data has lengths only (no token ids), so the download is the plan: one row per piece.")
            st.download_button(
                "Download plan (CSV)", lambda: export.plan_csv(plan), "plan.csv", "text/csv", on_click="ignore"
            )
        elif cells > export.MAX_EXPORT_CELLS:
            st.warning(
                f"The packed result has {cells:,} token slots, more than this page builds for download "
                f"({export.MAX_EXPORT_CELLS:,}). Run the snippet below to write it with the library."
            )
        else:
            pad = cache.pad_id(ctx.source, s)
            st.markdown(
                "One row per block: `input_ids`, `labels` (-100 where no loss), `loss_mask`, `position_ids`, "
                "`sequence_ids` (the source sample; -1 in padding) and `seq_lengths`. The files count from 0, as Python "
                "and the library do: block 1 and document 1 of the page are row 0 and `sequence_ids` 0 here."
            )
            buttons = st.container(horizontal=True, wrap=True)  # each button as wide as its label
            buttons.download_button(
                "Download JSON lines",
                lambda: export.jsonl_bytes(packing.materialize(plan, samples, pad_token_id=pad)),
                "packed.jsonl",
                "application/jsonl",
                on_click="ignore",
            )
            buttons.download_button(
                "Download Parquet",
                lambda: export.parquet_bytes(packing.materialize(plan, samples, pad_token_id=pad)),
                "packed.parquet",
                "application/vnd.apache.parquet",
                on_click="ignore",
            )
            if ctx.dataset is not None and ctx.dataset.tokenizer is not None:
                _documents(ctx.dataset.tokenizer, plan, samples, pad)
    st.subheader("Reproduce with the library")
    padded = packing.Recipe.of(s, pad_token_id=cache.pad_id(ctx.source, s)) if samples is not None else s
    code = export.snippet(ctx.source.origin(), padded, samples is not None)  # the pad id the page's blocks have
    st.code(code, language="python")
    st.subheader("Share")
    st.code(share_link(st.context.url, sidebar.share_params(ctx.source)), language=None, wrap_lines=True)
    st.caption(
        f"{ctx.source.link_reproduces()} It opens on the Result tab (copy it with the button at its right); the "
        "address bar holds the same choices and the open tab."
    )
