"""Stopping and resuming a ``PackingSampler``: its state is the epoch's global progress, the same on every rank.
Internal: ``PackingSampler.state_dict`` and ``load_state_dict`` are the public face.

A state says which epoch, how many steps every rank has consumed of the epoch's current plan, and on how many
ranks; if the epoch was resumed before on another number of ranks, the earlier plans too (``resized``: one
``[num_replicas, steps]`` pair each, in order). From that, and the lengths, recipe and seed it names by
fingerprint, every rank rebuilds the plans it needs, each in O(samples + the strategy's cost), never by
replaying steps: loading costs the same at step 10 or step 100,000.

- Same number of ranks: the plan is the uninterrupted run's, and iteration continues at the next step.
- Another number: what the current plan has not yet dealt is packed anew and dealt to the new ranks
  (``packing.torch._schedule.resume_schedule``); the state records the old plan as one more ``resized`` entry, so
  a later resume (on any number of ranks) rebuilds the same chain.

Everything in a state is a plain int, string or list (``torch.save``, JSON and ``torch.distributed.checkpoint``
keep it as it is).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from packing.core._validation import check_state_form, integer_words, is_integer
from packing.errors import SettingError, StateMismatch

FORMAT = "packing.PackingSampler/1"
"""The ``format`` entry of a sampler's state: its kind and version."""
KEYS = ("format", "epoch", "step", "num_replicas", "resized", "lengths", "trained_tokens", "recipe", "options")


def fingerprint(values: npt.ArrayLike | None) -> str | None:
    """``"<count>:<16 hex digits>"``: the count and a BLAKE2 digest of integers (as little-endian int64), or None.
    O(n).

    >>> fingerprint([3, 1, 2])
    '3:fe717980395d895e'
    """
    if values is None:
        return None
    array = np.ascontiguousarray(np.asarray(values, dtype="<i8"))
    return f"{len(array)}:{hashlib.blake2b(array.tobytes(), digest_size=8).hexdigest()}"


def _shown(print_: str | None) -> str:
    """A fingerprint in words: ``1,000 samples, fingerprint fe717980``."""
    if print_ is None:
        return "none"
    count, _, digest = print_.partition(":")
    return f"{int(count):,} samples, fingerprint {digest[:8]}" if count.isdigit() and len(count) < 20 else print_


@dataclass(frozen=True)
class Progress:
    """Where an epoch stands: ``epoch``, the earlier plans ``resized`` (``(num_replicas, steps)`` each), and the
    current plan's steps consumed by every rank (``step``) on ``num_replicas`` ranks."""

    epoch: int
    resized: tuple[tuple[int, int], ...]
    step: int
    num_replicas: int


def make_state(
    progress: Progress, lengths: str | None, trained: str | None, recipe: str, options: dict[str, Any]
) -> dict[str, Any]:
    """The state of ``progress`` over these fingerprints (see :func:`fingerprint`), the recipe's description and
    the sampler options that change its plans. O(resized)."""
    return {
        "format": FORMAT,
        "epoch": progress.epoch,
        "step": progress.step,
        "num_replicas": progress.num_replicas,
        "resized": [[world, steps] for world, steps in progress.resized],
        "lengths": lengths,
        "trained_tokens": trained,
        "recipe": recipe,
        "options": dict(options),
    }


MAX_RESIZED = 64
"""The most resumes on another number of ranks a state of one epoch records: loading rebuilds a plan for each
(O(n) apiece, about 0.3 s at a million samples), so a longer list is refused rather than loaded for minutes."""
WHAT = "a PackingSampler.state_dict()"
PRINT = re.compile(r"[0-9]{1,19}:[0-9a-f]{16}")
"""What :func:`fingerprint` gives."""


def _natural(state: Mapping[str, Any], key: str, least: int) -> int:
    value = state[key]
    if not is_integer(value) or value < least:
        raise SettingError("state", f"{WHAT} ('{key}': {integer_words(least)})", value)
    return int(value)


