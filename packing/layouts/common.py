"""What every layout module shares: the one form packed data is read into, and the pieces readers and writers
are built from.

Reading: a layout module turns a ``pyarrow.Table`` into a :class:`PackedLayout` (flat token arrays, a document
number per token, prediction targets in the Hugging Face convention) and hands it to the checks in a
:class:`Parsed`, with any boundary inconsistencies it met. Writing: a layout module turns a :class:`Rows` (the
blocks of a ``PackedBatch`` to export) into a table. Everything is vectorized: O(tokens + blocks).

>>> import pyarrow as pa
>>> column = list_column(pa.table({"m": [[1.0, 0.0], [True]]}).cast(pa.schema([("m", pa.list_(pa.float64()))])),
...                      "m", "<t>", flags=True)
>>> column.values.tolist(), column.lengths.tolist()
([1, 0, 1], [2, 1])
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import numpy.typing as npt

from packing.batches._packed import PackedBatch
from packing.batches._schema import COLUMNS, arrow_column
from packing.core._arrays import offsets_of, ranges, row_at, row_of
from packing.core._samples import IGNORE_INDEX
from packing.core._validation import INT64_MAX, flag_values
from packing.errors import DatasetError
from packing.strategies._registry import STRATEGIES

if TYPE_CHECKING:  # pragma: no cover - typing only
    import pyarrow as pa

Int64Array = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
__all__ = ["COLLATED", "IGNORE_INDEX", "LayoutModule", "PackedLayout", "Parsed", "Rows", "arrow_column"]
COLLATED = b"packing.collated"
"""The schema metadata key of a table made from a collator's batch (arrays or tensors, not dataset rows)."""


def is_collated(table: pa.Table) -> bool:
    """Whether ``table`` was made from a collator's batch (see :data:`COLLATED`)."""
    metadata = table.schema.metadata or {}
    return COLLATED in metadata


def positions_mark_nothing(row_offsets: Int64Array, positions: Int64Array, real: BoolArray | None = None) -> bool:
    """Whether position ids restart in no block at all (after its first token, among ``real`` tokens, all by
    default): then they carry no boundary anywhere, and a block of them may hold documents run together (TRL's
    ``wrapped`` with positions ``0..T-1``), which cannot be told from one long document. Where some block restarts
    them, the writer restarts at documents, and a block that does not holds one document. Empty blocks are not
    judged. O(tokens).

    >>> positions_mark_nothing(np.array([0, 3, 6]), np.array([0, 1, 2, 0, 1, 2]))
    True
    >>> positions_mark_nothing(np.array([0, 3, 6]), np.array([0, 1, 2, 0, 1, 0]))
    False
    """
    filled = np.diff(row_offsets) > 0
    restart = not_block_start(row_offsets, len(positions)) & (positions == 0)
    if real is not None:
        restart &= real
    restarts = np.bincount(row_of(np.diff(row_offsets))[restart], minlength=len(row_offsets) - 1)
    return bool(filled.any()) and not bool(restarts[filled].any())


# ---------------------------------------------------------------- reading


