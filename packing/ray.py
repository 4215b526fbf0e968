"""Packing a Ray Data dataset past one machine: the same blocks as ``packing.pack``, assembled by Ray.

The tokens stay on the cluster; only lengths travel to the driver:

1. every row gets a stable id (its place in the input) and a distributed ``map_batches`` reads
   its lengths (the library's Arrow reader, so bad rows are refused exactly as on one machine);
2. the driver plans globally from the lengths alone (``packing.plan``, any strategy) and, with
   ``shuffle``, permutes the blocks as single-machine packing does with the same seed;
3. every row is cut into the pieces the plan gives it, each tagged with its block and its place
   in the block, and Ray Data's own grouping (``groupby(...).map_groups``) brings the pieces of
   each block together; with ``ordered`` a ``sort`` puts the blocks in plan order;
4. the library's materializer fills the blocks (``packing.materialize``) into the output schema's
   columns, with ``sequence_ids`` holding global row ids.

The result is one row per block, the columns of ``packing.batches.schema`` (``input_ids``, ``labels``,
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

import io
from collections.abc import Iterable
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from packing.batches.packed import materialize
from packing.batches.units import Fitted, check_unit_recipe, fit_unit_lengths, fit_units
from packing.core.arrays import offsets_of, ranges, row_of
from packing.core.forms import FIELDS, RowKind
from packing.core.pairs_groups import Units
from packing.core.samples import Samples
from packing.core.validation import OverflowPolicy, check_flag
from packing.errors import SampleError, SettingError, UnitTooLong
from packing.planning.plans import PackingPlan, plan
from packing.reading.arrow import read_table
from packing.reading.reader import mixed_kinds_error, read_rows
from packing.recipe import Recipe, RecipeOptions
from packing.strategies.registry import StrategyName
from packing.strategies.stats import PackingStats, UnitStats
from packing.text.prepare import prepare

if TYPE_CHECKING:  # pragma: no cover - typing only
    from typing import Unpack

    import pyarrow as pa
    import ray.data

Int64Array = npt.NDArray[np.int64]
Int32Array = npt.NDArray[np.int32]

TOKENS_PER_TASK = 1 << 21
"""Token slots handled by one assembling or materializing call (about 60 MB of output columns)."""

_MAX_PARTITIONS = 200
"""At most this many hash partitions for the grouping (Ray Data's default); fewer when there are fewer groups."""

_UID = "__packing_uid"
_GROUP, _BLOCK, _KEY, _ROW = "__packing_group", "__packing_block", "__packing_key", "__packing_row"
_TOKENS, _MASK, _DOC_LENGTHS, _DOC_ROWS = "__packing_tokens", "__packing_mask", "__packing_docs", "__packing_rows"
_LENGTH, _BAD = "__packing_length", "__packing_bad"
_UNITS = "__packing_units"
"""The completions of each row that is a pair or group (the lengths pass); with any, every piece carries its unit's
structure and the global number of its first completion:"""
_KIND, _PROMPT, _COMPLETIONS = "__packing_kind", "__packing_prompt", "__packing_completions"
_COUNTS, _FIRST = "__packing_counts", "__packing_first"
_FIT = "__packing_fit"
"""What fitting a batch's pairs and groups cut (:func:`_fit_counts`), in its first row (the others null)."""
_FIT_SIZE = 2 + len(fields(UnitStats)) - 1
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


def _list_array(offsets: Int64Array, values: npt.NDArray[Any]) -> pa.Array:
    import pyarrow as pa

    return pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(values))


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
    return [name for name in FIELDS if name in table.column_names]


def _int_column(table: pa.Table, name: str) -> Int64Array:
    return np.asarray(table.column(name).to_numpy(), dtype=np.int64)


# ---------------------------------------------------------------------------------------------
# Step 1: lengths, where the data lives


