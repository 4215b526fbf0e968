"""Sample packing for language-model fine-tuning.

Concatenate variable-length token sequences into blocks of exactly
``max_seq_length`` tokens, with loss masks, labels, position ids and document
boundaries that keep packed samples from leaking into each other.

The top level holds the verbs, :class:`Recipe`, the types the verbs return, the base errors and one ``Literal``
per set of choices. The rest lives in documented submodules: every error in :mod:`packing.errors`; the row forms
and shared constants in :mod:`packing.core`; the output schema in :mod:`packing.batches`; the strategy registry
and explanations in :mod:`packing.strategies`; readers' helpers in :mod:`packing.reading`; tokenizers in
:mod:`packing.text`; model costs in :mod:`packing.planning`; the recipe's option tables in :mod:`packing.recipe`;
loss weighting in :mod:`packing.weighting`; framework layouts in :mod:`packing.layouts`; and the adapters
(:mod:`packing.torch`, :mod:`packing.hf`, :mod:`packing.ray`, :mod:`packing.optimal`, :mod:`packing.streaming`,
:mod:`packing.comparison`). Every other module is internal (its docstring says so).

>>> from packing import pack_sequences
>>> pack_sequences([[1, 2], [3, 4, 5], [6]], 4)
([[1, 2, 3, 4], [5, 6, 0, 0]], [[1, 1, 1, 1], [1, 1, 0, 0]])
"""

from packing.batches._classic import pack_sequences
from packing.batches._packed import PackedBatch, count_trainable, materialize, pack
from packing.comparison import compare
from packing.core._samples import Samples
from packing.core._validation import OverflowPolicy
from packing.errors import DatasetError, PackingError, SampleError, SettingError
from packing.layouts._export import export, write_jsonl, write_parquet
from packing.layouts.audit import AuditReport, audit
from packing.planning._cost import ComputeCost, compute_cost
from packing.planning._plans import PackingPlan, Piece, plan
from packing.reading._dataset import FileSamples, read_dataset
from packing.reading._reader import read_rows
from packing.recipe import LossRule, Recipe
from packing.strategies._bounds import LowerBounds, lower_bounds
from packing.strategies._explanation import explain
from packing.strategies._registry import StrategyName
from packing.strategies._stats import PackingStats
from packing.streaming import stream
from packing.text._text_rows import decode_documents, encode_rows
from packing.text._tokenizers import load_tokenizer

__all__ = [
    "AuditReport",
    "ComputeCost",
    "DatasetError",
    "FileSamples",
    "LossRule",
    "LowerBounds",
    "OverflowPolicy",
    "PackedBatch",
    "PackingError",
    "PackingPlan",
    "PackingStats",
    "Piece",
    "Recipe",
    "SampleError",
    "Samples",
    "SettingError",
    "StrategyName",
    "audit",
    "compare",
    "compute_cost",
    "count_trainable",
    "decode_documents",
    "encode_rows",
    "explain",
    "export",
    "load_tokenizer",
    "lower_bounds",
    "materialize",
    "pack",
    "pack_sequences",
    "plan",
    "read_dataset",
    "read_rows",
    "stream",
    "write_jsonl",
    "write_parquet",
]