@dataclass(frozen=True, eq=False, kw_only=True)
class PackedLayout:
    """A packed dataset brought to one form: flat token arrays and per-token documents.

    Block ``b`` is ``input_ids[row_offsets[b]:row_offsets[b + 1]]``. ``document`` numbers the documents
    over the whole dataset (-1 = padding); in a block without boundaries the whole block counts as one
    document. ``targets[j]`` says whether the token at ``j`` is a prediction target (the loss the token at
    ``j - 1`` is trained with), after the layout's own conventions are applied; ``None`` when the data holds
    no loss information (every real token is then a target). ``position_ids`` and ``attention_mask`` are
    the columns as stored, or ``None``. Built by keyword (each reader names what its layout stores).
    """

    name: str
    """The layout's name (:data:`packing.layouts.LAYOUTS`)."""
    row_offsets: Int64Array
    input_ids: Int64Array
    document: Int64Array
    targets: BoolArray | None
    boundaries_known: BoolArray
    position_ids: Int64Array | None = None
    attention_mask: Int64Array | None = None
    labels: Int64Array | None = None
    variant: str = ""
    unit: Int64Array | None = None
    """Blocks of preference pairs and completion groups (their ``unit_ids`` column): the unit of every token."""
    completion: Int64Array | None = None
    """With ``unit``: the completion every token answers (``completion_ids``), -1 on prompts."""

    @classmethod
    def of(
        cls,
        name: str,
        tokens: ListColumn,
        document: Int64Array,
        targets: BoolArray | None,
        columns: Mapping[str, ListColumn | None] | None = None,
        known: bool | BoolArray = True,
        **fields: Any,
    ) -> PackedLayout:
        """The blocks of the token column ``tokens`` in layout ``name``: ``position_ids``, ``attention_mask`` and
        ``labels`` as ``columns`` stores them (None where absent), boundaries ``known`` in every block or per block,
        ``fields`` the others (``variant``, or a column stored under another name). O(blocks)."""
        stored = {key: values_of((columns or {}).get(key)) for key in ("position_ids", "attention_mask", "labels")}
        known_rows = np.ones(len(tokens.lengths), dtype=bool) & known
        return cls(
            name=name,
            row_offsets=tokens.offsets,
            input_ids=tokens.values,
            document=document,
            targets=targets,
            boundaries_known=known_rows,
            **(stored | fields),
        )

    @property
    def num_blocks(self) -> int:
        return len(self.row_offsets) - 1

    @property
    def num_documents(self) -> int:
        return int(self.document.max(initial=-1)) + 1

    def documents(self) -> list[Int64Array]:
        """The tokens of every document, in order. O(tokens).

        >>> import pyarrow as pa
        >>> from packing.layouts import read_layout
        >>> [d.tolist() for d in read_layout(pa.table({"input_ids": [[1, 2, 3]], "seq_lengths": [[2, 1]]})).layout.documents()]
        [[1, 2], [3]]
        """
        return self._per_document(self.input_ids)

    def document_targets(self) -> list[BoolArray]:
        """Which tokens of every document are prediction targets (its first token never is). O(tokens)."""
        return self._per_document(self.real_targets())

    def _per_document(self, values: npt.NDArray[Any]) -> list[Any]:
        """Per-token ``values`` cut into every document's, in order. O(tokens)."""
        order = np.flatnonzero(self.document >= 0)
        counts = np.bincount(self.document[order], minlength=self.num_documents)
        return np.split(values[order], offsets_of(counts)[1:-1]) if len(counts) else []

    def real_targets(self) -> BoolArray:
        """``targets``, or every real token when the data has no loss information."""
        if self.targets is not None:
            return self.targets
        return self.document >= 0

    def block_columns(self, block: int) -> dict[str, npt.NDArray[Any]]:
        """Block ``block`` in this project's columns (:mod:`packing.batches._schema`): real tokens first, padding after;
        ``labels`` the token where it is a target and -100 elsewhere, and always at a document's first token
        (what a finding says is wrong is not carried over); ``position_ids`` restarting per document;
        ``sequence_ids`` the document's number in the dataset (-1 in padding); ``seq_lengths`` the documents.
        The block keeps its stored length. O(block length).

        >>> import pyarrow as pa
        >>> from packing.layouts import read_layout
        >>> layout = read_layout(pa.table({"tokens": [[5, 6, 7, 0]], "labels": [[5, 6, 7, -100]],
        ...                               "input_pos": [[0, 1, 0, 1]], "seq_lens": [[2, 1, 1]]})).layout
        >>> {name: values.tolist() for name, values in layout.block_columns(0).items()}  # doctest: +NORMALIZE_WHITESPACE
        {'input_ids': [5, 6, 7, 0], 'labels': [-100, 6, -100, -100], 'loss_mask': [0, 1, 0, 0],
         'position_ids': [0, 1, 0, 0], 'sequence_ids': [0, 0, 1, -1], 'seq_lengths': [2, 1]}
        """
        lo, hi = int(self.row_offsets[block]), int(self.row_offsets[block + 1])
        document = self.document[lo:hi]
        order = np.argsort(document < 0, kind="stable")
        document = document[order]
        ids = self.input_ids[lo:hi][order]
        real = document >= 0
        opens = real.copy()
        opens[1:] &= document[1:] != document[:-1]
        targets = self.real_targets()[lo:hi][order] & real & ~opens
        starts = np.flatnonzero(opens)
        lengths = np.diff(np.append(starts, int(real.sum())))
        positions = np.zeros(len(ids), dtype=np.int64)
        positions[: int(real.sum())] = np.arange(int(real.sum())) - np.repeat(starts, lengths)
        return {
            "input_ids": ids.astype(np.int64),
            "labels": np.where(targets, ids, IGNORE_INDEX).astype(np.int64),
            "loss_mask": targets.astype(np.int8),
            "position_ids": positions,
            "sequence_ids": document.astype(np.int32),
            "seq_lengths": lengths.astype(np.int32),
        }

    def block_of(self, cells: Int64Array) -> Int64Array:
        """The block of each flat token index. O(cells · log blocks)."""
        blocks: Int64Array = row_at(self.row_offsets, cells)
        return blocks


