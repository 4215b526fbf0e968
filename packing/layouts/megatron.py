"""NeMo / Megatron packed sequences: rows of ``input_ids``, ``seq_start_id`` (where each document starts) and
``loss_mask``, as NeMo's ``fill_packing_strategy`` writes them into a ``.npy`` file of Python dicts (``np.save``
of a list), read by ``GPTSFTPackedDataset``.

NeMo's loader cuts every document to ``ids[start:end - 1]`` (inputs), ``ids[start + 1:end]`` (labels) and
``loss_mask[start:end - 1]``: ``loss_mask[i]`` trains the prediction of token ``i + 1`` of the same document, and
a document's last entry is never used. Two conventions fill the mask: with a per-sequence ``loss_mask`` (NeMo 2)
it is rolled by one (the last entry 0); with only ``answer_start_idx`` (NeMo 1) it is ``idx >= answer_start_idx
- 1`` (the last entry 1). Both train the same tokens, and nothing is ever trained across documents. Each
document counts ``length - 1`` positions against the pack size. Masks may mix floats and booleans (0/1).

A ``.npy`` file is read by :func:`read_npy` through a restricted unpickler: only numpy arrays and dtypes, lists,
dicts, strings and numbers are admitted; any other object the pickle names is refused before it is created, so a
crafted file runs nothing. A file whose rows hold more numbers than it has bytes (rows sharing one list, which
NeMo never writes: a pickle spells every number in a byte or more) is refused before its values are converted.
:func:`write_npy` writes the file NeMo's loader reads unchanged.

Types: NeMo's ``fill_packing_strategy`` stores plain Python lists (``np.array(...).tolist()``: Python ints, masks
as bools or floats), and its loader turns ids, labels and masks into ``torch.LongTensor`` (int64). The table here
holds ``input_ids`` and ``seq_start_id`` as int64 (what NeMo trains on) and ``loss_mask`` as int8 0/1; the
``.npy`` written holds Python lists of ints, as NeMo's own file does. The loader described is the current one
(``GPTSFTPackedDataset`` in ``nemo.collections.llm.gpt.data.core``, the mask shifted once when packing); older
NeMo releases sliced an unshifted mask as ``loss_mask[start + 1:end]``.

>>> from packing import pack
>>> table = write(Rows(pack([[1, 2, 3], [4, 5], [6]], 4, strategy="ffd")))
>>> table.to_pydict()
{'input_ids': [[1, 2, 3, 6], [4, 5]], 'seq_start_id': [[0, 3], [0]], 'loss_mask': [[1, 1, 0, 0], [1, 0]]}
>>> read(table, "<t>").layout.targets.tolist()
[False, True, True, False, False, True]
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from packing.core._arrays import offsets_of, ranges, row_of
from packing.core._thd import padded_lengths
from packing.core._validation import is_integer
from packing.layouts.common import (
    BoolArray,
    Int64Array,
    ListColumn,
    PackedLayout,
    Parsed,
    Rows,
    arrow_column,
    check_lengths,
    error,
    from_starts,
    list_column,
    not_block_start,
    required,
    starts_of,
)

if TYPE_CHECKING:  # pragma: no cover - typing only
    import pyarrow as pa

NAME = "megatron"
TITLE = "NeMo / Megatron packed sequences"


def recognises(names: set[str], table: pa.Table) -> bool:
    """Whether the columns are NeMo's (``input_ids`` and ``seq_start_id``)."""
    return {"input_ids", "seq_start_id"} <= names


