"""The THD layout of context parallelism (Megatron, Transformer Engine): every document padded to a multiple of
``2 × context_parallel_size`` (× ``tensor_parallel_size`` with sequence parallelism), and context-parallel rank
``r`` of ``cp`` holding chunks ``r`` and ``2·cp − 1 − r`` of every padded document (so that causal attention
work is even across ranks: an early chunk sees few tokens, its mirror many).

The arithmetic lives here once; the recipe checks the sizes, the planner counts the padding, ``collate`` lays it
out and ``packing.torch.context_parallel_shard`` cuts a batch with :func:`shard_indices`.

>>> document_multiple(2, 1), document_multiple(1, 4), document_multiple(4, 2)
(4, 4, 16)
>>> padded_lengths([1, 4, 5], 4).tolist()
[4, 4, 8]
>>> shard_indices([0, 4, 12], 0, 2).tolist()  # rank 0 of 2: chunks 0 and 3 of each document
[0, 3, 4, 5, 10, 11]

Internal: the public names are in ``packing`` and ``packing.core``.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from packing.core._arrays import ranges
from packing.core._validation import check_integer, is_integer
from packing.errors import SettingError

Int64Array = npt.NDArray[np.int64]


def document_multiple(context_parallel_size: int, tensor_parallel_size: int = 1) -> int:
    """The multiple every document is padded to: ``2·cp·tp`` with context parallelism (``cp > 1``), ``tp``
    without (sequence parallelism alone needs lengths divisible by the tensor-parallel size). O(1)."""
    return (2 * context_parallel_size if context_parallel_size > 1 else 1) * tensor_parallel_size


def padded_lengths(lengths: npt.ArrayLike, multiple: int) -> Int64Array:
    """Each length rounded up to a multiple of ``multiple`` (0 stays 0). O(n)."""
    values = np.asarray(lengths, dtype=np.int64)
    return -(-values // multiple) * multiple


def shard_indices(cu_seqlens_padded: npt.ArrayLike, cp_rank: int, cp_size: int) -> Int64Array:
    """The token indices context-parallel rank ``cp_rank`` of ``cp_size`` holds: chunks ``cp_rank`` and
    ``2·cp_size − 1 − cp_rank`` of every document, a document being ``cu_seqlens_padded[i]:cu_seqlens_padded[i +
    1]`` cut into ``2·cp_size`` equal chunks, in order. With ``cp_size == 1`` every index. A padded length that
    ``2·cp_size`` does not divide is refused. O(T / cp_size).

    >>> shard_indices([0, 8], 1, 2).tolist()
    [2, 3, 4, 5]
    >>> shard_indices([0, 6], 0, 2)
    Traceback (most recent call last):
    ...
    packing.errors.SettingError: cu_seqlens_padded: expected documents padded to multiples of 2 × cp_size = 4, got 6
    """
    cu = np.asarray(cu_seqlens_padded, dtype=np.int64).reshape(-1)
    check_integer(cp_size, "cp_size")
    if not is_integer(cp_rank) or not 0 <= cp_rank < cp_size:
        raise SettingError("cp_rank", f"a rank in 0..{cp_size - 1}", cp_rank)
    if len(cu) == 0 or cu[0] != 0 or np.any(np.diff(cu) < 0):
        raise SettingError("cu_seqlens_padded", "0 then rising document ends", "<another list>")
    lengths = np.diff(cu)
    if cp_size == 1:
        return np.arange(int(cu[-1]), dtype=np.int64)
    chunks = 2 * int(cp_size)
    uneven = np.flatnonzero(lengths % chunks)
    if uneven.size:
        raise SettingError(
            "cu_seqlens_padded", f"documents padded to multiples of 2 × cp_size = {chunks}", int(lengths[uneven[0]])
        )
    chunk = lengths // chunks
    first = cu[:-1] + cp_rank * chunk
    second = cu[:-1] + (chunks - 1 - cp_rank) * chunk
    starts = np.stack([first, second], axis=1).reshape(-1)
    return ranges(starts, np.repeat(chunk, 2))
