"""Context parallelism: the THD layout of ``collate(..., context_parallel_size=cp)``, one rank's share with
``context_parallel_shard``, the planner and the sampler counting the padding; cp 1, 2, 4, 8 over random documents."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

import packing  # noqa: E402
from packing.torch import PackingSampler, collate, context_parallel_shard  # noqa: E402

documents = st.lists(st.lists(st.integers(1, 99), min_size=1, max_size=40), min_size=1, max_size=8)
masked = st.booleans()


def _rows(docs: list[list[int]], prompts: bool) -> list[Any]:
    """Documents as rows; with ``prompts``, the first token of each is a prompt (not trained)."""
    if not prompts:
        return docs
    return [{"prompt": d[:1], "completion": d[1:]} if len(d) > 1 else d for d in docs]


def brute_shard(lengths: list[int], rank: int, cp: int) -> list[int]:
    """Rank ``rank``'s token indices, document by document, chunk by chunk."""
    out, start = [], 0
    for n in lengths:
        chunk = n // (2 * cp)
        for c in (rank, 2 * cp - 1 - rank):
            out += list(range(start + c * chunk, start + (c + 1) * chunk))
        start += n
    return out


@settings(max_examples=150, deadline=None)
@given(docs=documents, cp=st.sampled_from([1, 2, 4, 8]), tp=st.sampled_from([1, 2]), prompts=masked)
def test_every_document_padded_to_a_multiple_of_2_cp(docs: list[list[int]], cp: int, tp: int, prompts: bool) -> None:
    rows = _rows(docs, prompts)
    plain = collate(rows, return_tensors="np")
    batch = collate(rows, context_parallel_size=cp, tensor_parallel_size=tp, pad_token_id=0, return_tensors="np")
    multiple = (2 * cp if cp > 1 else 1) * tp
    if multiple == 1:  # nothing to lay out: the padding-free batch, unchanged
        assert batch.keys() == plain.keys()
        assert all(np.array_equal(batch[k], plain[k]) for k in plain)
        return
    real = np.array([len(d) for d in docs])
    padded = np.diff(batch["cu_seqlens_padded"])
    assert batch["cu_seqlens_padded"].dtype == batch["cu_seq_lens_q"].dtype == np.int32
    assert np.array_equal(np.diff(batch["cu_seq_lens_q"]), real)
    assert np.array_equal(batch["cu_seq_lens_k"], batch["cu_seq_lens_q"])
    assert np.all(padded % multiple == 0) and np.all(padded >= real) and np.all(padded - real < multiple)
    assert batch["max_length_q"] == batch["max_length_k"] == int(padded.max())
    ids, labels, positions = batch["input_ids"][0], batch["labels"][0], batch["position_ids"][0]
    assert len(ids) == int(padded.sum())
    starts = batch["cu_seqlens_padded"][:-1]
    plain_starts = plain["cu_seq_lens_q"][:-1] if "cu_seq_lens_q" in plain else np.cumsum(real) - real
    for i, doc in enumerate(docs):
        lo, n, p = int(starts[i]), len(doc), int(padded[i])
        assert ids[lo : lo + n].tolist() == doc
        assert ids[lo + n : lo + p].tolist() == [0] * (p - n)  # the pad id
        src = int(plain_starts[i])
        assert labels[lo : lo + n].tolist() == plain["labels"][0][src : src + n].tolist()
        assert labels[lo + n : lo + p].tolist() == [-100] * (p - n)
        assert positions[lo : lo + p].tolist() == list(range(p))
        # shift_labels: what each position predicts, within its document
        expected = [*labels[lo + 1 : lo + p].tolist(), -100]
        assert batch["shift_labels"][0][lo : lo + p].tolist() == expected


