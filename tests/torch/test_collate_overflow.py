"""``collate`` with a length applies the overflow policy sample by sample, as the overflow owner
(:mod:`packing.strategies._overflow`) cuts documents: checked against the rows cut by hand."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("torch")

from packing.errors import SequenceTooLong, SettingError
from packing.torch import collate

_rows = st.lists(st.lists(st.integers(1, 50), min_size=0, max_size=9), min_size=1, max_size=6)


@settings(max_examples=60, deadline=None)
@given(_rows, st.integers(1, 8), st.sampled_from(["truncate", "drop", "error"]))
def test_collate_cuts_each_sample_by_its_policy(rows: list[list[int]], capacity: int, overflow: str) -> None:
    """``truncate`` keeps a sample's first ``capacity`` tokens, ``drop`` leaves an over-long sample out, empty
    samples give nothing, ``error`` refuses an over-long sample naming it; more than ``capacity`` tokens in all are
    refused."""
    over = [i for i, row in enumerate(rows) if len(row) > capacity]
    if overflow == "error" and over:
        with pytest.raises(SequenceTooLong, match=f"sample {over[0]}: expected at most max_seq_length={capacity}"):
            collate(rows, capacity, overflow=overflow)  # type: ignore[arg-type]
        return
    if overflow == "truncate":
        kept = [row[:capacity] for row in rows if row]
    else:
        kept = [row for row in rows if 0 < len(row) <= capacity]
    total = sum(map(len, kept))
    if total > capacity:
        with pytest.raises(SettingError, match="at most max_seq_length"):
            collate(rows, capacity, overflow=overflow)  # type: ignore[arg-type]
        return
    if not kept:
        return
    batch = collate(rows, capacity, overflow=overflow)  # type: ignore[arg-type]
    assert batch["input_ids"].tolist() == [[token for row in kept for token in row]]
    assert batch["position_ids"].tolist() == [[i for row in kept for i in range(len(row))]]
