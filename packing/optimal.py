"""The fewest blocks that hold every document whole, with a certificate that no packing uses fewer.

Real length distributions have few distinct lengths, and on their histogram bin packing is a cutting-stock
problem. ``solve`` works in steps, stopping as soon as the plan found meets a lower bound:

1. best-fit decreasing (BFD) against the L1 and Martello–Toth L2 bounds;
2. small inputs (up to ``MAX_OPTIMAL_DOCUMENTS`` documents): an exhaustive branch and bound;
3. when the bound is L1 and few BFD blocks have room left: only those blocks' documents are packed again;
4. Gilmore–Gomory column generation: a linear master problem over block patterns (HiGHS, warm restarts)
   whose duals price a bounded-knapsack dynamic program (numba) for the next pattern, with Wentges dual
   smoothing and exchange columns (a longer document may stand in for a shorter one: dual-optimal
   inequalities that keep prices ordered by length and cut the steps severalfold). Integer prices (the
   duals scaled and floored) give the bound ``ceil(sum(count[w] * price[w]) / V)``, exact whatever the
   solver's tolerances (see ``packing.certificate``). The integer plan starts from the LP over the same
   patterns without the exchange columns: its pattern counts rounded down, over-covered documents
   removed, rounded-up copies of fractional patterns added while the leftovers allow, the leftovers
   packed again (BFD, FFD, first-fit, then column generation on them alone, then a small integer program
   over the known patterns); while that falls short, ever more of the rounded blocks are taken apart and
   packed again with the leftovers.

``time_limit`` (seconds) bounds steps 2–4; when it runs out the best plan found comes back with its
certified gap.
"""

from packing.strategies._optimal import MAX_OPTIMAL_DOCUMENTS as MAX_OPTIMAL_DOCUMENTS
from packing.strategies._optimal import OptimalResult as OptimalResult
from packing.strategies._optimal import optimal_blocks as optimal_blocks
from packing.strategies._optimal import solve as solve

__all__ = ["MAX_OPTIMAL_DOCUMENTS", "OptimalResult", "optimal_blocks", "solve"]
