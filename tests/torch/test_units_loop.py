"""Pairs and groups in a training loop: collate's batch (and its options), the sampler that keeps units whole over
ranks and steps and balances their real attention work, its resume, and the helpers' contracts."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import packing  # noqa: E402
import packing.core  # noqa: E402
import packing.errors  # noqa: E402
import packing.torch as pt  # noqa: E402
from packing import SettingError  # noqa: E402
from packing.core._pairs_groups import Units  # noqa: E402
from packing.errors import TokensLost, UnitTooLong  # noqa: E402
from tests.helpers.units import completions_of, random_units  # noqa: E402

PAIR = {"prompt": [1, 2], "chosen": [3], "rejected": [4, 5]}
GROUP = {"prompt": [6], "completions": [[7, 8], [9]]}


def test_collate_gives_the_same_names_in_both_layouts() -> None:
    for share_prompt in (False, True):
        batch = pt.collate([PAIR, GROUP, [10, 11]], share_prompt=share_prompt)
        assert {"input_ids", "labels", "position_ids", *packing.core._pairs_groups.UNIT_COLUMNS} <= set(batch)
        assert ("attention_mask" in batch) == share_prompt
        assert batch["unit_ids"].tolist() == [
            [0] * (5 if share_prompt else 7) + [1] * (4 if share_prompt else 5) + [2, 2]
        ]
        assert sorted(set(batch["completion_ids"][0].tolist())) == [-1, 0, 1, 2, 3]


def test_a_shared_prompt_mask_is_the_dtype_minimum_where_masked() -> None:
    batch = pt.collate([PAIR], share_prompt=True, mask_dtype=torch.bfloat16)
    mask = batch["attention_mask"]
    assert mask.dtype == torch.bfloat16 and mask.shape == (1, 1, 5, 5)
    assert set(mask.unique().tolist()) == {0.0, float(torch.finfo(torch.bfloat16).min)}
    assert (mask[0, 0, 3, 2] != 0) and (mask[0, 0, 3, 1] == 0)  # the rejected sees its prompt, not the chosen


def test_collate_options_with_units() -> None:
    batch = pt.collate([PAIR], return_flash_attn_kwargs=True, return_seq_idx=True, pad_to_multiple_of=8)
    assert batch["cu_seq_lens_q"].tolist()[:3] == [0, 3, 7]
    assert batch["input_ids"].shape == (1, 8) and batch["labels"][0, -1] == -100
    shared = pt.collate([PAIR], share_prompt=True, pad_to_multiple_of=8, return_tensors="np")
    assert shared["attention_mask"].shape == (1, 1, 8, 8) and isinstance(shared["attention_mask"], np.ndarray)
    for name in ("return_flash_attn_kwargs", "return_seq_idx"):
        with pytest.raises(SettingError, match=rf"^{name}: expected False with share_prompt"):
            pt.collate([PAIR], share_prompt=True, **{name: True})
    with pytest.raises(SettingError, match=r"^loss_weights: expected another value with preference pairs"):
        pt.collate([PAIR], loss_weights="token")


def test_collate_applies_the_overflow_policy_to_whole_units() -> None:
    long = {"prompt": [1, 2, 3], "chosen": [4] * 8, "rejected": [5] * 2}
    with pytest.warns(TokensLost, match=r"^collate: 4 of 16 tokens .* 1 truncated \(1 completion cut\), 0 dropped"):
        assert pt.collate([long], 12)["input_ids"].tolist() == [[1, 2, 3, 4, 4, 4, 4, 1, 2, 3, 5, 5]]
    with pytest.warns(TokensLost, match=r"^collate: 16 of 23 tokens .* 0 truncated \(0 completions cut\), 1 dropped"):
        assert pt.collate([long, PAIR], 12, overflow="drop")["unit_ids"].tolist() == [[1] * 7]
    with pytest.raises(UnitTooLong, match=r"^sample 0: expected a pair of at most max_seq_length=12"):
        pt.collate([long], 12, overflow="error")
    with pytest.raises(SettingError, match=r"^overflow: expected another value"):
        pt.collate([long], 12, overflow="split")


def test_collate_reads_the_blocks_of_units_back() -> None:
    """Blocks of units (``PackedDataset`` items) collate into the batch their rows would give."""
    rows = random_units(5, count=6)
    for share_prompt in (False, True):
        blocks = pt.PackedDataset(packing.pack(rows, 64, share_prompt=share_prompt, strategy="next_fit"))
        from_blocks = pt.collate([blocks[i] for i in range(len(blocks))], share_prompt=share_prompt)
        from_rows = pt.collate(rows, share_prompt=share_prompt)
        for name in ("input_ids", "labels", "position_ids", "prediction_positions"):
            assert from_blocks[name].tolist() == from_rows[name].tolist(), name
        if share_prompt:
            assert (from_blocks["attention_mask"] == from_rows["attention_mask"]).all()


def test_completion_logps_reads_the_first_token_from_the_prompts_end() -> None:
    batch = pt.collate([PAIR], share_prompt=True)  # 1 2 | 3 | 4 5: both completions predicted from position 1
    logits = torch.zeros(1, 5, 8)
    logits[0, 1, 3], logits[0, 1, 4], logits[0, 3, 5] = 5.0, 3.0, 2.0
    scores = logits.log_softmax(-1)
    expected = [float(scores[0, 1, 3]), float(scores[0, 1, 4] + scores[0, 3, 5])]
    assert torch.allclose(pt.completion_logps(logits, batch), torch.tensor(expected))
    chosen, rejected = pt.preference_logps(logits, batch)
    assert chosen.tolist() == pytest.approx(expected[:1]) and rejected.tolist() == pytest.approx(expected[1:])
    with pytest.raises(SettingError, match=r"^batch: expected preference pairs only"):
        pt.preference_logps(torch.zeros(1, 6, 16), pt.collate([{"prompt": [1], "completions": [[2], [3], [4]]}]))
    with pytest.raises(SettingError, match=r"^logits: expected logits of the batch's shape"):
        pt.completion_logps(torch.zeros(1, 4, 8), batch)


# ---------------------------------------------------------------- the sampler


def _rows(count: int = 40, seed: int = 0) -> list[dict[str, Any]]:
    return random_units(seed, count=count, prompt=(20, 60), answer=(5, 40))


@pytest.mark.parametrize("share_prompt", [False, True])
def test_the_sampler_keeps_every_unit_whole_over_ranks_and_steps(share_prompt: bool) -> None:
    rows = _rows()
    samples = packing.read_rows(rows, share_prompt=share_prompt)
    ranks = [
        pt.PackingSampler(
            samples, 256, num_replicas=3, rank=r, seed=4, share_prompt=share_prompt, gradient_accumulation_steps=2
        )
        for r in range(3)
    ]
    assert len({len(s) for s in ranks}) == 1
    seen = [i for s in ranks for step in s for i in step]
    assert sorted(seen) == list(range(len(rows)))  # every unit once, as one item (never a piece)
    for sampler in ranks:
        for step in sampler:
            batch = sampler.collate([rows[i] for i in step])
            assert batch["input_ids"].shape[1] <= 256
            assert sorted(set(batch["unit_ids"][0].tolist())) == list(range(len(step)))  # the rows it was given


def test_the_samplers_lengths_are_the_units_in_its_layout() -> None:
    rows = _rows(count=6)
    samples = packing.read_rows(rows)  # read duplicated, sampled shared: relaid from the units
    shared = pt.PackingSampler(samples, 512, share_prompt=True)
    assert shared.lengths.tolist() == [len(row["prompt"]) + sum(map(len, completions_of(row))) for row in rows]
    with pytest.raises(UnitTooLong, match=r"^sample \d+: expected a (pair|group) of at most max_seq_length=64"):
        pt.PackingSampler(samples, 64, overflow="error")
    with pytest.raises(SettingError, match=r"^overflow: expected another value"):
        pt.PackingSampler(samples, 64, overflow="split")


def test_the_cost_model_counts_a_shared_prompts_attention_once() -> None:
    units = Units.of([100], [[10, 20, 30]])
    ell = lambda n: np.asarray(n, dtype=float)  # noqa: E731
    square = lambda n: np.asarray(n, dtype=float) ** 2  # noqa: E731
    assert units.costs(square, True).tolist() == [100**2 + sum(2 * 100 * c + c * c for c in (10, 20, 30))]
    assert units.costs(square, False).tolist() == [sum((100 + c) ** 2 for c in (10, 20, 30))]
    assert units.costs(ell, True).tolist() == [160.0] and units.costs(ell, False).tolist() == [360.0]
    rows = _rows(count=24)
    sampler = pt.PackingSampler(packing.read_rows(rows), 512, num_replicas=2, rank=0, share_prompt=True)
    schedule = sampler.schedule
    per_unit = sampler.units.costs(pt.default_cost)
    total = sum(per_unit[i] for s in range(schedule.num_steps) for r in range(2) for i in schedule.block(s, r))
    assert schedule.costs.sum() == pytest.approx(total)  # the blocks are balanced on the units' own costs


def test_the_sampler_resumes_units_exactly() -> None:
    rows = _rows(count=30, seed=2)
    samples = packing.read_rows(rows, share_prompt=True)
    make = lambda: pt.PackingSampler(samples, 256, share_prompt=True, seed=3)  # noqa: E731
    whole = list(make())
    first = make()
    steps = iter(first)
    consumed = [next(steps) for _ in range(3)]
    resumed = make()
    resumed.load_state_dict(first.state_dict())
    assert consumed + list(resumed) == whole
    other = pt.PackingSampler(samples, 256, seed=3)  # another layout: other lengths, other plan
    with pytest.raises(packing.errors.StateMismatch):
        other.load_state_dict(first.state_dict())


def test_context_parallelism_is_refused_with_units() -> None:
    with pytest.raises(SettingError) as refused:
        pt.PackingSampler(packing.read_rows([PAIR]), 64, context_parallel_size=2)
    assert refused.value.name == "context_parallel_size"


def test_collate_fixed_keeps_units_whole() -> None:
    rows = _rows(count=8, seed=1)
    batch = pt.collate_fixed(256, share_prompt=True)(rows)
    assert batch["attention_mask"].shape[1:] == (1, 256, 256)
    for row in range(batch["input_ids"].shape[0]):
        units = set(batch["unit_ids"][row].tolist()) - {-1}
        for other in range(row + 1, batch["input_ids"].shape[0]):
            assert not units & set(batch["unit_ids"][other].tolist())


@pytest.mark.parametrize("share_prompt", [False, True])
def test_collate_fixed_stacks_blocks_of_units(share_prompt: bool) -> None:
    rows = _rows(count=8, seed=5)
    made = pt.collate_fixed(256, share_prompt=share_prompt)(rows)
    blocks = pt.PackedDataset(packing.pack(rows, 256, share_prompt=share_prompt, strategy="next_fit"))
    stacked = pt.collate_fixed(256, share_prompt=share_prompt)([blocks[i] for i in range(len(blocks))])
    for name in ("input_ids", "labels", "position_ids", "completion_ids", "prediction_positions"):
        assert stacked[name].tolist() == made[name].tolist(), name
    assert ("attention_mask" in stacked) == share_prompt
