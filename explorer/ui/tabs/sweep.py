"""Sweep: efficiency, tokens lost and blocks against max_seq_length, one line per strategy."""

from __future__ import annotations

from typing import Any

import streamlit as st

import packing
import packing.core
import packing.strategies
from explorer.core.context import Context
from explorer.core.formatting import percent
from explorer.core.model import MAX_PIECES, plan_problem
from explorer.core.parsing import InputError, parse_ids
from explorer.core.runs import PAGE_TIME_LIMIT
from explorer.core.safety import escape
from explorer.server import cache
from explorer.ui.tabs.common import WHOLE
from explorer.views import tables
from packing.core._validation import MAX_SEQ_LENGTH

MAX_SWEEP_SIZES = 16


def _default_sizes(size: int) -> str:
    values = sorted({max(1, round(size * f)) for f in (0.25, 0.5, 0.75, 1, 1.5, 2, 4)})
    return ", ".join(str(v) for v in values if v <= MAX_SEQ_LENGTH)


def best_setting(rows: list[dict[str, Any]]) -> str:
    """The sentence naming the best efficiency among settings that lose no token (or the least loss).

    >>> best_setting([{"max_seq_length": 8, "strategy": "bfd", "efficiency": 1.0, "tokens lost": 5, "lost share": 0.5},
    ...               {"max_seq_length": 16, "strategy": "bfd", "efficiency": 0.9, "tokens lost": 0, "lost share": 0.0}])
    'Best without losing a token: bfd at max_seq_length 16 (90.00% efficiency).'
    """
    ran = [r for r in rows if r["efficiency"] is not None]
    if not ran:
        return ""
    whole = [r for r in ran if r["tokens lost"] == 0]
    if whole:
        best = max(whole, key=lambda r: (r["efficiency"], -r["max_seq_length"]))
        sentence = (
            f"Best without losing a token: {best['strategy']} at max_seq_length {best['max_seq_length']:,} "
            f"({percent(best['efficiency'])} efficiency)."
        )
        kept = [r for r in whole if not packing.strategies.STRATEGIES[r["strategy"]].splits_sequences]
        if packing.strategies.STRATEGIES[best["strategy"]].splits_sequences and kept:
            other = max(kept, key=lambda r: (r["efficiency"], -r["max_seq_length"]))
            sentence += (
                f" Keeping every sequence whole: {other['strategy']} at max_seq_length "
                f"{other['max_seq_length']:,} ({percent(other['efficiency'])})."
            )
        return sentence
    best = min(ran, key=lambda r: (r["lost share"], -r["efficiency"]))
    return (
        f"Every setting here loses tokens; the least is {best['strategy']} at max_seq_length "
        f"{best['max_seq_length']:,} ({best['lost share']:.1%} of the tokens lost, {percent(best['efficiency'])} "
        "efficiency). Try larger values, or overflow 'split'."
    )


def render(ctx: Context) -> None:
    s = ctx.recipe
    assert ctx.source is not None
    st.caption(
        f"How efficiency, tokens lost and the number of blocks change with max_seq_length, for every strategy "
        f"(overflow '{s.overflow}'). Efficiency = real tokens / (blocks × max_seq_length); it counts only the tokens "
        "that were kept, so read it next to the tokens lost."
    )
    default_strategies = [n for n, strategy in packing.strategies.STRATEGIES.items() if not strategy.is_search]
    st.session_state.setdefault("sweep_strategies", default_strategies)
    sizes_key = f"sweep_sizes_{s.max_seq_length}"
    st.session_state.setdefault(sizes_key, _default_sizes(s.max_seq_length))
    names = st.multiselect(
        "Strategies", list(packing.strategies.STRATEGIES), key="sweep_strategies", persist_state="session"
    )
    text = st.text_input("max_seq_length values", key=sizes_key, persist_state="session")
    try:
        sizes = sorted(set(parse_ids(text, "max_seq_length values")))
    except InputError as error:
        st.error(escape(str(error)))
        return
    too_big = [v for v in sizes if v > MAX_SEQ_LENGTH]
    sizes = [v for v in sizes if 1 <= v <= MAX_SEQ_LENGTH]
    if too_big:
        st.warning(f"Left out values above the library's limit of {MAX_SEQ_LENGTH:,} tokens.")
    if not sizes or not names:
        st.info("Choose at least one strategy and one max_seq_length.")
        return
    if len(sizes) > MAX_SWEEP_SIZES:
        st.warning(f"Using the first {MAX_SWEEP_SIZES} of {len(sizes)} values.")
        sizes = sizes[:MAX_SWEEP_SIZES]
    expanding = [v for v in sizes if any(plan_problem(ctx.lengths, v, n, s.overflow) for n in names)]
    if expanding:
        st.warning(
            f"Left out max_seq_length {', '.join(f'{v:,}' for v in expanding[:4])}: the data would be cut into more "
            f"than {MAX_PIECES:,} pieces."
        )
        sizes = [v for v in sizes if v not in expanding]
    if not sizes:
        return
    searches = [n for n in names if packing.strategies.STRATEGIES[n].is_search]
    searching = f"; {', '.join(searches)} searches up to {PAGE_TIME_LIMIT} s at each size" if searches else ""
    with st.spinner(
        f"Planning with {len(names)} strategies at {len(sizes)} sizes{searching} (in a worker process)…", show_time=True
    ):
        rows = cache.sweep(ctx.source, s, tuple(sizes), tuple(names))
    best = best_setting(rows)
    if best:
        st.info(best)
    st.plotly_chart(cache.sweep_figure(ctx.source, s, tuple(sizes), tuple(names)), key="sweep")
    for note in sorted({r["note"] for r in rows if r["note"]}):
        st.caption(f"Not shown: {escape(note)}")
    st.dataframe(
        tables.sweep_display(rows),
        hide_index=True,
        column_config={
            "max_seq_length": WHOLE,
            "blocks": WHOLE,
            "efficiency (%)": st.column_config.NumberColumn(format="%.2f%%"),
            "tokens lost": WHOLE,
            "tokens lost (%)": st.column_config.NumberColumn(format="%.2f%%"),
        },
    )
