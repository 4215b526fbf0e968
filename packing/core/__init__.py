"""The values every layer shares: the row forms a sample may take, preference pairs and completion groups
(units), the label that losses skip. Imports nothing of the library but ``packing.errors``.

The modules behind these names (samples, forms, loss rules, argument checks, array helpers) are internal.

>>> from packing.core import IGNORE_INDEX, is_text_row
>>> IGNORE_INDEX, is_text_row({"text": "hi"}), is_text_row([1, 2])
(-100, True, False)
"""

from packing.core._forms import CompletionGroup as CompletionGroup
from packing.core._forms import MaskedSample as MaskedSample
from packing.core._forms import PreferencePair as PreferencePair
from packing.core._forms import PromptCompletion as PromptCompletion
from packing.core._forms import Sample as Sample
from packing.core._forms import is_text_row as is_text_row
from packing.core._pairs_groups import UNIT_COLUMNS as UNIT_COLUMNS
from packing.core._pairs_groups import Units as Units
from packing.core._samples import IGNORE_INDEX as IGNORE_INDEX

__all__ = [
    "IGNORE_INDEX",
    "UNIT_COLUMNS",
    "CompletionGroup",
    "MaskedSample",
    "PreferencePair",
    "PromptCompletion",
    "Sample",
    "Units",
    "is_text_row",
]
