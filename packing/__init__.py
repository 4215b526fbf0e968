"""Sample packing for language-model fine-tuning.

Concatenate variable-length token sequences into blocks of exactly
``max_seq_length`` tokens, with loss masks, labels, position ids and document
boundaries that keep packed samples from leaking into each other.

>>> from packing import pack_sequences
>>> pack_sequences([[1, 2], [3, 4, 5], [6]], 4)
([[1, 2, 3, 4], [5, 6, 0, 0]], [[1, 1, 1, 1], [1, 1, 0, 0]])
"""

from packing.bounds import LowerBounds, lower_bounds
from packing.classic import pack_sequences
from packing.cost import ComputeCost, compute_cost
from packing.explain import MAX_EXPLAIN_DOCUMENTS, Placement, Step, explain
from packing.optimal import MAX_OPTIMAL_DOCUMENTS
from packing.packed import IGNORE_INDEX, PackedBatch, TrainableCounts, count_trainable, materialize, pack
from packing.plan import PackingPlan, Piece, plan
from packing.samples import Samples, chat_sample, read_samples
from packing.stats import PackingStats
from packing.strategies import STRATEGIES, Strategy
from packing.text import ByteTokenizer, decode_documents, encode_rows, is_text_row, load_tokenizer
from packing.validation import OVERFLOW_POLICIES

__all__ = [
    "IGNORE_INDEX",
    "MAX_EXPLAIN_DOCUMENTS",
    "MAX_OPTIMAL_DOCUMENTS",
    "OVERFLOW_POLICIES",
    "STRATEGIES",
    "ByteTokenizer",
    "ComputeCost",
    "LowerBounds",
    "PackedBatch",
    "PackingPlan",
    "PackingStats",
    "Piece",
    "Placement",
    "Samples",
    "Step",
    "Strategy",
    "TrainableCounts",
    "chat_sample",
    "compute_cost",
    "count_trainable",
    "decode_documents",
    "encode_rows",
    "explain",
    "is_text_row",
    "load_tokenizer",
    "lower_bounds",
    "materialize",
    "pack",
    "pack_sequences",
    "plan",
    "read_samples",
]
