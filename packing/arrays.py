"""Small array helpers shared by the reader, the plan and the writers (CSR offsets and index ranges)."""

from __future__ import annotations

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


def offsets_of(lengths: npt.ArrayLike) -> Int64Array:
    """CSR offsets: 0, then the running sum of ``lengths``. O(n).

    >>> offsets_of([2, 0, 3]).tolist()
    [0, 2, 2, 5]
    """
    count = np.asarray(lengths, dtype=np.int64)
    offsets = np.zeros(len(count) + 1, dtype=np.int64)
    np.cumsum(count, out=offsets[1:])
    return offsets
