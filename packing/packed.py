"""Materializing a plan: token arrays a trainer can consume."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import numpy.typing as npt

from packing.errors import SettingError
from packing.kernels import fill_blocks, piece_mask_sums
from packing.plans import PackingPlan, check_pieces, plan
from packing.reader import Samples, read_rows
from packing.recipe import Recipe, RecipeOptions
from packing.schema import record, to_arrow
from packing.stats import PackingStats
from packing.strategies import StrategyName
from packing.validation import OverflowPolicy, check_token_id
from packing.weighting import LossMode, LossTotals, token_weights

if TYPE_CHECKING:  # pragma: no cover - typing only
    from typing import Unpack

    import pyarrow as pa

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

    >>> b = pack([[1, 2], {"prompt": [3], "completion": [4, 5]}], 4, strategy="split")
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

    def loss_weights(self, mode: LossMode, total: float | LossTotals | None = None) -> npt.NDArray[np.float32]:
        """Per-token float32 weights aligned with ``labels`` (0 where the label is -100) such that
        ``Σ weights × per-token cross-entropy`` is the objective ``mode``: ``token``, ``sequence``,
        ``sequence_sum`` or ``sqrt`` (``packing.weighting``). A document is a source sample (``sequence_ids``),
        its pieces in several blocks counted together. ``total`` is the mode's normaliser over the whole
        optimizer step (trained tokens, documents, or Σ√trained; or a ``LossTotals``) when this batch is one
        part of it; default: this batch's own. O(blocks × max_seq_length).

        >>> b = pack([[1, 2, 3, 4, 5], [6, 7]], 8)
        >>> (b.loss_weights("token") * 5).tolist()
        [[0.0, 1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0]]
        >>> b.loss_weights("sequence").tolist()
        [[0.0, 0.125, 0.125, 0.125, 0.125, 0.0, 0.5, 0.0]]
        """
        return token_weights(self.labels != IGNORE_INDEX, self.sequence_ids, mode, total)

    def to_lists(self) -> tuple[list[list[int]], list[list[int]]]:
        """The classic ``(blocks, loss_masks)`` as lists of lists of ints."""
        return self.input_ids.tolist(), self.loss_mask.astype(np.int64).tolist()

    def block(self, index: int) -> dict[str, list[int]]:
        """Block ``index`` as a plain dict of the schema's columns (``packing.schema.COLUMNS``)."""
        return record(self, index)

    def iter_blocks(self) -> Iterator[dict[str, list[int]]]:
        """Every block as a plain dict of lists, in order. O(num_blocks × max_seq_length)."""
        for index in range(self.num_blocks):
            yield self.block(index)

    def to_arrow(self, order: npt.ArrayLike | None = None, loss_weights: LossMode | None = None) -> pa.Table:
        """The blocks as a ``pyarrow.Table`` of the schema's columns, one row per block, in ``order``
        (default: plan order); with ``loss_weights`` (an objective), also that column, normalised over every
        block of this batch. O(blocks × max_seq_length).

        >>> pack([[1, 2], [3]], 4).to_arrow().column_names
        ['input_ids', 'labels', 'loss_mask', 'position_ids', 'sequence_ids', 'seq_lengths']
        >>> pack([[1, 2], [3]], 4).to_arrow(loss_weights="sequence").column("loss_weights").to_pylist()
        [[0.0, 1.0, 0.0, 0.0]]
        """
        return to_arrow(self, order, loss_weights)


