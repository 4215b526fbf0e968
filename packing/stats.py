"""What a packing cost and what it lost, in numbers."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt

Int64Array = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class PackingStats:
    """Statistics of one packing. Every token that was cut or dropped is counted here.

    ``lower_bound`` is ceil(packed_tokens / max_seq_length); ``efficiency`` is
    packed_tokens / (num_blocks × max_seq_length); ``block_utilization[b]`` is
    the fraction of block b that holds real tokens.
    """

    max_seq_length: int
    num_sequences: int
    empty_sequences: int
    num_blocks: int
    lower_bound: int
    input_tokens: int
    packed_tokens: int
    padding_tokens: int
    efficiency: float
    tokens_truncated: int
    tokens_dropped: int
    sequences_truncated: int
    sequences_dropped: int
    sequences_split: int
    trainable_tokens: int
    samples_without_trainable_tokens: int
    block_utilization: FloatArray = field(repr=False, compare=False)

    @property
    def tokens_lost(self) -> int:
        """Tokens that are in the input but in no block (truncated or dropped)."""
        return self.tokens_truncated + self.tokens_dropped

    def summary(self) -> dict[str, Any]:
        """The scalar statistics as a plain dict (for tables, JSON and logs)."""
        values = asdict(self)
        values.pop("block_utilization")
        values["tokens_lost"] = self.tokens_lost
        return values

    def with_trainable(self, trainable_tokens: int, samples_without_trainable_tokens: int) -> PackingStats:
        """A copy with the loss-mask counts filled in from real masks."""
        return replace(
            self,
            trainable_tokens=trainable_tokens,
            samples_without_trainable_tokens=samples_without_trainable_tokens,
        )


def compute_stats(
    lengths: Int64Array,
    capacity: int,
    block_starts: Int64Array,
    piece_sequence: Int64Array,
    piece_length: Int64Array,
) -> PackingStats:
    """Statistics of a plan, assuming every packed token is trainable. O(n + pieces)."""
    num_blocks = len(block_starts) - 1
    kept = np.bincount(piece_sequence, weights=piece_length, minlength=len(lengths)).astype(np.int64)
    pieces = np.bincount(piece_sequence, minlength=len(lengths))
    present = pieces > 0
    nonempty = lengths > 0
    dropped = nonempty & ~present
    truncated = present & (kept < lengths)
    packed_tokens = int(kept.sum())
    input_tokens = int(lengths.sum())
    slots = num_blocks * capacity
    fill = np.add.reduceat(piece_length, block_starts[:-1]) if num_blocks else np.zeros(0, dtype=np.int64)
    return PackingStats(
        max_seq_length=capacity,
        num_sequences=len(lengths),
        empty_sequences=int((~nonempty).sum()),
        num_blocks=num_blocks,
        lower_bound=-(-packed_tokens // capacity),
        input_tokens=input_tokens,
        packed_tokens=packed_tokens,
        padding_tokens=slots - packed_tokens,
        efficiency=packed_tokens / slots if slots else 1.0,
        tokens_truncated=int((lengths - kept)[truncated].sum()),
        tokens_dropped=int(lengths[dropped].sum()),
        sequences_truncated=int(truncated.sum()),
        sequences_dropped=int(dropped.sum()),
        sequences_split=int((pieces > 1).sum()),
        trainable_tokens=packed_tokens,
        samples_without_trainable_tokens=0,
        block_utilization=fill / capacity,
    )
