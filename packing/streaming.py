"""Streaming packing: blocks from an iterable of samples of any length, in memory bounded by a buffer.

``stream(samples, max_seq_length)`` reads samples into a buffer of ``buffer_size``, packs the buffer with a
strategy (``bfd`` by default), yields its blocks, and carries the documents of under-filled blocks into the
next buffer (once each), so the blocks are nearly as full as when packing the whole dataset at once. Every
token of every sample comes out exactly once (up to the overflow policy); memory depends on ``buffer_size``,
never on the length of the stream. ``stream_dataset`` wraps a Hugging Face ``IterableDataset``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import numpy.typing as npt

from packing.errors import SampleError, SettingError
from packing.packed import LazyBatch
from packing.plans import plan
from packing.reader import Samples, TokenArray, all_ones, read_rows
from packing.schema import COLUMNS
from packing.strategies import STRATEGIES, StrategyName
from packing.validation import OverflowPolicy, check_max_seq_length, check_positive_int

Int64Array = npt.NDArray[np.int64]
Block = dict[str, npt.NDArray[Any]]

CHUNK_BLOCKS = 256
"""Blocks materialized at once."""
CARRY_BELOW = 0.99
"""A block filled below this fraction of ``max_seq_length`` goes back into the buffer (each document once)."""


def _tokens(samples: Samples) -> TokenArray:
    assert samples.tokens is not None  # checked when read
    return samples.tokens


def _mask(samples: Samples) -> npt.NDArray[np.int8]:
    assert samples.loss_mask is not None  # checked when read
    return samples.loss_mask


def _unmasked(mask: npt.NDArray[np.int8]) -> bool:
    """Whether ``mask`` is the reader's all-ones view (no memory of its own). O(1)."""
    return mask.size == 0 or (mask.strides[0] == 0 and bool(mask[0]))


def _concat(parts: list[Samples]) -> Samples:
    """One ``Samples`` from several, in order; the parts that hold tokens are copied once, a part alone
    is returned as it is. Tokens stay int32 when every part's are. O(tokens)."""
    parts = [part for part in parts if len(part)]
    if len(parts) == 1:
        return parts[0]
    offsets = [np.zeros(1, dtype=np.int64)]
    base = 0
    for part in parts:
        offsets.append(part.offsets[1:] + base)
        base += int(part.offsets[-1])
    tokens = np.concatenate([_tokens(p) for p in parts]) if parts else np.zeros(0, dtype=np.int32)
    masks = [_mask(p) for p in parts]
    if all(_unmasked(mask) for mask in masks):
        mask = all_ones(len(tokens))
    else:
        mask = np.concatenate(masks).astype(np.int8, copy=False)
    return Samples(tokens, mask, np.concatenate(offsets))


def _subset(samples: Samples, rows: Int64Array) -> Samples:
    """The samples ``rows``, in that order. O(their tokens)."""
    lengths = samples.lengths[rows]
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    index = np.repeat(samples.offsets[:-1][rows] - offsets[:-1], lengths) + np.arange(offsets[-1], dtype=np.int64)
    mask = _mask(samples)
    return Samples(_tokens(samples)[index], all_ones(len(index)) if _unmasked(mask) else mask[index], offsets)


def _capped(carry: npt.NDArray[np.bool_], fill: Int64Array, count: Int64Array, limit: int) -> npt.NDArray[np.bool_]:
    """``carry`` kept for the emptiest blocks only, at most ``limit`` documents in all. O(blocks log blocks)."""
    if int(count[carry].sum()) <= limit:
        return carry
    candidates = np.flatnonzero(carry)
    candidates = candidates[np.argsort(fill[candidates], kind="stable")]
    chosen = candidates[np.cumsum(count[candidates]) <= limit]
    capped = np.zeros_like(carry)
    capped[chosen] = True
    return capped


def _read(rows: list[Any], first: int, completion_only_loss: bool) -> Samples:
    """Read a buffer of rows; an error names the sample by its position in the stream."""
    try:
        samples = read_rows(rows, completion_only_loss)
    except SampleError as error:
        if error.sample is not None:
            error.sample += first
            error.args = (error.where_and_what(),)
        raise
    if samples.tokens is None:
        raise SettingError("samples", "samples with token ids", "<lengths only>")
    return samples


