"""Rows that share prefixes, made here at random for the prefix-tree tests: multi-turn conversations that branch
(several answers to a turn, follow-ups to each) and GRPO groups of whole rows (the prompt inside every row), with
an independent count of the prefix tree's size and of each stored token's loss weight."""

from __future__ import annotations

import random
from typing import Any

VOCAB = 96
"""Token ids are drawn from ``1..VOCAB-1`` (the tiny models' vocabulary)."""


def _turn(rng: random.Random, least: int, most: int) -> list[int]:
    return [rng.randrange(1, VOCAB) for _ in range(rng.randint(least, most))]


def conversation_rows(seed: int, depth: int = 3, most_branches: int = 3) -> list[dict[str, Any]]:
    """The rows of one random conversation tree of ``depth`` assistant turns: a user prompt, then at every turn
    1..``most_branches`` answers, each but the last followed by a user follow-up; one row per leaf (the whole
    path), its ``loss_mask`` 1 on every assistant token of it."""
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []

    def grow(ids: list[int], mask: list[int], level: int) -> None:
        for _ in range(rng.randint(1, most_branches)):
            answer = _turn(rng, 1, 5)
            here, trained = ids + answer, mask + [1] * len(answer)
            if level == depth:
                rows.append({"input_ids": here, "loss_mask": trained})
            else:
                follow = _turn(rng, 1, 4)
                grow(here + follow, trained + [0] * len(follow), level + 1)

    prompt = _turn(rng, 2, 6)
    grow(prompt, [0] * len(prompt), 1)
    return rows


def group_rows(seed: int, completions: int = 8, prompt: int = 12, completion: int = 3) -> list[dict[str, Any]]:
    """A GRPO group as whole rows: one random prompt of ``prompt`` tokens in each of ``completions`` rows
    ``{"prompt", "completion"}``, completions of 1..``completion`` tokens (some may repeat another's start)."""
    rng = random.Random(seed)
    head = _turn(rng, prompt, prompt)
    return [{"prompt": head, "completion": _turn(rng, 1, completion)} for _ in range(completions)]


def ids_and_mask(row: dict[str, Any]) -> tuple[list[int], list[int]]:
    """A row's token ids and its loss mask (a prompt/completion row trains its completion)."""
    if "input_ids" in row:
        return list(row["input_ids"]), list(row.get("loss_mask", [1] * len(row["input_ids"])))
    return list(row["prompt"]) + list(row["completion"]), [0] * len(row["prompt"]) + [1] * len(row["completion"])


def prefix_count(rows: list[dict[str, Any]]) -> int:
    """The prefix tree's size counted apart: the number of distinct non-empty prefixes of the rows."""
    return len({tuple(ids[: i + 1]) for ids, _ in map(ids_and_mask, rows) for i in range(len(ids))})


def prefix_weights(rows: list[dict[str, Any]]) -> dict[tuple[int, ...], int]:
    """How many rows train each prefix's last token (a row's first token is never trained), counted apart."""
    weights: dict[tuple[int, ...], int] = {}
    for ids, mask in map(ids_and_mask, rows):
        for i in range(len(ids)):
            weights[tuple(ids[: i + 1])] = weights.get(tuple(ids[: i + 1]), 0) + int(bool(mask[i]) and i > 0)
    return weights
