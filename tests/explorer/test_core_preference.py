"""Pairs and groups in the explorer's core and views: the plan is the library's (``pack``'s blocks and statistics),
every token's role is what its row says it is, and the two layouts' numbers are the library's."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import packing
from explorer.core import preference
from explorer.core.runs import window
from explorer.views import figures

TOKEN = st.integers(1, 50)
PART = st.lists(TOKEN, min_size=1, max_size=5)
PAIR = st.fixed_dictionaries({"prompt": PART, "chosen": PART, "rejected": PART})
GROUP = st.fixed_dictionaries({"prompt": PART, "completions": st.lists(PART, min_size=1, max_size=4)})
ROWS = st.lists(st.one_of(PAIR, GROUP, PART), min_size=1, max_size=8).filter(
    lambda rows: any(isinstance(row, dict) for row in rows)  # at least one unit: plain rows alone have no units
)


def _expected_roles(rows: list[Any]) -> dict[int, str]:
    """The role of every completion number, from the rows alone: completions numbered in input order, unit by
    unit (plain rows have none), a pair's first the chosen, its second the rejected, a group's k-th completion k."""
    roles: dict[int, str] = {}
    for row in rows:
        if isinstance(row, dict) and "chosen" in row:
            roles[len(roles)] = "chosen"
            roles[len(roles)] = "rejected"
        elif isinstance(row, dict):
            for k in range(1, len(row["completions"]) + 1):
                roles[len(roles)] = f"completion {k}"
    return roles


@settings(max_examples=60, deadline=None)
@given(rows=ROWS, share=st.booleans(), strategy=st.sampled_from(["bfd", "next_fit", "ffd"]))
def test_every_tokens_role_is_what_its_row_says(rows: list[Any], share: bool, strategy: str) -> None:
    batch = packing.pack(rows, 64, strategy=strategy, share_prompt=share)
    roles = preference.token_roles(batch)
    names = preference.role_names(roles)
    by_completion = _expected_roles(rows)
    for (block, column), code in np.ndenumerate(roles):
        unit, completion = int(batch.unit_ids[block, column]), int(batch.completion_ids[block, column])
        if unit < 0:
            assert names[code] == "padding"
        elif completion >= 0:
            assert names[code] == by_completion[completion]
        else:
            row = rows[unit]
            assert names[code] == ("prompt" if isinstance(row, dict) else "plain sequence")


def test_the_plan_of_units_is_packs() -> None:
    rows = [
        {"prompt": [1, 2, 3], "chosen": [4, 5, 6, 7, 8, 9], "rejected": [10]},
        [11, 12],
        {"prompt": [13], "completions": [[14], [15, 16]]},
    ]
    samples = packing.read_rows(rows)
    for share in (False, True):
        recipe = packing.Recipe(8, share_prompt=share)
        run = preference.run_units(samples, recipe)
        packed = packing.pack(rows, recipe=recipe)
        assert run.row.stats == packed.stats and run.row.stats.units is not None
        assert run.row.stats.tokens_truncated == packed.stats.tokens_truncated > 0  # the chosen was cut
        assert run.row.plan is not None and run.samples is not None
        shown = window(run.row.plan, run.samples, 0, run.row.plan.num_blocks, 0).batch
        assert np.array_equal(shown.input_ids, packed.input_ids)
        assert np.array_equal(shown.completion_ids, packed.completion_ids)
        assert all(np.array_equal(shown.attention_mask(b), packed.attention_mask(b)) for b in range(packed.num_blocks))


def test_a_recipe_that_cuts_units_is_the_librarys_refusal() -> None:
    run = preference.run_units(
        packing.read_rows([{"prompt": [1], "chosen": [2], "rejected": [3]}]), packing.Recipe(4, overflow="split")
    )
    assert run.row.plan is None and run.samples is None and isinstance(run.row.error, packing.SettingError)
    assert run.row.refusal.startswith("overflow: expected another value with preference pairs")


def test_both_layouts_are_packs_and_the_saving_its_statistics() -> None:
    rows = [
        {"prompt": [1] * 30, "completions": [[2] * 10] * 4},
        {"prompt": [3] * 8, "chosen": [4] * 5, "rejected": [5] * 9},
    ]
    recipe = packing.Recipe(160, strategy="ffd")
    both = preference.both_layouts(packing.read_rows(rows), recipe)
    for share, batch in ((False, both.duplicated), (True, both.shared)):
        packed = packing.pack(rows, recipe=packing.Recipe.of(recipe, share_prompt=share))
        assert batch.stats == packed.stats and np.array_equal(batch.input_ids, packed.input_ids)
    assert both.tokens_saved == both.shared.stats.units.prompt_tokens_shared == 3 * 30 + 8
    assert both.blocks_saved == both.duplicated.stats.num_blocks - both.shared.stats.num_blocks == 1


def test_the_block_figure_colours_each_token_by_its_role() -> None:
    rows = [{"prompt": [1, 2], "chosen": [3], "rejected": [4, 5]}, {"prompt": [6], "completions": [[7], [8], [9]]}]
    batch = packing.pack(rows, 12, share_prompt=True)
    roles = preference.token_roles(batch)
    fig = figures.block_figure(
        batch.sequence_ids, batch.loss_mask, batch.position_ids, batch.input_ids, 0, batch.labels, roles=roles
    )
    assert np.array_equal(np.asarray(fig.data[0].z), roles)
    colours = preference.role_names(roles)
    assert not any(trace.type == "scatter" for trace in fig.data)  # the legends are drawn apart, under the chart
    (_, role_items), (_, state_items) = figures.unit_legends(roles)
    shown = dict(role_items)
    assert set(shown) == {"prompt", "chosen", "rejected", "completion 1", "completion 2", "completion 3"}
    assert all(shown[name] == figures.role_colors(roles)[code] for code, name in enumerate(colours) if name in shown)
    assert [name for name, _ in state_items][-1] == "padding"
    assert len(colours) == len(figures.role_colors(roles)) == len(set(figures.role_colors(roles)))


def test_the_attention_figure_is_the_librarys_mask_coloured_by_the_keys_role() -> None:
    batch = packing.pack([{"prompt": [1, 2], "chosen": [3, 4], "rejected": [5]}], 8, share_prompt=True)
    mask, roles = batch.attention_mask(0), preference.token_roles(batch)[0]
    z = np.asarray(figures.unit_attention_figure(mask, roles, "Block 1").data[0].z)
    assert np.array_equal(z > 0, mask)
    assert np.array_equal(z[mask], np.broadcast_to(roles[None, :] + 1, mask.shape)[mask])
    rejected = int(np.flatnonzero(roles == preference.REJECTED)[0])
    assert set(z[rejected][z[rejected] > 0].tolist()) == {preference.PROMPT + 1, preference.REJECTED + 1}
