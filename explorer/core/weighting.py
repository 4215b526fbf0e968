"""What each document weighs in the loss under each objective: the numbers behind the Loss weights tab.

The arithmetic is the library's (``packing.weighting``); this module picks the documents a learner can
compare at a glance and words the result. No Streamlit, nothing at import.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

import packing
import packing.batches
import packing.weighting
from packing.batches._packed import targets_per_sample
from packing.weighting import LOSS_MODES, MODE_ARITHMETIC, LossMode

Int64Array = npt.NDArray[np.int64]
SHOWN_DOCUMENTS = 12
"""Documents drawn side by side: spread from the fewest training targets to the most."""


@dataclass(frozen=True)
class WeightView:
    """``targets``: the training targets of the documents shown (their ``index`` in the data), and each one's
    share of the loss under every objective (``weights[mode]``, over the whole data); ``documents`` and
    ``total_targets`` count the data's documents with a training target and all their training targets."""

    index: Int64Array
    targets: Int64Array
    weights: dict[LossMode, npt.NDArray[np.float64]]
    documents: int
    total_targets: int
    sqrt_sum: float

    @property
    def spread(self) -> float:
        """How many times the document shown with the most training targets outweighs the one with the fewest
        under a token mean (1 under a sequence mean)."""
        return float(self.targets.max() / self.targets.min()) if len(self.targets) else 1.0


def targets_per_document(plan: packing.PackingPlan, samples: packing.Samples | None) -> Int64Array:
    """Training targets (labels that are not -100) of each document in the packed blocks of ``plan``: the
    library's count (``packing.batches._packed.targets_per_sample``), the one ``PackedBatch.loss_weights`` weighs;
    lengths-only data (``samples`` None) has every token in its loss mask. O(total tokens).

    >>> rows = [[1, 2], [3, 4, 5], [6]]
    >>> targets_per_document(packing.plan([2, 3, 1], 4, strategy="split"), packing.read_rows(rows)).tolist()
    [1, 1, 0]
    """
    return targets_per_sample(plan, samples)


def weight_view(targets: npt.ArrayLike, shown: int = SHOWN_DOCUMENTS) -> WeightView:
    """The ``shown`` documents spread evenly by training targets (fewest to most), with their weights under
    every objective computed over all documents. O(n log n).

    >>> view = weight_view([1, 10, 100, 0], shown=3)
    >>> view.targets.tolist(), view.documents, view.total_targets
    ([1, 10, 100], 3, 111)
    >>> [round(w, 3) for w in view.weights["token"].tolist()], [round(w, 3) for w in view.weights["sequence"].tolist()]
    ([0.009, 0.09, 0.901], [0.333, 0.333, 0.333])
    """
    counts = np.asarray(targets, dtype=np.int64)
    kept = np.flatnonzero(counts > 0)
    by_size = kept[np.argsort(counts[kept], kind="stable")]
    picks = by_size[np.unique(np.linspace(0, len(by_size) - 1, min(shown, len(by_size))).round().astype(np.int64))]
    weights = {mode: packing.weighting.effective_weights(counts, mode)[picks] for mode in LOSS_MODES}
    total = float(np.sqrt(counts[kept]).sum())
    return WeightView(picks, counts[picks], weights, len(kept), int(counts[kept].sum()), total)


def arithmetic(view: WeightView) -> list[str]:
    """The objectives in words, with the numbers of ``view`` (one line each).

    >>> arithmetic(weight_view([1, 9]))[0].split("; ")[-1]
    'here T = 10 training targets: the smallest document shown weighs 0.1 and the largest 0.9.'
    """
    lines = []
    for mode in LOSS_MODES:
        weights = view.weights[mode]
        scale = {
            "token": f"T = {view.total_targets:,} training targets",
            "sqrt": f"Σ√n = {view.sqrt_sum:,.1f}",
        }.get(mode, f"D = {view.documents:,} documents")
        low, high = (float(weights[0]), float(weights[-1])) if len(weights) else (0.0, 0.0)
        lines.append(
            f"{mode}: {MODE_ARITHMETIC[mode]}; here {scale}: the smallest document shown weighs "
            f"{low:.3g} and the largest {high:.3g}."
        )
    return lines
