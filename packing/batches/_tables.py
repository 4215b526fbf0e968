"""A batch of rows as one Arrow table, packed into the schema's columns: the one batch function of the framework
doors (``packing.hf.pack_batch`` under ``Dataset.map(batched=True)``, ``packing.hf.pack_dataset``, the passes of
``packing.ray.pack_dataset`` under ``map_batches``), as TRL's ``pack_dataset`` maps a function of a
``pyarrow.Table``.

Any batch is made one table once (:func:`arrow_batch`: an Arrow table or record batch as it is, the Arrow table
under a ``datasets`` batch in the default Python format, Python columns converted by ``pyarrow``), read by the
one reader with its pairs and groups fitted (:func:`read_batch`) and packed (:func:`pack_table`), the other list
columns aligned with the tokens carried (:func:`carried_columns`).

>>> import pyarrow as pa
>>> from packing import Recipe
>>> batch = arrow_batch({"input_ids": [[1, 2], [3, 4, 5], [6]]})
>>> pack_table(batch, batch, Recipe(4), "doctest").to_pydict()["input_ids"]
[[3, 4, 5, 6], [1, 2]]

Internal: the doors are ``packing.hf`` and ``packing.ray``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from packing.batches._packed import run
from packing.batches._schema import LOSS_WEIGHTS, NAMES
from packing.batches._units import fit_units
from packing.core._arrays import offsets_of, ranges
from packing.core._forms import FIELDS
from packing.core._pairs_groups import Units
from packing.core._samples import Samples
from packing.core._validation import INT32_MAX
from packing.errors import SampleError, SettingError
from packing.planning._plans import PackingPlan
from packing.reading._arrow import read_table
from packing.recipe import Recipe
from packing.text._prepare import Prepared, prepare

if TYPE_CHECKING:  # pragma: no cover - typing only
    import pyarrow as pa


def arrow_batch(batch: Any, name: str = "batch") -> pa.Table | None:
    """``batch`` as one ``pyarrow.Table``: a table or a record batch as it is; a ``datasets`` batch in the Python
    format (a ``LazyBatch``: Arrow underneath, converted only when a column is read) its Arrow table, a column set
    since converted by ``pyarrow``; a dict of equal-length columns converted once. None for Python columns
    ``pyarrow`` cannot type (ids in one row, text in another: the reader reads them row by row and names the row);
    anything else refused, as the argument ``name``. O(1) for Arrow, O(cells) for Python columns.

    >>> arrow_batch({"input_ids": [[1, 2], [3]]}).column("input_ids").to_pylist()
    [[1, 2], [3]]
    >>> arrow_batch({"prompt": [[1], "text"]}) is None
    True
    """
    import pyarrow as pa

    if isinstance(batch, pa.RecordBatch):
        return pa.Table.from_batches([batch])
    if isinstance(batch, pa.Table):
        return batch
    if not isinstance(batch, Mapping):
        raise SettingError(name, "a datasets.Dataset, a pyarrow.Table or a dict of columns", type(batch).__name__)
    table, unread = getattr(batch, "pa_table", None), getattr(batch, "keys_to_format", None)
    if not isinstance(table, pa.Table) or not isinstance(unread, set):  # else a datasets batch: Arrow underneath
        table, unread = pa.table({}), set()
    sizes = sorted({table.num_rows if name in unread else len(batch[name]) for name in batch})
    if len(sizes) > 1:
        raise SettingError("batch", "columns of one length", f"<columns of lengths {sizes}>")
    try:
        return pa.table({name: table.column(name) if name in unread else pa.array(batch[name]) for name in batch})
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return None


def rows_of(batch: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A batch of equal-length columns as row dicts. O(cells)."""
    names = list(batch)
    return [dict(zip(names, values, strict=True)) for values in zip(*(batch[n] for n in names), strict=True)]


def read_batch(rows: pa.Table, recipe: Recipe, units: bool = False) -> Samples:
    """A batch's rows through the reader, pairs and groups fitted whole by the overflow policy (``fit_units``: the
    lengths planned are the pieces cut); ``units``: the rows are some of a dataset with pairs or groups, so plain
    rows are fitted as units of their own too (as ``pack`` fits the plain rows among units). O(tokens).

    >>> import pyarrow as pa
    >>> read_batch(pa.table({"input_ids": [[1, 2, 3]]}), Recipe(2, overflow="truncate"), units=True).lengths.tolist()
    [2]
    """
    samples = read_table(rows, **prepare(recipe).read_options)
    if units and samples.units is None and samples.tokens is not None:
        samples = replace(samples, units=Units.plain(samples.lengths, recipe.share_prompt))
    return fit_units(samples, recipe).samples if samples.units is not None else samples


def pack_table(
    rows: pa.Table | Samples,
    source: Any,
    recipe: Recipe,
    door: str,
    carry: Sequence[str] | None = None,
    prepared: Prepared | None = None,
) -> pa.Table:
    """One batch packed (``packing.pack``) into an Arrow table of the schema's columns, each row a block's real
    tokens (as TRL's rows) through the one pipeline (``run``), and the list columns of ``source`` aligned with the tokens carried
    (:func:`carried_columns`); what the overflow policy cut or left out warned of from ``door``. ``rows``: an Arrow
    table (read by the reader) or samples read already. O(tokens + blocks × max_seq_length) plus the strategy's
    cost."""
    prepared = prepare(recipe) if prepared is None else prepared
    samples = rows if isinstance(rows, Samples) else read_table(rows, **prepared.read_options)
    packed = run(samples, recipe, prepared).made()
    packed.stats.warn_lost(door)
    table = packed.to_arrow(padding=False)
    for name, column in carried_columns(packed.plan, source, carry).items():
        table = table.append_column(name, column)
    return table


