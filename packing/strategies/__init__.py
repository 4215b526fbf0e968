"""How lengths are laid out in blocks: the strategy registry (:data:`STRATEGIES`, one :class:`Strategy` each,
chosen by :data:`packing.StrategyName`), the step-by-step explanation of a strategy (:class:`Step`,
:class:`Placement`) and the statistics of units. Works on lengths only. The compiled loops, overflow, lower bounds,
certificates and the proven optimum behind them are internal modules (public names in ``packing`` and
``packing.optimal``).

>>> from packing.strategies import DEFAULT_STRATEGY, STRATEGIES
>>> DEFAULT_STRATEGY, STRATEGIES[DEFAULT_STRATEGY].order
('bfd', 'longest_first')
"""

from packing.strategies._explanation import MAX_EXPLAIN_DOCUMENTS as MAX_EXPLAIN_DOCUMENTS
from packing.strategies._explanation import Placement as Placement
from packing.strategies._explanation import Step as Step
from packing.strategies._registry import DEFAULT_STRATEGY as DEFAULT_STRATEGY
from packing.strategies._registry import STRATEGIES as STRATEGIES
from packing.strategies._registry import Strategy as Strategy
from packing.strategies._stats import UnitStats as UnitStats

__all__ = [
    "DEFAULT_STRATEGY",
    "MAX_EXPLAIN_DOCUMENTS",
    "STRATEGIES",
    "Placement",
    "Step",
    "Strategy",
    "UnitStats",
]
