"""Strategies side by side on the same lengths, with what trainers really do as rows of their own.

A :class:`Contender` is a strategy, optionally packed per window of consecutive input
sequences (what trainers that pack per ``datasets.map`` batch do). :func:`compare`
plans each on the same lengths and reports blocks, efficiency, losses, time and the
gap to the lower bound that applies; the command line's ``compare`` and the
explorer's Compare tab print its rows.

>>> rows = compare([6, 5, 3, 2], 8, contenders=[Contender("next_fit"), Contender("bfd")])
>>> [(row.label, row.stats.num_blocks, row.gap) for row in rows]
[('next_fit', 3, 1), ('bfd', 2, 0)]
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import numpy.typing as npt

from packing.core._validation import OverflowPolicy, as_lengths
from packing.errors import PackingError, SettingError
from packing.planning._plans import PackingPlan, plan_of
from packing.recipe import Recipe
from packing.strategies._bounds import lower_bounds
from packing.strategies._registry import STRATEGIES, StrategyName
from packing.strategies._stats import PackingStats

TRL_WINDOW = 1_000
"""Rows per ``datasets.map`` batch: TRL and LLaMA-Factory pack each such batch on its own."""


@dataclass(frozen=True)
class Contender:
    """A strategy, packed globally (``window`` None) or per window of ``window`` input sequences; both checked
    by the recipe it plans with (:meth:`recipe`)."""

    strategy: StrategyName
    window: int | None = None
    note: str = ""

    @property
    def label(self) -> str:
        """``bfd``, or ``bfd, windows of 1,000 (TRL's default)``."""
        if self.window is None:
            return self.strategy
        return f"{self.strategy}, windows of {self.window:,}" + (f" ({self.note})" if self.note else "")

    @classmethod
    def parse(cls, text: str) -> Contender:
        """``bfd`` or ``bfd/1000`` (per window of 1,000 sequences).

        >>> Contender.parse("bfd/1000").label
        'bfd, windows of 1,000'
        """
        name, _, window = text.strip().partition("/")
        if window and not window.strip().isdigit():
            raise SettingError("strategies", "NAME or NAME/WINDOW, WINDOW a whole number of sequences", text)
        return cls(name.strip(), int(window) if window else None)  # type: ignore[arg-type]

    def recipe(self, max_seq_length: int, overflow: OverflowPolicy, time_limit: float | None = None) -> Recipe:
        """The recipe this contender plans with: its strategy and window, checked there, and ``time_limit`` when the
        strategy reads one. O(1).

        >>> Contender("bfd", 0).recipe(8, "truncate")
        Traceback (most recent call last):
        ...
        packing.errors.SettingError: window: expected an integer >= 1, got 0
        """
        limit = time_limit if "time_limit" in STRATEGIES[self.strategy].options else None
        return Recipe(max_seq_length, self.strategy, overflow, self.window, limit)


DEFAULT_CONTENDERS: tuple[Contender, ...] = (
    *(Contender(name) for name, entry in STRATEGIES.items() if entry.keeps_boundaries),  # type: ignore[arg-type]
    Contender("bfd", TRL_WINDOW, "TRL's default"),
)
"""Every strategy that keeps document boundaries globally (``wrapped`` has ``split``'s blocks, without them),
and bfd per map batch of 1,000 rows as TRL packs by default."""


@dataclass(frozen=True)
class Row:
    """One contender's result: its plan's ``stats`` (None when it refused, with the ``refusal``)."""

    contender: Contender
    stats: PackingStats | None
    bound: int
    seconds: float
    refusal: str = ""
    plan: PackingPlan | None = None
    error: PackingError | None = field(default=None, compare=False)
    """The refusal itself (``refusal`` is its message), for callers that word it from its fields."""

    @property
    def label(self) -> str:
        return self.contender.label

    @property
    def gap(self) -> int | None:
        """Blocks above the lower bound that applies to the strategy (None when it refused)."""
        return None if self.stats is None else self.stats.num_blocks - self.bound


def compare(
    lengths: npt.ArrayLike,
    max_seq_length: int,
    contenders: tuple[Contender, ...] | list[Contender] = DEFAULT_CONTENDERS,
    *,
    overflow: OverflowPolicy = "truncate",
    time_limit: float | None = None,
) -> list[Row]:
    """Plan every contender on the same lengths. The strategies' cost each.

    Times are for planning alone (the compiled code is loaded before the clock starts).
    ``time_limit`` bounds ``optimal``. A contender that refuses the input (a typed
    ``PackingError``) gets a row with its ``refusal``.
    """
    sizes = as_lengths(lengths)
    bounds = lower_bounds(sizes, max_seq_length, overflow=overflow)
    rows: list[Row] = []
    for contender in contenders:
        bound = getattr(bounds, STRATEGIES[contender.strategy].bound)
        try:
            recipe = contender.recipe(max_seq_length, overflow, time_limit)
            plan_of(sizes[:1], Recipe.of(recipe, window=None))  # load compiled code: time the packing
            start = time.perf_counter()
            made = plan_of(sizes, recipe)
            elapsed = time.perf_counter() - start
        except PackingError as error:
            rows.append(Row(contender, None, bound, 0.0, str(error), error=error))
            continue
        rows.append(Row(contender, made.stats, bound, elapsed, plan=made))
    return _with_proven_bound(rows)


def _with_proven_bound(rows: list[Row]) -> list[Row]:
    """Where an optimal plan came with a certificate, its bound (at least L2) is every no-split row's bound."""
    proofs = [row.plan.certificate.lower_bound for row in rows if row.plan is not None and row.plan.certificate]
    if not proofs:
        return rows
    best = max(proofs)
    return [
        replace(row, bound=max(row.bound, best)) if not STRATEGIES[row.contender.strategy].splits_sequences else row
        for row in rows
    ]