def _lengths_batch(batch: pa.Table, recipe: Recipe) -> pa.Table:
    """Each row's id and length; in a batch with a bad row, that row's values are kept for the driver."""
    import pyarrow as pa

    uid = _int_column(batch, _UID)
    rows = batch.select(_fields(batch))
    units = np.zeros(len(uid), dtype=np.int64)  # completions of each pair or group (0 for other rows)
    fit: list[list[int] | None] = [None] * len(uid)
    try:
        samples = read_table(rows, **prepare(recipe).read_options)
        if samples.units is not None and _keeps_units(recipe):  # fitted whole, what that cut counted
            fitted = fit_units(samples, recipe)
            samples, fit[0] = fitted.samples, _fit_counts(fitted, recipe)
        samples.refuse_other_labels()  # blocks train each token on itself
        samples.refuse_wide_ids(recipe.int64)  # the shuffle carries the output's id width
        if samples.tokens is None and len(samples):  # lengths only: nothing to pack (named on the driver)
            raise SampleError(0, None, None, "token ids", "<a length only>")
        lengths = samples.lengths
        if samples.units is not None:
            units[:] = np.where(samples.units.kind > 0, samples.units.counts, 0)
    except SampleError as error:  # named on the driver with its global row id
        local = error.sample if error.sample is not None else 0
        sink = io.BytesIO()
        with pa.ipc.new_stream(sink, rows.schema) as writer:
            writer.write_table(rows.slice(local, 1))
        length = np.full(len(uid), _UNREAD, dtype=np.int64)
        length[local] = _REFUSED
        bad: list[bytes | None] = [None] * len(uid)
        bad[local] = sink.getvalue()
        return pa.table(
            {
                _UID: pa.array(uid, pa.int64()),
                _LENGTH: pa.array(length),
                _BAD: pa.array(bad, pa.binary()),
                _UNITS: pa.array(units),
                _FIT: pa.nulls(len(uid), pa.list_(pa.int64())),
            }
        )
    return pa.table(
        {
            _UID: pa.array(uid, pa.int64()),
            _LENGTH: pa.array(lengths, pa.int64()),
            _BAD: pa.nulls(len(uid), pa.binary()),
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
    rows among them too) and the :class:`~packing.strategies.stats.UnitStats` counts (every unit that fits kept,
    as a plan with ``drop`` keeps it). O(units).

    >>> from packing import read_rows
    >>> _fit_counts(fit_units(read_rows([{"prompt": [1], "chosen": [2, 3, 4], "rejected": [5]}]), Recipe(5)), Recipe(5))
    [1, 1, 1, 0, 2, 1, 1, 0, 0]
    """
    units = fitted.fit.kept_stats(recipe).units
    assert units is not None
    counts = [value for name, value in units.summary().items() if name != "share_prompt"]
    return [fitted.tokens_cut, int(fitted.fit.units_cut.sum()), *counts]


def _with_fit(stats: PackingStats, fit: Int64Array, share_prompt: bool) -> PackingStats:
    """``stats`` of the plan of fitted units with what fitting cut counted in (``fit``: :func:`_fit_counts` summed
    over every batch), as ``UnitFit.stats`` counts it on one machine. O(1)."""
    tokens_cut, units_cut, pairs, groups, completions, truncated, completions_cut, dropped, shared = map(int, fit)
    return replace(
        stats,
        input_tokens=stats.input_tokens + tokens_cut,
        tokens_truncated=stats.tokens_truncated + tokens_cut,
        sequences_truncated=stats.sequences_truncated + units_cut,
        units=UnitStats(pairs, groups, completions, truncated, completions_cut, dropped, shared, share_prompt),
    )


def _read(rows: pa.Table, recipe: Recipe, units: bool = False) -> Samples:
    """A batch's rows through the reader; pairs and groups fitted whole by the overflow policy (the same on every
    pass: the lengths planned are the pieces cut). ``units``: the dataset has pairs or groups, so a batch of plain
    rows is fitted as units of their own too, as ``pack`` fits the plain rows among units."""
    return _fitted(read_table(rows, **prepare(recipe).read_options), recipe, units)


def _fitted(samples: Samples, recipe: Recipe, units: bool) -> Samples:
    """``samples`` with pairs and groups fitted (:func:`_read`); ``units``: plain samples too, as units of their own.
    O(tokens)."""
    if units and samples.units is None:
        samples = replace(samples, units=Units.plain(samples.lengths, recipe.share_prompt))
    return fit_units(samples, recipe).samples if samples.units is not None else samples


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
    refused: list[tuple[int, bytes]] = []
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
            refused.append((int(uid[filled + index]), table.column(_BAD)[index].as_py()))
        filled += table.num_rows
        del table
    if filled != num_rows:  # pragma: no cover - a materialized dataset does not change
        raise RuntimeError(f"the lengths pass gave {filled} rows for a dataset of {num_rows}")
    ids = _RowIds.of(uid)
    order = ids.rows(uid)
    lengths, counts = np.empty(num_rows, dtype=np.int64), np.empty(num_rows, dtype=np.int64)
    lengths[order], counts[order] = length, completions
    bad = sorted((int(ids.rows(np.array([u]))[0]), values) for u, values in refused)
    return _Lengths(ids, lengths, counts, fit, bad)


@dataclass
class _Lengths:
    """What the lengths pass tells the driver (:func:`_collect_lengths`), by global row."""

    ids: _RowIds
    lengths: Int64Array
    counts: Int64Array
    """Completions of each row that is a pair or group, 0 for a plain row."""
    fit: Int64Array
    """What fitting the batches' units cut (:func:`_fit_counts`, summed)."""
    refused: list[tuple[int, bytes]]
    """The first row each refused batch refused, and its values, in row order."""

    def raise_first_error(self, recipe: Recipe) -> None:
        """Raise the error ``pack`` raises first for these rows, under its global row id: a reader's error before
        any unit too long (``pack`` reads every row before it fits them); among the too long, the first, the plain
        rows among units (``overflow="error"``) counted, which a batch without units could not refuse. O(rows)."""
        errors: list[SampleError] = []
        for row, values in self.refused:
            try:
                _raise_bad_row(values, row, recipe)
            except SampleError as error:
                errors.append(error)
        read = [error for error in errors if not isinstance(error, UnitTooLong)]
        if read:
            raise read[0]
        units = bool(errors) or bool(self.counts.any())
        over = np.flatnonzero((self.counts == 0) & (self.lengths > recipe.max_seq_length))
        if units and recipe.overflow == "error" and over.size and (not errors or errors[0].sample > over[0]):
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

    def plan(self, recipe: Recipe) -> tuple[PackingPlan, PackingStats, Recipe]:
        """The global plan of these rows, its statistics with what fitting cut counted in, and the recipe it was
        planned with (``drop`` under ``truncate`` with units: a unit that cannot fit is left out whole); the first
        bad row raised, under its global row id. O(rows) plus the strategy's cost."""
        self.raise_first_error(recipe)
        units = bool(self.counts.any())
        planning = recipe
        if units:  # pairs and groups: whole, fitted by the lengths pass; plain rows among them fitted as theirs
            check_unit_recipe(recipe)
            self.fit_plain_rows(recipe)
            if recipe.overflow == "truncate":
                planning = Recipe.of(recipe, overflow="drop")
        layout = plan(self.lengths, recipe=planning)
        return layout, _with_fit(layout.stats, self.fit, recipe.share_prompt) if units else layout.stats, planning

    def completion_first(self) -> Int64Array | None:
        """The global number of each row's first completion; None without pairs and groups. O(rows)."""
        return np.cumsum(self.counts) - self.counts if self.counts.any() else None


