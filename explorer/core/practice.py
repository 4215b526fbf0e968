"""Practice: a small random packing problem (some samples are prompt/completion pairs), and checking a typed
answer, blocks and loss masks, against the library."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import pandas as pd

import packing
from explorer.core.formatting import plural
from explorer.core.parsing import TypedBlock
from packing.core._arrays import offsets_of

PRACTICE_STRATEGIES = ("split", "next_fit", "first_fit", "ffd", "bfd")
MAX_PROBLEM = 999_999


@dataclass(frozen=True)
class Problem:
    """Sequences with distinct token ids (each a list, or a prompt/completion pair), a block size and a strategy."""

    number: int
    sequences: list[Any]
    max_seq_length: int
    strategy: str

    def expected(self) -> tuple[list[list[int]], list[list[int]]]:
        """The blocks and loss masks ``packing.pack`` produces (padding 0, loss on completions only)."""
        batch = packing.pack(self.sequences, self.max_seq_length, strategy=cast(packing.StrategyName, self.strategy))
        return batch.input_ids.tolist(), batch.loss_mask.tolist()

    @property
    def text(self) -> str:
        """The sequences one per line, a pair as ``prompt | completion`` (what the Sequences box reads)."""
        lines = []
        for s in self.sequences:
            if isinstance(s, dict):
                lines.append(f"{' '.join(map(str, s['prompt']))} | {' '.join(map(str, s['completion']))}")
            else:
                lines.append(" ".join(map(str, s)))
        return "\n".join(lines)


def new_problem(number: int) -> Problem:
    """Problem ``number``: 3 to 6 sequences of 1 to max_seq_length tokens, numbered 1, 2, 3, ... in order; about one
    in three with at least two tokens is a prompt/completion pair (loss on the completion only)."""
    rng = np.random.default_rng(number)
    size = int(rng.integers(4, 9))
    count = int(rng.integers(3, 7))
    lengths = rng.integers(1, size + 1, count).tolist()
    bounds = offsets_of(lengths)
    sequences: list[Any] = []
    for a, b in itertools.pairwise(bounds):
        ids = list(range(int(a) + 1, int(b) + 1))
        if len(ids) >= 2 and rng.random() < 0.35:
            cut = int(rng.integers(1, len(ids)))
            sequences.append({"prompt": ids[:cut], "completion": ids[cut:]})
        else:
            sequences.append(ids)
    return Problem(number, sequences, size, str(rng.choice(PRACTICE_STRATEGIES)))


def _differences(want: list[int], got: list[int]) -> list[int]:
    """Positions where two blocks differ, counting positions only one of them has."""
    return [p for p in range(max(len(want), len(got))) if p >= len(want) or p >= len(got) or want[p] != got[p]]


@dataclass(frozen=True)
class Feedback:
    """Whether an answer matches, a sentence saying so, and a row per block comparing the two."""

    correct: bool
    message: str
    rows: pd.DataFrame


def check_answer(
    expected: tuple[list[list[int]], list[list[int]]], answer: list[TypedBlock], max_seq_length: int
) -> Feedback:
    """Compare typed blocks and loss masks with the expected ones; trailing padding (0 ids, 0 mask) may be left
    out of the answer. A block typed without ``-> mask`` is checked for its ids and reported as missing its mask."""
    blocks, masks = expected
    too_long = [i + 1 for i, b in enumerate(answer) if len(b.ids) > max_seq_length]
    rows = []
    ids_ok = masks_ok = 0
    missing_masks = 0
    for i in range(max(len(blocks), len(answer))):
        want = blocks[i] if i < len(blocks) else None
        want_mask = masks[i] if i < len(masks) else None
        typed = answer[i] if i < len(answer) else None
        got = None if typed is None else typed.ids + [0] * (max_seq_length - len(typed.ids))
        got_mask = None
        if typed is not None and typed.mask is not None:
            got_mask = typed.mask + [0] * (max_seq_length - len(typed.mask))
        elif typed is not None:
            missing_masks += 1
        ids_match = want is not None and want == got
        mask_match = want_mask is not None and want_mask == got_mask
        ids_ok += ids_match
        masks_ok += mask_match
        rows.append(
            {
                "block": i + 1,
                "expected": "(none)" if want is None else f"{want} -> {want_mask}",
                "yours": "(missing)" if typed is None else f"{typed.ids} -> {typed.mask or '(no mask)'}",
                "ids": ids_match,
                "mask": mask_match,
                "ids differ at": "" if want is None or got is None else ", ".join(map(str, _differences(want, got))),
            }
        )
    table = pd.DataFrame(rows)
    n = len(blocks)
    correct = not too_long and len(answer) == n and ids_ok == n and masks_ok == n
    if correct:
        every = "the block and its loss mask match" if n == 1 else f"all {n} blocks and their loss masks match"
        message = f"Correct: {every}."
    elif too_long:
        message = f"Block {too_long[0]} has more than {plural(max_seq_length, 'token')}."
    elif len(answer) != n:
        message = f"You gave {plural(len(answer), 'block')}; the strategy makes {n}."
    elif ids_ok < n:
        wrong = n - ids_ok
        verb, its = ("differs", "its") if wrong == 1 else ("differ", "their")
        message = f"{wrong} of {plural(n, 'block')} {verb} in {its} token ids."
    elif missing_masks:
        message = (
            "The token ids are right. Now give each block's loss mask after `->` (1 = the token is trained on, "
            "0 = prompt or padding)."
        )
    else:
        wrong = n - masks_ok
        message = (
            f"The token ids are right, but {wrong} of {plural(n, 'loss mask')} "
            f"{'differs' if wrong == 1 else 'differ'}: prompt tokens and padding get 0."
        )
    return Feedback(correct, message, table)


def sidebar_values(problem: Problem) -> dict[str, object]:
    """Sidebar widget values that load ``problem`` as pasted data, so the other tabs can replay it."""
    return {
        "source": "paste",
        "sequences": problem.text,
        "max_seq_length": problem.max_seq_length,
        "strategy": problem.strategy,
        "overflow": "truncate",
        "pad_token_id": 0,
        "loss": "completion",
    }
