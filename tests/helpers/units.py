"""Preference pairs and completion groups for the tests: random units, and what a model gives each sequence run
alone (the reference every packed forward is compared with)."""

from __future__ import annotations

from typing import Any

import numpy as np


def random_units(
    seed: int, count: int = 6, vocab: int = 96, prompt: tuple[int, int] = (1, 9), answer: tuple[int, int] = (1, 7)
) -> list[dict[str, Any]]:
    """``count`` units of token ids below ``vocab`` (ids from 3), pairs and groups of 1 to 4 completions in turn,
    prompts of ``prompt`` and completions of ``answer`` tokens (half-open ranges)."""
    rng = np.random.default_rng(seed)

    def ids(bounds: tuple[int, int]) -> list[int]:
        return rng.integers(3, vocab, int(rng.integers(*bounds))).tolist()

    rows: list[dict[str, Any]] = []
    for index in range(count):
        if index % 2 == 0:
            rows.append({"prompt": ids(prompt), "chosen": ids(answer), "rejected": ids(answer)})
        else:
            rows.append({"prompt": ids(prompt), "completions": [ids(answer) for _ in range(int(rng.integers(1, 5)))]})
    return rows


def completions_of(row: dict[str, Any]) -> list[list[int]]:
    """A unit's completions, in order (a pair's chosen first)."""
    return [row["chosen"], row["rejected"]] if "chosen" in row else list(row["completions"])


def alone_logps(model: Any, rows: list[dict[str, Any]], *, grad: bool = False) -> Any:
    """Every completion's summed log-probability with ``model`` run on ``prompt + completion`` alone, in input
    order (unit by unit), as a tensor (with its graph when ``grad``)."""
    import torch

    values = []
    for row in rows:
        prompt = list(row["prompt"])
        for completion in completions_of(row):
            ids = torch.tensor([prompt + list(completion)])
            with torch.set_grad_enabled(grad):
                logits = model(input_ids=ids, use_cache=False).logits[0]
            scores = logits[:-1].log_softmax(-1).gather(-1, ids[0, 1:, None])[:, 0]
            values.append(scores[len(prompt) - 1 :].sum())
    return torch.stack(values)


def dpo_loss(chosen: Any, rejected: Any, reference_chosen: Any, reference_rejected: Any, beta: float = 0.1) -> Any:
    """The DPO loss (sigmoid) of a batch of pairs' log-probabilities, averaged over pairs."""
    import torch

    margin = (chosen - reference_chosen) - (rejected - reference_rejected)
    return -torch.nn.functional.logsigmoid(beta * margin).mean()
