"""Small array helpers shared by the reader, the plan and the writers (CSR offsets and index ranges).

Internal: the public names are in ``packing`` and ``packing.core``.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import numba
import numpy as np
import numpy.typing as npt

Int64Array = npt.NDArray[np.int64]


def ranges(starts: npt.ArrayLike, lengths: npt.ArrayLike) -> Int64Array:
    """Concatenation of ``arange(s, s + n)`` for every ``(s, n)``. O(sum of lengths).

    >>> ranges([10, 0, 5], [2, 0, 3]).tolist()
    [10, 11, 5, 6, 7]
    """
    first = np.asarray(starts, dtype=np.int64)
    count = np.asarray(lengths, dtype=np.int64)
    before = np.cumsum(count) - count
    result: Int64Array = np.arange(int(count.sum()), dtype=np.int64) + np.repeat(first - before, count)
    return result


def compile_for(kernel: Any, *args: Any) -> None:
    """Give a numba-compiled ``kernel`` a version for these arguments' types before it is called with them: when it
    has none, it is compiled (or loaded from numba's cache) from the types alone, in a thread of its own. A
    compile leaves its frames in a reference cycle until the next garbage collection, and with them every frame
    below (the callers', with their arguments): an array over a caller's buffer (a memory-mapped file, a
    ``bytearray``) kept so would still hold the buffer when it is closed or resized (``BufferError``). A thread's
    frames hold nothing of the caller's. O(arguments).

    >>> double = numba.njit(lambda values, i: values[i] * 2)
    >>> view = np.frombuffer(b"abc", dtype=np.uint8)
    >>> compile_for(double, view, 1)
    >>> len(double.signatures), double(view, 1)
    (1, 196)
    """
    types = tuple(numba.typeof(arg) for arg in args)  # type: ignore[no-untyped-call]
    if types in kernel.signatures:
        return

    def compile_() -> None:
        with contextlib.suppress(Exception):  # the call fails again, with its own error
            kernel.compile(types)

    compiling = threading.Thread(target=compile_, name="packing-compile", daemon=True)
    compiling.start()
    compiling.join()


def check_block_indexes(blocks: npt.ArrayLike, num_blocks: int, name: str = "blocks") -> Int64Array:
    """Block indexes, checked: a flat list of integers in ``0..num_blocks - 1``. O(len(blocks)).

    >>> check_block_indexes([2, 0], 3).tolist()
    [2, 0]
    """
    from packing.errors import SettingError

    rows = np.asarray(blocks)
    if rows.ndim != 1 or (rows.size and rows.dtype.kind not in "iu"):
        raise SettingError(name, "a flat list of block indexes", f"<an array of shape {rows.shape}>")
    if rows.size and (int(rows.min()) < 0 or int(rows.max()) >= num_blocks):
        raise SettingError(name, f"block indexes in 0..{num_blocks - 1}", f"<indexes {rows.min()}..{rows.max()}>")
    return rows.astype(np.int64)


def offsets_of(lengths: npt.ArrayLike, dtype: npt.DTypeLike = np.int64) -> npt.NDArray[Any]:
    """CSR offsets: 0, then the running sum of ``lengths`` (int64, or ``dtype``), one array written once;
    ``offsets_of(lengths)[:-1]`` are the starts. O(n).

    >>> offsets_of([2, 0, 3]).tolist(), offsets_of([2, 0, 3])[:-1].tolist()
    ([0, 2, 2, 5], [0, 2, 2])
    """
    count = np.asarray(lengths)  # summed as they are (int32 lengths are not copied to int64 first)
    offsets = np.zeros(len(count) + 1, dtype=dtype)
    np.cumsum(count, out=offsets[1:])
    return offsets


def row_of(lengths: npt.ArrayLike, dtype: npt.DTypeLike = np.int64) -> npt.NDArray[Any]:
    """Which row owns each element of the rows' concatenation: row ``i`` repeated ``lengths[i]`` times (int64,
    or ``dtype``). O(sum of lengths).

    >>> row_of([2, 0, 3]).tolist()
    [0, 0, 2, 2, 2]
    """
    count = np.asarray(lengths)
    rows: npt.NDArray[Any] = np.repeat(np.arange(len(count), dtype=dtype), count)
    return rows


def row_at(offsets: npt.ArrayLike, positions: Any) -> Any:
    """The row owning each of ``positions`` (an int for one) in rows of CSR ``offsets``. O(log rows) each.

    >>> row_at([0, 2, 2, 5], [0, 1, 2, 4]).tolist(), row_at([0, 2, 2, 5], 2)
    ([0, 0, 2, 2], 2)
    """
    found = np.searchsorted(offsets, positions, side="right") - 1
    return int(found) if np.ndim(found) == 0 else found.astype(np.int64, copy=False)


@numba.njit(cache=True, nogil=True)
def _copy_runs(
    source: npt.NDArray[Any], target: npt.NDArray[Any], at: Int64Array, lengths: Int64Array
) -> None:  # pragma: no cover - compiled
    position = 0
    for run in range(len(lengths)):
        count = lengths[run]
        for offset in range(count):
            target[at[run] + offset] = source[position + offset]
        position += count


def copy_runs(source: npt.NDArray[Any], target: npt.NDArray[Any], at: Int64Array, lengths: Int64Array) -> None:
    """Copy consecutive runs of ``source`` (run ``i`` has ``lengths[i]`` values) to ``target[at[i]:]``. O(values).

    The compiled loop copies in place, without the index arrays a numpy scatter would build.

    >>> target = np.zeros(6, dtype=np.int64)
    >>> copy_runs(np.array([1, 2, 3]), target, np.array([4, 0]), np.array([2, 1]))
    >>> target.tolist()
    [3, 0, 0, 0, 1, 2]
    """
    _copy_runs(source, target, at.astype(np.int64), lengths.astype(np.int64))