@settings(max_examples=150, deadline=None)
@given(docs=documents, cp=st.sampled_from([1, 2, 4, 8]), tp=st.sampled_from([1, 2]))
def test_shards_hold_every_token_once_with_even_causal_work(docs: list[list[int]], cp: int, tp: int) -> None:
    batch = collate(docs, context_parallel_size=max(cp, 2), tensor_parallel_size=tp, loss_weights="token")
    padded = np.diff(batch["cu_seqlens_padded"].numpy()).tolist()
    total = batch["input_ids"].shape[1]
    seen = np.zeros(total, dtype=int)
    work = []
    for rank in range(cp):
        shard = context_parallel_shard(batch, rank, cp)
        index = brute_shard(padded, rank, cp)
        seen[index] += 1
        for name in ("input_ids", "labels", "shift_labels", "position_ids", "loss_weights", "shift_loss_weights"):
            assert shard[name].shape == (1, total // cp)
            assert shard[name][0].tolist() == batch[name][0, index].tolist(), name
        for name in ("cu_seq_lens_q", "cu_seqlens_padded", "max_length_q"):  # kept whole on every rank
            assert shard[name] is batch[name]
        # causal attention work: a query at position p of its document attends to p + 1 keys
        work.append(int((shard["position_ids"][0] + 1).sum()))
    assert seen.tolist() == [1] * total
    assert len(set(work)) == 1  # chunks r and 2·cp − 1 − r: the same work on every rank


def test_shard_refuses_what_it_cannot_cut() -> None:
    batch = collate([[1, 2, 3]], context_parallel_size=2)
    with pytest.raises(packing.SettingError, match=r"^cu_seqlens_padded: expected documents padded to multiples"):
        context_parallel_shard(batch, 0, 4)
    with pytest.raises(packing.SettingError, match=r"^cp_rank: expected a rank in 0\.\.1, got 2"):
        context_parallel_shard(batch, 2, 2)
    with pytest.raises(packing.SettingError, match=r"^batch: expected a THD batch"):
        context_parallel_shard(collate([[1, 2, 3]]), 0, 2)


def test_numpy_batches_shard_too() -> None:
    batch = collate([[1, 2, 3], [4, 5]], context_parallel_size=2, return_tensors="np")
    shard = context_parallel_shard(batch, 1, 2)
    assert isinstance(shard["input_ids"], np.ndarray) and shard["input_ids"].tolist() == [[2, 3, 5, 0]]


# ---------------------------------------------------------------- the recipe, the planner, the sampler


def test_the_option_is_checked_and_refused_where_it_cannot_apply() -> None:
    with pytest.raises(packing.SettingError, match=r"^max_seq_length: expected a multiple of 8"):
        packing.Recipe(100, context_parallel_size=4)
    with pytest.raises(packing.SettingError, match=r"^context_parallel_size: expected 1 with strategy 'split'"):
        packing.plan([3, 4], 8, strategy="split", context_parallel_size=2)
    with pytest.raises(packing.SettingError, match=r"^tensor_parallel_size: expected 1 with strategy 'wrapped'"):
        packing.Recipe(8, strategy="wrapped", tensor_parallel_size=2)
    with pytest.raises(packing.SettingError, match=r"^context_parallel_size: expected an integer >= 1, got 0"):
        packing.Recipe(8, context_parallel_size=0)
    with pytest.raises(packing.SettingError, match=r"^context_parallel_size: expected no value at collate_fixed"):
        packing.torch.collate_fixed(8, context_parallel_size=2)
    with pytest.raises(packing.SettingError, match=r"^pad_to_multiple_of: expected None with context parallelism"):
        collate([[1]], context_parallel_size=2, pad_to_multiple_of=8)
    with pytest.raises(packing.SettingError, match=r"^rows: expected at most max_seq_length=8 tokens in all with"):
        collate([[1, 2, 3, 4, 5], [6]], 8, context_parallel_size=2)  # 6 tokens, 8 + 4 once padded
    assert collate([[1, 2, 3], [4]], 8, context_parallel_size=2)["input_ids"].shape == (1, 8)  # 4 + 4


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 70), min_size=4, max_size=80),
    cp=st.sampled_from([1, 2, 4, 8]),
    strategy=st.sampled_from(["bfd", "ffd", "first_fit_shuffle", "next_fit", "spfhp", "optimal"]),
    overflow=st.sampled_from(["truncate", "split", "drop"]),
)
def test_the_planner_counts_the_padding(lengths: list[int], cp: int, strategy: str, overflow: str) -> None:
    multiple = 2 * cp if cp > 1 else 1
    layout = packing.plan(lengths, 64, strategy=strategy, overflow=overflow, context_parallel_size=cp, time_limit=None)
    padded = packing.core._thd.padded_lengths(layout.piece_length, multiple)
    assert np.add.reduceat(padded, layout.block_starts[:-1]).max(initial=0) <= 64
    assert layout.document_multiple == multiple
    kept = np.minimum(lengths, 64) if overflow == "truncate" else np.array(lengths)
    if overflow != "drop":
        assert int(layout.piece_length.sum()) == int(kept.sum())  # nothing lost beyond the overflow policy


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 1000), cp=st.sampled_from([2, 4, 8]), world=st.sampled_from([1, 2, 3]))
def test_no_sampler_block_exceeds_max_seq_length_once_padded(seed: int, cp: int, world: int) -> None:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 90, 150)
    rows = [[1 + i % 90] * int(n) for i, n in enumerate(lengths)]
    for rank in range(world):
        sampler = PackingSampler(lengths, 128, num_replicas=world, rank=rank, seed=seed, context_parallel_size=cp)
        for block in sampler:
            batch = sampler.collate([rows[i] for i in block])
            assert batch["input_ids"].shape[1] <= 128
            assert int(batch["cu_seqlens_padded"][-1]) == batch["input_ids"].shape[1]


