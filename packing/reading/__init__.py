"""Reading rows: the helpers around :func:`packing.read_rows` and :func:`packing.read_dataset` (Arrow
tables, one chat as token ids, the bounds a caller sets on what a file may expand to). The one reader of rows, the
one file reader and their cells are internal modules.

>>> from packing.reading import ReadLimits
>>> ReadLimits().max_rows is None
True
"""

from packing.reading._arrow import chat_sample as chat_sample
from packing.reading._arrow import read_table as read_table
from packing.reading._limits import ReadLimits as ReadLimits

__all__ = [
    "ReadLimits",
    "chat_sample",
    "read_table",
]