def write(rows: Rows) -> pa.Table:
    """Rows as NeMo 2 stores them: no padding, ``loss_mask`` rolled by one within each document (0 on every
    document's last token). O(blocks × max_seq_length).

    Blocks planned for context parallelism (``context_parallel_size``) are written as Megatron-Bridge pads them
    (its ``pad_seq_to_mult``): every document followed by pad ids (loss mask 0) until the positions its loader
    trains (``length - 1``) are a multiple of the recipe's ``document_multiple``, and the schema metadata key
    :data:`PARALLEL_METADATA` records the sizes (JSON: ``context_parallel_size``, ``tensor_parallel_size``,
    ``pad_seq_to_mult``).

    >>> from packing import pack
    >>> table = write(Rows(pack([[1, 2, 3], [4, 5]], 8, context_parallel_size=2)))
    >>> table.to_pydict()["input_ids"], table.to_pydict()["seq_start_id"]  # 2 + 1 positions trained: 4 + 4
    ([[1, 2, 3, 0, 0, 4, 5, 0, 0, 0]], [[0, 5]])
    >>> json.loads(table.schema.metadata[PARALLEL_METADATA])
    {'context_parallel_size': 2, 'tensor_parallel_size': 1, 'pad_seq_to_mult': 4}
    """
    import pyarrow as pa

    batch = rows.batch
    targets = rows.targets()
    shifted = np.zeros_like(targets)
    shifted[:, :-1] = targets[:, 1:]
    shifted &= ~rows.last_of_document()
    stored, lengths, starts = _stored(rows)
    table = pa.table(
        {
            "input_ids": arrow_column(stored(rows.flat_real(batch.input_ids), batch.pad_token_id), lengths, pa.int64()),
            "seq_start_id": arrow_column(starts, rows.doc_counts, pa.int64()),
            "loss_mask": arrow_column(stored(shifted[rows.real].astype(np.int8), 0), lengths, pa.int8()),
        }
    )
    if batch.plan.document_multiple == 1:
        return table
    cp, tp = batch.plan.parallel_sizes
    sizes = {"context_parallel_size": cp, "tensor_parallel_size": tp, "pad_seq_to_mult": batch.plan.document_multiple}
    return table.replace_schema_metadata({PARALLEL_METADATA: json.dumps(sizes).encode()})


PARALLEL_METADATA = b"packing.megatron.parallel"
"""The schema metadata key of a NeMo table written for context parallelism (see :func:`write`)."""


def _stored(rows: Rows) -> tuple[Callable[[Any, Any], Any], Int64Array, Int64Array]:
    """How the documents are stored: a function laying out per-token values (the real tokens of ``rows``,
    concatenated) with a fill value in each document's padding, each row's length and every document's start
    within its row. Without context parallelism, the values as they are. O(tokens)."""
    multiple = rows.batch.plan.document_multiple
    if multiple == 1:
        return (lambda values, fill: values), rows.used, rows.doc_starts()
    real = rows.doc_lengths
    stored = np.where(real > 0, padded_lengths(np.maximum(real - 1, 0), multiple) + 1, 0)
    place = ranges(offsets_of(stored)[:-1], real)
    row_of_doc = row_of(rows.doc_counts)
    lengths = np.bincount(row_of_doc, weights=stored, minlength=len(rows.doc_counts)).astype(np.int64)
    starts = offsets_of(stored)[:-1] - offsets_of(lengths)[:-1][row_of_doc]

    def lay_out(values: Any, fill: Any) -> Any:
        out = np.full(int(stored.sum()), fill, dtype=values.dtype)
        out[place] = values
        return out

    return lay_out, lengths, starts


def weights_column(rows: Rows, weights: npt.NDArray[np.float32]) -> Any:
    """``weights`` shifted as the ``loss_mask`` is (the weight of the token each position predicts), laid out as
    :func:`write` stores the documents (0 in their padding). O(tokens)."""
    import pyarrow as pa

    shifted = np.zeros_like(weights)
    shifted[:, :-1] = weights[:, 1:]
    stored, lengths, _ = _stored(rows)
    return arrow_column(stored(rows.flat_real(shifted), 0.0), lengths, pa.float32())


def _targets(offsets: Int64Array, document: Int64Array, loss_mask: ListColumn | None) -> tuple[BoolArray | None, str]:
    """The prediction targets NeMo's loader trains, and the mask convention met. ``loss_mask[i]`` trains token
    ``i + 1``; each document's last entry is dropped by the loader, so a document's first token is never a
    target. O(tokens)."""
    if loss_mask is None:
        return None, "no loss_mask"
    total = len(document)
    starts = starts_of(offsets, document)
    targets = np.zeros(total, dtype=bool)
    targets[1:] = loss_mask.values[:-1] != 0
    targets &= ~starts & not_block_start(offsets, total)
    last = np.zeros(total, dtype=bool)
    last[:-1] = starts[1:]
    if total:
        last[-1] = True
    last[offsets[1:][np.diff(offsets) > 0] - 1] = True
    set_last = bool(np.any(last & (loss_mask.values != 0) & (document >= 0)))
    variant = "NeMo 1 mask: answer_start_idx - 1" if set_last else "NeMo 2 mask: loss_mask rolled by one"
    return targets, variant


