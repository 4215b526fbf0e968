"""The training-loop helpers of pairs and groups given what they cannot use: a batch of plain rows, logits of
another shape, type or vocabulary, a mask dtype that is not floating, a batch whose every unit the overflow policy
left out, more ranks than units. Each answer is a typed one-line error or a batch that trains nothing."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import packing
import packing.torch as pt
from packing.errors import SettingError, TokensLost

PAIR = {"prompt": [1, 2, 3], "chosen": [4, 5], "rejected": [6]}
LONG = {"prompt": [1] * 10, "chosen": [2] * 10, "rejected": [3]}


def _one_line(error: BaseException, start: str) -> None:
    assert str(error).startswith(start) and "\n" not in str(error) and len(str(error)) < 200, str(error)


@pytest.mark.parametrize("helper", ["completion_logps", "preference_logps", "attention_mask", "mask_mod", "block_mask"])
@pytest.mark.parametrize("batch", [pt.collate([[1, 2, 3], [4, 5]]), {"input_ids": torch.ones(1, 5, dtype=torch.long)}])
def test_a_batch_without_units_is_refused_by_name(helper: str, batch: dict[str, Any]) -> None:
    call = getattr(pt, helper)
    args = (torch.zeros(1, 5, 8), batch) if helper.endswith("logps") else (batch,)
    with pytest.raises(SettingError) as refused:
        call(*args)
    _one_line(refused.value, "batch: expected a batch of pairs or groups with '")


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 20), min_size=1, max_size=4), st.integers(1, 40), st.booleans())
def test_logits_of_another_shape_or_vocabulary_are_one_line(shape: list[int], vocab: int, shared: bool) -> None:
    batch = pt.collate([PAIR, {"prompt": [7], "completions": [[8], [9, 10]]}], share_prompt=shared)
    rows, tokens = batch["input_ids"].shape
    logits = torch.zeros(*shape, vocab)
    fits = tuple(shape) == (rows, tokens) and vocab > 10
    if fits:
        assert pt.completion_logps(logits, batch).shape == (5,)
        return
    with pytest.raises(SettingError) as refused:
        pt.completion_logps(logits, batch)
    _one_line(refused.value, "logits: expected ")


def test_logits_not_a_tensor_are_refused() -> None:
    batch = pt.collate([PAIR])
    with pytest.raises(
        SettingError, match=r"^logits: expected a torch tensor \(rows, tokens, vocabulary\), got <ndarray>"
    ):
        pt.completion_logps(np.zeros((1, 9, 8)), batch)


@pytest.mark.parametrize("dtype", [torch.int64, torch.bool, "float32", None])
def test_a_mask_dtype_that_is_not_floating_is_refused(dtype: Any) -> None:
    batch = pt.collate([PAIR], share_prompt=True)
    with pytest.raises(SettingError, match=r"^dtype: expected a floating torch dtype"):
        pt.attention_mask(batch, dtype)
    with pytest.raises(SettingError, match=r"^mask_dtype: expected a floating torch dtype"):
        pt.collate([PAIR], share_prompt=True, mask_dtype=dtype)


@pytest.mark.parametrize("overflow", ["truncate", "drop"])
@pytest.mark.parametrize("shared", [False, True])
def test_a_batch_whose_every_unit_is_left_out_is_padding_alone(overflow: str, shared: bool) -> None:
    """As plain rows and a sampler's empty step: one padding token that trains nothing, the unit columns -1."""
    with pytest.warns(TokensLost, match=r"^collate: \d+ of \d+ tokens .* lost") as caught:
        batch = pt.collate([LONG], 12, overflow=overflow, share_prompt=shared)  # 10 + 10 + 10 + 1 tokens duplicated
    units = caught[0].message.stats.units  # type: ignore[union-attr]
    plain = pt.collate([[1] * 20], 12, overflow="drop")
    if shared and overflow == "truncate":  # 10 + 1 + 1 fits: the completions cut to one token each
        assert batch["completion_ids"].tolist() == [[-1] * 10 + [0, 1]]
        assert (units.units_truncated, units.units_dropped) == (1, 0)
        return
    assert (units.units_truncated, units.units_dropped) == (0, 1)
    assert batch["input_ids"].tolist() == plain["input_ids"].tolist() and batch["labels"].tolist() == [[-100]]
    assert batch["unit_ids"].tolist() == batch["completion_ids"].tolist() == [[-1]]
    logits = torch.zeros(1, 1, 8)
    assert pt.completion_logps(logits, batch).shape == (0,)
    chosen, rejected = pt.preference_logps(logits, batch)
    assert chosen.shape == rejected.shape == (0,)


@pytest.mark.parametrize("shared", [False, True])
def test_more_ranks_than_units_each_collate_a_step_of_units(shared: bool) -> None:
    """Fewer units than ranks, and a plain row among them: every rank's step is a batch of units (the rank left
    with the plain row, and the one with an empty step of padding, too), so one training step runs on all."""
    rows = [PAIR, {"prompt": [7], "completions": [[8], [9, 10], [11]]}, [5, 6, 7]]
    data = packing.read_rows(rows)
    seen = []
    for rank in range(4):
        sampler = pt.PackingSampler(data, 32, share_prompt=shared, num_replicas=4, rank=rank, shuffle=False)
        for step in sampler:
            batch = sampler.collate([rows[i] for i in step])
            assert ("attention_mask" in batch) == shared
            logps = pt.completion_logps(torch.zeros(*batch["input_ids"].shape, 16), batch)
            seen.append(len(logps))
    assert sorted(seen) == [0, 0, 2, 3]
