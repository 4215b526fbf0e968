"""Blocks of preference pairs in OpenRLHF's packed convention.

OpenRLHF's reward and DPO datasets (``packing_collate_fn``) pack a batch of pairs into one row: every pair's
``prompt + chosen`` first, then every pair's ``prompt + rejected`` in the same order; ``attention_mask`` numbers the
sequences (1..B the chosen, B+1..2B the rejected; 0 is padding), ``packed_seq_lens`` lists their lengths and the
DPO trainer reads each pair's prompt length (here ``prompt_id_lens``) to leave the prompt out of the log-probabilities.
:func:`openrlhf_pairs` writes the blocks of ``pack(pairs, share_prompt=False)`` that way, one row per block, the
pairs of each block in its order. Its ``attention_mask`` numbers documents, so :func:`packing.audit` reads it as the
``segment_ids`` layout. (TRL's convention is the duplicated layout itself: each prompt + completion a document, the
``trl`` export.) A shared prompt has no such convention: it is written in this project's columns only.

>>> from packing import pack
>>> table = openrlhf_pairs(pack([{"prompt": [1], "chosen": [2], "rejected": [3, 4]}, {"prompt": [5], "chosen": [6],
...                                "rejected": [7]}], 16, strategy="ffd"))
>>> table.to_pydict()  # doctest: +NORMALIZE_WHITESPACE
{'input_ids': [[1, 2, 5, 6, 1, 3, 4, 5, 7]], 'attention_mask': [[1, 1, 2, 2, 3, 3, 3, 4, 4]],
 'position_ids': [[0, 1, 0, 1, 0, 1, 2, 0, 1]], 'packed_seq_lens': [[2, 2, 3, 2]], 'prompt_id_lens': [[1, 1]]}
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from packing.batches._packed import PackedBatch
from packing.core._pairs_groups import PAIR
from packing.errors import SettingError

if TYPE_CHECKING:  # pragma: no cover - typing only
    import pyarrow as pa


def openrlhf_pairs(batch: PackedBatch) -> pa.Table:
    """The blocks of ``batch`` (preference pairs, ``share_prompt=False``) in OpenRLHF's packed pair convention (see
    the module): ``input_ids``, ``attention_mask`` (the sequences numbered, chosen first), ``position_ids`` (restarting
    at each, as OpenRLHF's models make them from the lengths), ``packed_seq_lens`` and
    ``prompt_id_lens``, one row per block, real tokens only; the pairs of a block in the block's order. O(tokens).
    """
    import pyarrow as pa

    units = batch.units
    if units is None or units.share_prompt or bool((units.kind[np.unique(batch.plan.piece_sequence)] != PAIR).any()):
        raise SettingError("batch", "blocks of preference pairs only, packed with share_prompt=False", "<other blocks>")
    prompt, offsets, lengths = units.prompt_lengths, units.completion_offsets, units.completion_lengths
    names = ("input_ids", "attention_mask", "position_ids", "packed_seq_lens", "prompt_id_lens")
    columns: dict[str, list[Any]] = {name: [] for name in names}
    ids = batch.input_ids
    for block in range(batch.num_blocks):
        lo, hi = int(batch.plan.block_starts[block]), int(batch.plan.block_starts[block + 1])
        pairs = batch.plan.piece_sequence[lo:hi].astype(np.int64)
        at = 0
        chosen: list[Any] = []
        rejected: list[Any] = []
        for unit in pairs.tolist():
            first = int(offsets[unit])
            sizes = [int(prompt[unit] + lengths[first]), int(prompt[unit] + lengths[first + 1])]
            chosen.append(ids[block, at : at + sizes[0]])
            rejected.append(ids[block, at + sizes[0] : at + sizes[0] + sizes[1]])
            at += sum(sizes)
        count = len(pairs)
        sequences = chosen + rejected
        columns["input_ids"].append(np.concatenate(sequences).tolist())
        columns["attention_mask"].append(np.repeat(np.arange(1, 2 * count + 1), [len(s) for s in sequences]).tolist())
        columns["position_ids"].append(np.concatenate([np.arange(len(s)) for s in sequences]).tolist())
        columns["packed_seq_lens"].append([len(s) for s in sequences])
        columns["prompt_id_lens"].append(prompt[pairs].tolist())
    return pa.table(columns)
