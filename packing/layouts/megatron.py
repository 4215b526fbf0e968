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
>>> table = write(Rows(pack([[1, 2, 3], [4, 5], [6]], 4, strategy="ffd"), None))
>>> table.to_pydict()
{'input_ids': [[1, 2, 3, 6], [4, 5]], 'seq_start_id': [[0, 3], [0]], 'loss_mask': [[1, 1, 0, 0], [1, 0]]}
>>> read(table, "<t>").layout.targets.tolist()
[False, True, True, False, False, True]
"""

from __future__ import annotations

import io
import os
import pickle
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from packing.layouts.common import (
    BoolArray,
    Column,
    Int64Array,
    PackedLayout,
    Parsed,
    Rows,
    arrow_column,
    check_lengths,
    error,
    flag_values,
    from_starts,
    list_column,
    not_block_start,
    required,
    row_of,
    starts_of,
)
from packing.validation import INT64_MAX

if TYPE_CHECKING:  # pragma: no cover - typing only
    import pyarrow as pa

NAME = "megatron"
TITLE = "NeMo / Megatron packed sequences"


def recognises(names: set[str], table: pa.Table) -> bool:
    """Whether the columns are NeMo's (``input_ids`` and ``seq_start_id``)."""
    return {"input_ids", "seq_start_id"} <= names


def write(rows: Rows) -> pa.Table:
    """Rows as NeMo 2 stores them: no padding, ``loss_mask`` rolled by one within each document (0 on every
    document's last token). O(blocks × max_seq_length)."""
    import pyarrow as pa

    batch = rows.batch
    targets = rows.targets()
    shifted = np.zeros_like(targets)
    shifted[:, :-1] = targets[:, 1:]
    shifted &= ~rows.last_of_document()
    return pa.table(
        {
            "input_ids": rows.real_column(batch.input_ids, pa.int64()),
            "seq_start_id": arrow_column(rows.doc_starts(), rows.doc_counts, pa.int64()),
            "loss_mask": arrow_column(shifted[rows.real].astype(np.int8), rows.used, pa.int8()),
        }
    )


def _targets(offsets: Int64Array, document: Int64Array, loss_mask: Column | None) -> tuple[BoolArray | None, str]:
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
    entry_row = np.repeat(np.arange(len(tokens.lengths), dtype=np.int64), starts_column.lengths)
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
    docs_per_block = np.bincount(row_of(offsets, total)[starts_of(offsets, document)], minlength=len(row_length))
    layout = PackedLayout(
        "megatron",
        offsets,
        tokens.values,
        document,
        targets,
        None,
        None,
        None,
        np.ones(len(tokens.lengths), dtype=bool),
        variant,
    )
    return Parsed(layout, bad, used_offset=docs_per_block.astype(np.int64))


# ---------------------------------------------------------------- the .npy file


_NDARRAY = ("numpy", "ndarray")
_ALLOWED = {
    ("numpy", "dtype"): np.dtype,
    ("numpy._core.multiarray", "scalar"): np._core.multiarray.scalar,  # type: ignore[attr-defined]
    ("numpy.core.multiarray", "scalar"): np._core.multiarray.scalar,  # type: ignore[attr-defined]
}
_RECONSTRUCT = {("numpy._core.multiarray", "_reconstruct"), ("numpy.core.multiarray", "_reconstruct")}


class _ArrayClass:
    """Stands for ``numpy.ndarray`` inside the pickle: only the array rebuilder takes it; calling it fails."""


class _Unpickler(pickle.Unpickler):
    """An unpickler that admits numpy arrays and dtypes (the rebuilders numpy's own pickles name), lists, dicts,
    strings and numbers; any other global is refused before it is looked up. ``budget`` bounds the elements
    of any array it rebuilds (a pickle holds at least a byte per element)."""

    def __init__(self, file: io.BytesIO, budget: int) -> None:
        super().__init__(file)
        self.budget = budget

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == _NDARRAY:
            return _ArrayClass
        if (module, name) in _RECONSTRUCT:
            return self._reconstruct
        if (module, name) in _ALLOWED:
            return _ALLOWED[(module, name)]
        raise pickle.UnpicklingError(f"it asks for {module[:40]}.{name[:40]}")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("it asks for a persistent object")

    def _reconstruct(self, kind: Any, shape: Any, code: Any) -> Any:
        if kind is not _ArrayClass or not isinstance(shape, tuple) or not isinstance(code, bytes):
            raise pickle.UnpicklingError("an array rebuilt from something other than numpy.ndarray")
        if not all(isinstance(size, int) and size >= 0 for size in shape) or int(np.prod(shape)) > self.budget:
            raise pickle.UnpicklingError(f"an array of shape {str(shape)[:40]}, larger than the file")
        return np._core.multiarray._reconstruct(np.ndarray, shape, code)  # type: ignore[attr-defined]


