"""Hand-built or edited batches of units: every helper that reads a batch's columns (``completion_logps``,
``preference_logps``, ``attention_mask``, ``mask_mod``, ``block_mask``, ``model_inputs``) reads them through one
checked reader, so a tampered column (ids below -1, a prediction position at or after its own token, a column of
another shape or of floats, ragged lists) gives one ``SettingError`` line naming the column and the first bad
position, never an ``IndexError`` or a ``RuntimeError``; an untouched batch passes every helper."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

import packing.torch as pt  # noqa: E402
from packing.core._pairs_groups import KINDS  # noqa: E402
from packing.errors import SettingError  # noqa: E402
from tests.helpers.units import random_units  # noqa: E402

VOCAB = 96
LENGTH = 40
UNIT = ("unit_ids", "document_ids", "completion_ids", "prediction_positions", "unit_kinds")
MASK = {"input_ids", "document_ids", "completion_ids"}
READS: dict[str, set[str]] = {
    "model_inputs": {"input_ids", "position_ids", "unit_ids", "document_ids", "completion_ids"},
    "completion_logps": {"input_ids", "completion_ids", "prediction_positions"},
    "preference_logps": {"input_ids", "completion_ids", "prediction_positions", "unit_ids", "unit_kinds"},
    "attention_mask": MASK,
    "mask_mod": MASK,
    "block_mask": MASK,
}
"""The columns each helper reads."""


def _helpers(shape: tuple[int, int]) -> dict[str, Callable[[Any], Any]]:
    logits = torch.zeros(*shape, VOCAB, dtype=torch.float64)
    return {
        "model_inputs": lambda batch: pt.model_inputs(batch, "sdpa", dtype=torch.float64),
        "completion_logps": lambda batch: pt.completion_logps(logits, batch),
        "preference_logps": lambda batch: pt.preference_logps(logits, batch),
        "attention_mask": pt.attention_mask,
        "mask_mod": pt.mask_mod,
        "block_mask": pt.block_mask,
    }


def _base(seed: int, fixed: bool, share_prompt: bool) -> dict[str, Any]:
    """A batch of pairs: one padding-free row (``collate``), or rows of ``collate_fixed`` (padding, ids -1)."""
    rows = [row for row in random_units(seed, count=6) if "chosen" in row]
    if fixed:
        batch = pt.collate_fixed(LENGTH, share_prompt=share_prompt)(rows)
    else:
        batch = pt.collate(rows, share_prompt=share_prompt)
    batch.pop("attention_mask", None)
    return batch


@st.composite
def _tampered(draw: Any) -> tuple[dict[str, Any], str, str | None]:
    """A batch, the column tampered with, and the place its error must name (None for a whole column)."""
    batch = _base(draw(st.integers(0, 5)), draw(st.booleans()), draw(st.booleans()))
    rows, tokens = batch["input_ids"].shape
    how = draw(st.sampled_from(["id", "prediction", "kind", "short", "float", "ragged"]))
    if how in ("id", "prediction", "kind"):
        name = {"id": draw(st.sampled_from(["unit_ids", "document_ids", "completion_ids"])),
                "prediction": "prediction_positions", "kind": "unit_kinds"}[how]  # fmt: skip
        row, token = draw(st.integers(0, rows - 1)), draw(st.integers(0, tokens - 1))
        low = st.integers(-(10**6), -2)
        value = {"id": low, "kind": st.one_of(low, st.integers(len(KINDS), 10**6)),
                 "prediction": st.one_of(low, st.integers(token, token + 10**6))}[how]  # fmt: skip
        column = batch[name].clone()
        column[row, token] = draw(value)
        batch[name] = column
        return batch, name, f"at row {row}, token {token}"
    name = draw(st.sampled_from([*UNIT, "position_ids"]))
    if how == "short":
        batch[name] = batch[name][:, : draw(st.integers(0, tokens - 1))]
    elif how == "float":
        batch[name] = batch[name].double()
    else:  # lists whose last row is a token short (one row: a short column)
        values = batch[name].tolist()
        values[-1] = values[-1][:-1]
        batch[name] = values
    return batch, name, None


@settings(max_examples=60, deadline=None)
@given(_tampered())
def test_every_tampered_column_is_one_setting_error(case: tuple[dict[str, Any], str, str | None]) -> None:
    batch, name, place = case
    for helper, run in _helpers(tuple(batch["input_ids"].shape)).items():
        if name not in READS[helper]:
            continue
        with pytest.raises(SettingError) as caught:
            run(batch)
        message = str(caught.value)
        assert "\n" not in message and message.startswith(f"{name}: expected"), (helper, message)
        if place is not None:
            assert place in message, (helper, message)


@pytest.mark.parametrize("fixed", [False, True])
@pytest.mark.parametrize("share_prompt", [False, True])
def test_an_untouched_batch_passes_every_helper(fixed: bool, share_prompt: bool) -> None:
    batch = _base(0, fixed, share_prompt)
    for run in _helpers(tuple(batch["input_ids"].shape)).values():
        run(batch)
    as_lists = {key: value.tolist() for key, value in batch.items()}
    assert torch.equal(pt.attention_mask(as_lists), pt.attention_mask(batch))