def _raise_bad_row(row: bytes, index: int, recipe: Recipe) -> None:
    """Raise the reader's error for the refused row under its global row id, as on one machine."""
    import pyarrow as pa

    record = pa.ipc.open_stream(row).read_all().to_pylist()[0]
    try:
        samples = read_rows([record], **prepare(recipe).read_options)
        if samples.tokens is not None:  # a unit too long under overflow="error", or a plain row among units
            _fitted(samples, recipe, units=True)
        samples.refuse_other_labels()
        samples.refuse_wide_ids(recipe.int64)
    except SampleError as error:  # the reader's error, naming sample ``index``
        error.sample = index
        error.args = (error.where_and_what(),)
        raise
    kind: RowKind = "tokens" if samples.tokens is not None else "length"
    # read alone, the row is fine: it was refused for its kind, a length only where packing needs tokens
    raise mixed_kinds_error(index, "tokens", kind)


# ---------------------------------------------------------------------------------------------
# Step 2: the plan, and every row's pieces


@dataclass(frozen=True)
class _Pieces:
    """The plan's pieces by row (CSR over global row ids: 16 bytes a piece and 8 a row), each with its
    key (its place among all pieces in final block order), its start in the row and its length;
    ``block_keys[b]`` is the key of final block ``b``'s first piece."""

    row_ids: _RowIds
    row_starts: Int64Array
    key: Int64Array
    start: Int32Array
    length: Int32Array
    block_keys: Int64Array
    blocks_per_group: int
    completion_first: Int64Array | None = None
    """Pairs and groups: the global number of every row's first completion."""

    def block(self, key: Int64Array) -> Int64Array:
        """The final block of pieces with these keys. O(k log blocks)."""
        result: Int64Array = np.searchsorted(self.block_keys, key, side="right") - 1
        return result