def read_npy(data: bytes, label: str) -> pa.Table:
    """A NeMo packed ``.npy`` file (an array of dicts with ``input_ids``, ``seq_start_id`` and ``loss_mask``) as
    a table, read through the restricted unpickler (see the module). O(bytes).

    >>> import io, numpy as np
    >>> buffer = io.BytesIO()
    >>> np.save(buffer, [{"input_ids": [5, 6, 7], "seq_start_id": [0, 2], "loss_mask": [1.0, False, 0.0]}])
    >>> read_npy(buffer.getvalue(), "packed.npy").to_pydict()
    {'input_ids': [[5, 6, 7]], 'seq_start_id': [[0, 2]], 'loss_mask': [[1, 0, 0]]}
    >>> read_npy(pickle.dumps(os.getcwd), "evil.npy")
    Traceback (most recent call last):
    ...
    packing.errors.DatasetError: evil.npy: not a NumPy .npy file
    """
    handle = io.BytesIO(data)
    try:
        version = np.lib.format.read_magic(handle)
        read_header = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
        shape, _, dtype = read_header[version](handle)
    except (ValueError, OSError, SyntaxError, TypeError, KeyError):
        raise error(label, "not a NumPy .npy file") from None
    if dtype != np.dtype(object):
        raise error(label, f"expected an array of dicts (NeMo's packed rows), got {str(dtype)[:20]} {shape}")
    try:
        rows = _Unpickler(handle, budget=len(data) + 1).load()
    except RecursionError:
        raise error(label, "refused: nested too deeply") from None
    except EOFError:
        raise error(label, "the file ends early (truncated)") from None
    except Exception as failure:  # a crafted pickle fails in many ways; none of them runs anything
        if "truncated" in str(failure):
            raise error(label, "the file ends early (truncated)") from None
        reason = str(failure).splitlines()[0][:100] if str(failure) else type(failure).__name__
        raise error(
            label, f"refused: {reason} (only numpy arrays, lists, dicts, strings and numbers are read)"
        ) from None
    return _rows_table(rows, label, budget=len(data))


def _rows_table(rows: Any, label: str, budget: int) -> pa.Table:
    """NeMo's rows (dicts of lists or arrays) as Arrow columns: ``input_ids`` and ``seq_start_id`` int64,
    ``loss_mask`` int8 (0/1, from integers, booleans or floats). More than ``budget`` numbers in all (the file's
    bytes) are refused before they are converted. O(values)."""
    import pyarrow as pa

    if not isinstance(rows, (list, np.ndarray)) or (isinstance(rows, np.ndarray) and rows.ndim != 1):
        kind = f"an array of shape {rows.shape}" if isinstance(rows, np.ndarray) else type(rows).__name__
        raise error(label, f"expected a list of dicts (NeMo's packed rows), got {kind}")
    columns: dict[str, list[Any]] = {"input_ids": [], "seq_start_id": [], "loss_mask": []}
    values = 0
    for number, row in enumerate(rows, start=1):
        if not isinstance(row, dict):
            raise error(label, f"expected a dict, got {type(row).__name__}", f"row {number}")
        for name in columns:
            if name not in row:
                if name == "loss_mask":
                    continue
                raise error(label, f"no key '{name}'; found {', '.join(map(str, list(row)[:6]))}", f"row {number}")
            values += _size(row[name])
            if values > budget:
                raise error(
                    label, f"refused: more numbers than the file has bytes ({budget:,}): rows share their lists"
                )
            columns[name].append(_numbers(row[name], name, label, number))
    present = {name: values for name, values in columns.items() if len(values) == len(rows)}
    kinds = {"input_ids": pa.int64(), "seq_start_id": pa.int64(), "loss_mask": pa.int8()}
    return pa.table({name: pa.array(values, pa.list_(kinds[name])) for name, values in present.items()})


def _size(value: Any) -> int:
    """The numbers ``value`` spells at least (its length; an array's size), without converting it. O(1)."""
    if isinstance(value, np.ndarray):
        return int(value.size)
    return len(value) if isinstance(value, (list, tuple)) else 1


def _numbers(value: Any, name: str, label: str, row: int) -> npt.NDArray[Any]:
    """One row's list of numbers as integers; a mask's floats must be 0 or 1. O(values)."""
    try:
        array = np.asarray(value) if isinstance(value, (list, tuple, np.ndarray)) else None
    except (ValueError, TypeError, RecursionError, OverflowError):  # ragged or nested too deeply
        array = None
    if array is None or array.ndim != 1 or array.dtype.kind not in "iubf":
        raise error(label, f"key '{name}': expected a list of numbers", f"row {row}")
    if array.dtype.kind == "f":
        if name != "loss_mask":
            raise error(label, f"key '{name}': expected integers, got floats", f"row {row}")
        return flag_values(array, name, label, np.array([len(array)])).astype(np.int8)
    if array.dtype.kind == "u" and array.size and int(array.max()) > INT64_MAX:
        raise error(label, f"key '{name}': expected integers that fit in int64", f"row {row}")
    return array.astype(np.int64)


def write_npy(table: pa.Table, path: str | os.PathLike[str]) -> None:
    """Write NeMo's rows (``input_ids``, ``seq_start_id``, ``loss_mask``) as NeMo does: ``np.save`` of a list of
    dicts of Python lists, which ``GPTSFTPackedDataset`` loads unchanged. O(values).

    >>> import tempfile
    >>> from packing import pack
    >>> target = os.path.join(tempfile.mkdtemp(), "packed.npy")
    >>> write_npy(write(Rows(pack([[1, 2], [3]], 4), None)), target)
    >>> np.load(target, allow_pickle=True).tolist()
    [{'input_ids': [1, 2, 3], 'seq_start_id': [0, 2], 'loss_mask': [1, 0, 0]}]
    """
    from packing.outputs import atomic_path

    rows = np.empty(table.num_rows, dtype=object)
    rows[:] = table.to_pylist()
    with atomic_path(path) as temporary, open(temporary, "wb") as handle:
        np.save(handle, rows, allow_pickle=True)
