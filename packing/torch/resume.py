"""Stopping and resuming a ``PackingSampler``: its state is the epoch's global progress, the same on every rank.
Internal: ``PackingSampler.state_dict`` and ``load_state_dict`` are the public face.

A state says which epoch, how many steps every rank has consumed of the epoch's current plan, and on how many
ranks; if the epoch was resumed before on another number of ranks, the earlier plans too (``resized``: one
``[num_replicas, steps]`` pair each, in order). From that, and the lengths, recipe and seed it names by
fingerprint, every rank rebuilds the plans it needs, each in O(samples + the strategy's cost), never by
replaying steps: loading costs the same at step 10 or step 100,000.

- Same number of ranks: the plan is the uninterrupted run's, and iteration continues at the next step.
- Another number: what the current plan has not yet dealt is packed anew and dealt to the new ranks
  (``packing.torch.schedule.resume_schedule``); the state records the old plan as one more ``resized`` entry, so
  a later resume (on any number of ranks) rebuilds the same chain.

Everything in a state is a plain int, string or list (``torch.save``, JSON and ``torch.distributed.checkpoint``
keep it as it is).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from packing.core.validation import integer_words, is_integer
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
    return f"{int(count):,} samples, fingerprint {digest[:8]}" if count.isdigit() else print_


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


def _natural(state: Mapping[str, Any], key: str, least: int) -> int:
    value = state[key]
    if not is_integer(value) or value < least:
        raise SettingError("state", f"a PackingSampler.state_dict() ('{key}': {integer_words(least)})", value)
    return int(value)


def read_state(
    state: Any, lengths: str | None, trained: str | None, recipe: str, options: dict[str, Any], num_replicas: int
) -> Progress:
    """The progress to resume from ``state`` on ``num_replicas`` ranks, after checking that it was saved over the
    same lengths, trained tokens (when both sides have them), recipe and options; a resume on another number of
    ranks becomes one more ``resized`` entry (unless nothing of the current plan was consumed, which is then
    simply made for the new ranks). O(resized)."""
    if not isinstance(state, Mapping) or state.get("format") != FORMAT:
        got = state.get("format") if isinstance(state, Mapping) else type(state).__name__
        raise StateMismatch("format", FORMAT, str(got))
    missing = [key for key in KEYS if key not in state]
    if missing:
        raise SettingError("state", f"a PackingSampler.state_dict() (with '{missing[0]}')", "<a dict without it>")
    if state["lengths"] != lengths:
        raise StateMismatch("lengths", _shown(lengths), _shown(state["lengths"]))
    if trained is not None and state["trained_tokens"] is not None and state["trained_tokens"] != trained:
        raise StateMismatch("trained_tokens", _shown(trained), _shown(state["trained_tokens"]))
    if state["recipe"] != recipe:
        raise StateMismatch("recipe", recipe, _differences(recipe, str(state["recipe"])))
    saved = dict(state["options"]) if isinstance(state["options"], Mapping) else {}
    if saved != options:
        changed = [f"{k}={saved.get(k)}" for k in sorted(set(saved) | set(options)) if saved.get(k) != options.get(k)]
        mine = [f"{k}={options.get(k)}" for k in sorted(set(saved) | set(options)) if saved.get(k) != options.get(k)]
        raise StateMismatch("sampler options", ", ".join(mine), ", ".join(changed))
    epoch, step, world = _natural(state, "epoch", 0), _natural(state, "step", 0), _natural(state, "num_replicas", 1)
    resized = []
    for entry in state["resized"]:
        if (
            not isinstance(entry, (list, tuple))
            or len(entry) != 2
            or not all(is_integer(v) and v >= 0 for v in entry)
            or entry[0] < 1
        ):
            raise SettingError("state", "a PackingSampler.state_dict() ('resized': [num_replicas, steps] pairs)", entry)
        resized.append((int(entry[0]), int(entry[1])))
    if world == num_replicas:
        return Progress(epoch, tuple(resized), step, world)
    if step == 0:  # nothing of the current plan consumed: make it for the new ranks instead
        return Progress(epoch, tuple(resized), 0, num_replicas)
    return Progress(epoch, (*resized, (world, step)), 0, num_replicas)


def _differences(ours: str, theirs: str) -> str:
    """The options of ``theirs`` (a ``Recipe.describe()``) that differ from ``ours``, as ``name=value`` (``name``
    alone when ``theirs`` leaves it at its default)."""
    mine = dict(part.partition("=")[::2] for part in ours.split(", "))
    saved = dict(part.partition("=")[::2] for part in theirs.split(", "))
    changed = [
        f"{k}={saved[k]}" if k in saved else f"{k} at its default"
        for k in (*saved, *mine)
        if mine.get(k) != saved.get(k)
    ]
    return ", ".join(dict.fromkeys(changed)) or theirs
