"""What a plan costs a trainer: token slots and attention work.

Internal: the public names are in ``packing`` and ``packing.planning``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from packing.planning._plans import PackingPlan


class ComputeCost(NamedTuple):
    """``token_slots`` = blocks × max_seq_length (what every layer processes);
    ``attention_masked`` = sum of squared document lengths (attention kept within documents);
    ``attention_full`` = blocks × max_seq_length² (every position attends across the whole block)."""

    token_slots: int
    attention_masked: int
    attention_full: int


def compute_cost(plan: PackingPlan) -> ComputeCost:
    """Training-compute estimate of a plan. O(pieces).

    >>> from packing import plan
    >>> compute_cost(plan([2, 3, 1], 4, strategy="split"))
    ComputeCost(token_slots=8, attention_masked=10, attention_full=32)
    >>> compute_cost(plan([2, 3, 1], 4, strategy="wrapped")).attention_masked  # one run per block: 4² + 2²
    20
    """
    lengths = plan.boundaries[1].astype(np.int64)  # the documents attention sees; int32 squares overflow
    return ComputeCost(
        token_slots=plan.num_blocks * plan.max_seq_length,
        attention_masked=int(np.dot(lengths, lengths)),
        attention_full=plan.num_blocks * plan.max_seq_length**2,
    )
