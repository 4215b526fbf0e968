"""Step through: a slider over ``packing.explain`` steps: the blocks so far, the sequence being placed and why."""

from __future__ import annotations

import numpy as np
import streamlit as st

import packing
import packing.strategies
from explorer.core import runs as compute
from explorer.core.context import Context
from explorer.core.model import grammar_count
from explorer.core.safety import escape
from explorer.server import cache
from explorer.ui.page import guard
from explorer.ui.tabs.common import cells_chart
from explorer.views import figures


def token_range(start: int, length: int) -> str:
    """Which tokens of a sequence a step places, in words that read right for one token and for many.

    >>> token_range(0, 1), token_range(3, 4)
    ('token 0 (1 token)', 'tokens 3–6 (4 tokens)')
    """
    if length == 1:
        return f"token {start} (1 token)"
    return f"tokens {start}–{start + length - 1} ({grammar_count(length, 'token')})"


def render(ctx: Context) -> None:
    s = ctx.recipe
    assert ctx.source is not None
    try:
        with st.spinner(f"Replaying {s.strategy} one sequence at a time…", show_time=True):
            steps = cache.explain(ctx.source, s)
    except ValueError as error:
        st.warning(
            f"Cannot step through this input: {escape(str(error))}. Paste a few sequences, or use a small synthetic "
            "dataset or sample, to replay a strategy."
        )
        return
    if not steps:
        st.info("Nothing to place: every sequence is empty or was dropped.")
        return
    info = packing.strategies.STRATEGIES[s.strategy]
    st.caption(f"{info.title} replayed one sequence at a time: move the slider to see where each one goes, and why.")
    _step(ctx, steps)


@st.fragment
def _step(ctx: Context, steps: list[packing.strategies.Step]) -> None:
    """The chosen step: a fragment, so that moving the slider reruns this part only."""
    with guard("Step through"):
        _draw(ctx, steps)


def _draw(ctx: Context, steps: list[packing.strategies.Step]) -> None:
    s = ctx.recipe
    key = f"step_slider_{s.max_seq_length}_{s.strategy}_{s.overflow}"
    number = 1 if len(steps) == 1 else st.slider("Step", 1, len(steps), key=key, persist_state="session")
    step = steps[number - 1]
    pieces = ", ".join(f"block {p.block + 1} at position {p.position}" for p in step.placements)
    st.markdown(
        f"**Step {number} of {len(steps)}**: sequence {step.sequence + 1}, {token_range(step.start, step.length)} "
        f"→ {pieces}."
    )
    st.info(step.reason)
    if len(step.fill) * s.max_seq_length > compute.MAX_DRAW_CELLS:
        st.plotly_chart(figures.utilization_figure(np.asarray(step.fill) / s.max_seq_length), key="step_fill")
        return
    grid = compute.step_grid(steps, number - 1, s.max_seq_length)
    samples = ctx.samples
    tokens = None if samples is None else compute.step_tokens(steps, number - 1, s.max_seq_length, samples)
    runs = [(p.block, p.position, p.length) for p in step.placements]
    shown = "token ids" if tokens is not None else "sequence numbers"
    title = f"Blocks so far ({shown}; outlined: this step)"
    cells_chart(figures.grid_figure(grid, title, tokens, runs), key="step_grid")
    if number == len(steps):
        st.caption("Last step: these are the blocks of the Result tab (the empty cells become padding).")
