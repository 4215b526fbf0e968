"""The one output schema: the columns of a packed block, in order, with dtype and meaning.

Everything that writes packed blocks makes them from :data:`COLUMNS` through
:func:`to_arrow`: ``PackedBatch.to_arrow``, the Parquet and JSON lines writers, the
Hugging Face ``datasets`` adapter, the command line and the explorer's downloads.
One row per block; every column but ``seq_lengths`` holds exactly ``max_seq_length``
values per row, padding last, except in the ``datasets`` adapters (``packing.hf``,
``stream_dataset``), whose rows hold only the real tokens, ``sum(seq_lengths)`` values, as TRL's
``pack_dataset`` writes them (``to_arrow(..., padding=False)``). Compact by default: ids, labels and positions are int32 (a token id above
2**31 - 1 is refused, naming the sample and position), the loss mask one byte; with
``int64=True`` (``packing.Recipe``) ``input_ids``, ``labels`` and ``position_ids`` are int64.

>>> [column.name for column in COLUMNS]
['input_ids', 'labels', 'loss_mask', 'position_ids', 'sequence_ids', 'seq_lengths']
>>> print(markdown_table())  # doctest: +ELLIPSIS
| column | type | meaning |
|---|---|---|
| `input_ids` | list of int32 (int64 with `int64=True`) | token ids; the padding id in padding |
...
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from packing.arrays import check_block_indexes, ranges

if TYPE_CHECKING:  # pragma: no cover - typing only
    import pyarrow as pa

    from packing.packed import PackedBatch
    from packing.weighting import LossMode

Int64Array = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Column:
    """One output column: its ``name``, numpy ``dtype`` of its values, and what it means; ``wide`` columns
    are int64 when the output is asked for in int64."""

    name: str
    dtype: str
    meaning: str
    wide: bool = False

    def dtype_for(self, int64: bool = False) -> np.dtype[Any]:
        """The numpy dtype of the column's values (int64 for a ``wide`` column when ``int64``).

        >>> COLUMNS[0].dtype_for(), COLUMNS[0].dtype_for(int64=True), COLUMNS[2].dtype_for(int64=True)
        (dtype('int32'), dtype('int64'), dtype('int8'))
        """
        return np.dtype("int64" if int64 and self.wide else self.dtype)


COLUMNS: tuple[Column, ...] = (
    Column("input_ids", "int32", "token ids; the padding id in padding", wide=True),
    Column(
        "labels",
        "int32",
        "training targets: input_ids with -100 where there is no loss and at the first token of every document",
        wide=True,
    ),
    Column("loss_mask", "int8", "1 = a real token that is trained on; 0 = padding or a masked (prompt) token"),
    Column("position_ids", "int32", "0, 1, 2, ... restarting at every document in the block; 0 in padding", wide=True),
    Column("sequence_ids", "int32", "index of the source sample of each token; -1 in padding"),
    Column(
        "seq_lengths",
        "int32",
        "lengths of the documents in the block, in order (flash-attention's cu_seqlens is [0, *cumsum])",
    ),
)
"""The output columns, in order."""

LOSS_WEIGHTS = Column(
    "loss_weights",
    "float32",
    "optional (written when asked): per-token weight of the chosen loss objective, 0 where the label is -100; "
    "Σ weight × token cross-entropy is the objective over the file (packing.weighting)",
)
"""The optional column, after :data:`COLUMNS` when written (``to_arrow(..., loss_weights=mode)``)."""

NAMES: tuple[str, ...] = tuple(column.name for column in COLUMNS)
GRID_COLUMNS: tuple[str, ...] = NAMES[:-1]
"""The columns with one value per token slot (``max_seq_length`` per block)."""

MAX_ID = 2**31 - 1
"""The largest token id (and sample index) the compact schema holds."""
CHUNK_VALUES = 1 << 24
"""Values per Arrow chunk: keeps every chunk's 32-bit list offsets far from overflow."""


def arrow_schema(int64: bool = False, loss_weights: bool = False) -> pa.Schema:
    """The schema as Arrow types: a list of the column's dtype for each column (``int64``: the wide
    columns in int64; ``loss_weights``: that optional column too).

    >>> str(arrow_schema().field("input_ids").type), str(arrow_schema(int64=True).field("input_ids").type)
    ('list<item: int32>', 'list<item: int64>')
    >>> str(arrow_schema(loss_weights=True).field("loss_weights").type)
    'list<item: float>'
    """
    import pyarrow as pa

    columns = (*COLUMNS, LOSS_WEIGHTS) if loss_weights else COLUMNS
    return pa.schema([(c.name, pa.list_(pa.from_numpy_dtype(c.dtype_for(int64)))) for c in columns])


def markdown_table() -> str:
    """The schema as a Markdown table (the table of ``docs/guides/outputs.md`` is this one), the optional
    column last."""
    lines = ["| column | type | meaning |", "|---|---|---|"]
    wide = " (int64 with `int64=True`)"
    lines += [
        f"| `{c.name}` | list of {c.dtype}{wide if c.wide else ''} | {c.meaning} |" for c in (*COLUMNS, LOSS_WEIGHTS)
    ]
    return "\n".join(lines)


def help_text() -> str:
    """One line listing the columns, for ``--help``."""
    return ", ".join(NAMES)


def _chunks(num_rows: int, width: int) -> list[tuple[int, int]]:
    step = max(1, CHUNK_VALUES // max(width, 1))
    return [(lo, min(lo + step, num_rows)) for lo in range(0, num_rows, step)]


def _list_array(offsets: Int64Array, values: npt.NDArray[Any]) -> pa.Array:
    import pyarrow as pa

    return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(values))


