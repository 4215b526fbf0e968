"""Peak Python memory of a call, traced: what the memory-bound tests of the writers and readers measure."""

from __future__ import annotations

import tracemalloc
from typing import Any


def traced_peak(call: Any) -> int:
    """The peak of memory traced by ``tracemalloc`` (bytes) while ``call()`` runs.

    >>> traced_peak(lambda: bytearray(1 << 20)) >= 1 << 20
    True
    """
    tracemalloc.start()
    try:
        call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
