"""What each document weighs in the loss under each objective: the numbers behind the Loss weights tab.

The arithmetic is the library's (``packing.weighting``); this module picks the documents a learner can
compare at a glance and words the result. No Streamlit, nothing at import.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

import packing
from packing.weighting import LOSS_MODES, MODE_ARITHMETIC, LossMode

Int64Array = npt.NDArray[np.int64]
SHOWN_DOCUMENTS = 12
"""Documents drawn side by side: spread from the fewest trained tokens to the most."""


@dataclass(frozen=True)
class WeightView:
    """``trained`` tokens of the documents shown (their ``index`` in the data), and each one's share of the
    loss under every objective (``weights[mode]``, over the whole data); ``documents`` and ``tokens`` count
    the data's documents with a trained token and their trained tokens."""

    index: Int64Array
    trained: Int64Array
    weights: dict[LossMode, npt.NDArray[np.float64]]
    documents: int
    tokens: int
    sqrt_sum: float

    @property
    def spread(self) -> float:
        """How many times the most-trained document shown outweighs the least under a token mean (1 under a
        sequence mean)."""
        return float(self.trained.max() / self.trained.min()) if len(self.trained) else 1.0


def trained_per_document(lengths: npt.ArrayLike, samples: packing.Samples | None, max_seq_length: int) -> Int64Array:
    """Tokens each sample trains when packed whole and truncated to ``max_seq_length``: its loss mask after
    its first token (the first has no earlier token to predict it), or its length less one without a mask.
    O(total tokens).

    >>> trained_per_document([3, 1, 9], None, 4).tolist()
    [2, 0, 3]
    >>> trained_per_document([4], packing.read_rows([{"prompt": [1, 2], "completion": [3, 4]}]), 8).tolist()
    [2]
    """
    if samples is not None and samples.loss_mask is not None:
        return packing.trained_tokens(samples, max_seq_length)
    capped = np.minimum(np.asarray(lengths, dtype=np.int64), max_seq_length)
    trained: Int64Array = np.maximum(capped - 1, 0)
    return trained


def weight_view(trained: npt.ArrayLike, shown: int = SHOWN_DOCUMENTS) -> WeightView:
    """The ``shown`` documents spread evenly by trained tokens (fewest to most), with their weights under
    every objective computed over all documents. O(n log n).

    >>> view = weight_view([1, 10, 100, 0], shown=3)
    >>> view.trained.tolist(), view.documents, view.tokens
    ([1, 10, 100], 3, 111)
    >>> [round(w, 3) for w in view.weights["token"].tolist()], [round(w, 3) for w in view.weights["sequence"].tolist()]
    ([0.009, 0.09, 0.901], [0.333, 0.333, 0.333])
    """
    counts = np.asarray(trained, dtype=np.int64)
    kept = np.flatnonzero(counts > 0)
    by_size = kept[np.argsort(counts[kept], kind="stable")]
    picks = by_size[np.unique(np.linspace(0, len(by_size) - 1, min(shown, len(by_size))).round().astype(np.int64))]
    weights = {mode: packing.effective_weights(counts, mode)[picks] for mode in LOSS_MODES}
    total = float(np.sqrt(counts[kept]).sum())
    return WeightView(picks, counts[picks], weights, len(kept), int(counts[kept].sum()), total)


def arithmetic(view: WeightView) -> list[str]:
    """The objectives in words, with the numbers of ``view`` (one line each).

    >>> arithmetic(weight_view([1, 9]))[0].split("; ")[-1]
    'here T = 10 tokens: the smallest document shown weighs 0.1 and the largest 0.9.'
    """
    lines = []
    for mode in LOSS_MODES:
        weights = view.weights[mode]
        scale = {
            "token": f"T = {view.tokens:,} tokens",
            "sqrt": f"Σ√n = {view.sqrt_sum:,.1f}",
        }.get(mode, f"D = {view.documents:,} documents")
        low, high = (float(weights[0]), float(weights[-1])) if len(weights) else (0.0, 0.0)
        lines.append(
            f"{mode}: {MODE_ARITHMETIC[mode]}; here {scale}: the smallest document shown weighs "
            f"{low:.3g} and the largest {high:.3g}."
        )
    return lines
