"""Packed arrays: the one output schema (:data:`COLUMNS`, each an :class:`OutputColumn`) and what
:func:`packing.count_trainable` counts. ``pack``, ``materialize``, ``pack_sequences`` and
``PackedBatch`` are at the top level (``packing``); the modules behind them are internal.

>>> from packing.batches import COLUMNS
>>> [column.name for column in COLUMNS][:3]
['input_ids', 'labels', 'loss_mask']
"""

from packing.batches._packed import TrainableCounts as TrainableCounts
from packing.batches._schema import COLUMNS as COLUMNS
from packing.batches._schema import OutputColumn as OutputColumn

__all__ = [
    "COLUMNS",
    "OutputColumn",
    "TrainableCounts",
]
