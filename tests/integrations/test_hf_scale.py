"""Hugging Face ``datasets`` at scale: ``Dataset.map(pack_batch, num_proc=...)`` packs shard by shard and batch by
batch; ``pack_dataset`` plans once over everything, whatever ``num_proc`` prepared the rows."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

datasets = pytest.importorskip("datasets", reason="Hugging Face datasets is not installed")

import packing  # noqa: E402
from packing.hf import pack_batch, pack_dataset  # noqa: E402

COMPARED = ("input_ids", "labels", "loss_mask", "position_ids", "seq_lengths")


def token_rows(n: int, seed: int, max_length: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(1, 1000, int(k)).tolist() for k in rng.integers(1, max_length + 1, n)]


def blocks_of(batch: packing.PackedBatch) -> dict[str, list[Any]]:
    """The blocks as the datasets adapters write them: each row its real tokens only, as TRL's rows."""
    table = batch.to_arrow(padding=False)
    return {
        name: table.column(name).to_pylist()
        for name in ("input_ids", "labels", "loss_mask", "position_ids", "seq_lengths")
    }


def contiguous_shards(n: int, num_proc: int) -> list[tuple[int, int]]:
    """Where ``datasets`` cuts ``n`` rows for ``num_proc`` workers: contiguous, the first ``n % num_proc`` one longer."""
    size, extra = divmod(n, num_proc)
    starts = [i * size + min(i, extra) for i in range(num_proc + 1)]
    return list(itertools.pairwise(starts))


def shard_local(rows: list[list[int]], num_proc: int, batch_size: int, max_seq_length: int) -> dict[str, list[Any]]:
    """Brute force: ``packing.pack`` on every batch of every shard, blocks concatenated in order."""
    out: dict[str, list[Any]] = {name: [] for name in COMPARED}
    for lo, hi in contiguous_shards(len(rows), num_proc):
        for start in range(lo, hi, batch_size):
            part = blocks_of(packing.pack(rows[start : min(start + batch_size, hi)], max_seq_length, strategy="bfd"))
            for name in COMPARED:
                out[name].extend(part[name])
    return out


@pytest.mark.parametrize(("num_proc", "batch_size"), [(1, 40), (2, 40), (2, 1000)])
def test_map_with_num_proc_packs_each_batch_of_each_shard_alone(num_proc: int, batch_size: int) -> None:
    rows = token_rows(170, seed=num_proc + batch_size, max_length=20)
    ds = datasets.Dataset.from_dict({"input_ids": rows})
    packed = ds.map(
        pack_batch,
        batched=True,
        batch_size=batch_size,
        num_proc=num_proc,
        remove_columns=ds.column_names,
        fn_kwargs={"max_seq_length": 24, "strategy": "bfd"},
    )
    expected = shard_local(rows, num_proc, batch_size, 24)
    for name in COMPARED:
        assert packed[name] == expected[name], name


def test_global_packing_after_a_parallel_map_plans_over_every_row() -> None:
    """Rows prepared with ``num_proc`` keep their order; ``pack_dataset`` equals ``pack`` on all of them."""
    rows = token_rows(300, seed=4, max_length=30)
    ds = datasets.Dataset.from_dict({"text": [" ".join(map(str, row)) for row in rows]})
    tokenized = ds.map(lambda row: {"input_ids": [int(t) for t in row["text"].split()]}, num_proc=2)
    packed = pack_dataset(tokenized.remove_columns("text"), 32, strategy="bfd", shuffle=False)
    expected = blocks_of(packing.pack(rows, 32, strategy="bfd"))
    for name in COMPARED:
        assert packed[name] == expected[name], name


def test_shard_local_blocks_are_the_sum_of_per_batch_plans_and_more_than_global() -> None:
    """What shard-local packing costs: a plan per batch, counted from lengths alone, against one plan."""
    rng = np.random.default_rng(7)
    lengths = np.maximum(1, np.rint(rng.lognormal(np.log(40), 1.0, 3000))).astype(np.int64)
    rows = [[1] * int(k) for k in lengths]
    ds = datasets.Dataset.from_dict({"input_ids": rows})
    local = ds.map(
        pack_batch,
        batched=True,
        batch_size=100,
        num_proc=2,
        remove_columns=ds.column_names,
        fn_kwargs={"max_seq_length": 256, "strategy": "bfd"},
    )
    per_batch = sum(
        packing.plan(lengths[s : min(s + 100, hi)], 256, strategy="bfd").num_blocks
        for lo, hi in contiguous_shards(len(lengths), 2)
        for s in range(lo, hi, 100)
    )
    global_blocks = len(pack_dataset(ds, 256, strategy="bfd"))
    bound = -(-int(np.minimum(lengths, 256).sum()) // 256)
    assert len(local) == per_batch
    assert global_blocks == packing.plan(lengths, 256, strategy="bfd").num_blocks
    assert bound <= global_blocks < per_batch  # 30 batches of 100 rows each leave a half-empty last block
