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
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from numbers import Integral
from typing import Any, Literal, TypedDict

import numpy as np

from packing.core.loss import DEFAULT_ROLES, EOS_RULES, EosRule, LossRules, check_roles, check_train_on_eos
from packing.core.loss import LOSS_RULES as LOSS_RULES  # re-exported: packing.LOSS_RULES
from packing.core.loss import LossRule as LossRule
from packing.core.thd import document_multiple
from packing.core.validation import (
    MAX_SEQ_LENGTH,
    OVERFLOW_POLICIES,
    OverflowPolicy,
    check_choice,
    check_flag,
    check_max_seq_length,
    check_positive_int,
    check_time_limit,
    check_token_id,
)
from packing.errors import SettingError
from packing.strategies.registry import DEFAULT_STRATEGY, STRATEGIES, TIE_BREAKS, StrategyName, TieBreak


class RecipeOptions(TypedDict, total=False):
    """The keyword options every entry point accepts (each a field of :class:`Recipe`), for
    ``**options: Unpack[RecipeOptions]``; ``strategy`` and ``overflow`` are parameters of their own at every
    entry point (``pack`` and ``plan`` take them by position too). ``completion_only_loss`` is TRL's name for
    ``loss`` (True: ``completion``, False: ``all``), mapped in :meth:`Recipe.of` only."""

    window: int | None
    time_limit: float | None
    seed: int | None
    max_sequences_per_block: int | None
    tie_break: TieBreak
    loss: LossRule
    tokenizer: Any
    pad_token_id: int | None
    roles_to_train: tuple[str, ...] | list[str] | str
    train_on_eos: EosRule | bool
    chat_template: str | None
    num_proc: int | None
    completion_only_loss: bool
    int64: bool
    context_parallel_size: int
    tensor_parallel_size: int


Stage = Literal["read", "plan", "fill"]
"""Where an option acts: reading rows (``read``), laying out blocks (``plan``), filling them (``fill``)."""


def _about(
    stage: Stage, help: str, choices: Iterable[str] = (), metavar: str | None = None, parse: type = str
) -> dict[str, Any]:
    """A field's metadata, read by the command line's options and the explorer: its ``stage``, ``help``
    text, ``choices`` (their order), ``metavar`` and ``parse`` (how a typed value becomes the field's:
    ``int``, ``float``, ``str``; the recipe checks it). Adding a field with this metadata reaches every entry point."""
    return {"stage": stage, "help": help, "choices": tuple(choices), "metavar": metavar, "parse": parse}


def _check_seed(value: Any) -> int | None:
    """``seed`` as an ``int`` (a non-negative integer) or None."""
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, Integral) or value < 0:
        raise SettingError("seed", "a non-negative integer", value)
    return int(value)


