"""NeMo's packed ``.npy`` files read without running anything: a restricted unpickler admits only numpy arrays
and dtypes, lists, dicts, strings and numbers; any other object the pickle names is refused before it is created.
A file whose rows hold more numbers than it has bytes is refused before its values are converted. The layout
itself (what the columns mean) is ``packing.layouts.megatron``'s. Internal.
"""

from __future__ import annotations

import io
import pickle
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from packing.core._validation import INT64_MAX, flag_values
from packing.errors import DatasetError, first_line

if TYPE_CHECKING:  # pragma: no cover - typing only
    import pyarrow as pa


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
    >>> import os, pickle
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
        raise DatasetError(label, None, "not a NumPy .npy file") from None
    if dtype != np.dtype(object):
        raise DatasetError(
            label, None, f"expected an array of dicts (NeMo's packed rows), got {str(dtype)[:20]} {shape}"
        )
    try:
        rows = _Unpickler(handle, budget=len(data) + 1).load()
    except RecursionError:
        raise DatasetError(label, None, "refused: nested too deeply") from None
    except EOFError:
        raise DatasetError(label, None, "the file ends early (truncated)") from None
    except Exception as failure:  # a crafted pickle fails in many ways; none of them runs anything
        if "truncated" in str(failure):
            raise DatasetError(label, None, "the file ends early (truncated)") from None
        reason = f"refused: {first_line(failure)} (only numpy arrays, lists, dicts, strings and numbers are read)"
        raise DatasetError(label, None, reason) from None
    return _rows_table(rows, label, budget=len(data))


def _rows_table(rows: Any, label: str, budget: int) -> pa.Table:
    """NeMo's rows (dicts of lists or arrays) as Arrow columns: ``input_ids`` and ``seq_start_id`` int64,
    ``loss_mask`` int8 (0/1, from integers, booleans or floats). More than ``budget`` numbers in all (the file's
    bytes) are refused before they are converted. O(values)."""
    import pyarrow as pa

    if not isinstance(rows, (list, np.ndarray)) or (isinstance(rows, np.ndarray) and rows.ndim != 1):
        kind = f"an array of shape {rows.shape}" if isinstance(rows, np.ndarray) else type(rows).__name__
        raise DatasetError(label, None, f"expected a list of dicts (NeMo's packed rows), got {kind}")
    columns: dict[str, list[Any]] = {"input_ids": [], "seq_start_id": [], "loss_mask": []}
    values = 0
    for number, row in enumerate(rows, start=1):
        if not isinstance(row, dict):
            raise DatasetError(label, f"row {number}", f"expected a dict, got {type(row).__name__}")
        for name in columns:
            if name not in row:
                if name == "loss_mask":
                    continue
                raise DatasetError(
                    label, f"row {number}", f"no key '{name}'; found {', '.join(map(str, list(row)[:6]))}"
                )
            values += _size(row[name])
            if values > budget:
                raise DatasetError(
                    label, None, f"refused: more numbers than the file has bytes ({budget:,}): rows share their lists"
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
        raise DatasetError(label, f"row {row}", f"key '{name}': expected a list of numbers")
    if array.dtype.kind == "f":
        if name != "loss_mask":
            raise DatasetError(label, f"row {row}", f"key '{name}': expected integers, got floats")
        return flag_values(array, name, label, np.array([len(array)])).astype(np.int8)
    if array.dtype.kind == "u" and array.size and int(array.max()) > INT64_MAX:
        raise DatasetError(label, f"row {row}", f"key '{name}': expected integers that fit in int64")
    return array.astype(np.int64)
