"""The master problem over block patterns, solved by HiGHS (``highspy``, imported when first needed): min the
blocks subject to every document covered, columns added as they are priced. Internal.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import numpy.typing as npt

from packing.core._arrays import offsets_of
from packing.strategies._optimal.patterns import Pattern

Int64Array = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


@contextlib.contextmanager
def _quiet_stdout() -> Iterator[None]:
    """HiGHS prints a banner to file descriptor 1 the first time one is made; send it nowhere."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        yield
        return
    sys.stdout.flush()
    saved = os.dup(fd)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), fd)
            yield
    finally:
        os.dup2(saved, fd)
        os.close(saved)


def _highs() -> Any:
    try:
        import highspy
    except ImportError:  # pragma: no cover - depends on the environment
        raise ImportError(
            "strategy 'optimal' needs the HiGHS solver for inputs its exact search cannot settle: pip install highspy"
        ) from None
    highs: Any = highspy.Highs
    with _quiet_stdout():
        h = highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("simplex_strategy", 4)  # primal simplex: a new column keeps the basis primal feasible
    return h


class Master:
    """min sum(x) subject to pattern coverage >= demand, x >= 0, columns added as they are priced."""

    def __init__(self, demand: Int64Array, integer: bool = False, exchanges: bool = False) -> None:
        import highspy

        self.h = _highs()
        self.inf = highspy.kHighsInf
        self.m = len(demand)
        self.patterns: list[Pattern] = []
        self.h.addRows(
            self.m,
            demand.astype(np.float64),
            np.full(self.m, self.inf),
            0,
            np.zeros(self.m, dtype=np.int32),
            np.zeros(0, dtype=np.int32),
            np.zeros(0),
        )
        self.integer = integer
        self.offset = 0
        if exchanges and self.m > 1:
            # dual-optimal inequalities: a longer document may stand in for a shorter one (price of item i >=
            # price of item i + 1, lengths longest first); zero-cost columns ahead of the patterns
            k = self.m - 1
            index = np.stack([np.arange(k), np.arange(1, k + 1)], axis=1).ravel().astype(np.int32)
            value = np.tile([-1.0, 1.0], k)
            starts = np.arange(0, 2 * k, 2, dtype=np.int32)
            self.h.addCols(k, np.zeros(k), np.zeros(k), np.full(k, self.inf), 2 * k, starts, index, value)
            self.offset = k

    def add(self, patterns: list[Pattern]) -> None:
        if not patterns:
            return
        starts = offsets_of([len(p.items) for p in patterns], np.int32)[:-1]
        index = np.concatenate([p.items for p in patterns]).astype(np.int32)
        value = np.concatenate([p.counts for p in patterns]).astype(np.float64)
        k = len(patterns)
        first = self.offset + len(self.patterns)
        self.h.addCols(k, np.ones(k), np.zeros(k), np.full(k, self.inf), len(index), starts, index, value)
        if self.integer:
            import highspy

            cols = np.arange(first, first + k, dtype=np.int32)
            self.h.changeColsIntegrality(k, cols, np.full(k, highspy.HighsVarType.kInteger))
        self.patterns.extend(patterns)

    def solve(self) -> tuple[float, FloatArray, FloatArray]:
        """(objective, pattern values, row duals)."""
        self.h.run()
        solution = self.h.getSolution()
        # a failed solve leaves values that are no use but cannot break the plan or the bound: the plan is
        # checked to cover every document, and any prices give a valid bound
        x = np.nan_to_num(np.asarray(solution.col_value, dtype=np.float64)[self.offset :], nan=0.0, posinf=0.0)
        duals = np.zeros(self.m)
        if not self.integer:
            duals = np.nan_to_num(np.asarray(solution.row_dual, dtype=np.float64), nan=0.0, posinf=0.0, neginf=0.0)
        return float(self.h.getInfo().objective_function_value), x, duals