@dataclass(frozen=True, eq=False)
class Recipe:
    """How to pack: block size, strategy and its options, overflow, window, loss rule, tokenizer, padding and
    the output's integer width.

    Validated once, when made; immutable afterwards (``Recipe.of(recipe, **changes)`` makes a changed
    copy). ``pad_token_id=None`` means: the tokenizer's pad id (its EOS id when it has none, as
    transformers does), or ``0`` without a tokenizer. The strategy options (``time_limit``,
    ``seed``, ``max_sequences_per_block``) are accepted where the registry says the strategy reads
    them; ``seed`` is also what entry points that shuffle their output draw from. O(1).

    Two recipes are equal (and hash alike) when they pack alike: every option but ``num_proc`` is compared, the
    tokenizer by its spec (a name or path) or, for a tokenizer object, by identity.

    >>> Recipe(8, tokenizer="bytes") == Recipe(8), Recipe(8, tokenizer="bytes") == Recipe(8, tokenizer="bytes")
    (False, True)
    >>> Recipe(0)
    Traceback (most recent call last):
    ...
    packing.errors.SettingError: max_seq_length: expected an integer >= 1, got 0
    """

    max_seq_length: int = field(metadata=_about("plan", "tokens per block (>= 1)", metavar="N", parse=int))
    strategy: StrategyName = field(
        default=DEFAULT_STRATEGY, metadata=_about("plan", "how sequences are placed in blocks", STRATEGIES)
    )
    overflow: OverflowPolicy = field(
        default="truncate", metadata=_about("plan", "what to do with a sequence longer than N", OVERFLOW_POLICIES)
    )
    window: int | None = field(
        default=None,
        metadata=_about("plan", "pack each window of W consecutive sequences on its own", metavar="W", parse=int),
    )
    time_limit: float | None = field(
        default=None,
        metadata=_about("plan", "seconds a search strategy (optimal) may take (default: 60)", metavar="S", parse=float),
    )
    seed: int | None = field(
        default=None,
        metadata=_about("plan", "seed of random orders: first_fit_shuffle, the block shuffle (default: 0)", parse=int),
    )
    max_sequences_per_block: int | None = field(
        default=None, metadata=_about("plan", "cap on documents per block (spfhp only)", metavar="K", parse=int)
    )
    loss: LossRule = field(default="completion", metadata=_about("read", "which tokens are trained", LOSS_RULES))
    tokenizer: Any = field(
        default=None,
        compare=False,
        metadata=_about(
            "read",
            "tokenize text rows with 'bytes', a tokenizer folder, a tokenizer.json or .tiktoken file, or a hub name",
            metavar="SPEC",
        ),
    )
    pad_token_id: int | None = field(
        default=None,
        metadata=_about(
            "fill", "padding id (default: the tokenizer's pad id, its EOS, else 0)", metavar="ID", parse=int
        ),
    )
    roles_to_train: tuple[str, ...] = field(
        default=DEFAULT_ROLES,
        metadata=_about("read", "roles whose turns are trained (comma-separated; default assistant)", metavar="ROLES"),
    )
    train_on_eos: EosRule = field(
        default="turn",
        metadata=_about(
            "read",
            "whose end-of-turn tokens are trained: each trained turn's, the last trained turn's, every turn's, none",
            EOS_RULES,
        ),
    )
    chat_template: str | None = field(
        default=None,
        metadata=_about("read", "a Jinja chat template, or the path of a file holding one", metavar="PATH"),
    )
    num_proc: int | None = field(
        default=None,
        compare=False,  # results are identical to one process
        metadata=_about("read", "processes that tokenize text rows (same result as one)", metavar="N", parse=int),
    )
    int64: bool = field(
        default=False,
        metadata=_about("fill", "ids, labels and positions as int64 (default: int32, the compact schema)", parse=bool),
    )
    """Ids, labels and positions as int64 instead of the compact schema's int32 (``packing.batches.schema``)."""
    tie_break: TieBreak = field(
        default="newest",
        metadata=_about("plan", "bfd on equal room: the block that reached it last, or first (TRL's)", TIE_BREAKS),
    )
    context_parallel_size: int = field(
        default=1,
        metadata=_about(
            "plan",
            "context-parallel ranks: every document padded to a multiple of 2 x N (the THD layout), the padding "
            "counted against max_seq_length",
            metavar="N",
            parse=int,
        ),
    )
    tensor_parallel_size: int = field(
        default=1,
        metadata=_about(
            "plan",
            "tensor-parallel ranks with sequence parallelism: documents padded to a multiple of N more",
            metavar="N",
            parse=int,
        ),
    )

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "max_seq_length", check_max_seq_length(self.max_seq_length))
        check_choice(self.strategy, "strategy", STRATEGIES)
        check_choice(self.overflow, "overflow", OVERFLOW_POLICIES)
        check_choice(self.loss, "loss", LOSS_RULES)
        check_choice(self.tie_break, "tie_break", TIE_BREAKS)
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
        set_(self, "int64", check_flag(self.int64, "int64"))
        self._check_strategy_options()
        self._check_parallel_sizes()
        self._check_text_options()

    def _identity(self) -> tuple[Any, ...]:
        """What makes two recipes pack alike: every compared option, and the tokenizer's key."""
        compared = tuple(getattr(self, f.name) for f in dataclasses.fields(self) if f.compare)
        return (*compared, _tokenizer_key(self.tokenizer))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Recipe):
            return NotImplemented
        return self._identity() == other._identity()

    def __hash__(self) -> int:
        return hash(self._identity())

    def _check_text_options(self) -> None:
        """Check the loss rules (``roles_to_train``, ``train_on_eos``), ``chat_template`` and ``num_proc``."""
        set_ = object.__setattr__
        set_(self, "roles_to_train", check_roles(self.roles_to_train))
        set_(self, "train_on_eos", check_train_on_eos(self.train_on_eos))  # True/False mapped there, once
        if self.chat_template is not None and (not isinstance(self.chat_template, str) or not self.chat_template):
            raise SettingError(
                "chat_template", "a Jinja chat template or the path of a file holding one", self.chat_template
            )
        if self.num_proc is not None:
            set_(self, "num_proc", check_positive_int(self.num_proc, "num_proc"))

    def _check_parallel_sizes(self) -> None:
        """Check ``context_parallel_size`` and ``tensor_parallel_size``: whole documents padded to their
        :attr:`document_multiple`, which divides ``max_seq_length`` (so a document cut to it stays whole), with a
        strategy that keeps documents whole."""
        set_ = object.__setattr__
        for name in ("context_parallel_size", "tensor_parallel_size"):
            set_(self, name, check_positive_int(getattr(self, name), name))
        multiple = self.document_multiple
        if multiple == 1:
            return
        name = "context_parallel_size" if self.context_parallel_size > 1 else "tensor_parallel_size"
        spec = STRATEGIES[self.strategy]
        if spec.splits_sequences or not spec.keeps_boundaries:
            raise SettingError(
                name,
                f"1 with strategy {self.strategy!r} (it cuts documents at block ends; THD pads whole ones)",
                getattr(self, name),
            )
        if self.max_seq_length % multiple:
            raise SettingError(
                "max_seq_length",
                f"a multiple of {multiple} (every document is padded to one: {self._multiple_rule()})",
                self.max_seq_length,
            )

    def _multiple_rule(self) -> str:
        cp, tp = self.context_parallel_size, self.tensor_parallel_size
        parts = ([f"2 × context_parallel_size {cp}"] if cp > 1 else []) + (
            [f"tensor_parallel_size {tp}"] if tp > 1 else []
        )
        return " × ".join(parts)

    def _check_strategy_options(self) -> None:
        """Refuse a strategy option the strategy does not read (the registry's ``options``); ``seed`` is
        always allowed, as entry points that shuffle their output draw from it."""
        accepted = STRATEGIES[self.strategy].options
        for name in ("time_limit", "max_sequences_per_block", "tie_break"):
            value = getattr(self, name)
            if value != _DEFAULTS[name] and name not in accepted:
                users = [s.name for s in STRATEGIES.values() if name in s.options]
                raise SettingError(
                    name, f"no value with strategy {self.strategy!r} (it applies to {', '.join(users)})", value
                )

    # ------------------------------------------------------------ building

    @classmethod
    def of(cls, recipe: Recipe | None = None, max_seq_length: int | None = None, **options: Any) -> Recipe:
        """The recipe an entry point packs with: ``recipe`` (if given) with ``max_seq_length`` and
        ``options`` laid over it, checked once. An unknown option is a ``SettingError`` naming the
        options that exist. ``None`` for an option whose default is not None (``strategy``,
        ``overflow``, ``loss``) means "not given"; ``completion_only_loss`` (TRL's name) sets ``loss``. O(1).

        >>> Recipe.of(Recipe(16, strategy="ffd"), strategy=None, completion_only_loss=False).describe()
        'max_seq_length=16, strategy=ffd, loss=all'

        >>> Recipe.of(None, 16, strategy="split").strategy
        'split'
        >>> Recipe.of(None, 16, stratgy="split")
        Traceback (most recent call last):
        ...
        packing.errors.SettingError: stratgy: expected one of the options strategy, overflow, window, time_limit, seed, max_sequences_per_block, loss, tokenizer, pad_token_id, roles_to_train, train_on_eos, chat_template, num_proc, int64, tie_break, context_parallel_size, tensor_parallel_size, got 'split' (str)
        >>> Recipe.of(None, None)
        Traceback (most recent call last):
        ...
        packing.errors.SettingError: max_seq_length: expected an integer >= 1 (or a recipe), got None (NoneType)
        """
        known = OPTION_NAMES
        options = _given(options)
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

    @classmethod
    def for_reading(cls, recipe: Recipe | None = None, max_seq_length: int | None = None, **options: Any) -> Recipe:
        """The recipe of an entry point that may read rows without a block length (``read_dataset``, ``collate``):
        :meth:`of`, with the largest ``max_seq_length`` allowed standing in when neither a length nor a recipe
        is given (reading never uses it). O(1).

        >>> Recipe.for_reading(tokenizer="bytes").max_seq_length == MAX_SEQ_LENGTH
        True
        """
        if recipe is None and max_seq_length is None:
            sizes = [options.get(name) for name in ("context_parallel_size", "tensor_parallel_size")]
            whole = all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in sizes if v is not None)
            multiple = document_multiple(*(v or 1 for v in sizes)) if whole else 1  # else the recipe refuses them
            max_seq_length = MAX_SEQ_LENGTH - MAX_SEQ_LENGTH % multiple
        return cls.of(recipe, max_seq_length, **options)

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
    def document_multiple(self) -> int:
        """What every document's length is padded to a multiple of: ``2·cp·tp`` with context parallelism, ``tp``
        without, 1 by default (``packing.core.thd``). The planner counts the padding; ``collate`` lays it out.

        >>> Recipe(64, context_parallel_size=2).document_multiple, Recipe(64).document_multiple
        (4, 1)
        """
        return document_multiple(self.context_parallel_size, self.tensor_parallel_size)

    @property
    def completion_only_loss(self) -> bool:
        """Whether prompt tokens and non-assistant turns are masked (``loss`` other than ``all``)."""
        return self.loss != "all"

    @property
    def loss_rules(self) -> LossRules:
        """``loss``, ``roles_to_train`` and ``train_on_eos`` as the readers take them (``loss_rules=``).

        >>> Recipe(8, loss="last_turn", train_on_eos=False).loss_rules
        LossRules(loss='last_turn', roles_to_train=('assistant',), train_on_eos='none')
        """
        return LossRules(self.loss, self.roles_to_train, self.train_on_eos)

    def strategy_options(self) -> dict[str, Any]:
        """The options ``plan`` takes beyond strategy and overflow, as keywords (the ones this strategy reads)."""
        accepted = STRATEGIES[self.strategy].options
        options: dict[str, Any] = {"window": self.window}
        for name in ("time_limit", "max_sequences_per_block", "seed", "tie_break"):
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


