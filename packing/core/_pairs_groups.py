"""Units: preference pairs and completion groups, the samples that hold several completions of one prompt.

A **unit** is one sample of a :class:`~packing.core._samples.Samples` made of a prompt and ``k >= 1`` completions:
a preference pair (``{"prompt", "chosen", "rejected"}``, ``k = 2``, the chosen first) or a completion group
(``{"prompt", "completions": [...]}``, RL rollouts). A unit is the packing unit: the planner places it whole (its
length is the unit's length in its layout), it is never split across blocks, ranks or micro-batches. Plain samples
read among units are units of their own kind (``plain``: no prompt, one document that is not a completion).

The unit's tokens are stored **laid out**, as the model sees them (``share_prompt``):

- ``share_prompt=False`` (the layout TRL and OpenRLHF use): each completion is its own document, the prompt then
  the completion, the documents of a unit adjacent: ``P c1 P c2 ...`` (``k·P + Σc`` tokens); positions restart
  at every document;
- ``share_prompt=True``: the prompt once, then every completion, ``P c1 c2 ...`` (``P + Σc`` tokens); each
  completion's positions continue from the prompt's end (``P, P + 1, ...``), and it attends to its prompt and to
  itself, never to a sibling.

Everything a trainer needs follows from the layout, per token (:meth:`Units.token_arrays`): its position, the
completion it belongs to (``-1`` on prompts), and where it is predicted from: the token before it, except a shared
completion's first token, which the prompt's last position predicts (several completions are predicted from that
one position, which a shifted ``labels`` row cannot say: ``packing.torch.completion_logps`` gathers them).

>>> units = Units.of([3, 2], [[2, 1], [4]], kinds=["pair", "group"])
>>> units.lengths(share_prompt=False).tolist(), units.lengths(share_prompt=True).tolist()
([9, 6], [6, 6])
>>> arrays = Units.of([3], [[2, 1]], share_prompt=True).token_arrays()
>>> arrays.positions.tolist(), arrays.completion.tolist(), arrays.predictor.tolist()
([0, 1, 2, 3, 4, 3], [-1, -1, -1, 0, 0, 1], [0, 1, 1, 1, 1, 3])

Internal: the public names are in ``packing`` and ``packing.core``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any, Literal, NamedTuple

import numpy as np
import numpy.typing as npt

from packing.core._arrays import offsets_of, ranges, row_of
from packing.core._validation import INT32_MAX, integer_list
from packing.errors import SettingError, UnitTooLong

Int64Array = npt.NDArray[np.int64]
Int8Array = npt.NDArray[np.int8]
UnitKind = Literal["plain", "pair", "group"]
KINDS: tuple[UnitKind, ...] = ("plain", "pair", "group")
"""The kinds of unit, numbered in this order in :attr:`Units.kind`."""
PLAIN, PAIR, GROUP = 0, 1, 2
UNIT_COLUMNS: tuple[str, ...] = ("unit_ids", "document_ids", "completion_ids", "prediction_positions", "unit_kinds")
"""The per-token columns every door gives for units, under these names:

- ``unit_ids``: the unit of each token (its number; -1 in padding);
- ``document_ids``: the document of each token, numbered in its block (or batch row) from 0 (a completion with
  its prompt; with a shared prompt, the unit):
  tokens attend only within their document (and, with a shared prompt, not to a sibling completion);
- ``completion_ids``: the completion each token answers (its number, in input order: unit by unit, completions in
  order), -1 on prompts, plain samples and padding;