def to_arrow(
    batch: PackedBatch,
    order: npt.ArrayLike | None = None,
    loss_weights: LossMode | None = None,
    *,
    padding: bool = True,
) -> pa.Table:
    """The blocks as a ``pyarrow.Table`` of :data:`COLUMNS`, one row per block. O(blocks × max_seq_length).

    ``order`` lists the blocks to write, in order (default: every block in plan order);
    reorder the plan instead (``plan.shuffle``) to avoid the copy. Values are handed to
    Arrow without copying when already in block order. With ``loss_weights`` (an objective of
    ``packing.weighting``), also the column :data:`LOSS_WEIGHTS`, normalised over every block of ``batch``.
    With ``padding=False`` every row holds only its block's real tokens, ``sum(seq_lengths)`` values (the rows
    TRL's ``pack_dataset`` writes and its padding-free collator reads: it builds positions from ``seq_lengths``).

    >>> from packing import pack
    >>> table = to_arrow(pack([[1, 2], [3, 4, 5], [6]], 4, strategy="split"))
    >>> table.column("input_ids").to_pylist(), table.column("seq_lengths").to_pylist()
    ([[1, 2, 3, 4], [5, 6, 0, 0]], [[2, 2], [1, 1]])
    >>> to_arrow(pack([[1, 2], [3, 4, 5], [6]], 4, strategy="split"), padding=False).column("input_ids").to_pylist()
    [[1, 2, 3, 4], [5, 6]]
    """
    import pyarrow as pa

    layout = batch.plan
    rows = (
        np.arange(batch.num_blocks, dtype=np.int64)
        if order is None
        else check_block_indexes(order, batch.num_blocks, "order")
    )
    width = batch.max_seq_length
    grids = {name: getattr(batch, name) for name in GRID_COLUMNS}
    if loss_weights is not None:
        grids[LOSS_WEIGHTS.name] = batch.loss_weights(loss_weights)
    in_order = order is None
    if not in_order:
        grids = {name: grid[rows] for name, grid in grids.items()}
    counts = np.diff(layout.block_starts)[rows]
    firsts = layout.block_starts[:-1][rows]
    dtypes = {column.name: column.dtype_for(batch.int64) for column in (*COLUMNS, LOSS_WEIGHTS)}
    names = (*NAMES, LOSS_WEIGHTS.name) if loss_weights is not None else NAMES
    arrays: dict[str, list[pa.Array]] = {name: [] for name in names}
    for lo, hi in _chunks(len(rows), width):
        piece_offsets = np.zeros(hi - lo + 1, dtype=np.int64)
        np.cumsum(counts[lo:hi], out=piece_offsets[1:])
        if in_order:
            pieces = layout.piece_length[layout.block_starts[lo] : layout.block_starts[hi]]
        else:
            pieces = layout.piece_length[ranges(firsts[lo:hi], counts[lo:hi])]
        if padding:
            fixed = np.arange(hi - lo + 1, dtype=np.int64) * width
            real = None
        else:  # the real tokens of each block come first: keep them, drop the padding after them
            ends = np.concatenate(([0], np.cumsum(pieces, dtype=np.int64)))
            used = ends[piece_offsets[1:]] - ends[piece_offsets[:-1]]
            fixed = np.concatenate(([0], np.cumsum(used))).astype(np.int64)
            real = (np.arange(width)[None, :] < used[:, None]).reshape(-1)
        for name, grid in grids.items():
            values = grid[lo:hi].reshape(-1).astype(dtypes[name], copy=False)
            arrays[name].append(_list_array(fixed, values if real is None else values[real]))
        arrays["seq_lengths"].append(_list_array(piece_offsets, pieces.astype(np.int32, copy=False)))
    schema = arrow_schema(batch.int64, loss_weights is not None)
    return pa.table(
        {name: pa.chunked_array(arrays[name], type=schema.field(name).type) for name in names}, schema=schema
    )


def record(batch: PackedBatch, block: int) -> dict[str, list[int]]:
    """Block ``block`` as a plain dict of :data:`COLUMNS` lists. O(max_seq_length).

    >>> from packing import pack
    >>> record(pack([[1, 2], [3]], 4), 0)["labels"]
    [-100, 2, -100, -100]
    """
    values: dict[str, list[int]] = {name: getattr(batch, name)[block].tolist() for name in GRID_COLUMNS}
    values["seq_lengths"] = batch.seq_lengths(block).tolist()
    return values


def block_arrays(batch: PackedBatch, block: int, padding: bool = True) -> dict[str, npt.NDArray[Any]]:
    """Block ``block`` as numpy arrays of :data:`COLUMNS` with their dtypes (copies); ``padding=False``: its real
    tokens only, as :func:`to_arrow` writes them. O(max_seq_length).

    >>> from packing import pack
    >>> {name: values.dtype.name for name, values in block_arrays(pack([[1, 2], [3]], 4), 0).items()}
    {'input_ids': 'int32', 'labels': 'int32', 'loss_mask': 'int8', 'position_ids': 'int32', 'sequence_ids': 'int32', 'seq_lengths': 'int32'}
    """
    arrays: dict[str, npt.NDArray[Any]] = {}
    used = batch.max_seq_length if padding else int(batch.seq_lengths(block).sum())
    for column in COLUMNS:
        named = column.name == "seq_lengths"
        values = batch.seq_lengths(block) if named else getattr(batch, column.name)[block][:used]
        arrays[column.name] = np.array(values, dtype=column.dtype_for(batch.int64))
    return arrays


def datasets_features(int64: bool = False) -> Any:
    """The schema as Hugging Face ``datasets.Features`` (imports ``datasets``; ``int64``: the wide columns
    in int64)."""
    import datasets

    return datasets.Features({c.name: datasets.List(datasets.Value(c.dtype_for(int64).name)) for c in COLUMNS})
