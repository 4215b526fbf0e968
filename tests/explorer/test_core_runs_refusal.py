"""The page's one run refuses, never raises, when overflow='error' meets a sequence over the length."""

import numpy as np

import packing
from explorer.core.runs import run_strategy


def test_a_too_long_sequence_under_overflow_error_is_a_worded_refusal() -> None:
    row = run_strategy(np.array([2, 3, 1]), packing.Recipe(2, strategy="ffd", overflow="error"))
    assert row.plan is None and isinstance(row.error, packing.errors.SequenceTooLong)
    assert "sample 1" in str(row.error)
