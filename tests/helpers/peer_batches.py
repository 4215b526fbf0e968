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
