"""Streaming packing: blocks from an iterable of samples of any length, in memory bounded by a buffer.

``stream(samples, max_seq_length)`` reads samples into a buffer of ``buffer_size``, packs the buffer with a
strategy (``bfd`` by default), yields its blocks, and carries the documents of under-filled blocks into the
next buffer (once each), so the blocks are nearly as full as when packing the whole dataset at once. Every
token of every sample comes out exactly once (up to the overflow policy); memory depends on ``buffer_size``,
never on the length of the stream. ``stream_dataset`` wraps a Hugging Face ``IterableDataset``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from packing.batches.packed import LazyBatch, block_arrays
from packing.batches.schema import datasets_features
from packing.core.samples import Samples, TokenArray, all_ones
from packing.core.validation import OverflowPolicy, check_flag, check_positive_int
from packing.errors import SampleError, SequenceTooLong, SettingError
from packing.planning.plans import plan
from packing.reading.rows import read_rows
from packing.recipe import Recipe, RecipeOptions
from packing.strategies.registry import STRATEGIES, StrategyName, check_whole_samples
from packing.text.prepare import prepare

if TYPE_CHECKING:  # pragma: no cover - typing only
    from typing import Unpack

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


def _read(rows: list[Any], first: int, recipe: Recipe) -> Samples:
    """Read a buffer of rows; an error names the sample by its position in the stream."""
    try:
        samples = read_rows(rows, **prepare(recipe).read_options)
        samples.refuse_other_labels()  # blocks are made from subsets of the buffer, which do not carry labels
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
    max_seq_length: int | None = None,
    *,
    strategy: StrategyName | None = None,
    overflow: OverflowPolicy | None = None,
    buffer_size: int = 10_000,
    shuffle: bool = True,
    recipe: Recipe | None = None,
    **options: Unpack[RecipeOptions],
) -> Iterator[Block]:
    """Pack an iterable of samples (any form ``pack`` accepts, text rows with a ``tokenizer``, any length,
    read once) into blocks of ``max_seq_length`` tokens, holding at most ``buffer_size`` samples at a time.

    The options are every entry point's (:class:`~packing.Recipe`, or ``recipe=``), except ``window``
    (the buffer is the window here: refused, in a recipe too) and strategies that split samples (``split``). Yields one dict per
    block with the packed schema's columns (``packing.batches.schema.COLUMNS``) as numpy arrays, all of length
    ``max_seq_length`` but ``seq_lengths`` (the block's documents); ``sequence_ids`` is the sample's
    position in the stream, counted from its start (-1 in padding). Each buffer is packed with
    ``strategy``; documents of blocks filled below 99 % are carried into the next buffer once; with
    ``shuffle`` the blocks of a buffer come out in a random order drawn from ``seed`` (default 0),
    otherwise in plan order. The last buffer is flushed whole. O(tokens) plus the strategy's cost per
    buffer; memory O(buffer_size × sample length), independent of the stream's length.

    >>> blocks = list(stream([[1, 2, 3], [4, 5], [6, 7, 8, 9]], 5, shuffle=False))
    >>> [b["input_ids"].tolist() for b in blocks]
    [[6, 7, 8, 9, 0], [1, 2, 3, 4, 5]]
    >>> [b["sequence_ids"].tolist() for b in blocks]
    [[2, 2, 2, 2, -1], [0, 0, 0, 1, 1]]
    >>> [b["input_ids"].tolist() for b in stream([{"text": "hi"}], 4, tokenizer="bytes")]
    [[104, 105, 256, 257]]
    """
    chosen = Recipe.at("stream", recipe, max_seq_length, strategy=strategy, overflow=overflow, **options)
    capacity, strategy = chosen.max_seq_length, chosen.strategy
    size = check_positive_int(buffer_size, "buffer_size")
    check_whole_samples(strategy)
    shuffle = check_flag(shuffle, "shuffle")
    rng = np.random.default_rng(chosen.seed or 0)
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
        fresh = _read(rows, position, chosen)
        del rows  # the rows as given are not held while the buffer is packed
        buffer = _concat([carried, fresh])
        del fresh, carried
        ids = np.concatenate((carried_ids, np.arange(position, position + count, dtype=np.int64)))
        was_carried = np.arange(len(ids)) < len(carried_ids)
        position += count
        if len(ids) == 0:
            break
        random_order = "seed" in STRATEGIES[strategy].options
        plan_seed = int(rng.integers(2**31)) if random_order else None
        try:
            layout = plan(buffer.lengths, recipe=Recipe.of(chosen, seed=plan_seed) if random_order else chosen)
        except SequenceTooLong as error:  # overflow="error": named by its position in the stream
            raise error.at(int(ids[error.sample or 0])) from None
        fill = np.zeros(layout.num_blocks, dtype=np.int64)
        np.add.at(fill, layout.piece_block(), layout.piece_length)
        carry_block = np.zeros(layout.num_blocks, dtype=bool)
        if not finished:
            carry_block = fill < CARRY_BELOW * capacity
            # a document is carried once, and a sample cut in pieces (overflow="split") never: a block holding
            # one of these is emitted
            cut = np.bincount(layout.piece_sequence, minlength=len(ids)) > 1
            again = np.zeros(layout.num_blocks, dtype=bool)
            np.logical_or.at(
                again, layout.piece_block(), was_carried[layout.piece_sequence] | cut[layout.piece_sequence]
            )
            carry_block &= ~again
            carry_block = _capped(carry_block, fill, np.diff(layout.block_starts), size // 2)
        piece_carry = carry_block[layout.piece_block()]
        keep_rows = np.unique(layout.piece_sequence[piece_carry]).astype(np.int64)
        carried = _subset(buffer, keep_rows)
        carried_ids = ids[keep_rows]
        emit = np.flatnonzero(~carry_block)
        if shuffle:
            emit = rng.permutation(emit)
        blocks = LazyBatch.of(layout, buffer, prepare(chosen).pad_id, int64=chosen.int64, sequence_names=ids)
        for batch in blocks.chunks(emit, CHUNK_BLOCKS * capacity):  # a few blocks at a time: memory is the buffer's
            for b in range(batch.num_blocks):
                yield block_arrays(batch, b)
        del blocks, buffer


def _dataset_blocks(dataset: Any, max_seq_length: int | None, options: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The blocks of ``stream`` as rows of real tokens only (``sum(seq_lengths)`` values), as ``packing.hf``
    writes them: what TRL's padding-free collator reads."""
    for block in stream(dataset, max_seq_length, **options):
        used = int(block["seq_lengths"].sum())
        yield {name: (values if name == "seq_lengths" else values[:used]).tolist() for name, values in block.items()}


def stream_dataset(
    dataset: Any,
    max_seq_length: int | None = None,
    *,
    strategy: StrategyName | None = None,
    overflow: OverflowPolicy | None = None,
    buffer_size: int = 10_000,
    shuffle: bool = True,
    recipe: Recipe | None = None,
    **options: Unpack[RecipeOptions],
) -> Any:
    """A Hugging Face ``datasets.IterableDataset`` of packed blocks from an iterable dataset (or any iterable of
    rows ``stream`` reads; other columns are ignored). The options are ``stream``'s, checked now; the columns
    the packed schema's, each row holding its block's real tokens only (``sum(seq_lengths)`` values), as
    ``packing.hf`` and TRL's ``pack_dataset`` write them. Lazy: nothing is read until iterated.

    >>> import datasets
    >>> rows = datasets.Dataset.from_dict({"input_ids": [[1, 2], [3, 4, 5], [6]]}).to_iterable_dataset()
    >>> [b["input_ids"] for b in stream_dataset(rows, 4, shuffle=False)]
    [[3, 4, 5, 6], [1, 2]]
    """
    try:
        import datasets
    except ImportError as error:  # pragma: no cover - exercised only without datasets
        raise ImportError("stream_dataset needs Hugging Face datasets: pip install datasets") from error
    chosen = Recipe.at("stream", recipe, max_seq_length, strategy=strategy, overflow=overflow, **options)
    next(stream([], recipe=chosen, buffer_size=buffer_size, shuffle=shuffle), None)  # the settings, now
    settings = {"recipe": chosen, "buffer_size": buffer_size, "shuffle": shuffle}
    return datasets.IterableDataset.from_generator(
        _dataset_blocks,
        features=datasets_features(chosen.int64),
        gen_kwargs={"dataset": dataset, "max_seq_length": None, "options": settings},
    )
