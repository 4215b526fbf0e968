"""Packing Hugging Face ``datasets``: shard-local with ``Dataset.map`` or global over a whole dataset.

Both functions produce the same columns, one row per block of exactly
``max_seq_length`` tokens:

- ``input_ids``: token ids, ``pad_token_id`` in padding;
- ``labels``: ``input_ids`` with -100 where there is no loss and at the first token of every document;
- ``loss_mask``: 1 for a trained token, 0 for padding or a masked (prompt) token;
- ``position_ids``: 0, 1, 2, ... restarting at every document, 0 in padding;
- ``seq_lengths``: the lengths of the documents in the block, in order (flash-attention's varlen form
  is ``[0, *cumsum(seq_lengths)]``).

Input rows hold ``input_ids`` (optionally ``loss_mask``) or ``prompt`` and ``completion``
(loss on the completion only, unless ``completion_only_loss=False``).

:func:`pack_batch` packs one batch at a time, so ``Dataset.map(pack_batch, batched=True, ...)``
only ever combines rows of the same batch (shard-local packing, streaming-friendly).
:func:`pack_dataset` plans over every length of the dataset at once (global packing: fewer blocks)
and reads the columns through Arrow without a Python loop per row.

Neither ``datasets`` nor ``pyarrow`` is imported with this module; :func:`pack_dataset` imports
them when called.

>>> out = pack_batch({"input_ids": [[1, 2], [3, 4, 5], [6]]}, 4)
>>> out["input_ids"]
[[3, 4, 5, 6], [1, 2, 0, 0]]
>>> out["seq_lengths"]
[[3, 1], [2]]
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import replace
from itertools import pairwise
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from packing.packed import PackedBatch, materialize, pack
from packing.plan import PackingPlan, plan
from packing.samples import Samples
from packing.validation import check_max_seq_length, check_token_id

if TYPE_CHECKING:  # pragma: no cover - typing only
    import pyarrow as pa
    from datasets import Dataset

Int64Array = npt.NDArray[np.int64]
Int8Array = npt.NDArray[np.int8]

PACKED_COLUMNS = ("input_ids", "labels", "loss_mask", "position_ids", "seq_lengths")
"""The columns both functions return, in this order."""

_CHUNK_VALUES = 1 << 24
"""Values per Arrow chunk of the output (keeps every chunk's 32-bit list offsets far from overflow)."""


def _check_flag(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return value


def _batch_samples(batch: Mapping[str, Any]) -> list[Any]:
    """The rows of a column batch as the sample dicts ``packing.pack`` reads. O(rows)."""
    if "prompt" in batch or "completion" in batch:
        if "input_ids" in batch:
            raise ValueError("a batch has both 'input_ids' and 'prompt'/'completion' columns; keep one form")
        missing = [key for key in ("prompt", "completion") if key not in batch]
        if missing:
            raise ValueError(f"a prompt/completion batch needs both columns; '{missing[0]}' is missing")
        prompts, completions = batch["prompt"], batch["completion"]
        if len(prompts) != len(completions):
            raise ValueError(
                f"columns 'prompt' and 'completion' differ in length: {len(prompts)} != {len(completions)}"
            )
        return [{"prompt": p, "completion": c} for p, c in zip(prompts, completions, strict=True)]
    if "input_ids" in batch:
        ids = batch["input_ids"]
        masks = batch.get("loss_mask")
        if masks is None:
            return list(ids)  # plain token lists: every token is trained on
        if len(masks) != len(ids):
            raise ValueError(f"columns 'input_ids' and 'loss_mask' differ in length: {len(ids)} != {len(masks)}")
        return [
            row if mask is None else {"input_ids": row, "loss_mask": mask} for row, mask in zip(ids, masks, strict=True)
        ]
    raise ValueError(
        f"a batch needs an 'input_ids' column or 'prompt' and 'completion' columns; got columns {sorted(map(str, batch))}"
    )


def _block_seq_lengths(packed: PackedBatch) -> list[list[int]]:
    lengths = packed.plan.piece_length.tolist()
    starts = packed.plan.block_starts.tolist()
    return [lengths[lo:hi] for lo, hi in pairwise(starts)]


def pack_batch(
    batch: Mapping[str, Any],
    max_seq_length: int,
    strategy: str = "bfd",
    overflow: str = "truncate",
    pad_token_id: int = 0,
    completion_only_loss: bool = True,
    max_sequences_per_block: int | None = None,
) -> dict[str, list[list[int]]]:
    """Pack one batch of rows (a dict of columns) into blocks: the columns of ``PACKED_COLUMNS``.

    ``batch`` has an ``input_ids`` column (and optionally ``loss_mask``; a missing or ``None``
    mask trains on every token) or ``prompt`` and ``completion`` columns; other columns are
    ignored. The number of rows changes, so with ``datasets`` drop the old columns::

        dataset.map(pack_batch, batched=True, batch_size=1000, remove_columns=dataset.column_names,
                    fn_kwargs={"max_seq_length": 2048})

    Blocks only combine rows of the same batch. Uses ``packing.pack``: O(tokens + blocks ×
    max_seq_length) plus the strategy's cost, with one Python step per row to read it.

    >>> out = pack_batch({"prompt": [[1, 2]], "completion": [[3, 4]]}, 6)
    >>> out["loss_mask"], out["labels"], out["position_ids"]
    ([[0, 0, 1, 1, 0, 0]], [[-100, -100, 3, 4, -100, -100]], [[0, 1, 2, 3, 0, 0]])
    >>> pack_batch({"input_ids": []}, 4)
    {'input_ids': [], 'labels': [], 'loss_mask': [], 'position_ids': [], 'seq_lengths': []}
    """
    if not isinstance(batch, Mapping):
        raise TypeError(f"batch must be a dict of columns, got {type(batch).__name__}")
    packed = pack(
        _batch_samples(batch),
        max_seq_length,
        strategy=strategy,
        overflow=overflow,
        pad_token_id=pad_token_id,
        completion_only_loss=_check_flag(completion_only_loss, "completion_only_loss"),
        max_sequences_per_block=max_sequences_per_block,
    )
    return {
        "input_ids": packed.input_ids.tolist(),
        "labels": packed.labels.tolist(),
        "loss_mask": packed.loss_mask.astype(np.int64).tolist(),
        "position_ids": packed.position_ids.tolist(),
        "seq_lengths": _block_seq_lengths(packed),
    }


# ---------------------------------------------------------------------------------------------
# Global packing through Arrow


def _ranges(starts: Int64Array, lengths: Int64Array) -> Int64Array:
    """Concatenation of ``arange(s, s + n)`` for every ``(s, n)``. O(sum of lengths).

    >>> _ranges(np.array([10, 0, 5]), np.array([2, 0, 3])).tolist()
    [10, 11, 5, 6, 7]
    """
    starts = np.asarray(starts, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    before = np.cumsum(lengths) - lengths
    result: Int64Array = np.arange(total, dtype=np.int64) + np.repeat(starts - before, lengths)
    return result


def _arrow_table(dataset: Any) -> pa.Table:
    """The rows of ``dataset`` as one ``pyarrow.Table``, honouring any selection or shuffle already applied."""
    import pyarrow as pa

    if isinstance(dataset, pa.Table):
        return dataset
    if hasattr(dataset, "with_format"):  # datasets.Dataset: the formatter applies the indices mapping
        table = dataset.with_format("arrow")[:]
        if isinstance(table, pa.Table):
            return table
    if isinstance(dataset, Mapping):
        return pa.table(dict(dataset))
    raise TypeError(
        f"dataset must be a datasets.Dataset (or a pyarrow.Table, or a dict of columns), got {type(dataset).__name__}"
    )


def _list_column(table: pa.Table, name: str, kinds: str) -> tuple[npt.NDArray[Any], Int64Array, npt.NDArray[np.bool_]]:
    """A list column's flat values, the length of every row, and which rows are null. O(values + rows)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    column = table.column(name)
    rows = len(column)
    if pa.types.is_null(column.type):
        return np.zeros(0, dtype=np.int64), np.zeros(rows, dtype=np.int64), np.ones(rows, dtype=bool)
    list_type = column.type
    if not (pa.types.is_list(list_type) or pa.types.is_large_list(list_type) or pa.types.is_fixed_size_list(list_type)):
        raise TypeError(f"column {name!r} must hold lists of integers, got {list_type}")
    value_type = list_type.value_type
    integer = pa.types.is_integer(value_type)
    if not (integer or ("b" in kinds and pa.types.is_boolean(value_type)) or pa.types.is_null(value_type)):
        raise TypeError(f"column {name!r} must hold lists of integers, got {list_type}")
    nulls = pc.is_null(column).to_numpy(zero_copy_only=False).astype(bool)
    lengths = pc.list_value_length(column).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    values = pc.list_flatten(column)
    if values.null_count:
        flat_nulls = np.flatnonzero(pc.is_null(values).to_numpy(zero_copy_only=False))
        offsets = np.cumsum(lengths * ~nulls)
        row = int(np.searchsorted(offsets, flat_nulls[0], side="right"))
        raise ValueError(f"sample {row} {name!r}: token lists must not contain nulls")
    flat = values.to_numpy(zero_copy_only=False) if len(values) else np.zeros(0, dtype=np.int64)
    return flat, lengths, nulls


def _offsets(lengths: Int64Array) -> Int64Array:
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return offsets


def _token_values(flat: npt.NDArray[Any], lengths: Int64Array, name: str) -> Int64Array:
    """Check that every token id is a non-negative integer fitting in int64, as int64."""
    if flat.size and flat.dtype.kind == "u" and int(flat.max()) > np.iinfo(np.int64).max:
        raise ValueError(f"column {name!r}: token ids must fit in int64")
    tokens = flat.astype(np.int64, copy=False)
    negative = np.flatnonzero(tokens < 0)
    if negative.size:
        index = int(negative[0])
        offsets = _offsets(lengths)
        row = int(np.searchsorted(offsets, index, side="right")) - 1
        raise ValueError(
            f"sample {row} {name!r}, position {index - int(offsets[row])}: "
            f"expected a non-negative integer token id, got {int(tokens[index])}"
        )
    return tokens


def _required(table: pa.Table, name: str) -> tuple[Int64Array, Int64Array]:
    """Token ids and row lengths of a column in which no row may be null."""
    flat, lengths, nulls = _list_column(table, name, "iu")
    if nulls.any():
        raise ValueError(f"sample {int(np.flatnonzero(nulls)[0])} {name!r}: expected a list of token ids, got None")
    return _token_values(flat, lengths, name), lengths


def _table_samples(table: pa.Table, completion_only_loss: bool) -> Samples:
    """All rows of ``table`` as flat ``Samples``, vectorised over rows. O(tokens + rows)."""
    names = set(table.column_names)
    if "prompt" in names or "completion" in names:
        if "input_ids" in names:
            raise ValueError("the dataset has both 'input_ids' and 'prompt'/'completion' columns; keep one form")
        missing = [key for key in ("prompt", "completion") if key not in names]
        if missing:
            raise ValueError(f"a prompt/completion dataset needs both columns; '{missing[0]}' is missing")
        prompt, prompt_lengths = _required(table, "prompt")
        completion, completion_lengths = _required(table, "completion")
        offsets = _offsets(prompt_lengths + completion_lengths)
        tokens = np.empty(int(offsets[-1]), dtype=np.int64)
        prompt_at = _ranges(offsets[:-1], prompt_lengths)
        tokens[prompt_at] = prompt
        tokens[_ranges(offsets[:-1] + prompt_lengths, completion_lengths)] = completion
        mask = np.ones(len(tokens), dtype=np.int8)
        if completion_only_loss:
            mask[prompt_at] = 0
        return Samples(tokens, mask, offsets)
    if "input_ids" not in names:
        raise ValueError(
            f"the dataset needs an 'input_ids' column or 'prompt' and 'completion' columns; got columns {sorted(names)}"
        )
    tokens, lengths = _required(table, "input_ids")
    offsets = _offsets(lengths)
    mask = np.ones(len(tokens), dtype=np.int8)
    if "loss_mask" in names:
        values, mask_lengths, nulls = _list_column(table, "loss_mask", "iub")
        given = ~nulls  # a null mask trains on every token of its row
        wrong = np.flatnonzero(given & (mask_lengths != lengths))
        if wrong.size:
            row = int(wrong[0])
            raise ValueError(
                f"sample {row} 'loss_mask': expected {int(lengths[row])} values (one per token), "
                f"got {int(mask_lengths[row])}"
            )
        bad = np.flatnonzero((values != 0) & (values != 1))
        if bad.size:
            given_offsets = _offsets(np.where(given, lengths, 0))
            row = int(np.searchsorted(given_offsets, int(bad[0]), side="right")) - 1
            position = int(bad[0]) - int(given_offsets[row])
            raise ValueError(f"sample {row} 'loss_mask', position {position}: expected 0 or 1, got {values[bad[0]]!r}")
        mask[_ranges(offsets[:-1][given], lengths[given])] = values.astype(np.int8)
    return Samples(tokens, mask, offsets)


def _reorder_blocks(layout: PackingPlan, order: Int64Array) -> PackingPlan:
    """The same plan with its blocks in ``order`` (block ``i`` of the result is block ``order[i]``). O(pieces)."""
    counts = np.diff(layout.block_starts)[order]
    pieces = _ranges(layout.block_starts[:-1][order], counts)
    stats = replace(layout.stats, block_utilization=layout.stats.block_utilization[order])
    return replace(
        layout,
        block_starts=_offsets(counts),
        piece_sequence=layout.piece_sequence[pieces],
        piece_start=layout.piece_start[pieces],
        piece_length=layout.piece_length[pieces],
        stats=stats,
    )


def _chunk_rows(num_rows: int, width: int) -> list[tuple[int, int]]:
    """Row ranges of at most ``_CHUNK_VALUES`` values each (32-bit list offsets stay far from overflow)."""
    step = max(1, _CHUNK_VALUES // max(width, 1))
    return [(lo, min(lo + step, num_rows)) for lo in range(0, num_rows, step)]


def _list_column_of(chunks: list[tuple[Int64Array, Int64Array]], pa: Any) -> Any:
    """A chunked ``list<int64>`` column from ``(offsets, values)`` pairs; numpy buffers are shared, not copied."""
    arrays = [
        pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(values)) for offsets, values in chunks
    ]
    return pa.chunked_array(arrays, type=pa.list_(pa.int64()))


def _packed_table(packed: PackedBatch) -> pa.Table:
    """The packed blocks as an Arrow table of ``PACKED_COLUMNS``, one row per block, in block order.

    The block arrays are handed to Arrow without copying (except ``loss_mask``, widened to int64).
    O(blocks × max_seq_length).
    """
    import pyarrow as pa

    layout = packed.plan
    width = layout.max_seq_length
    ranges = _chunk_rows(layout.num_blocks, width)

    def fixed(matrix: npt.NDArray[Any]) -> Any:
        flat = matrix.reshape(-1)
        return _list_column_of(
            [
                (
                    np.arange(hi - lo + 1, dtype=np.int64) * width,
                    flat[lo * width : hi * width].astype(np.int64, copy=False),
                )
                for lo, hi in ranges
            ],
            pa,
        )

    starts = layout.block_starts
    seq_lengths = _list_column_of(
        [
            (starts[lo : hi + 1] - starts[lo], layout.piece_length[starts[lo] : starts[hi]].astype(np.int64))
            for lo, hi in ranges
        ],
        pa,
    )
    return pa.table(
        {
            "input_ids": fixed(packed.input_ids),
            "labels": fixed(packed.labels),
            "loss_mask": fixed(packed.loss_mask),
            "position_ids": fixed(packed.position_ids),
            "seq_lengths": seq_lengths,
        }
    )


def pack_dataset(
    dataset: Any,
    max_seq_length: int,
    strategy: str = "bfd",
    overflow: str = "truncate",
    pad_token_id: int = 0,
    completion_only_loss: bool = True,
    max_sequences_per_block: int | None = None,
    shuffle: bool = True,
    seed: int = 0,
) -> Dataset:
    """Pack a whole dataset at once (global packing) into a new ``datasets.Dataset`` of ``PACKED_COLUMNS``.

    ``dataset`` is a ``datasets.Dataset`` (any selection or shuffle already applied to it is
    respected), a ``pyarrow.Table`` or a dict of columns, with ``input_ids`` (and optionally
    ``loss_mask``) or ``prompt`` and ``completion`` columns. The columns are read through Arrow
    with no Python loop per row, one plan is made over every length, and the blocks are
    materialized; with ``shuffle`` (the default) the blocks come out in a random order drawn
    from ``seed``, otherwise in plan order (which for the decreasing strategies puts the
    longest documents first).

    O(tokens + blocks × max_seq_length) time plus the strategy's cost. Memory at the peak: the
    input tokens plus the block arrays (four int64, one int32 and one int8, each of blocks ×
    max_seq_length); four of them become
    the returned dataset's columns without a copy.

    Example (``datasets`` needed, so not a doctest)::

        packed = pack_dataset(Dataset.from_dict({"input_ids": [[1, 2], [3, 4, 5], [6]]}), 4, shuffle=False)
        packed["input_ids"]  # [[3, 4, 5, 6], [1, 2, 0, 0]]
        packed["seq_lengths"]  # [[3, 1], [2]]
    """
    capacity = check_max_seq_length(max_seq_length)
    pad = check_token_id(pad_token_id, "pad_token_id")
    completion_only = _check_flag(completion_only_loss, "completion_only_loss")
    if _check_flag(shuffle, "shuffle"):
        check_token_id(seed, "seed")
    samples = _table_samples(_arrow_table(dataset), completion_only)
    layout = plan(samples.lengths, capacity, strategy, overflow, max_sequences_per_block)
    if shuffle:  # reorder the plan, so the blocks are written in their final order and never copied
        layout = _reorder_blocks(layout, np.random.default_rng(seed).permutation(layout.num_blocks).astype(np.int64))
    table = _packed_table(materialize(layout, samples, pad))
    from datasets import Dataset

    settings = (capacity, strategy, overflow, pad, completion_only, max_sequences_per_block, shuffle, seed)
    return Dataset(table, fingerprint=_fingerprint(dataset, settings))


def _fingerprint(source: Any, settings: tuple[Any, ...]) -> str:
    """A fingerprint for the packed dataset, derived from the source's and the settings when the source
    has one (so ``datasets`` caching works across runs); random otherwise. Without it, ``datasets``
    would hash the whole packed table, which takes seconds for millions of tokens."""
    parent = getattr(source, "_fingerprint", None)
    if not isinstance(parent, str):
        from datasets.fingerprint import generate_random_fingerprint

        return str(generate_random_fingerprint())
    text = repr(("packing.hf.pack_dataset", parent, settings))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