def test_packed_blocks_leave_room_for_the_padding() -> None:
    batch = packing.pack([[1] * 5, [2] * 3, [3] * 6, [4] * 2], 16, context_parallel_size=2)
    dataset = packing.torch.PackedDataset(batch)
    recipe = packing.Recipe(16, context_parallel_size=2)
    for block in dataset:
        assert collate([block], recipe=recipe)["input_ids"].shape[1] <= 16
    assert batch.plan.document_multiple == 4


# ---------------------------------------------------------------- a real model


def test_a_llama_on_a_thd_batch_sees_each_document_alone_and_shift_labels_give_its_loss() -> None:
    pytest.importorskip("transformers")
    from tests.helpers.tiny_models import tiny_llama

    model = tiny_llama().eval()
    docs = [[5, 6, 7, 8, 9], [10, 11, 12], [13, 14, 15, 16, 17, 18, 19]]
    batch = collate(docs, context_parallel_size=2, tensor_parallel_size=1, pad_token_id=0)
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], position_ids=batch["position_ids"], use_cache=False).logits
        starts = batch["cu_seqlens_padded"][:-1].tolist()
        for doc, start in zip(docs, starts, strict=True):
            alone = model(input_ids=torch.tensor([doc]), use_cache=False).logits
            assert torch.allclose(logits[0, start : start + len(doc)], alone[0], atol=1e-5)
        # the loss over every rank's shard, from shift_labels, is the model's own loss over the batch
        total = torch.nn.functional.cross_entropy(
            logits[0, :-1], batch["labels"][0, 1:], ignore_index=-100, reduction="sum"
        )
        shards = 0.0
        for rank in range(2):
            index = torch.tensor(brute_shard(np.diff(batch["cu_seqlens_padded"].numpy()).tolist(), rank, 2))
            shard = context_parallel_shard(batch, rank, 2)
            shards += torch.nn.functional.cross_entropy(
                logits[0, index], shard["shift_labels"][0], ignore_index=-100, reduction="sum"
            )
        assert torch.allclose(shards, total)


def test_weighted_loss_over_the_shards_is_the_batch_loss() -> None:
    from packing.torch import weighted_loss

    docs = [[5, 6, 7, 8, 9], [10, 11, 12], [13, 14, 15, 16, 17, 18, 19], [3, 4]]
    rows = [{"prompt": d[:2], "completion": d[2:]} for d in docs]
    batch = collate(rows, context_parallel_size=4, loss_weights="sequence")
    logits = torch.randn(1, batch["input_ids"].shape[1], 32, generator=torch.Generator().manual_seed(0))
    whole = weighted_loss(logits, batch["labels"], batch["loss_weights"])
    parts = 0.0
    for rank in range(4):
        index = torch.tensor(brute_shard(np.diff(batch["cu_seqlens_padded"].numpy()).tolist(), rank, 4))
        shard = context_parallel_shard(batch, rank, 4)
        parts += weighted_loss(logits[:, index], shard["shift_labels"], shard["shift_loss_weights"], shifted=True)
    assert torch.allclose(parts, whole, atol=1e-6)
    assert whole > 0
