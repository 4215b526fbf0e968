"""Preference pairs and completion groups on the page: their plan (the library's pipeline, ``run``: fitted by the
overflow policy, planned whole, counted in ``stats.units``), the role of every token of a block read from the
batch's own columns, and the two layouts (``share_prompt`` False and True) side by side.

No packing decision is made here: every plan, block, mask and number is the library's. No Streamlit.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

import packing
from explorer.core.safety import describe
from packing.batches._packed import run
from packing.comparison import Contender, Row
from packing.core._pairs_groups import GROUP, PAIR
from packing.text import prepare

Int64Array = npt.NDArray[np.int64]
PADDING, PLAIN, PROMPT, CHOSEN, REJECTED = range(5)
"""Role codes of a token (``token_roles``); a group's completion ``k`` (from 1) is ``REJECTED + k``."""
ROLE_NAMES = ("padding", "plain sequence", "prompt", "chosen", "rejected")
MAX_COMPLETION_ROLES = 12
"""A group's completions told apart by role (colour and legend entry): the later ones share the last, so a group
of 10,000 completions draws a legend of a few lines, not 10,000."""


@dataclass(frozen=True)
class UnitRun:
    """The plan of samples with units as the library makes it (``row``: its plan and statistics with
    ``stats.units``, or the typed refusal), and the samples that fill it: laid out as the recipe's ``share_prompt``
    says and fitted by its overflow policy (None when refused)."""

    row: Row
    samples: packing.Samples | None


def run_units(samples: packing.Samples, recipe: packing.Recipe) -> UnitRun:
    """The library's plan of pairs and groups (``packing.batches._packed.run``: each unit fitted and planned
    whole) as one ``Row`` of ``packing.compare`` with the samples it fills; a recipe that cannot keep units whole
    (``split``) is its refusal, worded from its fields. O(tokens) plus the strategy's cost.

    >>> rows = [{"prompt": [1, 2, 3], "chosen": [4, 5], "rejected": [6]}]
    >>> made = run_units(packing.read_rows(rows), packing.Recipe(8, share_prompt=True))
    >>> made.row.stats.packed_tokens, made.row.stats.units.prompt_tokens_shared
    (6, 3)
    >>> run_units(packing.read_rows(rows), packing.Recipe(8, strategy="split")).row.refusal[:37]
    'strategy: expected another value with'
    """
    contender = Contender(recipe.strategy)
    started = time.perf_counter()
    try:
        lazy = run(samples, recipe, prepare(recipe))
        stats = lazy.stats
    except packing.PackingError as error:
        return UnitRun(Row(contender, None, 0, time.perf_counter() - started, describe(error), error=error), None)
    seconds = time.perf_counter() - started
    return UnitRun(Row(contender, stats, stats.lower_bound, seconds, plan=lazy.plan), lazy.samples)


def unit_lengths(samples: packing.Samples, share_prompt: bool) -> Int64Array:
    """Each sample's length in a layout (``Units.lengths``: ``k·P + Σc``, or ``P + Σc`` with a shared prompt): what
    the planner sees of a unit, before the overflow policy fits it. O(units).

    >>> unit_lengths(packing.read_rows([{"prompt": [1, 2], "completions": [[3], [4]]}]), True).tolist()
    [4]
    """
    assert samples.units is not None
    return samples.units.lengths(share_prompt=share_prompt)


def token_roles(batch: packing.PackedBatch) -> Int64Array:
    """The role of every token of ``batch``'s blocks of units, read from its columns: padding where ``unit_ids``
    is -1; a prompt (or a plain sequence) where ``completion_ids`` is -1; a pair's first completion the chosen, its
    second the rejected; a group's ``k``-th completion ``REJECTED + k``. A unit sits whole in one block, so its
    first completion is the smallest ``completion_ids`` of its tokens there. O(blocks × max_seq_length).

    >>> rows = [{"prompt": [1], "chosen": [2], "rejected": [3]}, {"prompt": [4], "completions": [[5], [6]]}, [7]]
    >>> token_roles(packing.pack(rows, 8, strategy="next_fit")).tolist()
    [[2, 3, 2, 4, 2, 5, 2, 6], [1, 0, 0, 0, 0, 0, 0, 0]]
    """
    assert batch.units is not None, "token_roles reads blocks of units"
    unit, completion = batch.unit_ids.astype(np.int64), batch.completion_ids.astype(np.int64)
    kind = np.where(unit >= 0, batch.units.kind[np.maximum(unit, 0)], -1)
    roles = np.full(unit.shape, PADDING, dtype=np.int64)
    roles[(unit >= 0) & (completion < 0)] = PROMPT
    roles[(unit >= 0) & (completion < 0) & (kind != PAIR) & (kind != GROUP)] = PLAIN
    answered = completion >= 0
    for row in range(unit.shape[0]):
        here = answered[row]
        if not here.any():
            continue
        units, inverse = np.unique(unit[row][here], return_inverse=True)
        first = np.full(len(units), np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(first, inverse, completion[row][here])
        number = completion[row][here] - first[inverse]  # 0 for a unit's first completion
        later = REJECTED + 1 + np.minimum(number, MAX_COMPLETION_ROLES - 1)  # the last role for the later ones
        roles[row][here] = np.where(kind[row][here] == PAIR, CHOSEN + np.minimum(number, 1), later)
    return roles


def role_names(roles: Int64Array) -> list[str]:
    """The name of every role code up to the largest in ``roles`` (a group's completions as ``completion k``, the
    last of ``MAX_COMPLETION_ROLES`` as the later ones too).

    >>> role_names(np.array([0, 7]))
    ['padding', 'plain sequence', 'prompt', 'chosen', 'rejected', 'completion 1', 'completion 2', 'completion 3']
    >>> role_names(np.array([REJECTED + MAX_COMPLETION_ROLES]))[-1]
    'completion 12 and later'
    """
    largest = int(roles.max()) if roles.size else REJECTED
    names = [f"completion {k}" for k in range(1, largest - REJECTED + 1)]
    if len(names) == MAX_COMPLETION_ROLES:
        names[-1] += " and later"
    return [*ROLE_NAMES, *names]


@dataclass(frozen=True)
class Layouts:
    """The same rows packed with ``share_prompt=False`` and ``True`` (``packing.pack`` with the recipe's other
    options): both batches, each with its library statistics."""

    duplicated: packing.PackedBatch
    shared: packing.PackedBatch

    @property
    def tokens_saved(self) -> int:
        """Tokens the shared layout does not store: the two layouts' ``packed_tokens`` apart."""
        return self.duplicated.stats.packed_tokens - self.shared.stats.packed_tokens

    @property
    def blocks_saved(self) -> int:
        """Blocks the shared layout does not need: the two layouts' ``num_blocks`` apart."""
        return self.duplicated.stats.num_blocks - self.shared.stats.num_blocks


def both_layouts(samples: packing.Samples, recipe: packing.Recipe) -> Layouts:
    """``packing.pack`` of ``samples`` under ``recipe`` with the prompt duplicated and shared. O(tokens) twice plus
    the strategy's cost.

    >>> group = packing.read_rows([{"prompt": [1] * 150, "completions": [[2] * 250] * 8}])
    >>> both = both_layouts(group, packing.Recipe(4096))
    >>> both.duplicated.stats.packed_tokens, both.shared.stats.packed_tokens, both.tokens_saved
    (3200, 2150, 1050)
    """
    duplicated = packing.pack(samples, recipe=packing.Recipe.of(recipe, share_prompt=False))
    shared = packing.pack(samples, recipe=packing.Recipe.of(recipe, share_prompt=True))
    return Layouts(duplicated, shared)