def _pieces_by_row(
    plan: PackingPlan, row_ids: _RowIds, blocks_per_group: int, completion_first: Int64Array | None = None
) -> _Pieces:
    """The pieces of the (already shuffled) plan by row; a piece's key is its place in the plan.
    O(pieces) when no row has two pieces, O(pieces log pieces) otherwise (a sort by row)."""
    per_row = np.bincount(plan.piece_sequence, minlength=len(plan.lengths))
    row_starts = offsets_of(per_row)
    if per_row.max(initial=0) <= 1:  # one piece a row at most: a scatter
        by_row = np.empty(len(plan.piece_sequence), dtype=np.int64)
        by_row[row_starts[plan.piece_sequence]] = np.arange(len(by_row), dtype=np.int64)
    else:
        by_row = np.argsort(plan.piece_sequence, kind="stable")
    return _Pieces(
        row_ids,
        row_starts,
        by_row,
        plan.piece_start[by_row],
        plan.piece_length[by_row],
        plan.block_starts,
        blocks_per_group,
        completion_first,
    )


# ---------------------------------------------------------------------------------------------
# Step 3: pieces tagged with their block, grouped by Ray Data


def _id_type(int64: bool) -> Any:
    """The Arrow type token ids travel as: the output's (int32, the compact schema; int64 when asked for)."""
    import pyarrow as pa

    return pa.int64() if int64 else pa.int32()


def _piece_schema(ids: pa.DataType, units: bool = False) -> pa.Schema:
    import pyarrow as pa

    unit_fields = [
        (_KIND, pa.int8()),
        (_PROMPT, pa.int64()),
        (_COMPLETIONS, pa.large_list(pa.int64())),
        (_FIRST, pa.int64()),
    ]
    return pa.schema(
        [
            (_GROUP, pa.int64()),
            (_BLOCK, pa.int64()),
            (_KEY, pa.int64()),
            (_ROW, pa.int64()),
            (_TOKENS, pa.large_list(ids)),
            (_MASK, pa.large_list(pa.int8())),
            *(unit_fields if units else []),
        ]
    )


def _tag_batch(batch: pa.Table, pieces_ref: list[Any], recipe: Recipe, units: bool = False) -> pa.Table:
    """``_tag_pieces`` with the pieces from the object store (shared memory, not copied)."""
    ray = _require_ray()
    return _tag_pieces(batch, ray.get(pieces_ref[0]), recipe, units)


