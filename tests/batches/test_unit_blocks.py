"""Pairs and groups packed: a unit is the packing unit (never split), the overflow policies act on the whole unit
and count what they cut, and the blocks' columns keep every completion from its siblings."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import packing
from packing import SettingError
from packing.batches._packed import PackedBatch, run
from packing.core._pairs_groups import UNIT_COLUMNS
from packing.errors import UnitTooLong
from packing.text import prepare
from tests.helpers.units import completions_of, random_units


def made(batch: PackedBatch) -> PackedBatch:
    """A copy of ``batch`` with its blocks made whole (``input_ids`` and ``loss_mask`` filled at once)."""
    copy = dataclasses.replace(batch)
    copy.input_ids  # noqa: B018 - filled now
    return copy


PAIR = {"prompt": [1, 2, 3], "chosen": [4, 5, 6, 7, 8, 9], "rejected": [10, 11]}


def _expected_visible(batch: Any, block: int) -> np.ndarray:
    """Brute force: which keys each query may see, from the units alone (its own completion or its unit's prompt,
    earlier in its document)."""
    width = batch.max_seq_length
    visible = np.zeros((width, width), dtype=bool)
    unit, completion, document = batch.unit_ids[block], batch.completion_ids[block], batch.document_ids[block]
    for q in range(width):
        for k in range(q + 1):
            if unit[q] < 0 or document[q] != document[k]:
                continue
            visible[q, k] = completion[k] < 0 or completion[k] == completion[q]
    return visible


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.booleans(), st.sampled_from(["bfd", "ffd", "next_fit", "first_fit"]))
def test_units_are_whole_and_completions_never_see_a_sibling(seed: int, share_prompt: bool, strategy: str) -> None:
    rows = random_units(seed, count=8)
    batch = packing.pack(rows, 64, strategy=strategy, share_prompt=share_prompt)
    assert batch.stats.units.units_truncated == batch.stats.units.units_dropped == 0
    seen = set()
    for block in range(batch.num_blocks):
        units = set(batch.unit_ids[block][batch.unit_ids[block] >= 0].tolist())
        assert not units & seen  # a unit in one block only
        seen |= units
        assert (batch.attention_mask(block) == _expected_visible(batch, block)).all()
        labels, prediction = batch.labels[block], batch.prediction_positions[block]
        trained = labels != -100
        assert (prediction[trained] == np.flatnonzero(trained) - 1).all()  # a label's predictor is the token before
        for unit in units:  # every completion after its prompt, at the positions it has alone
            row = rows[unit]
            where = np.flatnonzero(batch.unit_ids[block] == unit)
            for number in np.unique(batch.completion_ids[block][where]):
                if number < 0:
                    continue
                tokens = np.flatnonzero(batch.completion_ids[block] == number)
                prompt_length = len(row["prompt"])
                assert batch.position_ids[block][tokens].tolist() == list(
                    range(prompt_length, prompt_length + len(tokens))
                )
                first = int(tokens[0])
                source = int(batch.prediction_positions[block][first])
                assert batch.input_ids[block][source] == row["prompt"][-1]  # predicted from the prompt's end
    assert seen == set(range(len(rows)))


def test_share_prompt_stores_each_prompt_once_and_counts_it() -> None:
    rows = [{"prompt": [1] * 10, "completions": [[2] * 3] * 4}]
    duplicated = packing.pack(rows, 64)
    shared = packing.pack(rows, 64, share_prompt=True)
    assert duplicated.stats.packed_tokens == 4 * 10 + 12 and shared.stats.packed_tokens == 10 + 12
    assert shared.stats.units.prompt_tokens_shared == 30 and duplicated.stats.units.prompt_tokens_shared == 0
    summary = shared.stats.summary()
    assert (summary["groups"], summary["completions"], summary["pairs"]) == (1, 4, 0)
    assert "groups" not in packing.pack([[1, 2]], 4).stats.summary()  # plain rows: the summary as it was


def test_truncate_keeps_the_prompt_and_cuts_the_completions_to_one_length() -> None:
    batch = packing.pack([PAIR], 12)  # duplicated: 3 + c + 3 + r <= 12: both cut to at most 4 (4 + 2)
    assert batch.input_ids.tolist() == [[1, 2, 3, 4, 5, 6, 7, 1, 2, 3, 10, 11]]
    stats = batch.stats
    assert (stats.tokens_truncated, stats.sequences_truncated, stats.input_tokens) == (2, 1, 14)
    assert (stats.units.units_truncated, stats.units.completions_truncated) == (1, 1)
    shared = packing.pack([PAIR], 7, share_prompt=True)  # 3 + 2 + 2
    assert shared.input_ids.tolist() == [[1, 2, 3, 4, 5, 10, 11]]
    assert shared.stats.units.completions_truncated == 1 and shared.stats.tokens_lost == 4


def test_truncate_drops_a_unit_whose_prompt_leaves_no_room() -> None:
    batch = packing.pack([PAIR, [7, 7]], 6)  # 2 × (3 + 1) > 6: no token of each completion fits
    assert batch.input_ids.tolist() == [[7, 7, 0, 0, 0, 0]]
    assert batch.stats.units.units_dropped == 1 and batch.stats.sequences_dropped == 1
    assert batch.stats.tokens_dropped == 14


def test_drop_and_error_act_on_the_whole_unit() -> None:
    dropped = packing.pack([PAIR, {"prompt": [1], "chosen": [2], "rejected": [3]}], 10, overflow="drop")
    assert dropped.stats.units.units_dropped == 1 and dropped.stats.tokens_dropped == 14
    assert dropped.input_ids.tolist() == [[1, 2, 1, 3, 0, 0, 0, 0, 0, 0]]
    with pytest.raises(UnitTooLong) as refused:
        packing.pack([[1], PAIR], 10, overflow="error")
    assert str(refused.value) == (
        "sample 1: expected a pair of at most max_seq_length=10 tokens (overflow='error'; a pair is never split), "
        "got 14 tokens"
    )


@pytest.mark.parametrize(
    ("options", "name"),
    [
        ({"overflow": "split"}, "overflow"),
        ({"strategy": "split"}, "strategy"),
        ({"strategy": "wrapped"}, "strategy"),
        ({"context_parallel_size": 2}, "context_parallel_size"),
        ({"tensor_parallel_size": 2}, "tensor_parallel_size"),
    ],
)
def test_options_that_would_cut_a_unit_are_refused_by_name(options: dict[str, Any], name: str) -> None:
    with pytest.raises(SettingError) as refused:
        packing.pack([PAIR], 16, **options)
    assert refused.value.name == name
    with pytest.raises(SettingError) as shared:  # refused by the recipe itself with share_prompt
        packing.Recipe(16, share_prompt=True, **options)
    assert shared.value.name == name


def test_a_dataset_read_in_one_layout_packs_in_the_other() -> None:
    samples = packing.read_rows(random_units(3), share_prompt=False)
    direct = packing.pack(random_units(3), 64, share_prompt=True)
    relaid = packing.pack(samples, 64, share_prompt=True)
    assert (direct.input_ids == relaid.input_ids).all() and (direct.position_ids == relaid.position_ids).all()


def test_chunks_and_writers_carry_the_unit_columns() -> None:
    rows = random_units(4, count=10)
    recipe = packing.Recipe(32, share_prompt=True)
    lazy = run(packing.read_rows(rows), recipe, prepare(recipe))
    whole = made(lazy)
    chunks = list(lazy.chunks(tokens=64))
    assert len(chunks) > 1
    joined = np.concatenate([chunk.prediction_positions for chunk in chunks])
    assert (joined == whole.prediction_positions).all()
    table = whole.to_arrow(padding=False)
    assert tuple(table.column_names[-len(UNIT_COLUMNS) :]) == UNIT_COLUMNS
    assert lazy.stats.units.completions == sum(len(completions_of(row)) for row in rows)


def test_a_plan_that_cuts_a_unit_is_refused() -> None:
    samples = packing.read_rows([PAIR])
    with pytest.raises(SettingError, match=r"^plan: expected a plan that keeps every pair and group whole"):
        packing.materialize(packing.plan(samples.lengths, 8), samples)


def test_loss_weights_are_refused_with_units() -> None:
    batch = packing.pack([PAIR], 16)
    with pytest.raises(SettingError, match=r"^loss_weights: expected no value with preference pairs"):
        batch.loss_weights("token")


def test_plain_batches_give_the_unit_columns_too() -> None:
    batch = packing.pack([[1, 2, 3], [4]], 6)
    assert batch.unit_ids.tolist() == batch.sequence_ids.tolist()
    assert batch.document_ids.tolist() == [[0, 0, 0, 1, -1, -1]]
    assert (batch.completion_ids == -1).all()


def test_roles_colour_every_token_of_a_block() -> None:
    """What the explorer colours: the prompt, the chosen, the rejected, a group's completions, plain tokens."""
    samples = packing.read_rows([PAIR, {"prompt": [1], "completions": [[2], [3]]}, [9, 9]], share_prompt=True)
    assert samples.units.roles().tolist() == [0, 0, 0, 1, 1, 1, 1, 1, 1, 2, 2, 0, 3, 3, -1, -1]