- ``prediction_positions``: the position (in the same row) whose logits are trained to predict the token, -1
  where none is (prompts, untrained tokens, a document's first token, padding). It is ``t - 1`` inside a document,
  and for a shared completion's first token the prompt's last position;
- ``unit_kinds``: the kind of the token's unit (its number in :data:`KINDS`: 0 plain, 1 pair, 2 group; -1 in
  padding), so that a group of two completions is never read as a pair."""


class TokenArrays(NamedTuple):
    """Per token of the laid-out units (``Units.token_arrays``): ``positions`` (the model's position ids),
    ``completion`` (the completion's global number, -1 on prompts and plain samples), ``predictor`` (how many
    positions back the token's predictor is: 1 inside a document, more for a shared completion's first token, 0
    where nothing predicts it) and ``document`` (the number of the document it is in, the documents of
    :meth:`Units.documents`)."""

    positions: Int64Array
    completion: Int64Array
    predictor: Int64Array
    document: Int64Array


class Fit(NamedTuple):
    """What fitting units into ``max_seq_length`` did (:meth:`Units.fit_lengths`): every completion's kept length,
    the units cut (``cut``: a bool per unit) and the tokens cut (laid out, per unit)."""

    completion_lengths: Int64Array
    cut: npt.NDArray[np.bool_]
    tokens_cut: Int64Array


@dataclass(frozen=True, eq=False)
class Units:
    """The unit structure of samples (see the module): per sample its ``kind`` (0 plain, 1 pair, 2 group), its
    ``prompt_lengths``, and its completions' lengths in CSR form (sample ``i`` has completions
    ``completion_lengths[completion_offsets[i]:completion_offsets[i + 1]]``; a plain sample one, its tokens), and
    ``share_prompt``, the layout its tokens are stored in. Built once by the reader; O(1) to hold beside the tokens.

    ``first_completion`` numbers the completions (``completion_ids``) when these units are part of a longer input
    read in parts (a stream's buffer): per unit, the number of its first completion, its others following it
    (:meth:`numbered`); None numbers them over these units from 0, in order, as ``pack`` does over its input.

    >>> units = Units.of([2], [[1, 3]], kinds=["pair"])
    >>> len(units), units.num_completions, units.documents()[1].tolist()
    (1, 2, [3, 5])
    """

    kind: Int8Array
    prompt_lengths: Int64Array
    completion_offsets: Int64Array
    completion_lengths: Int64Array
    share_prompt: bool = False
    first_completion: Int64Array | None = None

    @classmethod
    def of(
        cls,
        prompt_lengths: Sequence[int] | Int64Array,
        completion_lengths: Sequence[Sequence[int]],
        *,
        kinds: Sequence[UnitKind] | None = None,
        share_prompt: bool = False,
    ) -> Units:
        """Units from each unit's prompt length and completion lengths (``kinds`` default: groups). O(units).

        >>> Units.of([1], [[2, 2]]).kind.tolist()
        [2]
        """
        counts = np.array([len(c) for c in completion_lengths], dtype=np.int64)
        flat = np.array([n for c in completion_lengths for n in c], dtype=np.int64)
        kind = np.array([KINDS.index(k) for k in kinds] if kinds is not None else [GROUP] * len(counts), np.int8)
        return cls(kind, np.asarray(prompt_lengths, dtype=np.int64), offsets_of(counts), flat, bool(share_prompt))

    @classmethod
    def plain(cls, lengths: Int64Array, share_prompt: bool = False) -> Units:
        """Plain samples of these ``lengths`` as units of their own (one document each). O(n)."""
        count = len(lengths)
        return cls(
            np.zeros(count, dtype=np.int8),
            np.zeros(count, dtype=np.int64),
            np.arange(count + 1, dtype=np.int64),
            np.asarray(lengths, dtype=np.int64).copy(),
            share_prompt,
        )

    def __len__(self) -> int:
        return len(self.kind)

    @property
    def num_completions(self) -> int:
        """Completions of pairs and groups (plain samples are not completions). O(n)."""
        return int(self.counts[self.kind != PLAIN].sum())

    @cached_property
    def counts(self) -> Int64Array:
        """Completions per unit (1 for a plain sample). O(n)."""
        return np.diff(self.completion_offsets)

    @cached_property
    def unit_of_completion(self) -> Int64Array:
        """The unit of every completion. O(completions)."""
        return row_of(self.counts)

    def lengths(self, share_prompt: bool | None = None) -> Int64Array:
        """Tokens per unit in a layout (default: the stored one): ``k·P + Σc``, or ``P + Σc`` with a shared
        prompt. O(n)."""
        shared = self.share_prompt if share_prompt is None else share_prompt
        answers = np.add.reduceat(self.completion_lengths, self.completion_offsets[:-1]) if len(self) else self.counts
        answers = np.where(self.counts > 0, answers, 0)
        prompts = self.prompt_lengths if shared else self.prompt_lengths * self.counts
        return (prompts + answers).astype(np.int64)

    def documents(self) -> tuple[Int64Array, Int64Array]:
        """``(offsets, lengths)``: the documents a model sees in each unit, in CSR form (unit ``i`` holds documents
        ``offsets[i]:offsets[i + 1]``): one per completion, prompt and completion, in the duplicated layout; the
        whole unit in the shared one (its attention mask keeps the completions apart). O(completions).

        >>> Units.of([2], [[1, 3]], share_prompt=True).documents()[1].tolist()
        [6]
        """
        if self.share_prompt:
            return np.arange(len(self) + 1, dtype=np.int64), self.lengths()
        return self.completion_offsets, self.completion_lengths + np.repeat(self.prompt_lengths, self.counts)

    def _segments(self) -> tuple[Int64Array, Int64Array, Int64Array, Int64Array, Int64Array]:
        """The laid-out runs of every unit, in order: ``(length, first position, completion, predictor of the first
        token, document)``, prompts and completions. O(completions)."""
        prompt = self.prompt_lengths
        completion = np.arange(len(self.completion_lengths), dtype=np.int64)
        unit = self.unit_of_completion
        is_plain = self.kind[unit] == PLAIN
        answer_id = np.where(is_plain, -1, self._completion_numbers())
        has_prompt = prompt[unit] > 0
        if not self.share_prompt:  # P c1 P c2 ...: a document per completion
            length = np.column_stack((prompt[unit], self.completion_lengths)).reshape(-1)
            first = np.column_stack((np.zeros_like(unit), prompt[unit])).reshape(-1)
            ids = np.column_stack((np.full_like(unit, -1), answer_id)).reshape(-1)
            predictor = np.column_stack((np.zeros_like(unit), has_prompt.astype(np.int64))).reshape(-1)
            document = np.repeat(completion, 2)
            return length, first, ids, predictor, document
        # P c1 c2 ...: the prompt once, then the completions; one document per unit
        slots = len(self) + len(completion)
        prompt_slot = self.completion_offsets[:-1] + np.arange(len(self), dtype=np.int64)
        answer_slot = completion + unit + 1
        length = np.zeros(slots, dtype=np.int64)
        first = np.zeros(slots, dtype=np.int64)
        ids = np.full(slots, -1, dtype=np.int64)
        predictor = np.zeros(slots, dtype=np.int64)
        document = np.zeros(slots, dtype=np.int64)
        length[prompt_slot], length[answer_slot] = prompt, self.completion_lengths
        first[answer_slot] = prompt[unit]
        ids[answer_slot] = answer_id
        before = self.completion_lengths.cumsum() - self.completion_lengths  # answers before it, in all units
        siblings_before = before - before[self.completion_offsets[:-1]][unit] if len(unit) else before
        predictor[answer_slot] = np.where(has_prompt, siblings_before + 1, 0)
        document[prompt_slot] = np.arange(len(self), dtype=np.int64)
        document[answer_slot] = unit
        return length, first, ids, predictor, document

    def _completion_numbers(self) -> Int64Array:
        """Every completion's number among the completions of pairs and groups (plain samples have none): from
        :attr:`first_completion` when given, else counted over these units from 0. O(c)."""
        unit = self.unit_of_completion
        firsts = self.first_completions()
        return (firsts[unit] + np.arange(len(unit), dtype=np.int64) - self.completion_offsets[unit]).astype(np.int64)

    def first_completions(self) -> Int64Array:
        """Per unit the number of its first completion (:attr:`first_completion`, or counted over these units from
        0: the completions of the pairs and groups before it; plain samples count none). O(n)."""
        if self.first_completion is not None:
            return self.first_completion
        counted = np.where(self.kind != PLAIN, self.counts, 0)
        return (np.cumsum(counted) - counted).astype(np.int64)

    def numbered(self, start: int) -> Units:
        """These units with their completions numbered from ``start`` (the completions read before them), in order:
        a part of a longer input numbers them as the whole input does. O(n).

        >>> Units.of([1, 1], [[1, 1], [1]], kinds=["pair", "group"]).numbered(5).token_arrays().completion.tolist()
        [-1, 5, -1, 6, -1, 7]
        """
        return replace(self, first_completion=start + replace(self, first_completion=None).first_completions())

    def token_arrays(self) -> TokenArrays:
        """Per token of the laid-out units (see :class:`TokenArrays`). O(tokens).

        >>> arrays = Units.of([2], [[1, 2]]).token_arrays()
        >>> arrays.positions.tolist(), arrays.predictor.tolist(), arrays.document.tolist()
        ([0, 1, 2, 0, 1, 2, 3], [0, 1, 1, 0, 1, 1, 1], [0, 0, 0, 1, 1, 1, 1])
        """
        length, first, ids, predictor, document = self._segments()
        segment = row_of(length)
        within = ranges(np.zeros(len(length), dtype=np.int64), length)  # each token's place in its run
        positions = first[segment] + within
        before = np.where(within == 0, predictor[segment], 1)  # a run's first token: its own predictor
        return TokenArrays(positions, ids[segment], before.astype(np.int64), document[segment])

    def roles(self) -> Int8Array:
        """Per token: 0 a prompt, 1 a chosen completion, 2 a rejected one, 3 a group's completion, -1 a plain
        sample's token (for colouring blocks). O(tokens).

        >>> Units.of([1], [[1, 1]], kinds=["pair"]).roles().tolist()
        [0, 1, 0, 2]
        """
        numbers = replace(self, first_completion=None).token_arrays().completion  # indices of the completions here
        role = np.full(len(numbers), -1, dtype=np.int8)
        completions = np.flatnonzero(self.kind[self.unit_of_completion] != PLAIN)
        if len(completions):
            owner = self.unit_of_completion[completions]
            rank = completions - self.completion_offsets[owner]
            kinds = self.kind[owner]
            per = np.where(kinds == PAIR, np.where(rank == 0, 1, 2), 3).astype(np.int8)
            has = numbers >= 0
            role[has] = per[numbers[has]]
        unit_of_token = row_of(self.lengths())
        prompt = (numbers < 0) & (self.kind[unit_of_token] != PLAIN) if len(unit_of_token) else numbers < 0
        role[prompt] = 0
        return role

    # ------------------------------------------------------------ fitting into a block

    def refuse_longer(self, capacity: int) -> None:
        """``overflow="error"``: refuse the first unit longer than ``capacity`` in its layout
        (:class:`~packing.errors.UnitTooLong`, naming it and its kind). O(units).

        >>> Units.of([3], [[2, 2]], kinds=["pair"]).refuse_longer(8)
        Traceback (most recent call last):
        ...
        packing.errors.UnitTooLong: sample 0: expected a pair of at most max_seq_length=8 tokens (overflow='error'; a pair is never split), got 10 tokens
        """
        lengths = self.lengths()
        over = np.flatnonzero(lengths > capacity)
        if len(over):
            first = int(over[0])
            kind = KINDS[int(self.kind[first])]
            raise UnitTooLong(first, int(lengths[first]), capacity, "sample" if kind == "plain" else kind)

    def fit_lengths(self, capacity: int) -> Fit:
        """Every completion's length once the units longer than ``capacity`` are cut to fit (``overflow=
        "truncate"``): the prompt is kept whole and the completions are cut to one common cap, the largest that
        fits (the longest cut first), so no completion is cut more than another needs (a plain sample keeps its
        first ``capacity`` tokens). A unit whose prompt leaves no room for one token of each completion is left as
        it is (the planner drops it). O(n + the cut units' completions).

        >>> Units.of([2], [[5, 1]]).fit_lengths(8).completion_lengths.tolist()  # 2 + 3 + 2 + 1 tokens
        [3, 1]
        """
        lengths = self.lengths()
        kept = self.completion_lengths.copy()
        cut = np.zeros(len(self), dtype=bool)
        tokens = np.zeros(len(self), dtype=np.int64)
        for unit in np.flatnonzero(lengths > capacity).tolist():
            lo, hi = int(self.completion_offsets[unit]), int(self.completion_offsets[unit + 1])
            answers = self.completion_lengths[lo:hi]
            base = int(self.prompt_lengths[unit]) * (1 if self.share_prompt else hi - lo)
            room = capacity - base
            if room < hi - lo:
                continue  # no room for one token of each completion: the planner leaves it out whole
            cap = _water_level(answers, room)
            kept[lo:hi] = np.minimum(answers, cap)
            cut[unit] = True
            tokens[unit] = int(answers.sum() - kept[lo:hi].sum())
        return Fit(kept, cut, tokens)

    def with_completion_lengths(self, lengths: Int64Array) -> Units:
        """These units with other completion lengths (after :meth:`fit_lengths`). O(1)."""
        return replace(self, completion_lengths=lengths)

    def kept_tokens(self, new_lengths: Int64Array) -> npt.NDArray[np.bool_]:
        """Which laid-out tokens stay when every completion keeps its first ``new_lengths`` tokens. O(tokens)."""
        length = self._segments()[0]
        shrunk = length.copy()
        shrunk[_answer_segments(self)] = new_lengths
        within = ranges(np.zeros(len(length), dtype=np.int64), length)  # each token's place in its run
        return within < np.repeat(shrunk, length)

    def relaid(self, share_prompt: bool) -> tuple[Int64Array, Units]:
        """The same units in the other layout: the index, into these units' laid-out tokens, of every token of the
        units laid out with ``share_prompt`` (the prompt once, or once per completion), and those units. O(tokens).

        >>> index, shared = Units.of([2], [[1, 1]]).relaid(True)   # P P c1 | P P c2 -> P P c1 c2
        >>> index.tolist(), shared.lengths().tolist()
        ([0, 1, 2, 5], [4])
        """
        total = int(self.lengths().sum())
        if bool(share_prompt) == self.share_prompt:
            return np.arange(total, dtype=np.int64), self
        target = replace(self, share_prompt=bool(share_prompt))
        source_length = self._segments()[0]
        source_start = source_length.cumsum() - source_length
        target_length = target._segments()[0]
        source_of = np.empty(len(target_length), dtype=np.int64)
        source_of[_answer_segments(target)] = np.flatnonzero(_answer_segments(self))
        source_of[_prompt_segments(target)] = _prompt_segments(self)[_first_prompt(self)][_prompt_units(target)]
        return ranges(source_start[source_of], target_length), target

    # ------------------------------------------------------------ selecting and joining

    def take(self, rows: Int64Array) -> Units:
        """The units ``rows``, in that order. O(their completions)."""
        counts = self.counts[rows]
        index = ranges(self.completion_offsets[:-1][rows], counts)
        first = None if self.first_completion is None else self.first_completion[rows]
        return Units(
            self.kind[rows],
            self.prompt_lengths[rows],
            offsets_of(counts),
            self.completion_lengths[index],
            self.share_prompt,
            first,
        )

    @staticmethod
    def join(parts: Sequence[Units]) -> Units:
        """The units of ``parts``, one after the other (all in one layout), their completions numbered as each
        part numbers them when one does (a part without :attr:`first_completion`: from 0), else over the whole
        from 0. O(units).

        >>> Units.join([Units.of([1], [[2]]), Units.plain(np.array([4]))]).completion_offsets.tolist()
        [0, 1, 2]
        """
        if len({part.share_prompt for part in parts}) > 1:
            raise SettingError("share_prompt", "one layout for every part (read with one recipe)", "<both>")
        offsets = offsets_of(np.concatenate([part.counts for part in parts]))
        numbered = any(part.first_completion is not None for part in parts)
        return Units(
            np.concatenate([part.kind for part in parts]),
            np.concatenate([part.prompt_lengths for part in parts]),
            offsets,
            np.concatenate([part.completion_lengths for part in parts]),
            parts[0].share_prompt,
            np.concatenate([part.first_completions() for part in parts]) if numbered else None,
        )

    def state(self) -> dict[str, Any]:
        """Plain lists and a flag, for a state (a stream's): what ``torch.load(weights_only=True)`` and JSON keep.
        O(units)."""
        return {
            "kind": self.kind.tolist(),
            "prompt_lengths": self.prompt_lengths.tolist(),
            "completion_offsets": self.completion_offsets.tolist(),
            "completion_lengths": self.completion_lengths.tolist(),
            "share_prompt": self.share_prompt,
            "first_completion": None if self.first_completion is None else self.first_completion.tolist(),
        }

    @classmethod
    def of_state(cls, state: Any, lengths: Int64Array, what: str, share_prompt: bool) -> Units:
        """Units from :meth:`state`, checked to be units of samples of these laid-out ``lengths`` in the layout
        ``share_prompt``, each as a reader makes them: a kind matching its completions (a pair has 2, a group at
        least 1, a plain sample 1 and no prompt), every completion of at least one token, their lengths adding up
        to the sample's. Else one ``SettingError`` (``state: expected {what} ...``). O(units).

        >>> units = Units.of([2], [[1, 3]], kinds=["pair"])
        >>> Units.of_state(units.state(), units.lengths(), "the saved units", False).completion_lengths.tolist()
        [1, 3]
        >>> Units.of_state(units.state(), np.array([9]), "the saved units", False)
        Traceback (most recent call last):
        ...
        packing.errors.SettingError: state: expected the saved units (sample 0: 9 tokens), got 8
        >>> Units.of_state({**units.state(), "kind": [0]}, units.lengths(), "the saved units", False)
        Traceback (most recent call last):
        ...
        packing.errors.SettingError: state: expected the saved units (sample 0: a plain sample of 1 completion and no prompt), got <2 completions, a prompt of 2>
        """
        if not isinstance(state, dict) or state.get("share_prompt") is not bool(share_prompt):
            expected = f"kind, prompt and completion lengths, share_prompt={bool(share_prompt)}"
            raise SettingError("state", f"{what} ({expected})", "<other>")
        count = len(lengths)
        kind = integer_list(state.get("kind"), "state", f"{what}' kinds", 0, 2)
        prompts = integer_list(state.get("prompt_lengths"), "state", f"{what}' prompt lengths")
        answers = integer_list(state.get("completion_lengths"), "state", f"{what}' completion lengths", 1)
        offsets = integer_list(state.get("completion_offsets"), "state", f"{what}' completion offsets", 0, len(answers))
        if len(kind) != count or len(prompts) != count or len(offsets) != count + 1 or offsets[-1] != len(answers):
            raise SettingError("state", f"{what} (one per sample, {count})", f"<{len(kind)} kinds>")
        if np.any(np.diff(offsets) < 0) or offsets[0] != 0:
            raise SettingError("state", f"{what} (completion offsets rising from 0)", "<falling offsets>")
        _refuse_other_kinds(kind, prompts, np.diff(offsets), what)
        first = state.get("first_completion")
        if first is not None:
            first = integer_list(first, "state", f"{what}' first completions", 0, INT32_MAX)  # completion_ids: int32
            if len(first) != count:
                raise SettingError("state", f"{what} (a first completion per sample, {count})", f"<{len(first)}>")
        units = cls(kind.astype(np.int8), prompts, offsets, answers, state["share_prompt"], first)
        laid_out = units.lengths()
        if not np.array_equal(laid_out, lengths):
            first = int(np.flatnonzero(laid_out != lengths)[0])
            raise SettingError("state", f"{what} (sample {first}: {int(lengths[first])} tokens)", int(laid_out[first]))
        return units

    # ------------------------------------------------------------ cost

    def costs(self, cost: Callable[[Int64Array], npt.ArrayLike], share_prompt: bool | None = None) -> npt.NDArray[Any]:
        """Each unit's compute cost under ``cost`` (a per-document cost of a length, vectorized): the sum over its
        documents in the duplicated layout; with a shared prompt ``cost(P) + Σ (cost(P + c) - cost(P))``, which
        for ``cost(ℓ) = a·ℓ + ℓ²`` is ``a·(P + Σc) + P² + Σ (2·P·c + c²)``: the prompt's work once, each
        completion's own and its attention to the prompt. O(completions).

        >>> square = lambda n: np.asarray(n, dtype=float) ** 2
        >>> Units.of([3], [[2, 1]]).costs(square).tolist(), Units.of([3], [[2, 1]]).costs(square, True).tolist()
        ([41.0], [32.0])
        """
        shared = self.share_prompt if share_prompt is None else share_prompt
        prompt = self.prompt_lengths
        whole = np.asarray(cost(np.repeat(prompt, self.counts) + self.completion_lengths), dtype=np.float64)
        per_unit = np.bincount(self.unit_of_completion, weights=whole, minlength=len(self))
        if not shared:
            return per_unit
        alone = np.asarray(cost(prompt), dtype=np.float64)
        return per_unit - alone * (self.counts - 1)


KIND_COUNTS = {PLAIN: "a plain sample of 1 completion and no prompt", PAIR: "a pair of 2 completions",
               GROUP: "a group of at least 1 completion"}  # fmt: skip
"""What a unit of each kind holds (:func:`_refuse_other_kinds`)."""


def _refuse_other_kinds(kind: Int64Array, prompts: Int64Array, counts: Int64Array, what: str) -> None:
    """Refuse the first unit whose ``kind`` does not match its completion ``counts`` (a pair has 2, a group at
    least 1, a plain sample 1 and no prompt): a ``SettingError`` naming it. O(units).

    >>> _refuse_other_kinds(np.array([1, 1]), np.array([3, 1]), np.array([2, 3]), "the units")
    Traceback (most recent call last):
    ...
    packing.errors.SettingError: state: expected the units (sample 1: a pair of 2 completions), got <3 completions, a prompt of 1>
    """
    wrong = np.where(kind == PLAIN, (counts != 1) | (prompts != 0), np.where(kind == PAIR, counts != 2, counts < 1))
    if wrong.any():
        first = int(np.flatnonzero(wrong)[0])
        got = f"<{int(counts[first])} completions, a prompt of {int(prompts[first])}>"
        raise SettingError("state", f"{what} (sample {first}: {KIND_COUNTS[int(kind[first])]})", got)


def _answer_segments(units: Units) -> npt.NDArray[np.bool_]:
    """Which of the laid-out runs (``Units._segments``) are completions, in order. O(completions)."""
    if not units.share_prompt:
        return np.tile(np.array([False, True]), len(units.completion_lengths))
    slots = len(units) + len(units.completion_lengths)
    answer = np.ones(slots, dtype=bool)
    answer[units.completion_offsets[:-1] + np.arange(len(units), dtype=np.int64)] = False
    return answer


def _prompt_segments(units: Units) -> Int64Array:
    """The laid-out runs (``Units._segments``) that are prompts, in order. O(completions)."""
    return np.flatnonzero(~_answer_segments(units))


def _prompt_units(units: Units) -> Int64Array:
    """The unit of every prompt run, in order (one per completion in the duplicated layout). O(completions)."""
    return units.unit_of_completion if not units.share_prompt else np.arange(len(units), dtype=np.int64)


def _first_prompt(units: Units) -> Int64Array:
    """For every unit, which of its layout's prompt runs (``_prompt_segments``) is its first. O(units)."""
    if units.share_prompt:
        return np.arange(len(units), dtype=np.int64)
    return units.completion_offsets[:-1].astype(np.int64)


def _water_level(answers: Int64Array, room: int) -> int:
    """The largest cap ``b >= 1`` with ``Σ min(answers, b) <= room`` (``room >= len(answers)``). O(k log k).

    >>> _water_level(np.array([10, 2, 5]), 9)  # 3 + 2 + 3 tokens
    3
    """
    ordered = np.sort(answers)
    k = len(ordered)
    spent = 0
    for i, value in enumerate(ordered.tolist()):
        remaining = k - i
        if spent + value * remaining > room:
            return max(1, (room - spent) // remaining)
        spent += value
    return int(ordered[-1]) if k else 0
