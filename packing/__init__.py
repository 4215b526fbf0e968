"""Sample packing for language-model fine-tuning.

Concatenate variable-length token sequences into blocks of exactly
``max_seq_length`` tokens, with loss masks, labels, position ids and document
boundaries that keep packed samples from leaking into each other.

>>> from packing import pack_sequences
>>> pack_sequences([[1, 2], [3, 4, 5], [6]], 4)
([[1, 2, 3, 4], [5, 6, 0, 0]], [[1, 1, 1, 1], [1, 1, 0, 0]])
"""

from packing.auditing import AuditReport, Finding, audit
from packing.bounds import LowerBounds, lower_bounds
from packing.classic import pack_sequences
from packing.comparison import compare
from packing.cost import ComputeCost, compute_cost
from packing.errors import (
    DatasetError,
    LimitError,
    NeedsTokenizer,
    PackingError,
    SampleError,
    SettingError,
    TooManyDocuments,
)
from packing.explanation import MAX_EXPLAIN_DOCUMENTS, Placement, Step, explain
from packing.formats import EXPORT_FORMATS, export
from packing.io import Dataset, read_dataset
from packing.limits import ReadLimits
from packing.packed import (
    LazyBatch,
    PackedBatch,
    TrainableCounts,
    count_trainable,
    materialize,
    pack,
)
from packing.plans import PackingPlan, Piece, plan
from packing.reader import (
    IGNORE_INDEX,
    MaskedSample,
    PromptCompletion,
    Sample,
    Samples,
    chat_sample,
    read_rows,
    read_table,
)
from packing.recipe import LOSS_RULES, LossRule, Recipe
from packing.schema import COLUMNS, Column
from packing.stats import PackingStats
from packing.strategies import DEFAULT_STRATEGY, STRATEGIES, Strategy, StrategyName
from packing.streaming import stream
from packing.text import ByteTokenizer, decode_documents, encode_rows, is_text_row, load_tokenizer
from packing.validation import OVERFLOW_POLICIES, OverflowPolicy
from packing.weighting import LOSS_MODES, LossMode, LossTotals, effective_weights, trained_tokens

__all__ = [
    "COLUMNS",
    "DEFAULT_STRATEGY",
    "EXPORT_FORMATS",
    "IGNORE_INDEX",
    "LOSS_MODES",
    "LOSS_RULES",
    "MAX_EXPLAIN_DOCUMENTS",
    "OVERFLOW_POLICIES",
    "STRATEGIES",
    "AuditReport",
    "ByteTokenizer",
    "Column",
    "ComputeCost",
    "Dataset",
    "DatasetError",
    "Finding",
    "LazyBatch",
    "LimitError",
    "LossMode",
    "LossRule",
    "LossTotals",
    "LowerBounds",
    "MaskedSample",
    "NeedsTokenizer",
    "OverflowPolicy",
    "PackedBatch",
    "PackingError",
    "PackingPlan",
    "PackingStats",
    "Piece",
    "Placement",
    "PromptCompletion",
    "ReadLimits",
    "Recipe",
    "Sample",
    "SampleError",
    "Samples",
    "SettingError",
    "Step",
    "Strategy",
    "StrategyName",
    "TooManyDocuments",
    "TrainableCounts",
    "audit",
    "chat_sample",
    "compare",
    "compute_cost",
    "count_trainable",
    "decode_documents",
    "effective_weights",
    "encode_rows",
    "explain",
    "export",
    "is_text_row",
    "load_tokenizer",
    "lower_bounds",
    "materialize",
    "pack",
    "pack_sequences",
    "plan",
    "read_dataset",
    "read_rows",
    "read_table",
    "stream",
    "trained_tokens",
]
