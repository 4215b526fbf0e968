"""Loss rules: which turns of a chat are trained, and whether their end-of-turn tokens are.

One owner for the choice every entry point makes through :class:`packing.Recipe` (``loss``,
``roles_to_train``, ``train_on_eos``) and each message's own ``weight`` (OpenAI's fine-tuning format):

- ``loss="completion"`` (default): every message whose role is in ``roles_to_train`` (default the
  assistant's), and the completion of a text prompt/completion pair, preference pair or group;
- ``loss="last_turn"``: only the last such message of a chat (LLaMA-Factory's ``mask_history``) that its
  weight does not leave out (a last assistant message of weight 0 is context: the one before it is trained);
- ``loss="all"``: every token of every text row and of both parts of a prompt/completion row, and every
  token of each completion of a preference pair or group (whose prompt is never trained); a message's
  ``weight`` is ignored; a token row's or token unit's own ``loss_mask``, ``labels`` or completion masks
  are kept;
- a message's ``weight`` of 0 or 1 overrides the rule for that message (under ``completion`` and
  ``last_turn``): 0 leaves it untrained, 1 trains it whatever its role;
- ``train_on_eos`` (Axolotl's names) says whose end of turn is trained, the end of turn being what the
  template adds after a message's content (the end-of-turn token and what follows it up to the next
  message) and the EOS after a completion: ``turn`` (default) every trained message's, ``last`` only the
  last trained message's, ``all`` every message's (trained or not), ``none`` no message's. ``True`` and
  ``False`` are ``turn`` and ``none`` (:func:`check_train_on_eos`, the one place they are mapped).

:class:`LossRules` holds the three settings (checked once) and decides, message by message, which are
trained and whose end of turn is (:meth:`LossRules.turns`); ``packing.text._text_rows`` turns that into token
masks. A chat prompt's messages are context: in a conversational ``{"prompt", "completion"}`` row, a
preference pair or a completion group, each completion's messages are ruled exactly as the same messages of a
``{"messages": prompt + completion}`` row (its user turns untrained, a weight of 0 honoured, its ends as
``train_on_eos`` says) and the prompt's never are.

>>> rules = LossRules("last_turn")
>>> chat = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
...         {"role": "user", "content": "c"}, {"role": "assistant", "content": "d"}]
>>> rules.trained(chat)
[False, False, False, True]
>>> chat[1] = {"role": "assistant", "content": "b", "weight": 1}
>>> rules.trained(chat)
[False, True, False, True]

Internal: the public names are in ``packing`` and ``packing.core``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from packing.core._validation import check_flag, is_number
from packing.errors import SampleError, SettingError

LossRule = Literal["completion", "last_turn", "all"]
"""What is trained: ``completion`` (the turns of ``roles_to_train``, a text completion; plain token
rows keep their own mask), ``last_turn`` (only a chat's last such turn), ``all`` (every token)."""
LOSS_RULES: dict[str, str] = {
    "completion": "train on the assistant turns (roles_to_train) of a chat or chat completion, and a text completion",
    "last_turn": "train only on the last assistant turn (roles_to_train) of a chat or chat completion, and a text one",
    "all": "train on every token (but the prompt of a preference pair or completion group)",
}
DEFAULT_ROLES: tuple[str, ...] = ("assistant",)
EosRule = Literal["turn", "last", "all", "none"]
"""Whose end of turn is trained: every trained message's, the last trained message's, every message's, none."""
EOS_RULES: dict[str, str] = {
    "turn": "train the end-of-turn tokens of every trained turn (and the EOS after a completion)",
    "last": "train only the last trained turn's end-of-turn tokens",
    "all": "train the end-of-turn tokens of every turn, trained or not",
    "none": "leave every end-of-turn token out (and the EOS after a completion)",
}


def check_roles(value: Any, name: str = "roles_to_train") -> tuple[str, ...]:
    """Roles as a tuple of non-empty strings: a list of them, or one string (commas separate roles). O(roles).

    >>> check_roles("assistant, tool"), check_roles(["assistant"])
    (('assistant', 'tool'), ('assistant',))
    >>> check_roles([])
    Traceback (most recent call last):
    ...
    packing.errors.SettingError: roles_to_train: expected one or more role names (strings), got [] (list)
    """
    expected = "one or more role names (strings)"
    if isinstance(value, str):
        value = [part.strip() for part in value.split(",")]
    if not isinstance(value, (list, tuple)) or not value:
        raise SettingError(name, expected, value)
    if not all(isinstance(role, str) and role.strip() for role in value):
        raise SettingError(name, expected, value)
    return tuple(dict.fromkeys(role.strip() for role in value))


def check_train_on_eos(value: Any, name: str = "train_on_eos") -> EosRule:
    """``value`` as one of :data:`EOS_RULES` (Axolotl's ``train_on_eos`` names); ``True`` is ``turn`` and
    ``False`` is ``none`` (the flag this option was). O(1).

    >>> check_train_on_eos(True), check_train_on_eos(False), check_train_on_eos("last")
    ('turn', 'none', 'last')
    >>> check_train_on_eos("yes")
    Traceback (most recent call last):
    ...
    packing.errors.SettingError: train_on_eos: expected one of turn, last, all, none (or True/False), got 'yes' (str)
    """
    if isinstance(value, (bool, np.bool_)):
        return "turn" if value else "none"
    if not isinstance(value, str) or value not in EOS_RULES:
        raise SettingError(name, f"one of {', '.join(EOS_RULES)} (or True/False)", value)
    rule: EosRule = value  # type: ignore[assignment]
    return rule


def message_weight(message: Mapping[str, Any], sample: int, field: str, position: int) -> int | None:
    """A message's ``weight`` (0 or 1) or None when it has none; anything else is a ``SampleError``. O(1).

    >>> message_weight({"role": "assistant", "content": "x", "weight": 0}, 0, "messages", 1)
    0
    >>> message_weight({"role": "assistant", "content": "x", "weight": 0.5}, 3, "messages", 1)
    Traceback (most recent call last):
    ...
    packing.errors.SampleError: sample 3, 'messages', position 1: expected a message 'weight' of 0 or 1, got 0.5 (float)
    """
    weight = message.get("weight")
    if weight is None:
        return None
    if not is_number(weight) or weight not in (0, 1):
        raise SampleError(sample, field, position, "a message 'weight' of 0 or 1", weight)
    return 1 if weight == 1 else 0


@dataclass(frozen=True)
class LossRules:
    """Which turns are trained (``loss``, ``roles_to_train``, message weights) and whether a trained
    turn's end-of-turn tokens are (``train_on_eos``). Checked when made. O(roles).

    >>> LossRules(roles_to_train=["assistant", "tool"]).roles_to_train
    ('assistant', 'tool')
    >>> LossRules("some")
    Traceback (most recent call last):
    ...
    packing.errors.SettingError: loss: expected one of completion, last_turn, all, got 'some' (str)
    """

    loss: LossRule = "completion"
    roles_to_train: tuple[str, ...] = DEFAULT_ROLES
    train_on_eos: EosRule = "turn"

    def __post_init__(self) -> None:
        if not isinstance(self.loss, str) or self.loss not in LOSS_RULES:
            raise SettingError("loss", f"one of {', '.join(LOSS_RULES)}", self.loss)
        object.__setattr__(self, "roles_to_train", check_roles(self.roles_to_train))
        object.__setattr__(self, "train_on_eos", check_train_on_eos(self.train_on_eos))

    @classmethod
    def of(cls, rules: LossRules | None, completion_only_loss: bool = True) -> LossRules:
        """``rules`` if given, else the rules ``completion_only_loss`` names (``completion`` or ``all``). O(1)."""
        if rules is None:
            return cls("completion" if check_flag(completion_only_loss, "completion_only_loss") else "all")
        if not isinstance(rules, LossRules):
            raise SettingError("loss_rules", "a packing.core._loss.LossRules", rules)
        return rules

    @property
    def completion_eos(self) -> bool:
        """Whether the end of a prompt/completion pair's completion (its one trained turn) is trained."""
        return self.train_on_eos != "none"

    def ends(self, trained: Sequence[bool]) -> list[bool]:
        """For each message, whether its end of turn is trained, given which messages are (``trained``, from
        :meth:`trained`): ``turn`` those of the trained, ``last`` that of the last trained, ``all`` every
        one, ``none`` none. O(messages).

        >>> [LossRules(train_on_eos=rule).ends([False, True, False, True]) for rule in ("last", "all")]
        [[False, False, False, True], [True, True, True, True]]
        """
        if self.train_on_eos == "turn":
            return list(trained)
        if self.train_on_eos == "all":
            return [True] * len(trained)
        ends = [False] * len(trained)
        if self.train_on_eos == "last" and any(trained):
            ends[len(trained) - 1 - list(trained)[::-1].index(True)] = True
        return ends

    @property
    def masks_anything(self) -> bool:
        """Whether some tokens may be left untrained (every rule but ``all``)."""
        return self.loss != "all"

    def trained(self, messages: Sequence[Mapping[str, Any]], sample: int = 0, field: str = "messages") -> list[bool]:
        """For each message, whether it is trained: its role is in ``roles_to_train`` and its ``weight`` is not
        0, or its ``weight`` is 1; under ``last_turn``, of the former only the last (a message of weight 0 is
        never the last turn: the one before it is, so ``last_turn`` trains a subset of what ``completion``
        trains, its last trained message included); every message under ``all``. A bad weight is a
        ``SampleError`` naming the message. O(messages).

        >>> LossRules(roles_to_train=("assistant", "tool")).trained(
        ...     [{"role": "user"}, {"role": "tool"}, {"role": "assistant", "weight": 0}])
        [False, True, False]
        >>> LossRules("last_turn").trained([{"role": "user", "weight": 1}, {"role": "assistant"},
        ...                                 {"role": "assistant", "weight": 0}])
        [True, True, False]
        """
        if self.loss == "all":
            return [True] * len(messages)
        weights = [message_weight(message, sample, field, position) for position, message in enumerate(messages)]
        chosen = [
            message.get("role") in self.roles_to_train and weight != 0
            for message, weight in zip(messages, weights, strict=True)
        ]
        if self.loss == "last_turn" and any(chosen):  # the last turn completion trains: weight 0 is never it
            last = len(chosen) - 1 - chosen[::-1].index(True)
            chosen = [index == last for index in range(len(chosen))]
        return [chose or weight == 1 for chose, weight in zip(chosen, weights, strict=True)]

    def turns(
        self, messages: Sequence[Mapping[str, Any]], sample: int = 0, field: str = "messages", context: int = 0
    ) -> tuple[list[bool], list[bool]]:
        """For each message, whether it is trained (:meth:`trained`) and whether its end of turn is
        (:meth:`ends`), the first ``context`` messages being a prompt: never trained, nor their ends, whatever
        their role or weight (their weights are still checked). The rest is trained as the same messages of a
        ``{"messages": ...}`` row are: a completion of a prompt is ruled as the end of that chat. O(messages).

        >>> chat = [{"role": "assistant"}, {"role": "user"}, {"role": "assistant", "weight": 0}, {"role": "assistant"}]
        >>> LossRules(train_on_eos="all").turns(chat, context=2)
        ([False, False, False, True], [False, False, True, True])
        """
        trained = self.trained(messages, sample, field)
        trained[:context] = [False] * min(context, len(trained))
        ends = self.ends(trained)
        ends[:context] = [False] * min(context, len(ends))
        return trained, ends


DEFAULT_RULES = LossRules()
"""The default loss rules (``completion``, the assistant's turns, each trained turn's end)."""
