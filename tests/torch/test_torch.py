"""packing.torch: the packing batch sampler across ranks, the padding-free collates, the packed dataset."""

from __future__ import annotations

import importlib.util
import itertools
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

import packing  # noqa: E402
import packing.core  # noqa: E402
import packing.layouts  # noqa: E402
import packing.strategies  # noqa: E402
import packing.weighting  # noqa: E402
from packing.torch import (  # noqa: E402
    PackedDataset,
    PackingSampler,
    build_schedule,
    collate,
    collate_fixed,
    default_cost,
)
from tests.helpers.peer_batches import as_transformers_feature  # noqa: E402
from tests.helpers.sample_rows import rows as sample_rows  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def skewed_lengths(count: int, seed: int = 0, max_seq_length: int = 4096) -> np.ndarray:
    """Mostly short samples and a long tail (log-normal, sigma 1.2), the shape of chat fine-tuning data."""
    rng = np.random.default_rng(seed)
    return np.clip(rng.lognormal(np.log(300), 1.2, count).astype(np.int64), 1, max_seq_length)


def epoch_blocks(lengths: Any, max_seq_length: int, replicas: int, **kwargs: Any) -> list[list[list[int]]]:
    """Every rank's blocks of one epoch, from independent samplers (as on separate processes)."""
    epoch = kwargs.pop("epoch", 0)
    result = []
    for rank in range(replicas):
        sampler = PackingSampler(lengths, max_seq_length, num_replicas=replicas, rank=rank, **kwargs)
        sampler.set_epoch(epoch)
        result.append(list(sampler))
    return result


def epoch_blocks_needed(lengths: list[int], max_seq_length: int, strategy: Any, seed: int, epoch: int) -> int:
    """The blocks of the plan the sampler makes for this epoch (its order drawn from ``(seed, epoch)``)."""
    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(len(lengths))
    reads_seed = "seed" in packing.strategies.STRATEGIES[strategy].options
    plan_seed = int(rng.integers(2**31)) if reads_seed else None
    return packing.plan(np.array(lengths)[order], max_seq_length, strategy=strategy, seed=plan_seed).num_blocks


# ---------------------------------------------------------------- the sampler


