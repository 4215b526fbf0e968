"""Sample packing for language-model fine-tuning.

Concatenate variable-length token sequences into blocks of exactly
``max_seq_length`` tokens, with loss masks, labels, position ids and document
boundaries that keep packed samples from leaking into each other.

>>> from packing import pack_sequences
>>> pack_sequences([[1, 2], [3, 4, 5], [6]], 4)
([[1, 2, 3, 4], [5, 6, 0, 0]], [[1, 1, 1, 1], [1, 1, 0, 0]])
"""

from packing.batches.classic import pack_sequences
from packing.batches.packed import LazyBatch, PackedBatch, TrainableCounts, count_trainable, materialize, pack
from packing.batches.schema import COLUMNS, Column
from packing.comparison import compare
from packing.core.forms import CompletionGroup, MaskedSample, PreferencePair, PromptCompletion, Sample, is_text_row
from packing.core.samples import IGNORE_INDEX, Samples
from packing.core.units import UNIT_COLUMNS, Units
from packing.core.validation import OVERFLOW_POLICIES, OverflowPolicy
from packing.errors import (
    DatasetError,
    LimitError,
    NeedsTokenizer,
    OptionNotUsed,
    PackingError,
    PeerName,
    SampleError,
    SequenceTooLong,
    SettingError,
    StateMismatch,
    TooManyDocuments,
    UnitError,
    UnitTooLong,
)
from packing.layouts.audit import AuditReport, Finding, audit
from packing.layouts.export import EXPORT_FORMATS, export, write_jsonl, write_parquet
from packing.planning.cost import ComputeCost, compute_cost
from packing.planning.model_cost import ModelCost
from packing.planning.plans import PackingPlan, Piece, plan
from packing.reading.arrow import chat_sample, read_table
from packing.reading.dataset import Dataset, read_dataset
from packing.reading.limits import ReadLimits
from packing.reading.rows import read_rows
from packing.recipe import LOSS_RULES, LossRule, Recipe
from packing.strategies.bounds import LowerBounds, lower_bounds
from packing.strategies.explanation import MAX_EXPLAIN_DOCUMENTS, Placement, Step, explain
from packing.strategies.registry import DEFAULT_STRATEGY, STRATEGIES, Strategy, StrategyName
from packing.strategies.stats import PackingStats, UnitStats
from packing.streaming import stream
from packing.text.prepare import Prepared, prepare
from packing.text.rows import decode_documents, encode_rows
from packing.text.tokenizers import ByteTokenizer, load_tokenizer
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
    "UNIT_COLUMNS",
    "AuditReport",
    "ByteTokenizer",
    "Column",
    "CompletionGroup",
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
    "ModelCost",
    "NeedsTokenizer",
    "OptionNotUsed",
    "OverflowPolicy",
    "PackedBatch",
    "PackingError",
    "PackingPlan",
    "PackingStats",
    "PeerName",
    "Piece",
    "Placement",
    "PreferencePair",
    "Prepared",
    "PromptCompletion",
    "ReadLimits",
    "Recipe",
    "Sample",
    "SampleError",
    "Samples",
    "SequenceTooLong",
    "SettingError",
    "StateMismatch",
    "Step",
    "Strategy",
    "StrategyName",
    "TooManyDocuments",
    "TrainableCounts",
    "UnitError",
    "UnitStats",
    "UnitTooLong",
    "Units",
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
    "prepare",
    "read_dataset",
    "read_rows",
    "read_table",
    "stream",
    "trained_tokens",
    "write_jsonl",
    "write_parquet",
]
