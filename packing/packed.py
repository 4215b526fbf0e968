"""Materializing a plan: token arrays a trainer can consume."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from packing.kernels import fill_blocks
from packing.plan import PackingPlan, plan
from packing.samples import Samples, read_samples
from packing.stats import PackingStats
from packing.validation import check_max_seq_length, check_token_id

Int64Array = npt.NDArray[np.int64]
IGNORE_INDEX = -100
"""Label value that Hugging Face losses skip."""


@dataclass(frozen=True)
class PackedBatch:
    """Packed blocks. Every array has shape ``(num_blocks, max_seq_length)``, padding at the end of each block.

    - ``input_ids``: token ids, ``pad_token_id`` in padding.
    - ``loss_mask``: 1 for a real token that is trained on, 0 for padding or a masked (prompt) token.
    - ``labels``: ``input_ids`` with -100 where there is no loss and at the first token of every document,
      so no token learns to predict the start of an unrelated sample.
    - ``position_ids``: 0, 1, 2, ... restarting at every document in a block; 0 in padding.
    - ``sequence_ids``: index of the source sample of each token, -1 in padding (int32; the others are int64,
      ``loss_mask`` int8).

    >>> b = pack([[1, 2], {"prompt": [3], "completion": [4, 5]}], 4)
    >>> b.input_ids.tolist()
    [[1, 2, 3, 4], [5, 0, 0, 0]]
    >>> b.labels.tolist()
    [[-100, 2, -100, 4], [-100, -100, -100, -100]]
    >>> b.position_ids.tolist()
    [[0, 1, 0, 1], [0, 0, 0, 0]]
    """

    plan: PackingPlan
    input_ids: Int64Array
    labels: Int64Array
    loss_mask: npt.NDArray[np.int8]
    position_ids: Int64Array
    sequence_ids: npt.NDArray[np.int32]
    pad_token_id: int
    stats: PackingStats

    @property
    def num_blocks(self) -> int:
        return self.plan.num_blocks

    @property
    def max_seq_length(self) -> int:
        return self.plan.max_seq_length

    def seq_lengths(self, block: int) -> Int64Array:
        """Lengths of the documents in ``block``, in order."""
        return self.plan.seq_lengths(block)

    def cu_seqlens(self, block: int) -> Int64Array:
        """0, then cumulative document lengths of ``block`` (flash-attention ``cu_seqlens``)."""
        return self.plan.cu_seqlens(block)

    def attention_mask(self, block: int) -> npt.NDArray[np.bool_]:
        """Block-diagonal causal mask of ``block``: ``mask[q, k]`` is True when query q may attend to key k.

        No attention across documents or into padding. O(max_seq_length²).

        >>> pack([[1, 2], [3]], 4).attention_mask(0).astype(int).tolist()
        [[1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 0]]
        """
        lengths = self.seq_lengths(block)
        document = np.full(self.max_seq_length, -1, dtype=np.int64)
        document[: int(lengths.sum())] = np.repeat(np.arange(len(lengths)), lengths)
        same = (document[:, None] == document[None, :]) & (document[:, None] >= 0)
        return np.tril(same)

    def to_lists(self) -> tuple[list[list[int]], list[list[int]]]:
        """The classic ``(blocks, loss_masks)`` as lists of lists of ints."""
        return self.input_ids.tolist(), self.loss_mask.astype(np.int64).tolist()

    def block(self, index: int) -> dict[str, list[int]]:
        """Block ``index`` as a plain dict of lists (for JSON lines, Parquet, datasets)."""
        return {
            "input_ids": self.input_ids[index].tolist(),
            "labels": self.labels[index].tolist(),
            "loss_mask": self.loss_mask[index].astype(np.int64).tolist(),
            "position_ids": self.position_ids[index].tolist(),
            "sequence_ids": self.sequence_ids[index].tolist(),
            "seq_lengths": self.seq_lengths(index).tolist(),
            "cu_seqlens": self.cu_seqlens(index).tolist(),
        }

    def iter_blocks(self) -> Iterator[dict[str, list[int]]]:
        """Every block as a plain dict of lists, in order. O(num_blocks × max_seq_length)."""
        for index in range(self.num_blocks):
            yield self.block(index)


def materialize(layout: PackingPlan, samples: Samples, pad_token_id: int = 0) -> PackedBatch:
    """Fill a plan's pieces with the samples' tokens. O(num_blocks × max_seq_length), one compiled pass.

    The plan must have been made for these samples' lengths; its pieces are checked before any write.

    >>> samples = read_samples([[1, 2], [3, 4, 5], [6]])
    >>> materialize(plan(samples.lengths, 4, "ffd"), samples).input_ids.tolist()
    [[3, 4, 5, 6], [1, 2, 0, 0]]
    """
    pad = check_token_id(pad_token_id, "pad_token_id")
    if not np.array_equal(layout.lengths, samples.lengths):
        raise ValueError(
            f"the plan was made for {len(layout.lengths)} sequences of other lengths than these "
            f"{len(samples.lengths)} samples; plan with plan(samples.lengths, ...)"
        )
    _check_pieces(layout)
    shape = (layout.num_blocks, layout.max_seq_length)
    input_ids = np.empty(shape, dtype=np.int64)
    labels = np.empty(shape, dtype=np.int64)
    loss_mask = np.empty(shape, dtype=np.int8)
    position_ids = np.empty(shape, dtype=np.int64)
    sequence_ids = np.empty(shape, dtype=np.int32)
    fill_blocks(
        samples.tokens,
        samples.loss_mask,
        samples.offsets,
        layout.block_starts,
        layout.piece_sequence,
        layout.piece_start,
        layout.piece_length,
        pad,
        IGNORE_INDEX,
        input_ids,
        labels,
        loss_mask,
        position_ids,
        sequence_ids,
    )
    stats = layout.stats
    if not samples.loss_mask.all():
        stats = stats.with_trainable(*count_trainable(layout, samples))
    return PackedBatch(layout, input_ids, labels, loss_mask, position_ids, sequence_ids, pad, stats)


def _check_pieces(layout: PackingPlan) -> None:
    """Refuse a plan whose pieces would write outside its blocks or read outside its sequences. O(pieces)."""
    starts, sequence = layout.block_starts, layout.piece_sequence
    first, length = layout.piece_start.astype(np.int64), layout.piece_length.astype(np.int64)
    problem = ""
    if len(starts) == 0 or starts[0] != 0 or starts[-1] != len(sequence) or np.any(np.diff(starts) < 1):
        problem = "block_starts must rise from 0 to the number of pieces, every block holding a piece"
    elif not (len(sequence) == len(first) == len(length)):
        problem = "the piece arrays differ in length"
    elif len(length) and (length.min() < 1 or first.min() < 0):
        problem = "every piece needs a length >= 1 and a start >= 0"
    elif len(sequence) and (sequence.min() < 0 or sequence.max() >= len(layout.lengths)):
        problem = "a piece names a sequence the plan does not have"
    elif len(length) and np.any(first + length > layout.lengths[sequence]):
        problem = "a piece reaches past the end of its sequence"
    elif layout.num_blocks and np.add.reduceat(length, starts[:-1]).max(initial=0) > layout.max_seq_length:
        problem = f"a block holds more than max_seq_length={layout.max_seq_length} tokens"
    if problem:
        raise ValueError(f"invalid plan: {problem}")


class TrainableCounts(NamedTuple):
    """Loss-mask statistics of a plan filled with samples (see ``PackingStats``)."""

    trainable_tokens: int
    target_tokens: int
    samples_without_trainable_tokens: int


def count_trainable(layout: PackingPlan, samples: Samples) -> TrainableCounts:
    """Trainable tokens kept, the training targets among them (not a document's first token), and packed
    samples with no target, without building any block. O(total tokens).

    >>> samples = read_samples([{"prompt": [1, 2], "completion": [3, 4]}, [5]])
    >>> count_trainable(plan(samples.lengths, 4, "ffd"), samples)
    TrainableCounts(trainable_tokens=3, target_tokens=2, samples_without_trainable_tokens=1)
    """
    trained = np.concatenate(([0], np.cumsum(samples.loss_mask, dtype=np.int64)))
    first = samples.offsets[layout.piece_sequence] + layout.piece_start
    end = first + layout.piece_length
    per_piece = trained[end] - trained[first]
    targets = trained[end] - trained[first + 1]
    per_sample = np.bincount(layout.piece_sequence, weights=targets, minlength=len(samples.lengths))
    packed = np.bincount(layout.piece_sequence, minlength=len(samples.lengths)) > 0
    return TrainableCounts(int(per_piece.sum()), int(targets.sum()), int((packed & (per_sample == 0)).sum()))


def pack(
    samples: Any,
    max_seq_length: int,
    strategy: str = "split",
    overflow: str = "truncate",
    pad_token_id: int = 0,
    completion_only_loss: bool = True,
    max_sequences_per_block: int | None = None,
) -> PackedBatch:
    """Pack samples into blocks of exactly ``max_seq_length`` tokens: ``plan`` then ``materialize``.

    ``samples`` items are token lists (all trained on), ``{"prompt", "completion"}`` dicts (loss on the
    completion only, unless ``completion_only_loss=False``) or ``{"input_ids", "loss_mask"}`` dicts.
    O(total tokens) plus the strategy's cost.

    >>> pack([[1, 2], [3, 4, 5], [6]], 4).to_lists()
    ([[1, 2, 3, 4], [5, 6, 0, 0]], [[1, 1, 1, 1], [1, 1, 0, 0]])
    >>> pack([[1, 2], [3, 4, 5], [6]], 4, strategy="ffd").to_lists()[0]
    [[3, 4, 5, 6], [1, 2, 0, 0]]
    """
    check_max_seq_length(max_seq_length)
    pad = check_token_id(pad_token_id, "pad_token_id")
    if not isinstance(completion_only_loss, bool):
        raise TypeError(f"completion_only_loss must be True or False, got {completion_only_loss!r}")
    flat = read_samples(samples, completion_only_loss)
    layout = plan(flat.lengths, max_seq_length, strategy, overflow, max_sequences_per_block)
    return materialize(layout, flat, pad)