def error(source: str, reason: str, where: str | None = None) -> DatasetError:
    """The error for a source that cannot be read as packed data."""
    return DatasetError(source, where, reason)


@dataclass(frozen=True)
class ListColumn:
    """A list column, flat: row ``r`` is ``values[offsets[r]:offsets[r + 1]]``."""

    values: Int64Array
    lengths: Int64Array

    @property
    def offsets(self) -> Int64Array:
        return offsets_of(self.lengths)


def list_column(table: pa.Table, name: str, source: str, flags: bool = False) -> ListColumn | None:
    """The integer (or boolean) list column ``name`` as flat int64 values, or ``None`` when absent.

    With ``flags`` (a mask column), floating-point values are accepted when every one is 0 or 1 (NeMo's masks
    mix floats and booleans). O(values)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if name not in table.column_names:
        return None
    column = table.column(name)
    kind = column.type
    if not (pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind)):
        if pa.types.is_null(kind):
            return None
        raise error(source, f"column '{name}': expected lists of integers, got {type_name(kind)}")
    value_type = kind.value_type
    floats = flags and pa.types.is_floating(value_type)
    exact = pa.types.is_integer(value_type) or pa.types.is_boolean(value_type) or pa.types.is_null(value_type)
    if not (exact or floats):
        raise error(source, f"column '{name}': expected lists of integers, got {type_name(kind)}")
    if column.null_count:
        row = int(np.flatnonzero(pc.is_null(column).to_numpy(zero_copy_only=False))[0])
        raise error(source, f"column '{name}': expected a list, got null", f"row {row + 1}")
    lengths = pc.list_value_length(column).to_numpy(zero_copy_only=False).astype(np.int64)
    flat = pc.list_flatten(column)
    if flat.null_count:
        raise error(source, f"column '{name}': lists must not contain nulls")
    values = flat.to_numpy(zero_copy_only=False) if len(flat) else np.zeros(0, dtype=np.int64)
    if floats:
        values = flag_values(values, name, source, lengths)
    if values.dtype.kind == "u" and values.size and int(values.max()) > INT64_MAX:
        # 2**64 - 1 would wrap to -1 in int64 and every check after it would read another value
        position = int(np.flatnonzero(values > INT64_MAX)[0])
        row = row_at(offsets_of(lengths), position)
        reason = f"column '{name}': expected integers that fit in int64, got {int(values[position])}"
        raise error(source, reason, f"row {row + 1}")
    return ListColumn(values.astype(np.int64, copy=False), lengths)


def type_name(kind: Any, limit: int = 60) -> str:
    """An Arrow type for messages, cut to ``limit`` characters (a crafted file can nest it 60 levels deep)."""
    text = str(kind)
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass
class Build:
    """Documents being derived from one boundary source, with the inconsistencies met on the way."""

    document: Int64Array
    bad_cells: list[Int64Array] = field(default_factory=list)


def from_lengths(row_offsets: Int64Array, lengths: ListColumn, fill_exactly: bool) -> Build:
    """Documents from per-block lengths (``seq_lengths``, ``seq_lens``, starts turned into lengths).

    Lengths that overrun their block are cut at its end, and the block is inconsistent; with
    ``fill_exactly``, lengths that do not add up to the block length are inconsistent too (the rest of the
    block then counts as padding). O(tokens + documents).
    """
    total = int(row_offsets[-1])
    row_length = np.diff(row_offsets)
    values = np.maximum(lengths.values, 0)
    entry_row = row_of(lengths.lengths)
    running = offsets_of(values)
    inside = running[:-1] - np.repeat(running[lengths.offsets[:-1]], lengths.lengths)
    start = row_offsets[:-1][entry_row] + inside
    end = np.minimum(start + values, row_offsets[1:][entry_row])
    kept = np.maximum(end - start, 0)
    document = np.full(total, -1, dtype=np.int64)
    real = kept > 0
    numbers = np.cumsum(real) - 1
    document[ranges(start[real], kept[real])] = np.repeat(numbers[real], kept[real])
    sums = np.bincount(entry_row, weights=values, minlength=len(row_length)).astype(np.int64)
    bad_rows = (sums > row_length) | (np.bincount(entry_row[lengths.values < 0], minlength=len(row_length)) > 0)
    if fill_exactly:
        bad_rows |= sums != row_length
    bad_rows &= row_length > 0  # an empty block has no cell to point at, and nothing to leak
    build = Build(document)
    if bad_rows.any():
        rows = np.flatnonzero(bad_rows)
        cells = np.minimum(row_offsets[rows] + np.minimum(sums[rows], row_length[rows]), row_offsets[rows + 1] - 1)
        build.bad_cells.append(np.maximum(cells, row_offsets[rows]))
    return build


def from_starts(row_offsets: Int64Array, starts: BoolArray, padding: BoolArray) -> Int64Array:
    """Documents from a per-token "opens a document" flag (a block's first real token always does)."""
    real = ~padding
    opens = starts & real
    row_first = row_offsets[:-1][np.diff(row_offsets) > 0]
    opens[row_first] |= real[row_first]
    # a real token after padding inside a block opens a document as well
    after_pad = np.zeros_like(opens)
    after_pad[1:] = padding[:-1] & real[1:]
    opens |= after_pad
    document = np.cumsum(opens) - 1
    document[padding] = -1
    return document.astype(np.int64)


def starts_of(row_offsets: Int64Array, document: Int64Array) -> BoolArray:
    """Whether each token opens a document (from ``document`` numbers)."""
    real = document >= 0
    start = real.copy()
    start[1:] &= document[1:] != document[:-1]
    return start


def renumber(document: Int64Array) -> Int64Array:
    """Documents numbered 0, 1, 2, ... again after some were turned into padding (-1); numbers only ever rise
    along the tokens. O(tokens)."""
    real = document >= 0
    kept = document[real]
    opens = np.ones(len(kept), dtype=np.int64)
    opens[1:] = kept[1:] != kept[:-1]
    out = np.full(len(document), -1, dtype=np.int64)
    out[real] = np.cumsum(opens) - 1
    return out


def not_block_start(row_offsets: Int64Array, total: int) -> BoolArray:
    inner = np.ones(total, dtype=bool)
    firsts = row_offsets[:-1][row_offsets[:-1] < total]
    inner[firsts] = False
    return inner


@dataclass
class Parsed:
    """What a layout reader hands to the checks."""

    layout: PackedLayout
    bad_boundaries: list[Int64Array]
    extra_padding_trained: BoolArray | None = None
    used_offset: Int64Array | None = None  # positions per block not counted (megatron: one per document); the
    # default capacity is then the most counted
    reused_segments: Int64Array | None = None  # documents whose segment number an earlier one of the block has


def check_lengths(
    column: ListColumn | None, name: str, reference: ListColumn, reference_name: str, source: str
) -> None:
    """A per-token column must have exactly as many values per row as the token column."""
    if column is None:
        return
    if len(column.lengths) != len(reference.lengths):
        raise error(
            source, f"column '{name}' has {len(column.lengths)} rows, '{reference_name}' has {len(reference.lengths)}"
        )
    differ = np.flatnonzero(column.lengths != reference.lengths)
    if differ.size:
        row = int(differ[0])
        raise error(
            source,
            f"column '{name}': {int(column.lengths[row])} values, expected {int(reference.lengths[row])} like "
            f"'{reference_name}'",
            f"row {row + 1}",
        )


def mismatch(row_offsets: Int64Array, document: Int64Array, other_starts: BoolArray) -> Int64Array:
    """Real tokens where another boundary source disagrees with the documents about where one opens."""
    starts = starts_of(row_offsets, document)
    inner = not_block_start(row_offsets, len(document))
    cells: Int64Array = np.flatnonzero((starts != other_starts) & (document >= 0) & inner).astype(np.int64)
    return cells


def values_of(column: ListColumn | None) -> Int64Array | None:
    return None if column is None else column.values


def targets_of(labels: ListColumn | None) -> BoolArray | None:
    """Hugging Face's convention: a token is a prediction target when its label is not -100 (None without
    labels). O(tokens)."""
    return None if labels is None else labels.values != IGNORE_INDEX


def read_columns(
    table: pa.Table, source: str, names: Iterable[str], tokens: str = "input_ids"
) -> tuple[ListColumn, dict[str, ListColumn | None]]:
    """The token column ``tokens`` (required) and the list columns ``names`` (None where absent), each checked to
    hold one value per token. O(tokens)."""
    ids = required(table, tokens, source)
    columns = {name: list_column(table, name, source) for name in names}
    for name, column in columns.items():
        check_lengths(column, name, ids, tokens, source)
    return ids, columns


def required(table: pa.Table, name: str, source: str) -> ListColumn:
    column = list_column(table, name, source)
    if column is None:
        raise error(source, f"column '{name}' is missing; found {', '.join(table.column_names)}")
    return column


def row_max(offsets: Int64Array, values: Int64Array) -> Int64Array:
    """The largest value of every block (-1 for an empty block). O(tokens)."""
    result = np.full(len(offsets) - 1, -1, dtype=np.int64)
    nonempty = np.flatnonzero(np.diff(offsets) > 0)
    if len(nonempty):
        result[nonempty] = np.maximum.reduceat(values, offsets[:-1][nonempty])
    return result


# ---------------------------------------------------------------- writing


class Rows:
    """The blocks of a batch to export, in plan order, with their real (non-padding) parts (the batch's arrays are
    read as they are, not copied). O(blocks × max_seq_length)."""

    def __init__(self, batch: PackedBatch) -> None:
        self.batch = batch
        starts, lengths = batch.boundaries  # the documents as the model sees them (wrapped: one per block)
        self.keeps_boundaries = STRATEGIES[batch.plan.strategy].keeps_boundaries
        self.doc_counts = np.diff(starts).astype(np.int64)
        self.doc_lengths = lengths[: int(starts[-1])].astype(np.int64)
        used = np.bincount(row_of(self.doc_counts), weights=self.doc_lengths, minlength=batch.num_blocks)
        self.used = used.astype(np.int64)
        self.width = batch.max_seq_length
        self.real = np.arange(self.width)[None, :] < self.used[:, None]

    def id_type(self) -> Any:
        """The Arrow type of token ids, labels and positions in the schema (:mod:`packing.batches._schema`): int32, or
        int64 for a batch made with ``int64=True``."""
        import pyarrow as pa

        return pa.from_numpy_dtype(COLUMNS[0].dtype_for(self.batch.int64))

    def flat_real(self, matrix: npt.NDArray[Any]) -> npt.NDArray[Any]:
        """The real tokens of the blocks, concatenated."""
        return matrix[self.real]

    def doc_starts(self) -> Int64Array:
        """The start of every document within its block, in order."""
        offsets = offsets_of(self.doc_lengths)
        starts: Int64Array = offsets[:-1] - np.repeat(offsets[offsets_of(self.doc_counts)[:-1]], self.doc_counts)
        return starts

    def last_of_document(self) -> BoolArray:
        """Per cell: whether it is its document's last token."""
        last = np.zeros((self.batch.num_blocks, self.width), dtype=bool)
        row_of_doc = row_of(self.doc_counts)
        local_end = self.doc_starts() + self.doc_lengths - 1
        last.reshape(-1)[row_of_doc * self.width + local_end] = True
        return last

    def targets(self) -> BoolArray:
        """Per cell of the blocks: whether the token is a prediction target (its label is not -100)."""
        targets: BoolArray = self.batch.labels != IGNORE_INDEX
        return targets

    def fixed(self, matrix: npt.NDArray[Any], kind: Any) -> Any:
        """A ``(blocks, max_seq_length)`` array as an Arrow list column of whole rows."""
        return arrow_column(matrix.reshape(-1), np.full(self.batch.num_blocks, self.width, dtype=np.int64), kind)

    def real_column(self, matrix: npt.NDArray[Any], kind: Any) -> Any:
        """The real tokens of a ``(blocks, max_seq_length)`` array as an Arrow list column (no padding)."""
        return arrow_column(self.flat_real(matrix), self.used, kind)


class LayoutModule(Protocol):
    """What a layout module provides (every module in :mod:`packing.layouts` is one): its name and title, whether a
    table's columns are its own, a reader to the common form, a writer from packed rows and where the writer puts
    loss weights. A new layout is its module and its line in :mod:`packing.layouts`.

    >>> from packing.layouts import MODULES
    >>> layout: LayoutModule = MODULES["trl"]
    >>> layout.NAME, layout.recognises({"input_ids", "seq_lengths"}, None)
    ('trl', True)
    """

    NAME: str
    TITLE: str

    def recognises(self, names: set[str], table: pa.Table) -> bool:
        """Whether a table with these column names is in this layout. O(1), or O(tokens) to read a mask."""

    def read(self, table: pa.Table, source: str) -> Parsed:
        """``table`` in the common form; errors name ``source``. O(tokens)."""

    def write(self, rows: Rows) -> pa.Table:
        """The packed ``rows`` as this layout's table. O(tokens)."""

    def weights_column(self, rows: Rows, weights: npt.NDArray[np.float32]) -> Any:
        """Per-token ``weights`` (``(blocks, max_seq_length)``) laid out as :meth:`write` lays out the labels: the
        ``loss_weights`` column of an export. O(tokens)."""


def fixed_weights(rows: Rows, weights: npt.NDArray[np.float32]) -> Any:
    """``weights`` as whole rows (a layout whose rows are ``max_seq_length`` long). O(tokens)."""
    import pyarrow as pa

    return rows.fixed(weights, pa.float32())


def real_weights(rows: Rows, weights: npt.NDArray[np.float32]) -> Any:
    """``weights`` of the real tokens only (a padding-free layout). O(tokens)."""
    import pyarrow as pa

    return rows.real_column(weights, pa.float32())