def _tokenizer_key(tokenizer: Any) -> Any:
    """A tokenizer spec as a hashable key: a name or path as its string, an object by identity."""
    if tokenizer is None or isinstance(tokenizer, str):
        return tokenizer
    if isinstance(tokenizer, os.PathLike):
        return os.fspath(tokenizer)
    return ("object", id(tokenizer))


def _given(options: dict[str, Any]) -> dict[str, Any]:
    """``options`` without the ones left at None whose default is not None, ``completion_only_loss`` as ``loss``."""
    given = {k: v for k, v in options.items() if v is not None or _DEFAULTS.get(k) is None}
    if given.get("completion_only_loss") is not None:
        flag = given.pop("completion_only_loss")
        loss = "completion" if check_flag(flag, "completion_only_loss") else "all"
        if given.setdefault("loss", loss) != loss:
            raise SettingError("completion_only_loss", f"no value with loss={given['loss']!r} (it sets loss)", flag)
    given.pop("completion_only_loss", None)
    return given


OPTION_NAMES: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(Recipe) if f.name != "max_seq_length")
"""The keyword options of every entry point, in the recipe's order."""
_DEFAULTS: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(Recipe) if f.name != "max_seq_length"}


def option_fields(*stages: Stage) -> list[dataclasses.Field[Any]]:
    """The recipe's fields acting at ``stages`` (all when none given), in order, with their metadata
    (``stage``, ``help``, ``choices``, ``metavar``): what the command line and the explorer build their options from.

    >>> [f.name for f in option_fields("fill")]
    ['pad_token_id', 'int64']
    """
    return [f for f in dataclasses.fields(Recipe) if not stages or f.metadata.get("stage") in stages]
