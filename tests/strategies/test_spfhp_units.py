"""``spfhp``'s ``max_sequences_per_block`` caps the documents of a block, with preference pairs and completion
groups too: a unit is placed as one sequence, which is one document with ``share_prompt=True`` (the cap then holds
on documents: ``seq_lengths``, ``document_ids``), and the cap is refused with units without it (a unit of k
completions is k documents)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import packing
from packing.errors import SettingError

tokens = st.lists(st.integers(1, 50), min_size=1, max_size=5)
units = st.one_of(
    st.builds(lambda p, c, r: {"prompt": p, "chosen": c, "rejected": r}, tokens, tokens, tokens),
    st.builds(lambda p, cs: {"prompt": p, "completions": cs}, tokens, st.lists(tokens, min_size=1, max_size=4)),
    tokens,  # a plain sample among units: one document
)


@settings(max_examples=80, deadline=None)
@given(rows=st.lists(units, min_size=1, max_size=12), cap=st.integers(1, 4), size=st.integers(24, 64))
def test_the_cap_counts_documents(rows: list[Any], cap: int, size: int) -> None:
    has_units = any(isinstance(row, dict) for row in rows)
    if has_units:
        with pytest.raises(SettingError, match=r"^max_sequences_per_block: expected another value with preference"):
            packing.pack(rows, size, strategy="spfhp", max_sequences_per_block=cap)
    batch = packing.pack(rows, size, strategy="spfhp", max_sequences_per_block=cap, share_prompt=True)
    for block in range(batch.num_blocks):
        assert len(batch.seq_lengths(block)) <= cap
        documents = batch.document_ids[block][batch.document_ids[block] >= 0] if has_units else None
        if documents is not None:
            assert len(np.unique(documents)) <= cap
    if has_units:  # every unit whole in one block, each one document
        unit_blocks = [set(np.flatnonzero((batch.unit_ids == unit).any(axis=1)).tolist()) for unit in range(len(rows))]
        assert all(len(found) <= 1 for found in unit_blocks)


def test_the_sampler_refuses_the_cap_with_units_as_pack_does() -> None:
    torch_units = pytest.importorskip("packing.torch")
    data = packing.read_rows([{"prompt": [1], "chosen": [2], "rejected": [3]}])
    with pytest.raises(SettingError, match=r"^max_sequences_per_block: .*with share_prompt=True each unit is one"):
        torch_units.PackingSampler(data, 8, strategy="spfhp", max_sequences_per_block=2)
    sampler = torch_units.PackingSampler(data, 8, strategy="spfhp", max_sequences_per_block=1, share_prompt=True)
    assert [len(step) for step in sampler] == [1]