def carried_columns(
    plan: PackingPlan, source: pa.Table | Mapping[str, Any] | None, carry: Sequence[str] | None = None
) -> dict[str, pa.Array]:
    """The list columns of ``source`` other than the reader's and the schema's, aligned with the samples (each
    row as many values as the row's tokens: ``attention_mask``, ``token_type_ids``, ...), cut and packed as the
    tokens are, one row per block of ``plan`` holding its real tokens' values, as TRL's ``pack_dataset``
    carries them. ``carry=None``: every such column aligned on every row (others are left out); a list of
    names: those columns, refused when missing, not lists, the reader's or out of line with a row. Nothing
    (``{}``) without a source. O(tokens of the carried columns).

    >>> import pyarrow as pa
    >>> from packing import plan
    >>> layout = plan([2, 3, 1], 4, strategy="ffd")
    >>> source = pa.table({"input_ids": [[1, 2], [3, 4, 5], [6]], "attention_mask": [[1, 0], [1, 1, 0], [1]]})
    >>> carried_columns(layout, source)["attention_mask"].to_pylist()
    [[1, 1, 0, 1], [1, 0]]
    """
    values = carried_values(plan, source, carry)
    return carried_for(plan, values, int(plan.piece_length.sum()) > INT32_MAX)


def carried_values(
    plan: PackingPlan, source: pa.Table | Mapping[str, Any] | Any | None, carry: Sequence[str] | None
) -> dict[str, pa.Array]:
    """The columns :func:`carried_columns` carries, checked against ``plan``'s rows, each as its values laid end
    to end (what every block's values are taken from). ``source`` may be a ``datasets.Dataset``. O(rows)."""
    if source is None:
        if carry:
            raise SettingError("carry", "no columns (text rows tokenized by num_proc processes carry none)", carry)
        return {}
    import pyarrow.compute as pc

    reserved = set(FIELDS) | set(NAMES) | {LOSS_WEIGHTS.name}  # loss_weights: what collate reads as its own
    names = list(source if isinstance(source, Mapping) else source.column_names)
    if carry is not None:
        if isinstance(carry, str) or not all(isinstance(n, str) for n in carry):
            raise SettingError("carry", "a list of column names", carry)
        for wanted in carry:
            if wanted not in names or wanted in reserved:
                expected = "a column of the dataset" if wanted not in names else "a column the reader does not read"
                raise SettingError("carry", f"{expected} (columns: {', '.join(map(repr, names))})", wanted)
    lengths = plan.lengths
    columns: dict[str, pa.Array] = {}
    for name in carry if carry is not None else [n for n in names if n not in reserved]:
        column = _list_column(source, name)
        if column is None or len(column) != len(lengths):
            if carry is not None:
                raise SettingError("carry", "a column of lists, one per row", f"<column {name!r}>")
            continue
        sizes = pc.fill_null(pc.list_value_length(column), -1).to_numpy(zero_copy_only=False)
        off = np.flatnonzero(sizes != lengths)
        if off.size:
            if carry is not None:
                row = int(off[0])
                size = int(sizes[row])
                got = "<null>" if size < 0 else f"<{size} value{'' if size == 1 else 's'}>"
                raise SampleError(row, name, None, f"{int(lengths[row])} values (one per token of the row)", got)
            continue
        columns[name] = pc.list_flatten(column)
    return columns


def carried_for(plan: PackingPlan, values: dict[str, pa.Array], large: bool) -> dict[str, pa.Array]:
    """The carried ``values`` (:func:`carried_values`) of ``plan``'s blocks (all of them, or a chunk's), one row
    per block holding its real tokens' values; ``large``: with 64-bit offsets. O(tokens of the blocks)."""
    if not values:
        return {}
    import pyarrow as pa

    source_at, row_offsets = _token_sources(plan)
    offsets = pa.array(row_offsets, pa.int64() if large else pa.int32())
    kind = pa.LargeListArray if large else pa.ListArray
    where = pa.array(source_at)
    return {name: kind.from_arrays(offsets, flat.take(where)) for name, flat in values.items()}


def _list_column(source: pa.Table | Mapping[str, Any] | Any, name: str) -> pa.Array | None:
    """``source``'s column ``name`` as one Arrow list array, or None when it is not a column of lists."""
    import pyarrow as pa

    try:
        if isinstance(source, pa.Table):
            column = source.column(name)
        elif isinstance(source, Mapping):
            column = pa.array(source[name])
        else:  # a datasets.Dataset: that column, as Arrow (its selection applied)
            column = source.select_columns([name]).with_format("arrow")[:].column(name)
    except (pa.ArrowException, TypeError, ValueError):
        return None
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if not (pa.types.is_list(column.type) or pa.types.is_large_list(column.type)):
        return None
    return column


def _token_sources(plan: PackingPlan) -> tuple[Any, Any]:
    """Where each block's real tokens come from, in the order its row holds them: positions into the samples'
    tokens laid end to end, and every block's start among them (``num_blocks + 1`` offsets). O(tokens placed)."""
    sizes = plan.piece_length.astype(np.int64)
    starts = offsets_of(plan.lengths)[plan.piece_sequence] + plan.piece_start.astype(np.int64)
    return ranges(starts, sizes), offsets_of(sizes)[plan.block_starts]
