"""Practice: a numbered small problem (its number is in the link); the user types the blocks and their loss
masks, and the page checks both against the library."""

from __future__ import annotations

import numpy as np
import streamlit as st

import packing
import packing.strategies
from explorer.core import practice
from explorer.core.context import Context
from explorer.core.parsing import InputError, parse_blocks
from explorer.core.safety import escape


def _new_problem() -> None:
    st.session_state["problem"] = int(np.random.default_rng().integers(1, practice.MAX_PROBLEM + 1))
    st.session_state["practice_answer"] = ""


def _load_problem(problem: practice.Problem) -> None:
    st.session_state.update(practice.sidebar_values(problem))
    st.session_state["tab"] = "Step through"


def render(ctx: Context) -> None:
    left, right = st.columns([1, 3], vertical_alignment="bottom")
    number = left.number_input(
        "Problem", value=1, min_value=1, max_value=practice.MAX_PROBLEM, step=1, key="problem", bind="query-params"
    )
    right.button("New problem", on_click=_new_problem)
    problem = practice.new_problem(int(number))
    info = packing.strategies.STRATEGIES[problem.strategy]
    st.markdown(
        f"Pack these sequences into blocks of **{problem.max_seq_length}** tokens with **{info.title}** — "
        f"`{problem.strategy}`: {info.description} A line `a b | c d` is a prompt/completion pair: loss on the "
        "completion only."
    )
    st.code(problem.text, language=None)
    answer = st.text_area(
        "Your blocks and loss masks, one block per line (padding may be left out)",
        key="practice_answer",
        placeholder="1 2 3 4 -> 1 1 1 1\n5 6 -> 0 1",
        persist_state="session",
    )
    if not st.button("Check", type="primary") and not answer.strip():
        return
    try:
        given = parse_blocks(answer)
    except InputError as error:
        st.error(f"Could not read your answer: {escape(str(error))}")
        return
    expected = problem.expected()
    feedback = practice.check_answer(expected, given, problem.max_seq_length)
    (st.success if feedback.correct else st.error)(feedback.message)
    rows = feedback.rows.assign(
        ids=feedback.rows["ids"].map({True: "✓", False: "✗"}), mask=feedback.rows["mask"].map({True: "✓", False: "✗"})
    )
    if feedback.correct:
        st.dataframe(rows, hide_index=True)
        return
    st.dataframe(rows.drop(columns="expected"), hide_index=True)
    left, right = st.columns(2)
    with left.expander("Show the expected blocks"):
        blocks, masks = expected
        st.code(
            "\n".join(
                f"{' '.join(map(str, b))} -> {' '.join(map(str, m))}" for b, m in zip(blocks, masks, strict=True)
            ),
            language=None,
        )
    right.button(
        "Replay this problem step by step",
        on_click=_load_problem,
        args=(problem,),
        help="Loads the problem into the sidebar and opens the Step through tab.",
    )
