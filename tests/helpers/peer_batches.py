"""Rows as transformers' and TRL's collators take them, and a key-for-key comparison of two batches (torch
tensors or numpy arrays), shared by the collate tests and the peers' published cases."""

from __future__ import annotations

from typing import Any

import numpy as np


def as_transformers_feature(row: Any) -> dict[str, list[int]]:
    """The same document as transformers' collators take it: ``input_ids``, and ``labels`` (-100 = no loss) when
    the row masks tokens (a prompt, a loss mask)."""
    if isinstance(row, list):
        return {"input_ids": row}
    if "prompt" in row:
        return {
            "input_ids": row["prompt"] + row["completion"],
            "labels": [-100] * len(row["prompt"]) + row["completion"],
        }
    return {
        "input_ids": row["input_ids"],
        "labels": [t if m else -100 for t, m in zip(row["input_ids"], row["loss_mask"], strict=True)],
    }


def as_features(rows: list[Any]) -> list[dict[str, list[int]]]:
    """``rows`` as features, each with ``labels`` when any has them (transformers reads labels for every
    feature when the first has them)."""
    features = [as_transformers_feature(row) for row in rows]
    if any("labels" in f for f in features):
        features = [{"labels": f["input_ids"], **f} for f in features]
    return features


def assert_same_batch(ours: dict[str, Any], theirs: dict[str, Any]) -> None:
    """Same keys; every array of the same type, dtype, shape and values; every other value equal and of one type."""
    assert set(ours) == set(theirs), (sorted(ours), sorted(theirs))
    for key, value in theirs.items():
        mine = ours[key]
        if hasattr(value, "shape"):
            assert type(mine) is type(value), key
            assert mine.dtype == value.dtype, (key, mine.dtype, value.dtype)
            assert tuple(mine.shape) == tuple(value.shape), key
            assert np.array_equal(np.asarray(mine), np.asarray(value)), key
        else:
            assert type(mine) is type(value) and mine == value, key


IGNORE = -100


def expected_flat(blocks: list[dict[str, Any]]) -> dict[str, list[int]]:
    """What a padding-free batch of these blocks must be, from their documents: tokens in order, positions
    restarting per document, labels the block's but -100 at each document's first token."""
    ids: list[int] = []
    positions: list[int] = []
    labels: list[int] = []
    for block in blocks:
        at = 0
        block_ids, block_labels = list(block["input_ids"]), list(block["labels"])
        for n in block["seq_lengths"]:
            ids += block_ids[at : at + n]
            positions += list(range(n))
            labels += [IGNORE, *block_labels[at + 1 : at + n]]
            at += n
    return {"input_ids": ids, "position_ids": positions, "labels": labels}


def check_trl_reads(blocks: list[dict[str, Any]]) -> dict[str, Any]:
    """TRL's own padding-free collator (``DataCollatorForLanguageModeling(padding_free=True)``, what ``SFTTrainer``
    uses for packed rows) on ``blocks``: its batch holds every document of the blocks, apart. Returns the batch."""
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    batch = dict(DataCollatorForLanguageModeling(pad_token_id=0, padding_free=True)(blocks))
    want = expected_flat(blocks)
    for name in ("input_ids", "position_ids", "labels"):
        assert batch[name][0].tolist() == want[name], name
    lengths = [int(n) for block in blocks for n in block["seq_lengths"]]
    assert batch["cu_seq_lens_q"].tolist() == np.concatenate(([0], np.cumsum(lengths))).tolist()
    return batch