def stream(
    samples: Iterable[Any],
    max_seq_length: int,
    *,
    buffer_size: int = 10_000,
    strategy: StrategyName = "bfd",
    overflow: OverflowPolicy = "truncate",
    pad_token_id: int = 0,
    completion_only_loss: bool = True,
    seed: int | None = 0,
    int64: bool = False,
) -> Iterator[Block]:
    """Pack an iterable of samples (any form ``pack`` accepts, any length, read once) into blocks of
    ``max_seq_length`` tokens, holding at most ``buffer_size`` samples at a time.

    Yields one dict per block with the packed schema's columns as numpy arrays: ``input_ids``, ``labels``,
    ``position_ids`` (int32; int64 with ``int64``), ``loss_mask`` (int8), ``sequence_ids`` (int32; the sample's position in the stream,
    counted from its start; -1 in padding), all of length ``max_seq_length``, and ``seq_lengths`` (int32, the
    block's documents). Each buffer is packed with ``strategy``; documents of blocks filled below 99 % are carried
    into the next buffer once; the blocks of a buffer come out in a random order from ``seed`` (``None``: plan
    order). The last buffer is flushed whole. O(tokens) plus the strategy's cost per buffer; memory
    O(buffer_size × sample length), independent of the stream's length: the buffer holds each token once
    (4 bytes for 32-bit ids, 8 otherwise, plus 1 when masked), the rows as given are let go once read, and
    blocks are made 256 at a time.

    >>> blocks = list(stream([[1, 2, 3], [4, 5], [6, 7, 8, 9]], 5, seed=None))
    >>> [b["input_ids"].tolist() for b in blocks]
    [[6, 7, 8, 9, 0], [1, 2, 3, 4, 5]]
    >>> [b["sequence_ids"].tolist() for b in blocks]
    [[2, 2, 2, 2, -1], [0, 0, 0, 1, 1]]
    """
    capacity = check_max_seq_length(max_seq_length)
    size = check_positive_int(buffer_size, "buffer_size")
    if strategy not in STRATEGIES or STRATEGIES[strategy].splits_sequences:
        choices = ", ".join(name for name, s in STRATEGIES.items() if not s.splits_sequences)
        raise SettingError("strategy", f"a strategy that keeps samples whole ({choices})", strategy)
    rng = np.random.default_rng(seed) if seed is not None else None
    carried = Samples(np.zeros(0, np.int32), all_ones(0), np.zeros(1, np.int64))
    carried_ids = np.zeros(0, dtype=np.int64)
    position = 0
    source = iter(samples)
    finished = False
    while not finished:
        rows = []
        room = size - len(carried_ids)
        for row in source:
            rows.append(row)
            if len(rows) >= room:
                break
        else:
            finished = True
        count = len(rows)
        fresh = _read(rows, position, completion_only_loss)
        del rows  # the rows as given are not held while the buffer is packed
        buffer = _concat([carried, fresh])
        del fresh, carried
        ids = np.concatenate((carried_ids, np.arange(position, position + count, dtype=np.int64)))
        was_carried = np.arange(len(ids)) < len(carried_ids)
        position += count
        if len(ids) == 0:
            break
        random_order = "seed" in STRATEGIES[strategy].options
        plan_seed = (int(rng.integers(2**31)) if rng is not None else 0) if random_order else None
        layout = plan(buffer.lengths, capacity, strategy, overflow, seed=plan_seed)
        fill = np.zeros(layout.num_blocks, dtype=np.int64)
        np.add.at(fill, layout.piece_block(), layout.piece_length)
        carry_block = np.zeros(layout.num_blocks, dtype=bool)
        if not finished:
            carry_block = fill < CARRY_BELOW * capacity
            # a document is carried once; a block holding one that already was is emitted
            again = np.zeros(layout.num_blocks, dtype=bool)
            np.logical_or.at(again, layout.piece_block(), was_carried[layout.piece_sequence])
            carry_block &= ~again
            carry_block = _capped(carry_block, fill, np.diff(layout.block_starts), size // 2)
        piece_carry = carry_block[layout.piece_block()]
        keep_rows = np.unique(layout.piece_sequence[piece_carry]).astype(np.int64)
        carried = _subset(buffer, keep_rows)
        carried_ids = ids[keep_rows]
        emit = np.flatnonzero(~carry_block)
        if rng is not None:
            emit = rng.permutation(emit)
        blocks = LazyBatch.of(layout, buffer, pad_token_id, int64=int64, sequence_names=ids)
        for batch in blocks.chunks(emit, CHUNK_BLOCKS * capacity):  # a few blocks at a time: memory is the buffer's
            for b in range(batch.num_blocks):
                yield {
                    "input_ids": batch.input_ids[b].copy(),
                    "labels": batch.labels[b].copy(),
                    "loss_mask": batch.loss_mask[b].copy(),
                    "position_ids": batch.position_ids[b].copy(),
                    "sequence_ids": batch.sequence_ids[b].copy(),
                    "seq_lengths": batch.seq_lengths(b).astype(np.int32),
                }
        del blocks, buffer


def _dataset_blocks(dataset: Any, max_seq_length: int, options: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for block in stream(dataset, max_seq_length, **options):
        yield {name: values.tolist() for name, values in block.items()}


def stream_dataset(dataset: Any, max_seq_length: int, **options: Any) -> Any:
    """A Hugging Face ``datasets.IterableDataset`` of packed blocks from an iterable dataset (or any iterable of
    rows with ``input_ids`` or ``prompt``/``completion``; other columns are ignored). ``options`` are those of
    ``stream``. The columns are the packed schema's. Lazy: nothing is read until iterated.

    >>> import datasets
    >>> rows = datasets.Dataset.from_dict({"input_ids": [[1, 2], [3, 4, 5], [6]]}).to_iterable_dataset()
    >>> [b["input_ids"] for b in stream_dataset(rows, 4, seed=None)]
    [[3, 4, 5, 6], [1, 2, 0, 0]]
    """
    try:
        import datasets
    except ImportError as error:  # pragma: no cover - exercised only without datasets
        raise ImportError("stream_dataset needs Hugging Face datasets: pip install datasets") from error

    wide = bool(options.get("int64", False))
    features = datasets.Features({c.name: datasets.List(datasets.Value(c.dtype_for(wide).name)) for c in COLUMNS})
    return datasets.IterableDataset.from_generator(
        _dataset_blocks,
        features=features,
        gen_kwargs={"dataset": dataset, "max_seq_length": max_seq_length, "options": options},
    )
