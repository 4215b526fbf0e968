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

Internal: the public names are in ``packing`` and ``packing.batches``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from packing.core._pairs_groups import UNIT_COLUMNS

if TYPE_CHECKING:  # pragma: no cover - typing only
    import pyarrow as pa


Int64Array = npt.NDArray[np.int64]


@dataclass(frozen=True)
class OutputColumn:
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


COLUMNS: tuple[OutputColumn, ...] = (
    OutputColumn("input_ids", "int32", "token ids; the padding id in padding", wide=True),
    OutputColumn(
        "labels",
        "int32",
        "training targets: input_ids with -100 where there is no loss and at the first token of every document",
        wide=True,
    ),
    OutputColumn("loss_mask", "int8", "1 = a real token that is trained on; 0 = padding or a masked (prompt) token"),
    OutputColumn(
        "position_ids", "int32", "0, 1, 2, ... restarting at every document in the block; 0 in padding", wide=True
    ),
    OutputColumn("sequence_ids", "int32", "index of the source sample of each token; -1 in padding"),
    OutputColumn(
        "seq_lengths",
        "int32",
        "lengths of the documents in the block, in order (flash-attention's cu_seqlens is [0, *cumsum])",
    ),
)
"""The output columns, in order."""

LOSS_WEIGHTS = OutputColumn(
    "loss_weights",
    "float32",
    "optional (written when asked): per-token weight of the chosen loss objective, 0 where the label is -100; "
    "Σ weight × token cross-entropy is the objective over the file (packing.weighting)",
)
"""The optional column, after :data:`COLUMNS` when written (``to_arrow(..., loss_weights=mode)``)."""

UNIT_GRID: tuple[OutputColumn, ...] = (
    OutputColumn("unit_ids", "int32", "blocks of pairs and groups: the unit (sample) of each token; -1 in padding"),
    OutputColumn(
        "document_ids",
        "int32",
        "blocks of pairs and groups: the document of each token, numbered in its block from 0 (a completion with its "
        "prompt; with a shared prompt, the unit); -1 in padding. Tokens attend within their document, never to a "
        "sibling completion",
    ),
    OutputColumn(
        "completion_ids",
        "int32",
        "blocks of pairs and groups: the completion each token answers (input order); -1 on prompts and padding",
    ),
    OutputColumn(
        "prediction_positions",
        "int32",
        "blocks of pairs and groups: the position whose logits predict each token (t - 1, or a shared prompt's last "
        "position for a completion's first token); -1 where nothing is trained",
        wide=True,
    ),
    OutputColumn(
        "unit_kinds",
        "int8",
        "blocks of pairs and groups: the kind of each token's unit (0 a plain sample, 1 a pair, 2 a group); -1 in "
        "padding",
    ),
)
"""The columns written after :data:`COLUMNS` for blocks of preference pairs and completion groups, under the names
of ``packing.core._pairs_groups.UNIT_COLUMNS`` in that order; other blocks never have them. Every door writes them from
here (``to_arrow``, Parquet, the command line, ``PackedDataset``, ``stream``, ``packing.hf``)."""
if tuple(column.name for column in UNIT_GRID) != UNIT_COLUMNS:  # pragma: no cover - a schema kept by hand
    raise AssertionError("UNIT_GRID must hold the columns of packing.core._pairs_groups.UNIT_COLUMNS, in order")

NAMES: tuple[str, ...] = tuple(column.name for column in COLUMNS)
GRID_COLUMNS: tuple[str, ...] = NAMES[:-1]
"""The columns with one value per token slot (``max_seq_length`` per block)."""

CHUNK_VALUES = 1 << 24
"""Values per Arrow chunk: keeps every chunk's 32-bit list offsets far from overflow."""


def arrow_column(values: npt.NDArray[Any], lengths: Int64Array, kind: Any) -> Any:
    """A chunked Arrow ``list<kind>`` column with rows of ``lengths`` values taken from ``values`` in order, about
    :data:`CHUNK_VALUES` values a chunk (a longer row a chunk of its own): the one list-column writer of every
    layout. O(values), no copy of values already of ``kind``.

    >>> import pyarrow as pa
    >>> arrow_column(np.arange(5), np.array([2, 0, 3]), pa.int32()).to_pylist()
    [[0, 1], [], [2, 3, 4]]
    """
    import pyarrow as pa

    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    chunks: list[Any] = []
    first = 0
    rows = len(lengths)
    while first < rows or not chunks:
        last = int(np.searchsorted(offsets, offsets[first] + CHUNK_VALUES, side="right")) - 1
        last = min(max(last, first + 1), rows) if rows else 0
        part = offsets[first : last + 1] - offsets[first]
        flat = values[offsets[first] : offsets[last]] if rows else values[:0]
        chunks.append(pa.ListArray.from_arrays(pa.array(part.astype(np.int32)), pa.array(flat, type=kind)))
        first = last
        if not rows:
            break
    return pa.chunked_array(chunks, type=pa.list_(kind))


def arrow_schema(int64: bool = False, loss_weights: bool = False, units: bool = False) -> pa.Schema:
    """The schema as Arrow types: a list of the column's dtype for each column (``int64``: the wide
    columns in int64; ``loss_weights``: that optional column too; ``units``: the columns of blocks of units).

    >>> str(arrow_schema().field("input_ids").type), str(arrow_schema(int64=True).field("input_ids").type)
    ('list<item: int32>', 'list<item: int64>')
    >>> str(arrow_schema(loss_weights=True).field("loss_weights").type)
    'list<item: float>'
    """
    import pyarrow as pa

    columns = (*COLUMNS, *(UNIT_GRID if units else ()), *((LOSS_WEIGHTS,) if loss_weights else ()))
    return pa.schema([(c.name, pa.list_(pa.from_numpy_dtype(c.dtype_for(int64)))) for c in columns])


def markdown_table(columns: tuple[OutputColumn, ...] | None = None) -> str:
    """The schema as a Markdown table (the tables of ``docs/guides/outputs.md`` are these): ``columns``, by default
    :data:`COLUMNS` and the optional column last (``UNIT_GRID``: the columns of blocks of units)."""
    lines = ["| column | type | meaning |", "|---|---|---|"]
    wide = " (int64 with `int64=True`)"
    chosen = (*COLUMNS, LOSS_WEIGHTS) if columns is None else columns
    lines += [f"| `{c.name}` | list of {c.dtype}{wide if c.wide else ''} | {c.meaning} |" for c in chosen]
    return "\n".join(lines)


def help_text() -> str:
    """One line listing the columns, for ``--help``."""
    return ", ".join(NAMES)


def datasets_features(int64: bool = False, units: bool = False) -> Any:
    """The schema as Hugging Face ``datasets.Features`` (imports ``datasets``; ``int64``: the wide columns
    in int64; ``units``: with the columns of blocks of units)."""
    import datasets

    columns = (*COLUMNS, *(UNIT_GRID if units else ()))
    return datasets.Features({c.name: datasets.List(datasets.Value(c.dtype_for(int64).name)) for c in columns})