def _tag_pieces(batch: pa.Table, pieces: _Pieces, recipe: Recipe, units: bool = False) -> pa.Table:
    """One output row per piece of every input row: its group, block, key, global row and tokens (as the
    output's ids: the lengths pass refused wider ones); with ``units``, each piece's (a whole unit's) kind, prompt
    length and completion lengths. O(tokens)."""
    import pyarrow as pa

    rows = pieces.row_ids.rows(_int_column(batch, _UID))
    samples = _read(batch.select(_fields(batch)), recipe, units)
    assert samples.tokens is not None and samples.loss_mask is not None  # checked by the lengths pass
    counts = pieces.row_starts[rows + 1] - pieces.row_starts[rows]
    which = ranges(pieces.row_starts[rows], counts)
    local = row_of(counts)
    length = pieces.length[which].astype(np.int64)
    at = ranges(samples.offsets[local] + pieces.start[which], length)
    offsets = offsets_of(length)
    key = pieces.key[which]
    block = pieces.block(key)
    columns = [
        pa.array(block // pieces.blocks_per_group, pa.int64()),
        pa.array(block, pa.int64()),
        pa.array(key, pa.int64()),
        pa.array(rows[local], pa.int64()),
        _list_array(offsets, samples.tokens[at].astype(np.int64 if recipe.int64 else np.int32, copy=False)),
        _list_array(offsets, samples.loss_mask[at]),
    ]
    if units:  # every piece a whole unit (a plain row among units: a unit of its own)
        found = samples.units
        assert found is not None  # read as units (_read)
        counts = found.counts[local]
        columns += [
            pa.array(found.kind[local], pa.int8()),
            pa.array(found.prompt_lengths[local], pa.int64()),
            _list_array(offsets_of(counts), found.completion_lengths[ranges(found.completion_offsets[local], counts)]),
            pa.array(
                pieces.completion_first[rows[local]] if pieces.completion_first is not None else counts, pa.int64()
            ),
        ]
    return pa.table(columns, schema=_piece_schema(_id_type(recipe.int64), units))


def _block_schema(ids: pa.DataType, units: bool = False) -> pa.Schema:
    import pyarrow as pa

    unit_fields = [
        (_KIND, pa.large_list(pa.int8())),
        (_PROMPT, pa.large_list(pa.int64())),
        (_COUNTS, pa.large_list(pa.int64())),
        (_COMPLETIONS, pa.large_list(pa.int64())),
        (_FIRST, pa.large_list(pa.int64())),
    ]
    return pa.schema(
        [
            (_BLOCK, pa.int64()),
            (_TOKENS, pa.large_list(ids)),
            (_MASK, pa.large_list(pa.int8())),
            (_DOC_LENGTHS, pa.large_list(pa.int32())),
            (_DOC_ROWS, pa.large_list(pa.int64())),
            *(unit_fields if units else []),
        ]
    )


def _gather_group(group: pa.Table) -> pa.Table:
    """The pieces of some blocks as one compact row per block: tokens, mask, document lengths and rows,
    in the plan's order. O(tokens + pieces log pieces)."""
    import pyarrow as pa

    group = group.take(np.argsort(_int_column(group, _KEY), kind="stable"))
    block = _int_column(group, _BLOCK)
    starts = np.flatnonzero(np.diff(block, prepend=-1))
    doc_offsets = np.append(starts, len(block)).astype(np.int64)
    doc_lengths = np.asarray(_flat_lengths(group.column(_TOKENS)), dtype=np.int64)  # tokens per piece, in key order
    token_offsets = offsets_of(np.add.reduceat(doc_lengths, starts) if len(starts) else np.zeros(0, np.int64))
    columns = [
        pa.array(block[starts], pa.int64()),
        _list_array(token_offsets, _flat(group.column(_TOKENS))),
        _list_array(token_offsets, _flat(group.column(_MASK)).astype(np.int8, copy=False)),
        _list_array(doc_offsets, doc_lengths.astype(np.int32)),
        _list_array(doc_offsets, _int_column(group, _ROW)),
    ]
    units = _KIND in group.column_names
    if units:  # each piece's unit, in key order
        counts = _flat_lengths(group.column(_COMPLETIONS))
        completion_offsets = offsets_of(np.add.reduceat(counts, starts) if len(starts) else np.zeros(0, np.int64))
        columns += [
            _list_array(doc_offsets, np.asarray(group.column(_KIND).to_numpy(), dtype=np.int8)),
            _list_array(doc_offsets, _int_column(group, _PROMPT)),
            _list_array(doc_offsets, counts),
            _list_array(completion_offsets, _flat(group.column(_COMPLETIONS)).astype(np.int64, copy=False)),
            _list_array(doc_offsets, _int_column(group, _FIRST)),
        ]
    return pa.table(columns, schema=_block_schema(group.schema.field(_TOKENS).type.value_type, units))


def _flat_lengths(column: Any) -> Int64Array:
    import pyarrow.compute as pc

    return np.asarray(pc.list_value_length(column).to_numpy(zero_copy_only=False), dtype=np.int64)


# ---------------------------------------------------------------------------------------------
# Step 4: the library's materializer, per batch of blocks


def _materialize_batch(
    blocks: pa.Table,
    max_seq_length: int,
    strategy: str,
    overflow: str,
    pad_token_id: int,
    int64: bool,
    share_prompt: bool = False,
) -> pa.Table:
    """Compact blocks to the output schema's columns through ``packing.materialize`` (blocks of units with their
    unit columns, laid out as ``share_prompt`` says). O(blocks × max_seq_length)."""
    doc_lengths = _flat(blocks.column(_DOC_LENGTHS)).astype(np.int64, copy=False)
    doc_rows = _flat(blocks.column(_DOC_ROWS)).astype(np.int64, copy=False)
    block_starts = offsets_of(_flat_lengths(blocks.column(_DOC_LENGTHS)))
    units = None
    if _KIND in blocks.column_names:
        units = Units(
            _flat(blocks.column(_KIND)).astype(np.int8, copy=False),
            _flat(blocks.column(_PROMPT)).astype(np.int64, copy=False),
            offsets_of(_flat(blocks.column(_COUNTS)).astype(np.int64, copy=False)),
            _flat(blocks.column(_COMPLETIONS)).astype(np.int64, copy=False),
            share_prompt,
        )
    samples = Samples(
        _flat(blocks.column(_TOKENS)),
        _flat(blocks.column(_MASK)).astype(np.int8, copy=False),
        offsets_of(doc_lengths),
        None,
        units,
    )
    layout = PackingPlan.of_blocks(doc_lengths, block_starts, max_seq_length, strategy, overflow)
    batch = materialize(layout, samples, pad_token_id=pad_token_id, int64=int64, sequence_names=doc_rows)
    if units is not None:  # completions numbered over the whole dataset, as one machine numbers them
        first = _flat(blocks.column(_FIRST)).astype(np.int64, copy=False)
        counted = units.kind[units.unit_of_completion] > 0
        owner = units.unit_of_completion[counted]
        numbers = first[owner] + (np.flatnonzero(counted) - units.completion_offsets[owner])
        local = batch.completion_ids
        known = numbers if numbers.size else np.full(1, -1, dtype=np.int64)  # a batch of plain rows: no completion
        batch.__dict__["completion_ids"] = np.where(local >= 0, known[np.maximum(local, 0)], -1).astype(np.int32)
    return batch.to_arrow()


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
    mixed freely; other columns are ignored). A pair or group travels whole, as one piece with its unit's structure,
    and its blocks get the unit columns (as ``pack`` gives them). The options are every entry point's (:class:`~packing.Recipe`, or ``recipe=``). Row
    ``i`` is the ``i``-th row Ray produces (``sequence_ids`` hold these ids): with Ray's
    ``DataContext.execution_options.preserve_order = True`` that is the input order, the same on
    every run; without it Ray may hand rows over in another order. The input is executed once
    (``materialize``); the driver receives 16 bytes a row (id and length) and plans with the recipe
    (strategy, its options, ``window``); the pieces of each block travel through Ray Data's hash
    shuffle (``groupby``), the compact blocks through a ``sort`` when ``ordered``, so that (with
    ``preserve_order``) they are read in plan order; ``ordered=False`` skips the sort and leaves the
    order to Ray. With ``shuffle`` the order is ``plan.shuffle(seed)``'s (seed default 0), the same
    as single-machine packing with that seed.

    Raises the first bad row's :class:`~packing.SampleError`, with its global row id, before anything
    is packed. Cost: O(tokens) on the cluster and two shuffles of the packed tokens (5 bytes a
    token); O(rows) memory and the strategy's planning time on the driver.
    """
    chosen = Recipe.at("ray.pack_dataset", recipe, max_seq_length, strategy=strategy, overflow=overflow, **options)
    cluster = _require_ray()
    check_flag(shuffle, "shuffle")
    check_flag(ordered, "ordered")
    capacity, pad = chosen.max_seq_length, prepare(chosen).pad_id
    indexed, names = _indexed(ds)
    num_rows = indexed.count()
    if num_rows and not any(name in names for name in FIELDS):
        raise SettingError("ds", f"rows the reader reads (a column of {', '.join(FIELDS)})", f"<columns {names}>")
    lengths_ds = indexed.map_batches(_lengths_batch, batch_format="pyarrow", fn_kwargs={"recipe": chosen})
    found = _collect_lengths((cluster.get(ref) for ref in lengths_ds.to_arrow_refs()), num_rows)
    layout, stats, planning = found.plan(chosen)
    row_ids, completion_first = found.ids, found.completion_first()
    units = completion_first is not None
    stats.warn_lost("ray.pack_dataset")  # on the driver, with pack's counts
    if layout.num_blocks == 0:  # nothing to pack (no row, or every row left out): the schema's columns, no rows
        empty = Samples(np.zeros(0, np.int64), np.zeros(0, np.int8), np.zeros(1, np.int64))
        none = plan(np.zeros(0, np.int64), recipe=planning)
        nothing: ray.data.Dataset = cluster.data.from_arrow(
            materialize(none, empty, pad_token_id=pad, int64=chosen.int64).to_arrow()
        )
        return nothing
    if shuffle:
        layout = layout.shuffle(chosen.seed or 0)
    cpus = max(1, int(cluster.cluster_resources().get("CPU", 1)))
    blocks_per_group = max(1, min(TOKENS_PER_TASK // capacity, -(-layout.num_blocks // (4 * cpus))))
    groups = -(-layout.num_blocks // blocks_per_group)
    pieces = _pieces_by_row(layout, row_ids, blocks_per_group, completion_first)
    strategy_name, overflow_name = layout.strategy, layout.overflow
    del layout, found  # the driver keeps nothing of the plan but what it broadcasts
    pieces_ref = cluster.put(pieces)
    del pieces
    tagged = indexed.map_batches(
        _tag_batch, batch_format="pyarrow", fn_kwargs={"pieces_ref": [pieces_ref], "recipe": chosen, "units": units}
    )
    blocks = tagged.groupby(_GROUP, num_partitions=min(groups, _MAX_PARTITIONS)).map_groups(
        _gather_group, batch_format="pyarrow"
    )
    if ordered:
        blocks = blocks.sort(_BLOCK)
    settings = {
        "max_seq_length": capacity,
        "strategy": strategy_name,
        "overflow": overflow_name,
        "pad_token_id": pad,
        "int64": chosen.int64,
        "share_prompt": chosen.share_prompt,
    }
    packed: ray.data.Dataset = blocks.map_batches(
        _materialize_batch, batch_format="pyarrow", batch_size=blocks_per_group, fn_kwargs=settings
    )
    return packed
