"""Hypothesis strategies for rows of every token form, shared by the streaming and the PyTorch tests."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st


def rows(max_tokens: int, min_size: int = 0, max_size: int = 40) -> st.SearchStrategy[list[Any]]:
    """Lists of rows: token lists, prompt/completion pairs, and ``input_ids`` with a loss mask of their length."""
    token_lists = st.lists(st.integers(0, 1000), min_size=0, max_size=max_tokens)
    masked = token_lists.flatmap(
        lambda ids: st.fixed_dictionaries(
            {"input_ids": st.just(ids), "loss_mask": st.lists(st.integers(0, 1), min_size=len(ids), max_size=len(ids))}
        )
    )
    pairs = st.fixed_dictionaries({"prompt": token_lists, "completion": token_lists})
    return st.lists(st.one_of(token_lists, pairs, masked), min_size=min_size, max_size=max_size)