def materialize(
    layout: PackingPlan, samples: Samples, pad_token_id: int = 0, blocks: npt.ArrayLike | None = None
) -> PackedBatch:
    """Fill a plan's pieces with the samples' tokens. O(num_blocks × max_seq_length), one compiled pass.

    ``blocks`` picks the blocks to build, in order (``layout.select(blocks)``); the result's plan is
    that selection. The plan must have been made for these samples' lengths.

    >>> samples = read_rows([[1, 2], [3, 4, 5], [6]])
    >>> materialize(plan(samples.lengths, 4, "ffd"), samples).input_ids.tolist()
    [[3, 4, 5, 6], [1, 2, 0, 0]]
    >>> materialize(plan(samples.lengths, 4, "ffd"), samples, blocks=[1]).input_ids.tolist()
    [[1, 2, 0, 0]]
    """
    pad = check_token_id(pad_token_id, "pad_token_id")
    if not isinstance(samples, Samples):
        raise SettingError("samples", "a Samples (packing.read_rows)", type(samples).__name__)
    if samples.tokens is None or samples.loss_mask is None:
        raise SettingError("samples", "token ids (lengths-only data can be planned, not packed)", "<lengths only>")
    if not np.array_equal(layout.lengths, samples.lengths):
        raise SettingError(
            "plan",
            f"a plan for these {len(samples.lengths)} samples' lengths (plan(samples.lengths, ...))",
            f"<a plan for {len(layout.lengths)} sequences of other lengths>",
        )
    check_pieces(layout)
    if blocks is not None:
        layout = layout.select(blocks)
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


class TrainableCounts(NamedTuple):
    """Loss-mask statistics of a plan filled with samples (see ``PackingStats``)."""

    trainable_tokens: int
    target_tokens: int
    samples_without_trainable_tokens: int


def count_trainable(layout: PackingPlan, samples: Samples) -> TrainableCounts:
    """Trainable tokens kept, the training targets among them (not a document's first token), and packed
    samples with no target, without building any block. O(total tokens).

    >>> samples = read_rows([{"prompt": [1, 2], "completion": [3, 4]}, [5]])
    >>> count_trainable(plan(samples.lengths, 4, "ffd"), samples)
    TrainableCounts(trainable_tokens=3, target_tokens=2, samples_without_trainable_tokens=1)
    """
    if samples.loss_mask is None:
        raise SettingError("samples", "token ids with their loss mask", "<lengths only>")
    per_piece, targets = piece_mask_sums(
        samples.loss_mask, samples.offsets, layout.piece_sequence, layout.piece_start, layout.piece_length
    )
    per_sample = np.bincount(layout.piece_sequence, weights=targets, minlength=len(samples.lengths))
    packed = np.bincount(layout.piece_sequence, minlength=len(samples.lengths)) > 0
    return TrainableCounts(int(per_piece.sum()), int(targets.sum()), int((packed & (per_sample == 0)).sum()))


def pack(
    samples: Any,
    max_seq_length: int | None = None,
    strategy: StrategyName | None = None,
    overflow: OverflowPolicy | None = None,
    *,
    recipe: Recipe | None = None,
    **options: Unpack[RecipeOptions],
) -> PackedBatch:
    """Pack samples into blocks of exactly ``max_seq_length`` tokens: ``plan`` then ``materialize``.

    ``samples`` is a list of rows in any form the reader accepts (token lists, ``{"prompt",
    "completion"}``, ``{"input_ids", "loss_mask"}``; see ``packing.reader``), a ``Samples``, or a
    dataset from ``packing.read_dataset`` (read once, not checked again). The options are every entry
    point's (:class:`~packing.Recipe`, or ``recipe=``): ``strategy`` (default ``bfd``) and the
    strategy options are ``plan``'s; with a ``tokenizer`` (``packing.load_tokenizer``'s specs:
    ``"bytes"``, a folder, a tokenizer object), text rows are tokenized with their chat template and
    masks, and padding is the tokenizer's pad id unless ``pad_token_id`` is given. O(total tokens)
    plus the strategy's cost.

    >>> pack([[1, 2], [3, 4, 5], [6]], 4, strategy="split").to_lists()
    ([[1, 2, 3, 4], [5, 6, 0, 0]], [[1, 1, 1, 1], [1, 1, 0, 0]])
    >>> pack([[1, 2], [3, 4, 5], [6]], 4).to_lists()[0]
    [[3, 4, 5, 6], [1, 2, 0, 0]]
    >>> pack([{"text": "hi"}], 4, tokenizer="bytes").input_ids.tolist()  # the byte tokenizer pads with 257
    [[104, 105, 256, 257]]
    """
    chosen = Recipe.of(recipe, max_seq_length, strategy=strategy, overflow=overflow, **options)
    flat = read_rows(getattr(samples, "samples", samples), **chosen.read_options())
    return materialize(plan(flat.lengths, recipe=chosen), flat, chosen.pad_id)