def read(table: pa.Table, source: str) -> Parsed:
    """NeMo's rows as a :class:`PackedLayout`: documents from ``seq_start_id``, targets as NeMo's loader trains
    them (see the module); each document counts ``length - 1`` positions against the pack size. O(tokens)."""
    tokens = required(table, "input_ids", source)
    offsets = tokens.offsets
    total = int(offsets[-1])
    loss_mask = list_column(table, "loss_mask", source, flags=True)
    check_lengths(loss_mask, "loss_mask", tokens, "input_ids", source)
    starts_column = required(table, "seq_start_id", source)
    if len(starts_column.lengths) != len(tokens.lengths):
        raise error(source, "column 'seq_start_id' has another number of rows than 'input_ids'")
    entry_row = row_of(starts_column.lengths)  # as many rows as input_ids (checked)
    value = starts_column.values
    row_length = np.diff(offsets)
    inside = (value >= 0) & (value < row_length[entry_row])
    opens = np.zeros(total, dtype=bool)
    opens[(offsets[:-1][entry_row] + value)[inside]] = True
    bad_rows = np.bincount(entry_row[~inside], minlength=len(row_length)) > 0
    first = starts_column.offsets[:-1]
    has = starts_column.lengths > 0
    bad_rows[has] |= value[first[has]] != 0
    bad_rows[~has] |= row_length[~has] > 0
    rising = np.ones(len(value), dtype=bool)
    rising[1:] = value[1:] > value[:-1]
    rising[first[has]] = True
    bad_rows |= np.bincount(entry_row[~rising], minlength=len(row_length)) > 0
    document = from_starts(offsets, opens, np.zeros(total, dtype=bool))
    bad_rows &= row_length > 0
    bad = [offsets[:-1][np.flatnonzero(bad_rows)].astype(np.int64)] if bad_rows.any() else []
    targets, variant = _targets(offsets, document, loss_mask)
    multiple = _pad_seq_to_mult(table)
    if multiple > 1:  # written for context parallelism: every document's trained positions padded to a multiple
        opens = starts_of(offsets, document)
        lengths = np.diff(np.append(np.flatnonzero(opens), total))
        uneven = np.flatnonzero(opens)[(lengths - 1) % multiple != 0]
        if uneven.size:
            bad.append(uneven.astype(np.int64))
        variant += f"; padded for context parallelism (pad_seq_to_mult {multiple})"
    docs_per_block = np.bincount(row_of(np.diff(offsets))[starts_of(offsets, document)], minlength=len(row_length))
    layout = PackedLayout.of(NAME, tokens, document, targets, variant=variant)
    return Parsed(layout, bad, used_offset=docs_per_block.astype(np.int64))


def _pad_seq_to_mult(table: pa.Table) -> int:
    """The multiple a table written for context parallelism records (:data:`PARALLEL_METADATA`), else 1."""
    recorded = (table.schema.metadata or {}).get(PARALLEL_METADATA)
    try:
        value = json.loads(recorded)["pad_seq_to_mult"] if recorded else 1
    except (ValueError, KeyError, TypeError):
        return 1
    return int(value) if is_integer(value) and value >= 1 else 1


# ---------------------------------------------------------------- the .npy file


def write_npy(table: pa.Table, path: str | os.PathLike[str]) -> None:
    """Write NeMo's rows (``input_ids``, ``seq_start_id``, ``loss_mask``) as NeMo does: ``np.save`` of a list of
    dicts of Python lists, which ``GPTSFTPackedDataset`` loads unchanged. O(values).

    >>> import tempfile
    >>> from packing import pack
    >>> target = os.path.join(tempfile.mkdtemp(), "packed.npy")
    >>> write_npy(write(Rows(pack([[1, 2], [3]], 4))), target)
    >>> np.load(target, allow_pickle=True).tolist()
    [{'input_ids': [1, 2, 3], 'seq_start_id': [0, 2], 'loss_mask': [1, 0, 0]}]
    """
    from packing.layouts._outputs import atomic_path

    rows = np.empty(table.num_rows, dtype=object)
    rows[:] = table.to_pylist()
    with atomic_path(path) as temporary, open(temporary, "wb") as handle:
        np.save(handle, rows, allow_pickle=True)
