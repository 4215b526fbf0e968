"""Run TRL's real ``pack_dataset`` on sequences of given lengths and read back which piece of which sequence
each of its blocks holds, to compare with this project's plans."""

from __future__ import annotations

from collections.abc import Sequence

STRIDE = 100_000
"""Token ``sequence * STRIDE + position``: every token says where it came from (lengths stay below STRIDE)."""


def tokens_of(lengths: Sequence[int]) -> list[list[int]]:
    """Rows of these lengths whose tokens name their sequence and position."""
    return [[i * STRIDE + k for k in range(n)] for i, n in enumerate(lengths)]


def trl_blocks(lengths: Sequence[int], seq_length: int, strategy: str = "bfd") -> list[list[tuple[int, int, int]]]:
    """TRL's blocks for sequences of ``lengths``: each a list of ``(sequence, start, length)`` pieces in block
    order (for ``wrapped``, which keeps no boundaries, the runs of one sequence inside the block)."""
    from datasets import Dataset
    from trl import pack_dataset

    packed = pack_dataset(Dataset.from_dict({"input_ids": tokens_of(lengths)}), seq_length, strategy=strategy)
    blocks = []
    for row in packed:
        ids = row["input_ids"]
        runs = row["seq_lengths"] if "seq_lengths" in row else _runs(ids)
        pieces, at = [], 0
        for run in runs:
            first = ids[at]
            pieces.append((first // STRIDE, first % STRIDE, run))
            at += run
        blocks.append(pieces)
    return blocks


def _runs(ids: Sequence[int]) -> list[int]:
    """Lengths of the runs of consecutive tokens of one sequence."""
    runs: list[int] = []
    for k, token in enumerate(ids):
        if k and token // STRIDE == ids[k - 1] // STRIDE and token == ids[k - 1] + 1:
            runs[-1] += 1
        else:
            runs.append(1)
    return runs
