"""Plans over lengths: ``plan``, ``PackingPlan``, ``Piece``, ``compute_cost`` and ``ComputeCost`` are at the
top level (``packing``); here, the model whose costs a plan is weighed with (:class:`ModelCost`). The modules
behind them are internal.

>>> from packing.planning import ModelCost
>>> ModelCost.__name__
'ModelCost'
"""

from packing.planning._model_cost import ModelCost as ModelCost

__all__ = [
    "ModelCost",
]
