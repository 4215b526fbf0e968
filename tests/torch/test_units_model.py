"""Proof on real models: the log-probabilities of every completion from one packed forward equal each sequence run
alone (tiny transformers Llama and Qwen2 in float64), in both layouts (a shared prompt through the 4-D mask), and a
DPO loss, its gradients and 20 DPO steps from packed batches equal the unpacked ones."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import packing  # noqa: E402
import packing.torch as pt  # noqa: E402
from tests.helpers.tiny_models import tiny_causal_lm  # noqa: E402
from tests.helpers.units import alone_logps, completions_of, dpo_loss, random_units  # noqa: E402

TOLERANCE = 1e-6


def _forward(model: Any, batch: Any, share_prompt: bool) -> Any:
    """The logits of one packed forward of a ``collate`` batch: the 4-D mask with a shared prompt, the position ids
    alone otherwise (transformers' packed-sequence detection, which it skips when it builds a cache)."""
    mask = {"attention_mask": batch["attention_mask"].double()} if share_prompt else {}
    return model(input_ids=batch["input_ids"], position_ids=batch["position_ids"], use_cache=False, **mask).logits


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
@pytest.mark.parametrize("attention", ["eager", "sdpa"])
@pytest.mark.parametrize("share_prompt", [False, True])
def test_one_packed_forward_gives_every_sequence_alone(kind: str, attention: str, share_prompt: bool) -> None:
    model = tiny_causal_lm(kind, attention)
    for seed in range(3):
        rows = random_units(seed)
        reference = alone_logps(model, rows)
        batch = pt.collate(rows, share_prompt=share_prompt)
        with torch.no_grad():
            packed = pt.completion_logps(_forward(model, batch, share_prompt), batch)
        assert packed.shape == reference.shape
        assert float((packed - reference).abs().max()) < TOLERANCE


@pytest.mark.parametrize("share_prompt", [False, True])
def test_blocks_of_pack_with_the_mask_builder_give_every_sequence_alone(share_prompt: bool) -> None:
    """``pack``'s blocks (several rows, units reordered by bfd, padding) through ``attention_mask(batch)``: the
    completions come back in input order."""
    model = tiny_causal_lm("llama", "sdpa")
    rows = random_units(7, count=10)
    batch = packing.pack(rows, 64, share_prompt=share_prompt, int64=True)
    assert batch.stats.units.units_truncated == 0
    assert batch.num_blocks > 1
    with torch.no_grad():
        logits = model(
            input_ids=torch.as_tensor(batch.input_ids),
            position_ids=torch.as_tensor(batch.position_ids),
            attention_mask=pt.attention_mask(batch, torch.float64),
            use_cache=False,
        ).logits
    packed = pt.completion_logps(logits, batch)
    reference = alone_logps(model, rows)
    assert float((packed - reference).abs().max()) < TOLERANCE


def test_the_sampler_and_its_collate_give_every_sequence_alone() -> None:
    """A sampler over a dataset of units, its collate and one forward per step: every completion once, as alone."""
    model = tiny_causal_lm("qwen2", "sdpa")
    rows = random_units(3, count=12)
    samples = packing.read_rows(rows)
    sampler = pt.PackingSampler(samples, 48, share_prompt=True, seed=1)
    reference = alone_logps(model, rows)
    offsets = np.cumsum([0] + [len(completions_of(row)) for row in rows])
    seen = []
    for step in sampler:
        batch = sampler.collate([rows[i] for i in step])
        with torch.no_grad():
            logps = pt.completion_logps(_forward(model, batch, True), batch)
        expected = torch.cat([reference[offsets[i] : offsets[i + 1]] for i in step])
        assert float((logps - expected).abs().max()) < TOLERANCE
        seen.extend(step)
    assert sorted(seen) == list(range(len(rows)))


@pytest.mark.parametrize("share_prompt", [False, True])
def test_dpo_loss_and_gradients_from_a_packed_batch_equal_the_unpacked(share_prompt: bool) -> None:
    rows = [row for row in random_units(11, count=12) if "chosen" in row]
    policy = tiny_causal_lm("llama", "eager")
    reference = tiny_causal_lm("llama", "eager", seed=1)
    with torch.no_grad():
        ref = alone_logps(reference, rows)
    ref_chosen, ref_rejected = ref[0::2], ref[1::2]

    alone = alone_logps(policy, rows, grad=True)
    loss_alone = dpo_loss(alone[0::2], alone[1::2], ref_chosen, ref_rejected)
    grads_alone = torch.autograd.grad(loss_alone, list(policy.parameters()))

    batch = pt.collate(rows, share_prompt=share_prompt)
    chosen, rejected = pt.preference_logps(_forward(policy, batch, share_prompt), batch)
    loss_packed = dpo_loss(chosen, rejected, ref_chosen, ref_rejected)
    grads_packed = torch.autograd.grad(loss_packed, list(policy.parameters()))

    assert abs(float(loss_packed - loss_alone)) < 1e-9
    worst = max(float((a - b).abs().max()) for a, b in zip(grads_alone, grads_packed, strict=True))
    assert worst < TOLERANCE


@pytest.mark.parametrize("share_prompt", [False, True])
def test_twenty_dpo_steps_packed_equal_unpacked(share_prompt: bool) -> None:
    """Two copies of a policy trained 20 DPO steps (SGD), one on packed batches through the sampler, one sequence
    by sequence on the same pairs: the same weights."""
    rows = [row for row in random_units(5, count=40) if "chosen" in row]
    reference = tiny_causal_lm("llama", "sdpa", seed=1)
    with torch.no_grad():
        ref = alone_logps(reference, rows)
    packed_model = tiny_causal_lm("llama", "sdpa")
    alone_model = copy.deepcopy(packed_model)
    packed_opt = torch.optim.SGD(packed_model.parameters(), lr=0.5)
    alone_opt = torch.optim.SGD(alone_model.parameters(), lr=0.5)
    sampler = pt.PackingSampler(packing.read_rows(rows), 64, share_prompt=share_prompt, seed=2)
    steps = 0
    while steps < 20:
        for step in sampler:
            if steps == 20:
                break
            chosen_rows = [rows[i] for i in step]
            ref_chosen = torch.stack([ref[2 * i] for i in step])
            ref_rejected = torch.stack([ref[2 * i + 1] for i in step])
            batch = sampler.collate(chosen_rows)
            chosen, rejected = pt.preference_logps(_forward(packed_model, batch, share_prompt), batch)
            packed_opt.zero_grad()
            dpo_loss(chosen, rejected, ref_chosen, ref_rejected).backward()
            packed_opt.step()
            alone = alone_logps(alone_model, chosen_rows, grad=True)
            alone_opt.zero_grad()
            dpo_loss(alone[0::2], alone[1::2], ref_chosen, ref_rejected).backward()
            alone_opt.step()
            steps += 1
        sampler.set_epoch(sampler.epoch + 1)
    worst = max(
        float((a - b).detach().abs().max())
        for a, b in zip(packed_model.parameters(), alone_model.parameters(), strict=True)
    )
    moved = max(
        float((a - b).detach().abs().max())
        for a, b in zip(packed_model.parameters(), tiny_causal_lm("llama", "sdpa").parameters(), strict=True)
    )
    assert moved > 1e-3  # the steps trained something
    assert worst < TOLERANCE


@pytest.mark.slow
def test_flex_attention_block_mask_gives_every_sequence_alone() -> None:
    """FlexAttention on CPU (float32 only there; it compiles, so slow): the ``BlockMask`` of a shared-prompt batch
    gives each completion's log-probability alone, within float32's precision."""
    pytest.importorskip("torch.nn.attention.flex_attention")
    model = tiny_causal_lm("llama", "flex_attention").float()
    plain = tiny_causal_lm("llama", "sdpa").float()
    rows = random_units(2, count=4)
    batch = pt.collate(rows, share_prompt=True)
    with torch.no_grad():
        logits = model(
            input_ids=batch["input_ids"],
            position_ids=batch["position_ids"],
            attention_mask=pt.block_mask(batch),
            use_cache=False,
        ).logits
    packed = pt.completion_logps(logits, batch)
    assert float((packed - alone_logps(plain, rows).float()).abs().max()) < 1e-4