def _check_fields(state: Any) -> None:
    """Refuse ``state``, saying which field, unless it is a mapping of this format holding every key, the
    fingerprints as :func:`fingerprint` gives them (or None), the recipe a string, the options two flags. O(1)."""
    check_state_form(state, FORMAT, KEYS, WHAT)
    for key in ("lengths", "trained_tokens"):
        print_ = state[key]
        if print_ is not None and not (isinstance(print_, str) and PRINT.fullmatch(print_[:48])):
            raise SettingError("state", f"{WHAT} ('{key}': a fingerprint '<count>:<16 hex digits>' or None)", print_)
    if not isinstance(state["recipe"], str):
        raise SettingError("state", f"{WHAT} ('recipe': a Recipe.describe() string)", state["recipe"])
    options = state["options"]
    if not (
        isinstance(options, Mapping)
        and set(options) == {"shuffle", "balance"}
        and all(isinstance(flag, bool) for flag in options.values())
    ):
        raise SettingError("state", f"{WHAT} ('options': {{'shuffle': a bool, 'balance': a bool}})", options)


def _resized(value: Any) -> tuple[tuple[int, int], ...]:
    """The ``resized`` entries: at most :data:`MAX_RESIZED` ``[num_replicas, steps]`` pairs of integers >= 1 (a
    plan is recorded once a step of it was consumed). O(entries)."""
    if not isinstance(value, (list, tuple)) or len(value) > MAX_RESIZED:
        got = f"<{len(value):,} entries>" if isinstance(value, (list, tuple)) else value
        raise SettingError("state", f"{WHAT} ('resized': a list of at most {MAX_RESIZED:,} pairs)", got)
    pairs = []
    for entry in value:
        if not (isinstance(entry, (list, tuple)) and len(entry) == 2 and all(is_integer(v) and v >= 1 for v in entry)):
            raise SettingError("state", f"{WHAT} ('resized': [num_replicas, steps] pairs of integers >= 1)", entry)
        pairs.append((int(entry[0]), int(entry[1])))
    return tuple(pairs)


def read_state(
    state: Any, lengths: str | None, trained: str | None, recipe: str, options: dict[str, Any], num_replicas: int
) -> Progress:
    """The progress to resume from ``state`` on ``num_replicas`` ranks, after checking that it was saved over the
    same lengths, trained tokens (when both sides have them), recipe and options (:class:`StateMismatch`) and
    that every field is what a state can hold (:class:`SettingError`: types, ranges, at most
    :data:`MAX_RESIZED` earlier plans; the steps of each plan are checked against it when it is rebuilt). A
    resume on another number of ranks becomes one more ``resized`` entry (unless nothing of the current plan
    was consumed, which is then simply made for the new ranks). O(resized), whatever the numbers in it say.

    >>> mine = (fingerprint([3, 1, 2]), None, "max_seq_length=8", {"shuffle": True, "balance": True})
    >>> saved = make_state(Progress(0, (), 3, 2), *mine)               # step 3 on 2 ranks
    >>> read_state(saved, *mine, num_replicas=1)                        # resumed on 1: the plan made on 2 is kept
    Progress(epoch=0, resized=((2, 3),), step=0, num_replicas=1)
    >>> read_state({**saved, "resized": 5}, *mine, num_replicas=1)
    Traceback (most recent call last):
    ...
    packing.errors.SettingError: state: expected a PackingSampler.state_dict() ('resized': a list of at most 64 pairs), got 5
    """
    _check_fields(state)
    if state["recipe"] != recipe:  # first: another layout (share_prompt) also gives other lengths
        raise StateMismatch.recipes(recipe, state["recipe"])
    if state["lengths"] != lengths:
        raise StateMismatch("lengths", _shown(lengths), _shown(state["lengths"]))
    if state["trained_tokens"] != trained:  # with and without them the loss is normalised otherwise
        raise StateMismatch("trained_tokens", _shown(trained), _shown(state["trained_tokens"]))
    saved = dict(state["options"])
    if saved != options:
        changed = [f"{k}={saved.get(k)}" for k in sorted(set(saved) | set(options)) if saved.get(k) != options.get(k)]
        mine = [f"{k}={options.get(k)}" for k in sorted(set(saved) | set(options)) if saved.get(k) != options.get(k)]
        raise StateMismatch("sampler options", ", ".join(mine), ", ".join(changed))
    epoch, step, world = _natural(state, "epoch", 0), _natural(state, "step", 0), _natural(state, "num_replicas", 1)
    resized = _resized(state["resized"])
    if world == num_replicas:
        return Progress(epoch, resized, step, world)
    if step == 0:  # nothing of the current plan consumed: make it for the new ranks instead
        return Progress(epoch, resized, 0, num_replicas)
    return Progress(epoch, (*resized, (world, step)), 0, num_replicas)
