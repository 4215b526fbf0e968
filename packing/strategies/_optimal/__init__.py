"""The proven optimum: the implementation behind ``packing.optimal`` (its docstring describes the method), one
module per idea:

- :mod:`~packing.strategies._optimal.knapsack`: the bounded-knapsack pricing kernel (numba);
- :mod:`~packing.strategies._optimal.patterns`: block patterns, the distinct ones of a packing (hashed, checked);
- :mod:`~packing.strategies._optimal.master`: the master problem, solved by HiGHS;
- :mod:`~packing.strategies._optimal.columns`: column generation on the histogram of lengths, with its bound;
- :mod:`~packing.strategies._optimal.rounding`: from the LP to whole blocks (rounding and repair);
- :mod:`~packing.strategies._optimal.search`: the exhaustive search of small inputs (branch and bound);
- :mod:`~packing.strategies._optimal.solver`: ``solve``, which tries them in turn.

Internal: import the public names from ``packing.optimal``.
"""

from packing.strategies._optimal.search import MAX_OPTIMAL_DOCUMENTS as MAX_OPTIMAL_DOCUMENTS
from packing.strategies._optimal.solver import OptimalResult as OptimalResult
from packing.strategies._optimal.solver import optimal_blocks as optimal_blocks
from packing.strategies._optimal.solver import solve as solve

__all__ = ["MAX_OPTIMAL_DOCUMENTS", "OptimalResult", "optimal_blocks", "solve"]
