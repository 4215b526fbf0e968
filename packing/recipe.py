"""One recipe for packing: every option, its default and its check, in one place.

A :class:`Recipe` is a frozen, validated-once description of how to pack. Every entry point
(``pack``, ``plan``, ``read_dataset``, ``stream``, the sampler and ``collate``, the ``datasets``
and Ray adapters, the command line and the explorer) takes the same keyword options with the
same names and defaults, or a ``recipe=``, and builds its recipe with :meth:`Recipe.at`. Which entry
points use which option is written once, in each field's metadata (``doors``): an option given to an entry
point that does not use it is refused there, by name, with the entry points that do use it
(:class:`~packing.errors.OptionNotUsed`); a recipe passed whole is the whole pipeline's, and each entry point
applies what it uses. Another library's name for an option (TRL's ``max_length``, torchtune's
``max_seq_len``, ...) is answered with this library's (:data:`PEER_NAMES`, :class:`~packing.errors.PeerName`):
one name per concept, no aliases.

>>> recipe = Recipe(4096, strategy="ffd")
>>> recipe.strategy, recipe.overflow, recipe.loss
('ffd', 'truncate', 'completion')
>>> Recipe.of(recipe, overflow="split").overflow
'split'
>>> Recipe(4096, strategy="bfd", time_limit=5)
Traceback (most recent call last):
...
packing.errors.SettingError: time_limit: expected no value with strategy 'bfd' (it applies to optimal), got 5.0 (float)
>>> Recipe(4096, max_length=4096)
Traceback (most recent call last):
...
packing.errors.PeerName: max_length: expected max_seq_length (TRL's max_length), got 4096
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict, get_args

from packing.core._fingerprint import shown
from packing.core._loss import DEFAULT_ROLES, EOS_RULES, EosRule, LossRules, check_roles, check_train_on_eos
from packing.core._loss import LOSS_RULES as LOSS_RULES  # re-exported: packing.recipe.LOSS_RULES
from packing.core._loss import LossRule as LossRule
from packing.core._thd import document_multiple
from packing.core._validation import (
    MAX_SEQ_LENGTH,
    OverflowPolicy,
    check_choice,
    check_flag,
    check_integer,
    check_max_seq_length,
    check_time_limit,
    check_token_id,
    integer_words,
    is_integer,
)
from packing.core._validation import (
    OVERFLOW_POLICIES as OVERFLOW_POLICIES,
)
from packing.errors import OptionNotUsed, PeerName, SettingError, refuse_with_units
from packing.strategies._registry import DEFAULT_STRATEGY, STRATEGIES, TIE_BREAKS, StrategyName, TieBreak
from packing.vision._config import VisionConfig

Door = Literal[
    "pack",
    "plan",
    "read_dataset",
    "stream",
    "PackingSampler",
    "build_schedule",
    "collate",
    "collate_fixed",
    "hf.pack_batch",
    "hf.pack_dataset",
    "ray.pack_dataset",
    "packing pack",
    "packing compare",
]
"""The entry points that take the recipe's options: the library's functions (``stream_dataset`` is ``stream``'s),
``packing.torch``'s, the ``datasets`` and Ray adapters, and the command line's two packing commands."""
DOORS: tuple[Door, ...] = get_args(Door)
_PACKERS: tuple[Door, ...] = ("pack", "stream", "hf.pack_batch", "hf.pack_dataset", "ray.pack_dataset", "packing pack")
"""Entry points that read rows, lay them out and fill blocks."""
_PLANNERS: tuple[Door, ...] = (*_PACKERS, "plan", "PackingSampler", "build_schedule")
"""Entry points that lay out blocks (the strategy and its options)."""
_PADDERS: tuple[Door, ...] = (*_PACKERS, "PackingSampler", "collate", "collate_fixed")
"""Entry points that pad (``collate`` with ``pad_to_multiple_of``, and the sampler's)."""
_READERS: tuple[Door, ...] = (*_PADDERS, "read_dataset", "packing compare")
"""Entry points that read rows (the loss rules, the tokenizer): every one that pads (the sampler's ``collate`` and
``pieces`` read), ``read_dataset`` and ``compare``."""
_THD: tuple[Door, ...] = (*_PLANNERS, "collate")
"""Entry points that lay out the THD padding of context parallelism (the planners count it, ``collate`` writes it)."""
_WITHOUT_LENGTH: tuple[Door, ...] = ("read_dataset", "collate")
"""Entry points that may read rows without a block length (reading never uses it)."""


class RecipeOptions(TypedDict, total=False):
    """The keyword options of the entry points (each a field of :class:`Recipe`), for
    ``**options: Unpack[RecipeOptions]``; ``strategy`` and ``overflow`` are keyword-only parameters of their own
    where they are used. Every entry point takes its data first and ``max_seq_length`` second (the only two
    positional parameters) and every option by keyword. Each entry point uses the options its fields' ``doors``
    name and refuses the others."""

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
    int64: bool
    context_parallel_size: int
    tensor_parallel_size: int
    share_prompt: bool
    vision: Any
    max_image_patches: int | None


Stage = Literal["read", "plan", "fill"]
"""Where an option acts: reading rows (``read``), laying out blocks (``plan``), filling them (``fill``); the
entry points of its stage (:data:`_READERS`, :data:`_PLANNERS`, :data:`_PADDERS`) use it unless it says otherwise."""
_STAGE_DOORS: dict[Stage, tuple[Door, ...]] = {"read": _READERS, "plan": _PLANNERS, "fill": _PADDERS}
Check = Callable[[Any, str], Any]
"""An option's check: its value and name in, the value as the recipe keeps it out, or a ``SettingError``."""


def _about(
    stage: Stage,
    help: str,
    choices: Iterable[str] = (),
    metavar: str | None = None,
    parse: type = str,
    *,
    doors: Iterable[Door] | None = None,
    not_in_recipe_at: Iterable[Door] = (),
    check: Check | None = None,
) -> dict[str, Any]:
    """A field's metadata, read by every entry point, the command line's options and the explorer: its ``stage``,
    ``help`` text, ``choices`` (their order), ``metavar``, ``parse`` (how a typed value becomes the field's:
    ``int``, ``float``, ``str``, ``bool``), ``doors`` (the entry points that use it, its stage's by default, less
    ``not_in_recipe_at``: entry points that do this stage their own way and refuse it even in a recipe; the others
    refuse it as a keyword) and ``check`` (by default one of ``choices``, an integer >= 1 for ``int``, True or False
    for ``bool``). Adding a field with this metadata reaches every entry point."""
    choices, refused = tuple(choices), set(not_in_recipe_at)
    used = set(_STAGE_DOORS[stage] if doors is None else doors) - refused
    if check is None and choices:
        check = functools.partial(check_choice, choices=choices)
    return {
        "stage": stage,
        "help": help,
        "choices": choices,
        "metavar": metavar,
        "parse": parse,
        "doors": tuple(door for door in DOORS if door in used),  # in DOORS' order
        "not_in_recipe_at": tuple(refused),
        "check": check or {int: check_integer, bool: check_flag}.get(parse),
    }


def _option(default: Any, *about: Any, compare: bool = True, **more: Any) -> Any:
    """A recipe field with ``default`` and :func:`_about`'s metadata; ``compare=False`` leaves it out of equality."""
    return field(default=default, compare=compare, metadata=_about(*about, **more))


def _check_strategy(value: Any, name: str) -> str:
    """``strategy``: one of the registry's; another library's strategy name is answered (:data:`PEER_STRATEGIES`).
    O(strategies).

    >>> _check_strategy("bfd_split", "strategy")
    Traceback (most recent call last):
    ...
    packing.errors.PeerName: strategy: expected strategy='bfd' with overflow='split' (TRL's bfd_split), got 'bfd_split' (str)
    """
    if isinstance(value, str) and value in PEER_STRATEGIES:
        raise PEER_STRATEGIES[value].error(name, value, term=value)
    return check_choice(value, name, STRATEGIES)


def _check_chat_template(value: Any, name: str) -> str:
    """``chat_template``: a non-empty template, or the path of a file holding one (a path object as its string).
    O(1).

    >>> import pathlib
    >>> _check_chat_template(pathlib.Path("template.jinja"), "chat_template")
    'template.jinja'
    """
    value = os.fspath(value) if isinstance(value, os.PathLike) else value
    if not isinstance(value, str) or not value:
        raise SettingError(name, "a Jinja chat template or the path of a file holding one", value)
    return value


@dataclass(frozen=True, eq=False)
class Recipe:
    """How to pack: block size, strategy and its options, overflow, window, loss rule, tokenizer, padding and
    the output's integer width.

    Validated once, when made (each field by its metadata's ``check``, then the rules between fields); immutable
    afterwards (``Recipe.of(recipe, **changes)`` makes a changed copy). ``pad_token_id=None`` means: the
    tokenizer's pad id (its EOS id when it has none, as transformers does), or ``0`` without a tokenizer. The
    strategy options (``time_limit``, ``seed``, ``max_sequences_per_block``) are accepted where the registry says
    the strategy reads them; ``seed`` is also what entry points that shuffle their output draw from. O(1).

    Two recipes are equal (and hash alike) when they pack alike: every option but ``num_proc`` is compared, the
    tokenizer by its spec (a name or path) or, for a tokenizer object, by identity.

    >>> Recipe(8, tokenizer="bytes") == Recipe(8), Recipe(8, tokenizer="bytes") == Recipe(8, tokenizer="bytes")
    (False, True)
    >>> Recipe(0)
    Traceback (most recent call last):
    ...
    packing.errors.SettingError: max_seq_length: expected an integer >= 1, got 0
    """

    max_seq_length: int = field(
        metadata=_about(
            "plan",
            "tokens per block (>= 1)",
            metavar="N",
            parse=int,
            doors=DOORS,
            check=lambda value, _: check_max_seq_length(value),
        )
    )
    strategy: StrategyName = _option(
        DEFAULT_STRATEGY, "plan", "how sequences are placed in blocks", STRATEGIES, check=_check_strategy
    )
    overflow: OverflowPolicy = _option(
        "truncate", "plan", "what to do with a sequence longer than N", OVERFLOW_POLICIES, doors=DOORS
    )
    window: int | None = _option(
        None,
        "plan",
        "pack each window of W consecutive sequences on its own",
        metavar="W",
        parse=int,
        not_in_recipe_at=["stream"],  # it packs buffer by buffer: buffer_size is its window
    )
    time_limit: float | None = _option(
        None,
        "plan",
        "seconds a search strategy (optimal) may take (default: 60)",
        metavar="S",
        parse=float,
        doors=(*_PLANNERS, "packing compare"),  # compare times its optimal contender with it
        check=lambda value, _: check_time_limit(value),
    )
    seed: int | None = _option(
        None,
        "plan",
        "seed of random orders: first_fit_shuffle, the block shuffle (default: 0)",
        parse=int,
        check=functools.partial(check_integer, least=0),
    )
    max_sequences_per_block: int | None = _option(
        None,
        "plan",
        "cap on documents per block (spfhp only; a pair or group is one with share_prompt, refused without)",
        metavar="K",
        parse=int,
    )
    loss: LossRule = _option("completion", "read", "which tokens are trained", LOSS_RULES)
    tokenizer: Any = _option(
        None,
        "read",
        "tokenize text rows with 'bytes', a tokenizer folder, a tokenizer.json or .tiktoken file, or a hub name",
        metavar="SPEC",
        compare=False,  # compared by its key (_tokenizer_key)
    )
    pad_token_id: int | None = _option(
        None,
        "fill",
        "padding id (default: the tokenizer's pad id, its EOS, else 0)",
        metavar="ID",
        parse=int,
        check=check_token_id,
    )
    roles_to_train: tuple[str, ...] = _option(
        DEFAULT_ROLES,
        "read",
        "roles whose turns are trained (comma-separated; default assistant)",
        metavar="ROLES",
        check=check_roles,
    )
    train_on_eos: EosRule = _option(
        "turn",
        "read",
        "whose end-of-turn tokens are trained: each trained turn's, the last trained turn's, every turn's, none",
        EOS_RULES,
        check=check_train_on_eos,  # True and False mapped there, once
    )
    chat_template: str | None = _option(
        None,
        "read",
        "a Jinja chat template, or the path of a file holding one",
        metavar="PATH",
        check=_check_chat_template,
    )
    num_proc: int | None = _option(
        None,
        "read",
        "processes that tokenize text rows (same result as one)",
        metavar="N",
        parse=int,
        compare=False,  # results are identical to one process
    )
    int64: bool = _option(
        False,
        "fill",
        "ids, labels and positions as int64 (default: int32, the compact schema)",
        parse=bool,
        doors=_PACKERS,  # collate and collate_fixed give int64 tensors, as torch takes them
    )
    """Ids, labels and positions as int64 instead of the compact schema's int32 (``packing.batches._schema``)."""
    tie_break: TieBreak = _option(
        "newest", "plan", "bfd on equal room: the block that reached it last, or first (TRL's)", TIE_BREAKS
    )
    context_parallel_size: int = _option(
        1,
        "plan",
        "context-parallel ranks: every document padded to a multiple of 2 x N (the THD layout), the padding "
        "counted against max_seq_length",
        metavar="N",
        parse=int,
        doors=_THD,
    )
    tensor_parallel_size: int = _option(
        1,
        "plan",
        "tensor-parallel ranks with sequence parallelism: documents padded to a multiple of N more",
        metavar="N",
        parse=int,
        doors=_THD,
    )
    share_prompt: bool = _option(
        False,
        "read",
        "preference pairs and completion groups: store each prompt once, its completions after it (each "
        "attends to its prompt and itself; a 4-D attention mask), instead of once per completion",
        parse=bool,
    )
    """Lay out a pair's or group's prompt once, each completion after it with positions continuing from the
    prompt's end (``packing.core._pairs_groups``); False: the prompt before every completion, each its own document."""
    vision: VisionConfig | None = _option(
        None,
        "read",
        "a Qwen2-VL-family model's config (or its numbers): rows with images, their 3-D positions, images never cut",
        doors=("collate",),
        check=lambda value, _: VisionConfig.of(value),
    )
    """Rows in a vision processor's form (``image_grid_thw``, ``pixel_values``, videos) placed as the model's own
    ``get_rope_index`` places them (:mod:`packing.vision`), an image never cut by the overflow policy."""
    max_image_patches: int | None = _option(
        None,
        "fill",
        "at most N vision patches (rows of pixel_values) in a batch, with vision",
        metavar="N",
        parse=int,
        doors=("collate",),
    )

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):  # each field's own check, in the recipe's order
            value = getattr(self, f.name)
            if f.metadata["check"] is not None and not (value is None and f.default is None):
                object.__setattr__(self, f.name, f.metadata["check"](value, f.name))
        self._check_strategy_options()
        self._check_parallel_sizes()
        self._check_shared_prompt()
        if self.max_image_patches is not None and self.vision is None:
            raise SettingError("max_image_patches", "no value without vision (a model config)", self.max_image_patches)

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

    def _check_parallel_sizes(self) -> None:
        """Check ``context_parallel_size`` and ``tensor_parallel_size``: whole documents padded to their
        :attr:`document_multiple`, which divides ``max_seq_length`` (so a document cut to it stays whole), with a
        strategy that keeps documents whole."""
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

    def _check_shared_prompt(self) -> None:
        """Refuse, with ``share_prompt``, what cannot keep a shared prompt with its completions: a strategy or
        overflow policy that cuts a sample across blocks, and context or tensor parallelism (the THD layout keeps
        documents apart by their boundaries alone; a shared prompt's completions need an attention mask)."""
        if not self.share_prompt:
            return
        if STRATEGIES[self.strategy].splits_sequences:
            raise refuse_with_units("strategy", self.strategy, "share_prompt: it cuts a unit across blocks")
        if self.overflow == "split":
            raise refuse_with_units("overflow", self.overflow, "share_prompt: it cuts a unit across blocks")
        for name in ("context_parallel_size", "tensor_parallel_size"):
            if getattr(self, name) > 1:
                raise SettingError(
                    name,
                    "1 with share_prompt (a shared prompt's completions need an attention mask)",
                    getattr(self, name),
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
        options that exist, another library's name for one a :class:`~packing.errors.PeerName` naming this
        library's. ``None`` for an option whose default is not None (``strategy``, ``overflow``, ``loss``)
        means "not given". Whether an entry point uses each option is :meth:`at`'s to check. O(1).

        >>> Recipe.of(Recipe(16, strategy="ffd"), strategy=None, loss="all").describe()
        'max_seq_length=16, strategy=ffd, loss=all'
        >>> Recipe.of(None, 16, completion_only_loss=False)
        Traceback (most recent call last):
        ...
        packing.errors.PeerName: completion_only_loss: expected loss: 'completion' for True, 'all' for False (TRL's completion_only_loss), got False (bool)

        >>> Recipe.of(None, 16, strategy="split").strategy
        'split'
        >>> Recipe.of(None, 16, stratgy="split")
        Traceback (most recent call last):
        ...
        packing.errors.SettingError: stratgy: expected one of the options strategy, overflow, window, time_limit, seed, max_sequences_per_block, loss, tokenizer, pad_token_id, roles_to_train, train_on_eos, chat_template, num_proc, int64, tie_break, context_parallel_size, tensor_parallel_size, share_prompt, vision, max_image_patches, got 'split' (str)
        >>> Recipe.of(None, None)
        Traceback (most recent call last):
        ...
        packing.errors.SettingError: max_seq_length: expected an integer >= 1 (or a recipe), got None (NoneType)
        """
        options = _given(options)
        check_names(options)
        if recipe is not None and not isinstance(recipe, Recipe):
            raise SettingError("recipe", "a packing.Recipe", recipe)
        if recipe is None:
            if max_seq_length is None:
                raise SettingError("max_seq_length", f"{integer_words()} (or a recipe)", None)
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
            max_seq_length = _stand_in_length(options)
        return cls.of(recipe, max_seq_length, **options)

    @classmethod
    def at(cls, door: Door, recipe: Recipe | None = None, max_seq_length: int | None = None, **options: Any) -> Recipe:
        """The recipe of entry point ``door``: :meth:`of`, after refusing by name an option given as a keyword that
        ``door`` does not use (its field's ``doors``: :class:`~packing.errors.OptionNotUsed`, naming the entry
        points that use it), and refusing in ``recipe`` too an option ``door`` does its own way (its field's
        ``not_in_recipe_at``). A recipe passed whole is the pipeline's: ``door`` applies what it uses. An entry
        point that reads rows without a block length (``read_dataset``, ``collate``) has the largest
        ``max_seq_length`` stand in when neither a length nor a recipe is given. O(options).

        >>> Recipe.at("plan", None, 8, strategy="ffd").strategy
        'ffd'
        >>> Recipe.at("plan", None, 8, tokenizer="bytes")
        Traceback (most recent call last):
        ...
        packing.errors.OptionNotUsed: tokenizer: expected no value at plan (it does not use tokenizer; pack, read_dataset, stream and 8 more do), got 'bytes' (str)
        >>> Recipe.at("stream", Recipe(8, window=4))
        Traceback (most recent call last):
        ...
        packing.errors.OptionNotUsed: window: expected no value at stream (it does not use window; pack, plan, PackingSampler and 5 more do), got 4
        """
        given = _given(options)
        check_names(given)
        for name, value in given.items():
            if value is not None and door not in _FIELDS[name].metadata["doors"]:
                raise OptionNotUsed(name, door, _FIELDS[name].metadata["doors"], value)
        chosen = (cls.for_reading if door in _WITHOUT_LENGTH else cls.of)(recipe, max_seq_length, **given)
        for f in _FIELDS.values():
            if door in f.metadata["not_in_recipe_at"] and getattr(chosen, f.name) != f.default:
                raise OptionNotUsed(f.name, door, f.metadata["doors"], getattr(chosen, f.name))
        return chosen

    # ------------------------------------------------------------ derived

    @property
    def document_multiple(self) -> int:
        """What every document's length is padded to a multiple of: ``2·cp·tp`` with context parallelism, ``tp``
        without, 1 by default (``packing.core._thd``). The planner counts the padding; ``collate`` lays it out.

        >>> Recipe(64, context_parallel_size=2).document_multiple, Recipe(64).document_multiple
        (4, 1)
        """
        return document_multiple(self.context_parallel_size, self.tensor_parallel_size)

    @property
    def loss_rules(self) -> LossRules:
        """``loss``, ``roles_to_train`` and ``train_on_eos`` as the readers take them (``loss_rules=``).

        >>> Recipe(8, loss="last_turn", train_on_eos=False).loss_rules
        LossRules(loss='last_turn', roles_to_train=('assistant',), train_on_eos='none')
        """
        return LossRules(self.loss, self.roles_to_train, self.train_on_eos)

    def strategy_options(self) -> dict[str, Any]:
        """The options ``plan`` takes beyond strategy and overflow, as keywords: ``window`` and the ones this strategy
        reads (the registry's ``options``).

        >>> Recipe(8, strategy="bfd", window=4).strategy_options()
        {'window': 4, 'tie_break': 'newest'}
        """
        return {"window": self.window, **{name: getattr(self, name) for name in STRATEGIES[self.strategy].options}}

    def describe(self) -> str:
        """One line naming every option that differs from its default, with its value: a tuple of roles joined by
        commas, a long chat template by its length and digest, a tokenizer object by its class, name and a digest
        of its content (``packing.core._fingerprint``), so two recipes that pack differently never describe alike;
        ``num_proc`` is left out (it changes nothing). O(options), O(vocabulary) with a tokenizer object.

        >>> Recipe(2048, strategy="split", loss="all").describe()
        'max_seq_length=2048, strategy=split, loss=all'
        >>> Recipe(64, roles_to_train=["user", "assistant"], train_on_eos="none").describe()
        'max_seq_length=64, roles_to_train=user,assistant, train_on_eos=none'
        """
        parts = [f"max_seq_length={self.max_seq_length}"]
        for name in OPTION_NAMES:
            value = getattr(self, name)
            if value != _DEFAULTS[name] and name != "num_proc":
                parts.append(f"{name}={shown(value)}")
        return ", ".join(parts)


def _stand_in_length(options: dict[str, Any]) -> int:
    """The ``max_seq_length`` that stands in when reading rows without one: the largest allowed, a multiple of the
    options' THD padding (``context_parallel_size``, ``tensor_parallel_size``) when they are whole numbers (else
    the recipe refuses them). O(1)."""
    sizes = [options.get(name) for name in ("context_parallel_size", "tensor_parallel_size")]
    whole = all(is_integer(v) and v >= 1 for v in sizes if v is not None)
    multiple = document_multiple(*(v or 1 for v in sizes)) if whole else 1
    return MAX_SEQ_LENGTH - MAX_SEQ_LENGTH % multiple


def _tokenizer_key(tokenizer: Any) -> Any:
    """A tokenizer spec as a hashable key: a name or path as its string, an object by identity."""
    if tokenizer is None or isinstance(tokenizer, str):
        return tokenizer
    if isinstance(tokenizer, os.PathLike):
        return os.fspath(tokenizer)
    return ("object", id(tokenizer))


def _given(options: dict[str, Any]) -> dict[str, Any]:
    """``options`` without the ones left at None whose default is not None (None there means "not given")."""
    return {k: v for k, v in options.items() if v is not None or _DEFAULTS.get(k) is None}


def check_names(options: dict[str, Any]) -> None:
    """Refuse a name that is not one of the recipe's options: another library's name for one is answered with
    this library's (:data:`PEER_NAMES`), any other names the options there are. O(options).

    >>> check_names({"max_seq_len": 2048})
    Traceback (most recent call last):
    ...
    packing.errors.PeerName: max_seq_len: expected max_seq_length (torchtune's max_seq_len), got 2048
    """
    for name, value in options.items():
        if name in _FIELDS:
            continue
        if name in PEER_NAMES:
            raise PEER_NAMES[name].error(name, value)
        raise SettingError(name, f"one of the options {', '.join(OPTION_NAMES)}", value)


@dataclass(frozen=True)
class Peer:
    """Another library's name for something this library names otherwise: who (``peer``), the option meant here
    (``option``, None when there is none to give) and ``how`` to give it."""

    peer: str
    option: str | None
    how: str = ""

    def error(self, name: str, value: Any, term: str | None = None) -> PeerName:
        """The refusal of option ``name`` given ``value``; ``term`` is the peer's word when it is the value."""
        return PeerName(name, value, self.peer, self.option, self.how, term)


_TRUE_IS_ALL = "'all' for True"
PEER_NAMES: dict[str, Peer] = {
    "max_length": Peer("TRL", "max_seq_length"),
    "seq_length": Peer("TRL's pack_dataset", "max_seq_length"),
    "max_seq_len": Peer("torchtune", "max_seq_length"),
    "sequence_len": Peer("Axolotl", "max_seq_length"),
    "cutoff_len": Peer("LLaMA-Factory", "max_seq_length"),
    "packing_strategy": Peer("TRL", "strategy", "'bfd' (TRL's bfd_split: strategy='bfd' with overflow='split')"),
    "split_across_pack": Peer("torchtune", "strategy", "'split' for True"),
    "truncation_mode": Peer("TRL", "overflow", "'truncate' keeps each sample's start"),
    "completion_only_loss": Peer("TRL", "loss", "'completion' for True, 'all' for False"),
    "assistant_only_loss": Peer("TRL", "loss", "'completion' trains the turns of roles_to_train (the assistant's)"),
    "train_on_input": Peer("torchtune", "loss", _TRUE_IS_ALL),
    "train_on_inputs": Peer("Axolotl", "loss", _TRUE_IS_ALL),
    "train_on_prompt": Peer("LLaMA-Factory", "loss", _TRUE_IS_ALL),
    "mask_history": Peer("LLaMA-Factory", "loss", "'last_turn' for True"),
    "completion_mask": Peer("TRL", "loss", "which tokens are trained (completion_mask is a column the reader reads)"),
    "assistant_masks": Peer("TRL", "loss", "which tokens are trained (assistant_masks is a column the reader reads)"),
    "padding_idx": Peer("torchtune", "pad_token_id"),
    "pad_token": Peer("TRL", "pad_token_id", "the padding token's id"),
    "dataset_num_proc": Peer("TRL", "num_proc"),
    "chat_template_path": Peer("TRL", "chat_template", "a Jinja template, or the path of a file holding one"),
    "padding_free": Peer(
        "TRL", None, "no option: packed rows hold their real tokens only, and packing.torch.collate is padding-free"
    ),
    "seq_lens": Peer("torchtune", None, "no option: the packed rows' column seq_lengths holds each block's lengths"),
    "seq_lengths": Peer("TRL", None, "no option: the packed rows' column seq_lengths holds each block's lengths"),
}
"""Other libraries' names for this library's options (TRL's ``SFTConfig`` and ``pack_dataset``, torchtune's
``PackedDataset`` and dataset builders, Axolotl, LLaMA-Factory), each answered with the option meant here."""
PEER_STRATEGIES: dict[str, Peer] = {
    "bfd_split": Peer("TRL", None, "strategy='bfd' with overflow='split'"),
}
"""Other libraries' strategy names that are not a strategy here: TRL's ``bfd_split`` is ``bfd`` and ``split``."""


OPTION_NAMES: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(Recipe) if f.name != "max_seq_length")
"""The keyword options of the entry points, in the recipe's order (each entry point uses those whose ``doors``
name it)."""
_DEFAULTS: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(Recipe) if f.name != "max_seq_length"}
_FIELDS: dict[str, dataclasses.Field[Any]] = {f.name: f for f in dataclasses.fields(Recipe)}


def _checked_init(init: Any) -> Any:
    """``Recipe``'s generated ``__init__``, with its keywords checked first as :meth:`Recipe.of` checks them (an
    unknown name or another library's is a ``SettingError``, not a ``TypeError``)."""

    @functools.wraps(init)
    def checked(self: Recipe, *args: Any, **options: Any) -> None:
        check_names(options)
        init(self, *args, **options)

    return checked


Recipe.__init__ = _checked_init(Recipe.__init__)  # type: ignore[method-assign]


def option_fields(*stages: Stage, door: Door | None = None) -> list[dataclasses.Field[Any]]:
    """The recipe's fields acting at ``stages`` (all when none given) and used by ``door`` (any when None), in
    order, with their metadata (``stage``, ``help``, ``choices``, ``metavar``, ``parse``, ``doors``,
    ``not_in_recipe_at``, ``check``): what the recipe checks and the entry points and the command line build their
    options from.

    >>> [f.name for f in option_fields("fill")], [f.name for f in option_fields(door="plan")][:3]
    (['pad_token_id', 'int64', 'max_image_patches'], ['max_seq_length', 'strategy', 'overflow'])
    """
    return [
        f
        for f in dataclasses.fields(Recipe)
        if (not stages or f.metadata.get("stage") in stages) and (door is None or door in f.metadata["doors"])
    ]
