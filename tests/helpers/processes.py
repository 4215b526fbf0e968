"""Process checks shared by the explorer's worker tests."""

from __future__ import annotations

from pathlib import Path


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (an exited one no parent has reaped yet, a zombie, does not).

    >>> import os
    >>> alive(os.getpid())
    True
    """
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def busy_pids() -> list[int]:
    """Process ids of the explorer's workers running a call now, in every lane."""
    from explorer.server import workers

    with workers._LOCK:
        return sorted(pid for each in workers._LANES.values() for pid in each.busy)
