"""The documents of packed blocks (sample, token ids, labels), read back from what an entry point gives: how the
tests compare every door with ``pack``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

import packing
import packing.torch as pt
from packing import Recipe

Document = tuple[int, tuple[int, ...], tuple[int, ...]]


def documents(blocks: Iterable[Mapping[str, Any]]) -> tuple[list[Document], set[int]]:
    """Every document of some blocks of the schema's columns (sample, tokens, labels), sorted; the padding ids."""
    found: list[Document] = []
    pads: set[int] = set()
    for block in blocks:
        ids, labels, sequences = (np.asarray(block[k]).tolist() for k in ("input_ids", "labels", "sequence_ids"))
        at = 0
        for n in np.asarray(block["seq_lengths"]).tolist():
            found.append((sequences[at], tuple(ids[at : at + n]), tuple(labels[at : at + n])))
            at += n
        pads.update(ids[at:])
    return sorted(found), pads


def sampled_documents(lengths: Any, recipe: Recipe, data: Any) -> list[Document]:
    """Every document of every batch ``PackingSampler`` + its ``collate`` make of ``data`` (sample, ids, labels),
    sorted; no batch longer than the recipe's ``max_seq_length``."""
    sampler = pt.PackingSampler(lengths, recipe=recipe, num_replicas=1, rank=0)
    pieces = sampler.pieces(data)
    found: list[Document] = []
    for items in sampler:
        batch = sampler.collate([pieces[item] for item in items], return_flash_attn_kwargs=True)
        assert batch["input_ids"].shape[1] <= recipe.max_seq_length
        cu = batch["cu_seq_lens_q"].tolist()
        ids, labels = batch["input_ids"][0].tolist(), batch["labels"][0].tolist()
        for item, lo, hi in zip(items, cu[:-1], cu[1:], strict=True):
            sample = item.sequence if isinstance(item, packing.Piece) else item
            found.append((sample, tuple(ids[lo:hi]), tuple(labels[lo:hi])))
    return sorted(found)
