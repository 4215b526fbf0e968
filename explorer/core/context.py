"""The ``Context`` a tab draws from: a source resolved once per run (its dataset, with the samples and the
tokenizer that read them), the recipe it is packed with, and the chosen strategy's plan, handed down to every tab."""

from __future__ import annotations

from dataclasses import dataclass

import packing
from explorer.core.model import Dataset, Int64Array
from explorer.core.sources import Source


@dataclass(frozen=True)
class Context:
    """Everything a tab draws from: the source, its dataset (None when it could not be read), the
    ``packing.Recipe`` the sidebar's choices make (validated once, by the library), and the chosen strategy's plan
    (None when the strategy refused or a choice is out of range)."""

    source: Source | None
    recipe: packing.Recipe
    dataset: Dataset | None = None
    plan: packing.PackingPlan | None = None
    refusal: str = ""
    stats: packing.PackingStats | None = None
    """The plan's statistics as the library counts them for what it packs (for pairs and groups, with what fitting
    them cut and ``stats.units``); None without a plan."""
    problem: str = ""
    """Why there is nothing to show (unreadable data, an out-of-range setting), already in plain words."""

    @property
    def lengths(self) -> Int64Array:
        assert self.dataset is not None
        return self.dataset.lengths

    @property
    def samples(self) -> packing.Samples | None:
        return None if self.dataset is None else self.dataset.samples
