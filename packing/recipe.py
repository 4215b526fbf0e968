"""One recipe for packing: every option, its default and its check, in one place.

A :class:`Recipe` is a frozen, validated-once description of how to pack. Every entry point
(``pack``, ``plan``, ``read_dataset``, ``stream``, the sampler and ``collate``, the ``datasets``
and Ray adapters, the command line and the explorer) takes the same keyword options with the
same names and defaults, or a ``recipe=``, and builds its recipe with :meth:`Recipe.of`; an
option an entry point cannot honour is refused there with a :class:`~packing.SettingError`.

>>> recipe = Recipe(4096, strategy="ffd")
>>> recipe.strategy, recipe.overflow, recipe.loss
('ffd', 'truncate', 'completion')
>>> Recipe.of(recipe, overflow="split").overflow
'split'
>>> Recipe(4096, strategy="bfd", time_limit=5)
Traceback (most recent call last):
...
packing.errors.SettingError: time_limit: expected no value with strategy 'bfd' (it applies to optimal), got 5.0 (float)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from numbers import Integral
from typing import Any, TypedDict

import numpy as np

from packing.errors import SettingError
from packing.loss import DEFAULT_ROLES, LossRules, check_flag, check_roles
from packing.loss import LOSS_RULES as LOSS_RULES  # re-exported: packing.LOSS_RULES
from packing.loss import LossRule as LossRule
from packing.strategies import DEFAULT_STRATEGY, STRATEGIES, StrategyName
from packing.validation import (
    OVERFLOW_POLICIES,
    OverflowPolicy,
    check_choice,
    check_max_seq_length,
    check_positive_int,
    check_time_limit,
    check_token_id,
)


class RecipeOptions(TypedDict, total=False):
    """The keyword options every entry point accepts (each a field of :class:`Recipe`)."""

    strategy: StrategyName
    overflow: OverflowPolicy
    window: int | None
    time_limit: float | None
    seed: int | None
    max_sequences_per_block: int | None
    loss: LossRule
    tokenizer: Any
    pad_token_id: int | None
    roles_to_train: tuple[str, ...] | list[str] | str
    train_on_eos: bool
    chat_template: str | None
    num_proc: int | None


def _check_seed(value: Any) -> int | None:
    """``seed`` as an ``int`` (a non-negative integer) or None."""
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, Integral) or value < 0:
        raise SettingError("seed", "a non-negative integer", value)
    return int(value)


@dataclass(frozen=True)
class Recipe:
    """How to pack: block size, strategy and its options, overflow, window, loss rule, tokenizer and padding.

    Validated once, when made; immutable afterwards (``Recipe.of(recipe, **changes)`` makes a changed
    copy). ``pad_token_id=None`` means: the tokenizer's pad id (its EOS id when it has none, as
    transformers does), or ``0`` without a tokenizer. The strategy options (``time_limit``,
    ``seed``, ``max_sequences_per_block``) are accepted where the registry says the strategy reads
    them; ``seed`` is also what entry points that shuffle their output draw from. O(1).

    >>> Recipe(8).pad_id
    0
    >>> Recipe(8, tokenizer="bytes").pad_id  # the byte tokenizer's own pad id, not the NUL byte
    257
    >>> Recipe(8, pad_token_id=7, tokenizer="bytes").pad_id
    7
    >>> Recipe(0)
    Traceback (most recent call last):
    ...
    packing.errors.SettingError: max_seq_length: expected an integer >= 1, got 0
    """

    max_seq_length: int
    strategy: StrategyName = DEFAULT_STRATEGY
    overflow: OverflowPolicy = "truncate"
    window: int | None = None
    time_limit: float | None = None
    seed: int | None = None
    max_sequences_per_block: int | None = None
    loss: LossRule = "completion"
    tokenizer: Any = field(default=None, compare=False)
    pad_token_id: int | None = None
    # loss rules and tokenizer forms (packing.loss, packing.text); num_proc: processes that tokenize text
    # rows (results identical to one process, so it is left out of equality)
    roles_to_train: tuple[str, ...] = DEFAULT_ROLES
    train_on_eos: bool = True
    chat_template: str | None = None
    num_proc: int | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "max_seq_length", check_max_seq_length(self.max_seq_length))
        check_choice(self.strategy, "strategy", STRATEGIES)
        check_choice(self.overflow, "overflow", OVERFLOW_POLICIES)
        check_choice(self.loss, "loss", LOSS_RULES)
        if self.window is not None:
            set_(self, "window", check_positive_int(self.window, "window"))
        if self.time_limit is not None:
            set_(self, "time_limit", check_time_limit(self.time_limit))
        if self.max_sequences_per_block is not None:
            set_(
                self,
                "max_sequences_per_block",
                check_positive_int(self.max_sequences_per_block, "max_sequences_per_block"),
            )
        set_(self, "seed", _check_seed(self.seed))
        if self.pad_token_id is not None:
            set_(self, "pad_token_id", check_token_id(self.pad_token_id, "pad_token_id"))
        self._check_strategy_options()
        self._check_text_options()

    def _check_text_options(self) -> None:
        """Check the loss rules (``roles_to_train``, ``train_on_eos``), ``chat_template`` and ``num_proc``."""
        set_ = object.__setattr__
        set_(self, "roles_to_train", check_roles(self.roles_to_train))
        set_(self, "train_on_eos", check_flag(self.train_on_eos, "train_on_eos"))
        if self.chat_template is not None and (not isinstance(self.chat_template, str) or not self.chat_template):
            raise SettingError(
                "chat_template", "a Jinja chat template or the path of a file holding one", self.chat_template
            )
        if self.num_proc is not None:
            set_(self, "num_proc", check_positive_int(self.num_proc, "num_proc"))

    def _check_strategy_options(self) -> None:
        """Refuse a strategy option the strategy does not read (the registry's ``options``); ``seed`` is
        always allowed, as entry points that shuffle their output draw from it."""
        accepted = STRATEGIES[self.strategy].options
        for name in ("time_limit", "max_sequences_per_block"):
            value = getattr(self, name)
            if value is not None and name not in accepted:
                users = [s.name for s in STRATEGIES.values() if name in s.options]
                raise SettingError(
                    name, f"no value with strategy {self.strategy!r} (it applies to {', '.join(users)})", value
                )

    # ------------------------------------------------------------ building

    @classmethod
    def of(cls, recipe: Recipe | None = None, max_seq_length: int | None = None, **options: Any) -> Recipe:
        """The recipe an entry point packs with: ``recipe`` (if given) with ``max_seq_length`` and
        ``options`` laid over it, checked once. An unknown option is a ``SettingError`` naming the
        options that exist. O(1).

        >>> Recipe.of(None, 16, strategy="split").strategy
        'split'
        >>> Recipe.of(None, 16, stratgy="split")
        Traceback (most recent call last):
        ...
        packing.errors.SettingError: stratgy: expected one of the options strategy, overflow, window, time_limit, seed, max_sequences_per_block, loss, tokenizer, pad_token_id, roles_to_train, train_on_eos, chat_template, num_proc, got 'split' (str)
        >>> Recipe.of(None, None)
        Traceback (most recent call last):
        ...
        packing.errors.SettingError: max_seq_length: expected an integer >= 1 (or a recipe), got None (NoneType)
        """
        known = OPTION_NAMES
        for name, value in options.items():
            if name not in known:
                raise SettingError(name, f"one of the options {', '.join(known)}", value)
        if recipe is not None and not isinstance(recipe, Recipe):
            raise SettingError("recipe", "a packing.Recipe", recipe)
        if recipe is None:
            if max_seq_length is None:
                raise SettingError("max_seq_length", "an integer >= 1 (or a recipe)", None)
            return cls(max_seq_length, **options)
        changes = dict(options)
        if max_seq_length is not None:
            changes["max_seq_length"] = max_seq_length
        return dataclasses.replace(recipe, **changes) if changes else recipe

    def refuse(self, entry_point: str, names: Iterable[str]) -> None:
        """Raise ``SettingError`` if an option in ``names`` differs from its default: the entry point
        ``entry_point`` cannot honour it. O(len(names)).

        >>> Recipe(8, window=4).refuse("stream", ["window"])
        Traceback (most recent call last):
        ...
        packing.errors.SettingError: window: expected no value at stream (it cannot honour it), got 4
        """
        for name in names:
            value = getattr(self, name)
            if value != _DEFAULTS[name]:
                raise SettingError(name, f"no value at {entry_point} (it cannot honour it)", value)

    # ------------------------------------------------------------ derived

    @property
    def completion_only_loss(self) -> bool:
        """Whether prompt tokens and non-assistant turns are masked (``loss`` other than ``all``)."""
        return self.loss != "all"

    @property
    def loss_rules(self) -> LossRules:
        """``loss``, ``roles_to_train`` and ``train_on_eos`` as the readers take them (``loss_rules=``).

        >>> Recipe(8, loss="last_turn", train_on_eos=False).loss_rules
        LossRules(loss='last_turn', roles_to_train=('assistant',), train_on_eos=False)
        """
        return LossRules(self.loss, self.roles_to_train, self.train_on_eos)

    @cached_property
    def loaded_tokenizer(self) -> Any:
        """The tokenizer object (``packing.load_tokenizer`` of ``tokenizer`` with ``chat_template``), loaded
        once; None without one."""
        if self.tokenizer is None:
            return None
        from packing.text import load_tokenizer

        return load_tokenizer(self.tokenizer, chat_template=self.chat_template)

    @cached_property
    def pad_id(self) -> int:
        """The id padding is filled with: ``pad_token_id``, else the tokenizer's pad id, else its EOS id, else 0."""
        if self.pad_token_id is not None:
            return self.pad_token_id
        tokenizer = self.loaded_tokenizer
        for name in ("pad_token_id", "eos_token_id"):
            value = getattr(tokenizer, name, None)
            if isinstance(value, list):  # some configs list several EOS ids
                value = value[0] if value else None
            if isinstance(value, Integral) and not isinstance(value, bool) and int(value) >= 0:
                return int(value)
        return 0

    def strategy_options(self) -> dict[str, Any]:
        """The options ``plan`` takes beyond strategy and overflow, as keywords (the ones this strategy reads)."""
        accepted = STRATEGIES[self.strategy].options
        options: dict[str, Any] = {"window": self.window}
        for name in ("time_limit", "max_sequences_per_block", "seed"):
            if name in accepted:
                options[name] = getattr(self, name)
        return options

    def describe(self) -> str:
        """One line naming every option that differs from its default.

        >>> Recipe(2048, strategy="split", loss="all").describe()
        'max_seq_length=2048, strategy=split, loss=all'
        """
        parts = [f"max_seq_length={self.max_seq_length}"]
        for name in OPTION_NAMES:
            value = getattr(self, name)
            if value != _DEFAULTS[name]:
                shown = value if isinstance(value, (str, int, float)) else type(value).__name__
                parts.append(f"{name}={shown}")
        return ", ".join(parts)


OPTION_NAMES: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(Recipe) if f.name != "max_seq_length")
"""The keyword options of every entry point, in the recipe's order."""
_DEFAULTS: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(Recipe) if f.name != "max_seq_length"}
