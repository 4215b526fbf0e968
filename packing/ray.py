"""Packing a Ray Data dataset past one machine: the same blocks as ``packing.pack``, assembled by Ray.

The tokens stay on the cluster; only lengths travel to the driver:

1. every row gets a stable id (its place in the input) and a distributed ``map_batches`` reads
   its lengths (the one batch reader, ``packing.batches._tables``, so bad rows are refused exactly as on one
   machine);
2. the driver plans globally from the lengths alone (``packing.plan``, any strategy) and, with
   ``shuffle``, permutes the blocks as single-machine packing does with the same seed;
3. every row is sent whole to the groups of blocks that hold its pieces, and Ray Data's own grouping
   (``groupby(...).map_groups``) brings each group's rows together, where they are read again and the plan's
   pieces of those blocks filled by the library's materializer (``packing.materialize``) into the output schema's
   columns, with ``sequence_ids`` holding global row ids; with ``ordered`` a ``sort`` puts the blocks in plan
   order.

The result is one row per block, the columns of ``packing.batches._schema`` (``input_ids``, ``labels``,
``loss_mask``, ``position_ids``, ``sequence_ids``, ``seq_lengths``), equal to single-machine packing
of the same rows with the same settings. Write it with Ray Data's writers (``write_parquet``).

Ray is an optional dependency (``pip install "ray[data]"``), imported when a function here runs,
never by ``import packing``.

Example (needs a Ray cluster, so not a doctest)::

    import ray, packing.ray
    ray.init()
    ds = ray.data.read_parquet("s3://bucket/tokenized/")      # input_ids, prompt/completion, or text with tokenizer=
    packed = packing.ray.pack_dataset(ds, 4096, strategy="bfd", shuffle=True, seed=0)
    packed.write_parquet("s3://bucket/packed/")
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from packing.batches._packed import PackedBatch
from packing.batches._schema import arrow_schema
from packing.batches._tables import read_batch
from packing.batches._units import Fitted, check_unit_recipe, fit_unit_lengths, fit_units, unit_planning
from packing.core._arrays import offsets_of, ranges, row_of
from packing.core._forms import FIELDS, READ_FIELDS
from packing.core._pairs_groups import Units
from packing.core._validation import OverflowPolicy, check_flag
from packing.errors import SampleError, SettingError, UnitTooLong
from packing.planning._plans import PackingPlan, plan_of
from packing.reading._arrow import read_table
from packing.reading._reader import mixed_kinds_error
from packing.recipe import Recipe, RecipeOptions
from packing.strategies._registry import StrategyName
from packing.strategies._stats import UNIT_SUMMED, PackingStats, UnitStats
from packing.text._prepare import prepare

if TYPE_CHECKING:  # pragma: no cover - typing only
    from typing import Unpack

    import pyarrow as pa
    import ray.data

Int64Array = npt.NDArray[np.int64]

TOKENS_PER_TASK = 1 << 21
"""Token slots handled by one assembling or materializing call (about 60 MB of output columns)."""

_MAX_PARTITIONS = 200
"""At most this many hash partitions for the grouping (Ray Data's default); fewer when there are fewer groups."""

_UID = "__packing_uid"
_GROUP, _BLOCK, _ROW = "__packing_group", "__packing_block", "__packing_row"
_LENGTH, _BAD = "__packing_length", "__packing_bad"
_UNITS = "__packing_units"
"""The completions of each row that is a pair or group (the lengths pass); with any, every group numbers its
completions from the global number of its rows' first."""
_FIT = "__packing_fit"
"""What fitting a batch's pairs and groups cut (:func:`_fit_counts`), in its first row (the others null)."""
_FIT_SIZE = 2 + len(UNIT_SUMMED)
"""The numbers of :func:`_fit_counts`: tokens cut, units cut, and every count of ``UnitStats``."""
_UNREAD, _REFUSED = -2, -1
"""Lengths reported for the rows of a batch with a bad row: not read, and the row the reader refused."""
_ROW_BITS = 33
"""``monotonically_increasing_id`` puts the task index above bit 33 and the row within the task below."""


def _require_ray() -> Any:
    try:
        import ray
        import ray.data
    except ImportError as error:  # pragma: no cover - exercised only without Ray
        raise ImportError('packing.ray needs Ray Data: pip install "ray[data]"') from error
    return ray


def _flat(column: Any) -> npt.NDArray[Any]:
    """The values of a list column, flattened, as numpy. O(values)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    values = pc.list_flatten(column)
    flat: npt.NDArray[Any] = values.to_numpy(zero_copy_only=False)
    return flat


def _fields(table: pa.Table) -> list[str]:
    """The columns the reader looks at; the others (and ours) stay behind."""
    return [name for name in READ_FIELDS if name in table.column_names]  # image grids too: refused


def _int_column(table: pa.Table, name: str) -> Int64Array:
    return np.asarray(table.column(name).to_numpy(), dtype=np.int64)


# ---------------------------------------------------------------------------------------------
# Step 1: lengths, where the data lives


def _lengths_batch(batch: pa.Table, recipe: Recipe) -> pa.Table:
    """Each row's id, length and completions (0 for a plain row), and in the first row what fitting the batch's
    pairs and groups cut (:func:`_fit_counts`); in a batch the reader refuses, its error (pickled) in the row it
    names, for the driver to raise under the row's global id. O(tokens)."""
    import pyarrow as pa

    uid = _int_column(batch, _UID)
    lengths, units = np.full(len(uid), _UNREAD, dtype=np.int64), np.zeros(len(uid), dtype=np.int64)
    fit: list[list[int] | None] = [None] * len(uid)
    bad: list[bytes | None] = [None] * len(uid)
    try:
        samples = read_table(batch.select(_fields(batch)), **prepare(recipe).read_options)
        if samples.units is not None and _keeps_units(recipe):  # fitted whole, what that cut counted
            fitted = fit_units(samples, recipe)
            samples, fit[0] = fitted.samples, _fit_counts(fitted, recipe)
        samples.refuse_other_labels()  # blocks train each token on itself
        samples.refuse_wide_ids(recipe.int64)  # the shuffle carries the output's id width
        if samples.tokens is None and len(samples):  # lengths only, where every other row has tokens
            raise mixed_kinds_error(0, "tokens", "length")
        lengths[:] = samples.lengths
        if samples.units is not None:
            units[:] = np.where(samples.units.kind > 0, samples.units.counts, 0)
    except SampleError as error:  # raised on the driver under its global row id
        local = min(max(error.sample or 0, 0), len(uid) - 1)
        lengths[local], bad[local], fit[0] = _REFUSED, pickle.dumps(error), None
    return pa.table(
        {
            _UID: pa.array(uid, pa.int64()),
            _LENGTH: pa.array(lengths),
            _BAD: pa.array(bad, pa.binary()),
            _UNITS: pa.array(units),
            _FIT: pa.array(fit, pa.list_(pa.int64())),
        }
    )


def _keeps_units(recipe: Recipe) -> bool:
    """Whether ``recipe`` keeps pairs and groups whole; if not, the driver refuses it by name (a refusal in a task
    would reach it wrapped in Ray's error). O(1)."""
    try:
        check_unit_recipe(recipe)
    except SettingError:
        return False
    return True


def _fit_counts(fitted: Fitted, recipe: Recipe) -> list[int]:
    """What fitting some rows' units cut, as numbers to add up over batches: the tokens cut, the units cut (plain
    rows among them too) and the :class:`~packing.strategies._stats.UnitStats` counts (every unit that fits kept,
    as a plan with ``drop`` keeps it). O(units).

    >>> from packing import read_rows
    >>> _fit_counts(fit_units(read_rows([{"prompt": [1], "chosen": [2, 3, 4], "rejected": [5]}]), Recipe(5)), Recipe(5))
    [1, 1, 1, 0, 2, 1, 1, 0, 0]
    """
    units = fitted.fit.kept_stats(recipe).units
    assert units is not None
    return [fitted.tokens_cut, int(fitted.fit.units_cut.sum()), *(getattr(units, name) for name in UNIT_SUMMED)]


@dataclass(frozen=True)
class _RowIds:
    """Global row ids from ``monotonically_increasing_id`` values (task index above bit 33, the row's
    number within its task below): tasks are numbered in input order and a task numbers its rows
    0, 1, ..., so a row's id is the number of rows in earlier tasks plus its number in its task.

    >>> uid = np.array([(7 << 33) + 1, 7 << 33, 2 << 33, (2 << 33) + 1, (7 << 33) + 2])
    >>> _RowIds.of(uid).rows(uid).tolist()
    [3, 2, 0, 1, 4]
    """

    tasks: Int64Array
    first_row: Int64Array
    count: Int64Array

    @classmethod
    def of(cls, uid: Int64Array) -> _RowIds:
        """From every row's value. O(rows log rows)."""
        tasks, count = np.unique(uid >> _ROW_BITS, return_counts=True)
        return cls(tasks.astype(np.int64), offsets_of(count)[:-1], count.astype(np.int64))

    def rows(self, uid: Int64Array) -> Int64Array:
        """The global row ids of these values. O(k log tasks)."""
        task = np.searchsorted(self.tasks, uid >> _ROW_BITS)
        number = uid & ((1 << _ROW_BITS) - 1)
        if len(uid) and (
            int(task.max()) >= len(self.tasks)
            or not np.array_equal(self.tasks[task], uid >> _ROW_BITS)
            or bool(np.any(number >= self.count[task]))
        ):
            raise RuntimeError("Ray's row ids are not numbered 0, 1, ... within each task; cannot order the rows")
        result: Int64Array = self.first_row[task] + number
        return result


def _collect_lengths(tables: Iterable[pa.Table], num_rows: int) -> _Lengths:
    """Gather every row's length (the lengths pass's ``tables``) on the driver, in row order, with its completions
    (0 for a plain row), what fitting the batches' units cut (:func:`_fit_counts`, summed; zeros without units) and
    the first row a batch refused.

    The batches are copied one at a time into arrays of ``num_rows`` (24 bytes a row). O(rows).
    """
    uid = np.empty(num_rows, dtype=np.int64)
    length = np.empty(num_rows, dtype=np.int64)
    completions = np.empty(num_rows, dtype=np.int64)
    refused: list[tuple[int, SampleError]] = []
    fit = np.zeros(_FIT_SIZE, dtype=np.int64)
    filled = 0
    for table in tables:
        if table.num_rows == 0:  # an empty batch may come without columns
            continue
        rows = slice(filled, filled + table.num_rows)
        uid[rows], length[rows] = _int_column(table, _UID), _int_column(table, _LENGTH)
        completions[rows] = _int_column(table, _UNITS)
        fit += _flat(table.column(_FIT)).astype(np.int64).reshape(-1, len(fit)).sum(axis=0)
        for index in np.flatnonzero(length[rows] == _REFUSED).tolist():
            refused.append((int(uid[filled + index]), pickle.loads(table.column(_BAD)[index].as_py())))
        filled += table.num_rows
        del table
    if filled != num_rows:  # pragma: no cover - a materialized dataset does not change
        raise RuntimeError(f"the lengths pass gave {filled} rows for a dataset of {num_rows}")
    ids = _RowIds.of(uid)
    order = ids.rows(uid)
    lengths, counts = np.empty(num_rows, dtype=np.int64), np.empty(num_rows, dtype=np.int64)
    lengths[order], counts[order] = length, completions
    global_rows = ids.rows(np.array([u for u, _ in refused], dtype=np.int64))
    errors = [error.after(int(row) - (error.sample or 0)) for row, (_, error) in zip(global_rows, refused, strict=True)]
    return _Lengths(ids, lengths, counts, fit, sorted(errors, key=lambda error: error.sample or 0))


@dataclass
class _Lengths:
    """What the lengths pass tells the driver (:func:`_collect_lengths`), by global row."""

    ids: _RowIds
    lengths: Int64Array
    counts: Int64Array
    """Completions of each row that is a pair or group, 0 for a plain row."""
    fit: Int64Array
    """What fitting the batches' units cut (:func:`_fit_counts`, summed)."""
    refused: list[SampleError]
    """The error of each refused batch, naming its row's global id, in row order."""

    def raise_first_error(self, recipe: Recipe) -> None:
        """Raise the error ``pack`` raises first for these rows, under its global row id: a reader's error before
        any unit too long (``pack`` reads every row before it fits them); among the too long, the first, the plain
        rows among units (``overflow="error"``) counted, which a batch without units could not refuse. O(rows)."""
        errors = self.refused
        read = [error for error in errors if not isinstance(error, UnitTooLong)]
        if read:
            raise read[0]
        units = bool(errors) or bool(self.counts.any())
        over = np.flatnonzero((self.counts == 0) & (self.lengths > recipe.max_seq_length))
        if units and recipe.overflow == "error" and over.size and (not errors or (errors[0].sample or 0) > over[0]):
            try:
                fit_unit_lengths(Units.plain(self.lengths[over[:1]], recipe.share_prompt), recipe)
            except SampleError as error:  # the row's global number
                raise error.after(int(over[0])) from None
        if errors:
            raise errors[0]

    def fit_plain_rows(self, recipe: Recipe) -> None:
        """Among pairs and groups, the plain rows of batches without any fitted as ``pack`` fits every plain row
        among units under ``truncate`` (``fit_unit_lengths``: the first ``max_seq_length`` tokens kept, and
        counted). O(rows)."""
        over = np.flatnonzero((self.counts == 0) & (self.lengths > recipe.max_seq_length))
        if not over.size or recipe.overflow != "truncate":
            return
        fit = fit_unit_lengths(Units.plain(self.lengths[over], recipe.share_prompt), recipe)
        self.lengths[over] = fit.fitted.lengths()
        self.fit[0] += fit.tokens_cut
        self.fit[1] += int(fit.units_cut.sum())

    def plan(self, recipe: Recipe) -> tuple[PackingPlan, PackingStats]:
        """The global plan of these rows (pairs and groups planned with ``unit_planning``: a unit that cannot fit is
        left out whole) and its statistics with what fitting cut counted in; the first bad row raised, under its
        global row id. O(rows) plus the strategy's cost."""
        self.raise_first_error(recipe)
        if not self.counts.any():
            layout = plan_of(self.lengths, recipe)
            return layout, layout.stats
        check_unit_recipe(recipe)  # pairs and groups: whole, fitted by the lengths pass
        self.fit_plain_rows(recipe)  # plain rows among them fitted as theirs
        layout = plan_of(self.lengths, unit_planning(recipe))
        tokens_cut, units_cut, *counts = map(int, self.fit)
        unit_stats = UnitStats(**dict(zip(UNIT_SUMMED, counts, strict=True)), share_prompt=recipe.share_prompt)
        return layout, layout.stats.with_fit(tokens_cut, units_cut, unit_stats)

    def completion_first(self) -> Int64Array | None:
        """The global number of each row's first completion; None without pairs and groups. O(rows)."""
        return np.cumsum(self.counts) - self.counts if self.counts.any() else None


# ---------------------------------------------------------------------------------------------
# Step 2: every row sent, whole, to the groups of blocks that hold its pieces


@dataclass(frozen=True)
class _Layout:
    """The (shuffled) plan as the cluster reads it, broadcast once: the groups of ``blocks_per_group`` blocks each
    row goes to (CSR over global rows: ``groups[row_starts[r]:row_starts[r + 1]]``) and, with pairs or groups, the
    global number of every row's first completion."""

    plan: PackingPlan
    row_ids: _RowIds
    blocks_per_group: int
    row_starts: Int64Array
    groups: Int64Array
    completion_first: Int64Array | None

    @classmethod
    def of(
        cls, plan: PackingPlan, row_ids: _RowIds, blocks_per_group: int, completion_first: Int64Array | None
    ) -> _Layout:
        """Each row's groups from the plan's pieces. O(pieces) when no row has two pieces (a scatter), O(pieces log
        pieces) otherwise (a sort by row and group)."""
        group = np.repeat(np.arange(plan.num_blocks, dtype=np.int64) // blocks_per_group, np.diff(plan.block_starts))
        sequence = plan.piece_sequence.astype(np.int64)
        per_row = np.bincount(sequence, minlength=len(plan.lengths))
        if per_row.max(initial=0) <= 1:
            row_starts = offsets_of(per_row)
            groups = np.empty(len(group), dtype=np.int64)
            groups[row_starts[sequence]] = group
            return cls(plan, row_ids, blocks_per_group, row_starts, groups, completion_first)
        count = -(-plan.num_blocks // blocks_per_group)
        pairs = np.sort(sequence * count + group)
        pairs = pairs[np.append(True, pairs[1:] != pairs[:-1])]
        row_starts = np.searchsorted(pairs // count, np.arange(len(plan.lengths) + 1, dtype=np.int64))
        return cls(plan, row_ids, blocks_per_group, row_starts.astype(np.int64), pairs % count, completion_first)


def _layout(ref: list[Any] | _Layout) -> _Layout:
    """The layout, from the object store (shared memory, not copied) unless given itself."""
    return ref if isinstance(ref, _Layout) else _require_ray().get(ref[0])


def _tag_rows(batch: pa.Table, layout_ref: list[Any] | _Layout) -> pa.Table:
    """Every row of the batch (the reader's columns) once per group of blocks holding a piece of it, with the
    group and its global row; a row in no block left behind. O(rows)."""
    import pyarrow as pa

    layout = _layout(layout_ref)
    rows = layout.row_ids.rows(_int_column(batch, _UID))
    counts = layout.row_starts[rows + 1] - layout.row_starts[rows]
    local = row_of(counts)
    tagged = batch.select(_fields(batch)).take(pa.array(local))
    groups = layout.groups[ranges(layout.row_starts[rows], counts)]
    return tagged.append_column(_GROUP, pa.array(groups, pa.int64())).append_column(_ROW, pa.array(rows[local]))


# ---------------------------------------------------------------------------------------------
# Step 3: each group's blocks filled from its rows, by the library's materializer


def _pack_group(group: pa.Table, layout_ref: list[Any] | _Layout, recipe: Recipe) -> pa.Table:
    """The blocks of one group from its rows (read and fitted again, as the lengths pass did): the plan's pieces
    of those blocks filled by ``packing.materialize`` into the output schema's columns, ``sequence_ids`` (and
    completions) numbered over the whole dataset, and each block's place in the plan. O(rows + blocks ×
    max_seq_length)."""
    import pyarrow as pa

    layout = _layout(layout_ref)
    group = group.sort_by(_ROW)
    rows, number = _int_column(group, _ROW), int(group.column(_GROUP)[0].as_py())
    samples = read_batch(group.select(_fields(group)), recipe, layout.completion_first is not None)
    first = number * layout.blocks_per_group
    blocks = layout.plan.select(np.arange(first, min(first + layout.blocks_per_group, layout.plan.num_blocks)))
    local = np.searchsorted(rows, blocks.piece_sequence).astype(np.int32)
    blocks = replace(blocks, lengths=samples.lengths, piece_sequence=local)
    pad = prepare(recipe).pad_id
    batch = PackedBatch.of(blocks, samples, pad_token_id=pad, int64=recipe.int64, sequence_names=rows).made()
    if layout.completion_first is not None and samples.units is not None:  # completions numbered globally
        units = samples.units
        counted = units.kind[units.unit_of_completion] > 0
        owner = units.unit_of_completion[counted]
        numbers = layout.completion_first[rows][owner] + (np.flatnonzero(counted) - units.completion_offsets[owner])
        known = numbers if numbers.size else np.full(1, -1, dtype=np.int64)  # plain rows only: no completion
        ids = batch.completion_ids
        batch.__dict__["completion_ids"] = np.where(ids >= 0, known[np.maximum(ids, 0)], -1).astype(np.int32)
    return batch.to_arrow().append_column(_BLOCK, pa.array(np.arange(first, first + blocks.num_blocks)))


# ---------------------------------------------------------------------------------------------


def _indexed(ds: ray.data.Dataset) -> tuple[Any, list[str]]:
    """``ds`` with every row's id (``_UID``), materialized, and its column names; a column whose rows hold values
    of different types (a pair's ``chosen`` ids in one row, text in another), which Ray cannot merge, refused by
    name. O(rows) on the cluster."""
    import re

    import pyarrow as pa
    from ray.data.expressions import monotonically_increasing_id

    try:
        indexed = ds.with_column(_UID, monotonically_increasing_id()).materialize()
        schema = indexed.schema()
        return indexed, list(schema.names) if schema is not None else []
    except (pa.ArrowTypeError, pa.ArrowInvalid) as error:
        found = re.search(r"Field (\w+) has incompatible types", str(error))
        column = repr(found.group(1)) if found else "a column"
        raise SettingError(
            "ds", f"{column} of one type in every row (Ray merges the rows' columns)", "<mixed types>"
        ) from None
    except Exception as error:  # Ray's task error around its own KeyError: blocks of other columns
        found = re.search(r"Field \\?\"?(\w+)\\?\"? does not exist in schema", str(error))
        if found is None:
            raise
        raise SettingError(
            "ds",
            "the same columns in every block (rows of several forms: give every row every column, None where it has "
            "no value, or pack them apart)",
            f"<a block without {found.group(1)!r}>",
        ) from None


def pack_dataset(
    ds: ray.data.Dataset,
    max_seq_length: int | None = None,
    *,
    strategy: StrategyName | None = None,
    overflow: OverflowPolicy | None = None,
    shuffle: bool = True,
    ordered: bool = True,
    recipe: Recipe | None = None,
    **options: Unpack[RecipeOptions],
) -> ray.data.Dataset:
    """Pack a Ray dataset with one global plan: a dataset of blocks equal to ``packing.pack`` on its rows.

    Rows are in any form the reader accepts (token lists under ``input_ids`` with an optional loss
    mask, ``prompt`` and ``completion``, preference pairs and completion groups, or text rows with a ``tokenizer``,
    mixed freely; other columns are ignored). A pair or group is kept whole and its blocks get the unit columns (as
    ``pack`` gives them). The options are every entry point's (:class:`~packing.Recipe`, or ``recipe=``). Row
    ``i`` is the ``i``-th row Ray produces (``sequence_ids`` hold these ids): with Ray's
    ``DataContext.execution_options.preserve_order = True`` that is the input order, the same on
    every run; without it Ray may hand rows over in another order. The input is executed once
    (``materialize``); the driver receives 16 bytes a row (id and length) and plans with the recipe
    (strategy, its options, ``window``); the rows of each group of blocks travel through Ray Data's hash
    shuffle (``groupby``; a row cut across groups to each), the blocks through a ``sort`` when ``ordered``, so that (with
    ``preserve_order``) they are read in plan order; ``ordered=False`` skips the sort and leaves the
    order to Ray. With ``shuffle`` the order is ``plan.shuffle(seed)``'s (seed default 0), the same
    as single-machine packing with that seed.

    Raises the first bad row's :class:`~packing.SampleError`, with its global row id, before anything
    is packed. Cost: O(tokens) on the cluster, a shuffle of the rows' columns and one of the blocks; O(rows)
    memory and the strategy's planning time on the driver.
    """
    chosen = Recipe.at("ray.pack_dataset", recipe, max_seq_length, strategy=strategy, overflow=overflow, **options)
    cluster = _require_ray()
    check_flag(shuffle, "shuffle")
    check_flag(ordered, "ordered")
    capacity = chosen.max_seq_length
    prepare(chosen)  # the tokenizer and the pad id, on the driver before the cluster reads a row
    indexed, names = _indexed(ds)
    num_rows = indexed.count()
    if num_rows and not any(name in names for name in FIELDS):
        raise SettingError("ds", f"rows the reader reads (a column of {', '.join(FIELDS)})", f"<columns {names}>")
    lengths_ds = indexed.map_batches(_lengths_batch, batch_format="pyarrow", fn_kwargs={"recipe": chosen})
    found = _collect_lengths((cluster.get(ref) for ref in lengths_ds.to_arrow_refs()), num_rows)
    layout, stats = found.plan(chosen)
    stats.warn_lost("ray.pack_dataset")  # on the driver, with pack's counts
    if layout.num_blocks == 0:  # nothing to pack (no row, or every row left out): the schema's columns, no rows
        nothing: ray.data.Dataset = cluster.data.from_arrow(arrow_schema(chosen.int64).empty_table())
        return nothing
    if shuffle:
        layout = layout.shuffle(chosen.seed or 0)
    cpus = max(1, int(cluster.cluster_resources().get("CPU", 1)))
    blocks_per_group = max(1, min(TOKENS_PER_TASK // capacity, -(-layout.num_blocks // (4 * cpus))))
    groups = -(-layout.num_blocks // blocks_per_group)
    layout_ref = cluster.put(_Layout.of(layout, found.ids, blocks_per_group, found.completion_first()))
    del layout, found  # the driver keeps nothing of the plan but what it broadcasts
    tagged = indexed.map_batches(_tag_rows, batch_format="pyarrow", fn_kwargs={"layout_ref": [layout_ref]})
    packed = tagged.groupby(_GROUP, num_partitions=min(groups, _MAX_PARTITIONS)).map_groups(
        _pack_group, batch_format="pyarrow", fn_kwargs={"layout_ref": [layout_ref], "recipe": chosen}
    )
    result: ray.data.Dataset = (packed.sort(_BLOCK) if ordered else packed).drop_columns([_BLOCK])
    return result