@settings(max_examples=80, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 40), min_size=1, max_size=60),
    max_seq_length=st.integers(8, 40),
    replicas=st.sampled_from([1, 2, 3, 8]),
    seed=st.integers(0, 3),
    epoch=st.integers(0, 3),
    strategy=st.sampled_from(["bfd", "ffd", "first_fit", "first_fit_shuffle", "next_fit", "spfhp", "none"]),
)
def test_every_sample_once_equal_steps_empty_blocks_only_when_too_few_samples(
    lengths: list[int], max_seq_length: int, replicas: int, seed: int, epoch: int, strategy: str
) -> None:
    nonempty = sum(1 for n in lengths if n > 0)
    if nonempty == 0:  # nothing to train: refused
        with pytest.raises(packing.SettingError, match=r"^lengths: expected at least one sample with tokens, got <"):
            epoch_blocks(lengths, max_seq_length, replicas, seed=seed, epoch=epoch, strategy=strategy)
        return
    blocks = epoch_blocks(lengths, max_seq_length, replicas, seed=seed, epoch=epoch, strategy=strategy)
    steps = {len(rank_blocks) for rank_blocks in blocks}
    assert len(steps) == 1
    flat = sorted(i for rank_blocks in blocks for block in rank_blocks for i in block)
    assert flat == list(range(len(lengths)))
    # the blocks of the epoch's plan (next-fit and first-fit count differently in another order), split until
    # every rank has one a step; when there are too few samples for that, every sample has a block of its own
    # and the ranks left over get an empty step (no token: it trains nothing)
    wanted = max(1, -(-epoch_blocks_needed(lengths, max_seq_length, strategy, seed, epoch) // replicas)) * replicas
    assert steps == {wanted // replicas}
    with_tokens = [sum(lengths[i] for i in block) for rank_blocks in blocks for block in rank_blocks]
    assert sum(1 for tokens in with_tokens if tokens > 0) == min(nonempty, wanted)
    for rank_blocks in blocks:
        for block in rank_blocks:
            tokens = [lengths[i] for i in block]
            assert sum(tokens) <= max_seq_length or sum(1 for n in tokens if n > 0) == 1
            if sum(tokens) == 0:
                assert nonempty < wanted  # an empty step only when the samples are too few for the ranks


def test_uneven_blocks_are_spread_over_extra_blocks() -> None:
    # 5 full blocks of 4 documents for 8 ranks: 20 documents over 8 blocks, as evenly as whole documents allow
    lengths = [4] * 20
    blocks = epoch_blocks(lengths, 16, 8, seed=0)
    assert [len(b) for b in blocks] == [1] * 8
    assert sorted(len(b[0]) for b in blocks) == [2, 2, 2, 2, 3, 3, 3, 3]
    # without balancing, blocks with the most documents are halved until there are enough
    blocks = epoch_blocks(lengths, 16, 8, seed=0, balance=False)
    assert sorted(len(b[0]) for b in blocks) == [2, 2, 2, 2, 2, 2, 4, 4]


@pytest.mark.parametrize("balance", [True, False])
def test_fewer_samples_than_ranks_give_the_rest_an_empty_step(balance: bool) -> None:
    lengths, trained = [5, 0, 6, 7], [4, 0, 5, 6]
    ranks = [
        PackingSampler(lengths, 16, num_replicas=5, rank=r, balance=balance, trained_tokens=trained) for r in range(5)
    ]
    assert [len(s) for s in ranks] == [1] * 5
    blocks = [next(iter(s)) for s in ranks]
    assert sorted(i for block in blocks for i in block) == [0, 1, 2, 3]  # every sample once, the empty one too
    assert sorted(sum(lengths[i] for i in block) for block in blocks) == [0, 0, 5, 6, 7]  # one sample a rank
    assert {block.totals for block in blocks} == {packing.weighting.LossTotals.of([4, 5, 6])}  # the whole step
    assert ranks[0].schedule.costs.shape == (1, 5) and sorted(ranks[0].schedule.tokens[0].tolist())[:2] == [0, 0]
    assert ranks[0].balance_stats.tokens == pytest.approx(max(5, 6, 7) / (18 / 5) - 1)
    assert ranks[0].state_dict()["step"] == 1
    # each empty step collates to padding alone, which trains nothing
    rows = [[1] * 5, [], [2] * 6, [3] * 7]
    for sampler, block in zip(ranks, blocks, strict=True):
        batch = sampler.collate([rows[i] for i in block])
        assert (batch["labels"] != packing.core.IGNORE_INDEX).any() == (sum(lengths[i] for i in block) > 0)


def test_nothing_to_train_is_refused() -> None:
    with pytest.raises(packing.SettingError, match=r"^lengths: expected at least one sample with tokens, got <none "):
        PackingSampler([0, 0, 0], 16, num_replicas=4, rank=0)
    with pytest.raises(
        packing.SettingError, match=r"of at most 4 tokens \(overflow='drop'\), got <none of 2 samples>$"
    ):
        PackingSampler([5, 9], 4, overflow="drop")


def test_long_samples_get_a_block_of_their_own() -> None:
    blocks = epoch_blocks([100, 3, 3], 8, 1, seed=0)[0]
    assert sorted(map(sorted, blocks)) == [[0], [1, 2]]


def test_epoch_and_seed_determinism() -> None:
    lengths = skewed_lengths(3000, seed=1)
    first = epoch_blocks(lengths, 4096, 2, seed=5, epoch=1)
    assert first == epoch_blocks(lengths, 4096, 2, seed=5, epoch=1)
    assert first != epoch_blocks(lengths, 4096, 2, seed=5, epoch=2)
    assert first != epoch_blocks(lengths, 4096, 2, seed=6, epoch=1)
    sampler = PackingSampler(lengths, 4096, num_replicas=2, rank=0, seed=5)
    sampler.set_epoch(1)
    again = list(sampler)
    sampler.set_epoch(2)
    sampler.set_epoch(1)
    assert list(sampler) == again == first[0]


def test_unshuffled_epochs_are_identical_and_in_cost_order() -> None:
    lengths = skewed_lengths(2000, seed=2)
    sampler = PackingSampler(lengths, 4096, num_replicas=2, rank=0, shuffle=False)
    first = list(sampler)
    sampler.set_epoch(3)
    assert list(sampler) == first
    step_max = sampler.schedule.costs.max(axis=1)
    assert np.all(np.diff(step_max) <= 0)


@pytest.mark.parametrize("replicas", [2, 8])
def test_balanced_compute_on_a_skewed_distribution(replicas: int) -> None:
    lengths = skewed_lengths(20_000, seed=3)
    ours = PackingSampler(lengths, 4096, num_replicas=replicas, rank=0, seed=0)
    dealt = PackingSampler(lengths, 4096, num_replicas=replicas, rank=0, seed=0, balance=False)
    assert ours.imbalance <= 0.02
    assert ours.schedule.worst_step_imbalance <= 0.02  # the part-filled last blocks are evened out too
    assert ours.imbalance < dealt.imbalance
    # the costs reported are those of the blocks: the default per-document cost summed
    schedule = ours.schedule
    block = schedule.block(0, 1)
    assert schedule.costs[0, 1] == pytest.approx(default_cost(lengths[block]).sum())


def brute_force_sum_of_max(costs: list[float], replicas: int) -> float:
    """The least sum over steps of the largest cost, over every way of grouping blocks into steps."""
    best = float("inf")
    for order in itertools.permutations(costs):
        total = sum(max(order[i : i + replicas]) for i in range(0, len(order), replicas))
        best = min(best, total)
    return best


@settings(max_examples=30, deadline=None)
@given(lengths=st.lists(st.integers(1, 12), min_size=4, max_size=12), replicas=st.sampled_from([2, 3]))
def test_balancing_is_optimal_for_one_block_per_rank(lengths: list[int], replicas: int) -> None:
    blocks = packing.plan(lengths, 12, strategy="bfd").num_blocks
    if len(lengths) < -(-blocks // replicas) * replicas or -(-blocks // replicas) * replicas > 6:
        return
    schedule = build_schedule(lengths, 12, replicas, seed=0)
    costs = schedule.costs.reshape(-1).tolist()
    assert schedule.costs.max(axis=1).sum() == pytest.approx(brute_force_sum_of_max(costs, replicas))


def test_custom_cost() -> None:
    lengths = skewed_lengths(500, seed=4)
    schedule = PackingSampler(lengths, 4096, num_replicas=2, rank=0, cost=lambda n: n).schedule
    for step in range(schedule.num_steps):
        for rank in range(2):
            assert schedule.costs[step, rank] == lengths[schedule.block(step, rank)].sum()
    with pytest.raises(ValueError, match="one value per length"):
        PackingSampler(lengths, 4096, num_replicas=2, rank=0, cost=lambda n: 1.0)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match=r"^rank: expected a rank in 0\.\.1, got 2$"):
        PackingSampler([1, 2], 4, num_replicas=2, rank=2)
    with pytest.raises(packing.SettingError, match=r"^strategy: expected a strategy that keeps samples whole"):
        PackingSampler([1, 2], 4, strategy="split", num_replicas=1, rank=0)
    with pytest.raises(packing.SettingError, match=r"^lengths\[1\]: expected a non-negative integer, got -2$"):
        PackingSampler([1, -2], 4, num_replicas=1, rank=0)
    with pytest.raises(packing.SettingError, match=r"^lengths: expected a flat list of integers \(one length per"):
        PackingSampler([[1, 2], [3]], 4)  # rows where lengths were meant: the library's error, not numpy's


def test_replicas_and_rank_from_torch_distributed(tmp_path: Path) -> None:
    import torch.distributed as dist

    assert PackingSampler([1, 2, 3], 4).num_replicas == 1
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        sampler = PackingSampler([1, 2, 3], 4)
        assert (sampler.num_replicas, sampler.rank) == (1, 0)
    finally:
        dist.destroy_process_group()


def test_with_a_dataloader() -> None:
    rng = np.random.default_rng(0)
    samples = [rng.integers(1, 100, n).tolist() for n in rng.integers(1, 30, 200)]
    sampler = PackingSampler([len(s) for s in samples], 64, num_replicas=2, rank=1, seed=2)
    loader = torch.utils.data.DataLoader(samples, batch_sampler=sampler, collate_fn=collate)
    assert len(loader) == len(sampler)
    for indices, batch in zip(sampler, loader, strict=True):
        assert batch["input_ids"][0].tolist() == [t for i in indices for t in samples[i]]
        assert batch["input_ids"].shape[1] <= 64


# ---------------------------------------------------------------- collate against transformers

rows_strategy = sample_rows(max_tokens=12, min_size=1, max_size=6)


def assert_same_batch(ours: dict[str, Any], theirs: dict[str, Any]) -> None:
    assert set(ours) == set(theirs)
    for key, value in theirs.items():
        if isinstance(value, torch.Tensor):
            assert ours[key].dtype == value.dtype, key
            assert ours[key].shape == value.shape, key
            assert torch.equal(ours[key], value), key
        else:
            assert type(ours[key]) is type(value) and ours[key] == value, key


@settings(max_examples=100, deadline=None)
@given(rows=rows_strategy)
def test_collate_equals_data_collator_with_flattening(rows: list[Any]) -> None:
    transformers = pytest.importorskip("transformers")
    features = [as_transformers_feature(row) for row in rows]
    if all(len(f["input_ids"]) == 0 for f in features):
        with pytest.raises(packing.SettingError, match=r"^rows: expected at least one token"):
            collate(rows)
        return
    # transformers uses labels for every feature when the first has them: give plain rows explicit labels too
    if any("labels" in f for f in features):
        features = [{"labels": f["input_ids"], **f} for f in features]
    reference = transformers.DataCollatorWithFlattening(return_flash_attn_kwargs=True, return_position_ids=True)
    assert_same_batch(collate(rows, return_flash_attn_kwargs=True), reference(features))


def test_collate_keeps_given_labels_and_takes_tensors() -> None:
    transformers = pytest.importorskip("transformers")
    features = [
        {"input_ids": [4, 5, 6], "labels": [-100, 5, 9]},
        {"input_ids": [7, 8], "labels": [7, 8]},
    ]
    reference = transformers.DataCollatorWithFlattening(return_flash_attn_kwargs=True, return_position_ids=True)
    as_tensors = [{k: torch.tensor(v) for k, v in f.items()} for f in features]
    assert_same_batch(collate(as_tensors, return_flash_attn_kwargs=True), reference(features))


def test_collate_ands_given_labels_with_masks_unless_masks_are_ignored() -> None:
    """A row's ``labels`` are read by the reader: -100 masks, other values are kept where trained; a loss mask
    masks too, unless ``ignore_masks`` (then transformers' labels exactly)."""
    transformers = pytest.importorskip("transformers")
    rows = [
        {"input_ids": [4, 5, 6, 3], "labels": [-100, 5, 9, 2], "loss_mask": [1, 1, 1, 0]},
        {"input_ids": [7, 8], "labels": [7, 8], "completion_mask": [0, 0]},
    ]
    assert collate(rows)["labels"].tolist() == [[-100, 5, 9, -100, -100, -100]]
    features = [{"input_ids": [4, 5, 6, 3], "labels": [-100, 5, 9, 2]}, {"input_ids": [7, 8], "labels": [7, 8]}]
    reference = transformers.DataCollatorWithFlattening(return_position_ids=True)
    assert_same_batch(collate(rows, ignore_masks=True), reference(features))


def test_labels_read_from_a_file_reach_collate_and_are_refused_by_pack(tmp_path: Path) -> None:
    """``read_dataset`` keeps labels other than the ids (its items carry them), so the sampler's batches train
    on them; ``pack``, whose labels are the ids, refuses them."""
    path = tmp_path / "labelled.jsonl"
    path.write_text('{"input_ids": [1, 2]}\n{"input_ids": [4, 5, 6], "labels": [-100, 5, 9]}\n')
    data = packing.read_dataset(path)
    assert data[1]["labels"].tolist() == [-100, 5, 9] and data[0]["labels"].tolist() == [1, 2]
    assert collate([data[0], data[1]])["labels"].tolist() == [[-100, 2, -100, 5, 9]]
    sampler = PackingSampler(data.lengths, 3, num_replicas=1, rank=0)  # one sample a block
    pieces = sampler.pieces(data)
    labels = [sampler.collate([pieces[item] for item in items])["labels"][0].tolist() for items in sampler]
    assert sorted(labels) == [[-100, 2], [-100, 5, 9]]
    with pytest.raises(packing.DatasetError, match=r"labelled\.jsonl, line 2, 'labels', position 2: expected 6 \(the"):
        packing.pack(data, 4)  # named by its file and line


def test_collate_reads_every_mask_name() -> None:
    transformers = pytest.importorskip("transformers")
    rows = [
        {"input_ids": [1, 2, 3], "completion_mask": [0, 1, 1], "attention_mask": [1, 1, 1]},
        {"input_ids": [4, 5, 6], "assistant_masks": [1, 0, 1]},
        {"input_ids": [7, 8], "loss_mask": [True, True]},
    ]
    features = [
        {"input_ids": [1, 2, 3], "labels": [-100, 2, 3]},
        {"input_ids": [4, 5, 6], "labels": [4, -100, 6]},
        {"input_ids": [7, 8], "labels": [7, 8]},
    ]
    reference = transformers.DataCollatorWithFlattening(return_flash_attn_kwargs=True, return_position_ids=True)
    assert_same_batch(collate(rows, return_flash_attn_kwargs=True), reference(features))


def test_packed_forward_keeps_documents_apart() -> None:
    """A real model: logits of the collated documents equal those of each document alone (no attention_mask)."""
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64,
    )  # fmt: skip
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    docs = [[3, 4, 5, 6, 7], [8, 9], [10, 11, 12, 13]]
    batch = collate(docs)
    with torch.no_grad():
        packed = model(**batch, use_cache=False).logits[0]
        alone = torch.cat([model(input_ids=torch.tensor([d]), use_cache=False).logits[0] for d in docs])
    torch.testing.assert_close(packed, alone, atol=1e-5, rtol=1e-4)


# ---------------------------------------------------------------- collate_fixed and PackedDataset


def test_collate_fixed_matches_pack() -> None:
    rows = [[1, 2, 3], {"prompt": [4, 5], "completion": [6]}, [7, 8, 9, 10, 11]]
    batch = collate_fixed(8, pad_token_id=99)(rows)
    reference = packing.pack(rows, 8, strategy="next_fit", pad_token_id=99)
    assert set(batch) == {"input_ids", "labels", "position_ids"}
    for key in batch:
        assert batch[key].dtype == torch.int64
        assert batch[key].tolist() == getattr(reference, key).tolist(), key
    assert pickle.loads(pickle.dumps(collate_fixed(8)))([[1]])["input_ids"].tolist() == [[1, 0, 0, 0, 0, 0, 0, 0]]


def test_collate_fixed_one_block_per_sampler_step() -> None:
    samples = [list(range(1, n + 1)) for n in skewed_lengths(300, seed=5, max_seq_length=128).tolist()]
    sampler = PackingSampler([len(s) for s in samples], 128, num_replicas=1, rank=0)
    fixed = collate_fixed(128)
    for indices in sampler:
        batch = fixed([samples[i] for i in indices])
        assert batch["input_ids"].shape == (1, 128)
        assert batch["input_ids"][0, : sum(len(samples[i]) for i in indices)].tolist() == [
            t for i in indices for t in samples[i]
        ]


def packed_example() -> tuple[list[Any], packing.PackedBatch]:
    rng = np.random.default_rng(7)
    rows: list[Any] = []
    for n in rng.integers(1, 20, 60).tolist():
        tokens = rng.integers(1, 500, n).tolist()
        rows.append(tokens if n % 2 else {"prompt": tokens[: n // 2], "completion": tokens[n // 2 :]})
    return rows, packing.pack(rows, 32, strategy="bfd")


def test_packed_dataset_over_a_batch_and_collate_of_blocks() -> None:
    rows, batch = packed_example()
    data = PackedDataset(batch)
    assert len(data) == batch.num_blocks
    item = data[1]
    assert item["input_ids"].tolist() == batch.input_ids[1].tolist()
    assert item["sequence_ids"].dtype == torch.int32 and item["loss_mask"].dtype == torch.int8
    assert item["seq_lengths"].tolist() == batch.seq_lengths(1).tolist()
    # collating blocks gives the padding-free batch of their documents, in order
    documents = [rows[int(i)] for b in (0, 1) for i in dict.fromkeys(batch.sequence_ids[b][batch.sequence_ids[b] >= 0])]
    assert_same_batch(collate([data[0], data[1]]), collate(documents))
    stacked = collate_fixed(32)([data[0], data[1]])
    assert stacked["labels"].tolist() == batch.labels[:2].tolist()
    with pytest.raises(IndexError):
        data[len(data)]


def test_packed_dataset_over_parquet_row_groups(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from packing.layouts._export import write_parquet

    _, batch = packed_example()
    whole = tmp_path / "whole.parquet"
    write_parquet(batch, whole)
    grouped = tmp_path / "grouped.parquet"
    pq.write_table(pq.read_table(whole), grouped, row_group_size=3)  # several row groups
    assert pq.ParquetFile(grouped).num_row_groups > 2
    data = PackedDataset(grouped, cached_row_groups=1)
    assert len(data) == batch.num_blocks
    order = np.random.default_rng(0).permutation(len(data)).tolist()
    reference = PackedDataset(batch)
    for index in order:
        ours, theirs = data[index], reference[index]
        for key in theirs:
            assert ours[key].dtype == theirs[key].dtype and torch.equal(ours[key], theirs[key]), key
    copy = pickle.loads(pickle.dumps(data))
    assert torch.equal(copy[-1]["input_ids"], reference[-1]["input_ids"])
    loader = torch.utils.data.DataLoader(data, batch_size=4, collate_fn=collate)
    assert sum(b["input_ids"].shape[1] for b in loader) == int(batch.stats.packed_tokens)
    table = pa.table({"input_ids": [[1]]})
    pq.write_table(table, tmp_path / "plain.parquet")
    plain = PackedDataset(tmp_path / "plain.parquet")  # TRL wrapped: one block, no boundaries, converted
    assert plain[0]["input_ids"].tolist() == [1] and plain.report.counts() == {"no_document_boundaries": 1}
    (tmp_path / "junk.parquet").write_bytes(b"not parquet")
    with pytest.raises(packing.DatasetError, match="not a Parquet file"):
        PackedDataset(tmp_path / "junk.parquet")


def test_packed_dataset_over_an_arrow_ipc_file(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    _, batch = packed_example()
    path = tmp_path / "blocks.arrow"
    table = batch.to_arrow()
    with pa.ipc.new_file(path, table.schema) as writer:
        for record_batch in table.to_batches(max_chunksize=4):
            writer.write_batch(record_batch)
    data = PackedDataset(path)
    reference = PackedDataset(batch)
    assert len(data) == len(reference)
    for index in np.random.default_rng(1).permutation(len(data)).tolist():
        for key, value in reference[index].items():
            assert data[index][key].dtype == value.dtype and torch.equal(data[index][key], value), key
    (tmp_path / "junk.arrow").write_bytes(b"not arrow")
    with pytest.raises(packing.DatasetError, match="not an Arrow IPC file"):
        PackedDataset(tmp_path / "junk.arrow")


# ---------------------------------------------------------------- imports and the worked example


@pytest.mark.slow
def test_import_packing_does_not_import_torch() -> None:
    code = "import sys, packing; packing.pack([[1]], 2); sys.exit(int('torch' in sys.modules))"
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=False).returncode == 0


def test_a_clear_error_without_torch() -> None:
    code = (
        "import sys; sys.modules['torch'] = None\n"  # as if torch were not installed
        "try:\n    import packing.torch\nexcept ImportError as e:\n    print(e)"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "packing.torch needs PyTorch: pip install torch"


@pytest.mark.slow
def test_two_process_ddp_example_lowers_the_loss() -> None:
    if importlib.util.find_spec("transformers") is None:
        pytest.skip("transformers is not installed")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "train_ddp.py"), "--nproc", "2", "--epochs", "2"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    losses = [float(x) for x in re.findall(r"^step \d+ loss ([\d.]+)$", done.stdout, flags=re.M)]
    epochs = re.findall(r"^epoch (\d+): (\d+) steps, imbalance", done.stdout, flags=re.M)
    assert len(epochs) == 2 and len(losses) == sum(int(steps) for _, steps in epochs) >= 10
    assert np.mean(losses[-3:]) < 0.6 * np.mean(losses[:3])


@pytest.mark.slow
def test_the_ddp_example_on_more_ranks_than_samples_takes_empty_steps() -> None:
    if importlib.util.find_spec("transformers") is None:
        pytest.skip("transformers is not installed")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "train_ddp.py"), "--nproc", "3", "--samples", "2", "--epochs", "2"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    losses = [float(x) for x in re.findall(r"^step \d+ loss ([\d.]+)$", done.stdout, flags=re.M)]
    assert len(losses) == 2 and all(0 < loss < 10 for loss in losses)  # one step an epoch; the empty rank adds 0


@pytest.mark.slow
def test_sampler_benchmark_quick_run() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "sampler.py"), "--quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    rows = [line.split(" | ") for line in done.stdout.splitlines()[2:]]
    assert [row[1] for row in rows] == ["2", "8", "2", "8"]
    assert all(row[7] == "met" for row in rows)
