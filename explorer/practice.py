"""Practice: a small random packing problem, and checking a typed answer against the library."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import pandas as pd

import packing
from explorer.formatting import plural

PRACTICE_STRATEGIES = ("split", "next_fit", "first_fit", "ffd", "bfd")


@dataclass(frozen=True)
class Problem:
    """Sequences with distinct token ids, a block size and a strategy."""

    sequences: list[list[int]]
    max_seq_length: int
    strategy: str

    def expected(self) -> list[list[int]]:
        """The blocks ``packing.pack`` produces (padding 0)."""
        blocks: list[list[int]] = packing.pack(self.sequences, self.max_seq_length, self.strategy).input_ids.tolist()
        return blocks


def new_problem(seed: int) -> Problem:
    """A random problem: 3 to 6 sequences of 1 to max_seq_length tokens, numbered 1, 2, 3, ... in order."""
    rng = np.random.default_rng(seed)
    size = int(rng.integers(4, 9))
    count = int(rng.integers(3, 7))
    lengths = rng.integers(1, size + 1, count).tolist()
    bounds = np.cumsum([0, *lengths])
    sequences = [list(range(int(a) + 1, int(b) + 1)) for a, b in itertools.pairwise(bounds)]
    return Problem(sequences, size, str(rng.choice(PRACTICE_STRATEGIES)))


def _differences(want: list[int], got: list[int]) -> list[int]:
    """Positions where two blocks differ, counting positions only one of them has."""
    return [p for p in range(max(len(want), len(got))) if p >= len(want) or p >= len(got) or want[p] != got[p]]


@dataclass(frozen=True)
class Feedback:
    """Whether an answer matches, a sentence saying so, and a row per block comparing the two."""

    correct: bool
    message: str
    rows: pd.DataFrame


def check_answer(expected: list[list[int]], answer: list[list[int]], max_seq_length: int) -> Feedback:
    """Compare typed blocks with the expected ones; trailing padding (0) may be left out of the answer."""
    too_long = [i + 1 for i, block in enumerate(answer) if len(block) > max_seq_length]
    padded = [block + [0] * (max_seq_length - len(block)) for block in answer]
    rows = []
    for i in range(max(len(expected), len(padded))):
        want = expected[i] if i < len(expected) else None
        got = padded[i] if i < len(padded) else None
        wrong = [] if want is None or got is None else _differences(want, got)
        rows.append(
            {
                "block": i + 1,
                "expected": "(none)" if want is None else str(want),
                "yours": "(missing)" if got is None else str(answer[i]),
                "match": want == got,
                "differs at positions": ", ".join(map(str, wrong)),
            }
        )
    table = pd.DataFrame(rows)
    correct = not too_long and padded == expected
    if correct:
        message = f"Correct: all {len(expected)} blocks match."
    elif too_long:
        message = f"Block {too_long[0]} has more than {max_seq_length} tokens."
    elif len(padded) != len(expected):
        message = f"You gave {plural(len(padded), 'block')}; the strategy makes {len(expected)}."
    else:
        message = f"{int((~table['match']).sum())} of {len(expected)} blocks differ."
    return Feedback(correct, message, table)


def sidebar_values(problem: Problem) -> dict[str, object]:
    """Sidebar widget values that load ``problem`` as pasted data, so the other tabs can replay it."""
    return {
        "source": "paste",
        "sequences": str(problem.sequences),
        "max_seq_length": problem.max_seq_length,
        "strategy": problem.strategy,
        "overflow": "truncate",
        "pad_token_id": 0,
    }
