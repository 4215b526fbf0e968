"""The classic interview function, exactly as the problem states it.

Internal: the public names are in ``packing`` and ``packing.batches``.
"""

from __future__ import annotations

from collections.abc import Sequence

from packing.batches._packed import pack
from packing.core._validation import check_max_seq_length


def pack_sequences(sequences: Sequence[Sequence[int]], max_seq_length: int) -> tuple[list[list[int]], list[list[int]]]:
    """Concatenate sequences in order into blocks of exactly ``max_seq_length`` tokens.

    A sequence longer than ``max_seq_length`` keeps its first ``max_seq_length`` tokens;
    a sequence that does not fit the room left is cut and continues in the next block;
    empty sequences are ignored; the last block is padded with 0. Returns
    ``(blocks, loss_masks)``, with 1 for a real token and 0 for padding. O(total tokens).

    >>> pack_sequences([[1, 2], [3, 4, 5], [6]], 4)
    ([[1, 2, 3, 4], [5, 6, 0, 0]], [[1, 1, 1, 1], [1, 1, 0, 0]])
    >>> pack_sequences([[1, 2, 3, 4, 5, 6]], 4)
    ([[1, 2, 3, 4]], [[1, 1, 1, 1]])
    >>> pack_sequences([[], []], 4)
    ([], [])
    """
    check_max_seq_length(max_seq_length)  # the classic function takes a length, never a recipe
    return pack(list(sequences), max_seq_length, strategy="split", overflow="truncate").to_lists()
