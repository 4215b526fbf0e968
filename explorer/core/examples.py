"""Ready-made inputs: the classic example, one per follow-up question, synthetic lengths and real workloads."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from packing._workloads import load_workload

Int64Array = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Example:
    """A pasted-text example with the settings that show its point."""

    key: str
    title: str
    question: str
    text: str
    max_seq_length: int
    strategy: str
    loss: str = "completion"
    """The loss rule the example opens with (one of ``packing.recipe.LOSS_RULES``)."""
    look_at: str = "Result"
    share_prompt: bool = False
    """The layout of preference pairs and completion groups the example opens with (the recipe's option)."""
    link: str = ""
    """The follow-up's one-click name on the first screen ('' for an example that is not one of the three)."""


PREFERENCE_TEXT = (
    '{"prompt": [1, 2, 3, 4], "chosen": [5, 6, 7], "rejected": [8, 9]}\n'
    '{"prompt": [10, 11, 12], "chosen": [13, 14], "rejected": [15, 16, 17, 18]}\n'
    '{"prompt": [19, 20, 21, 22, 23], "completions": [[24, 25], [26], [27, 28, 29]]}'
)
"""Two preference pairs and a completion group of three, as token ids."""


EXAMPLES: dict[str, Example] = {
    e.key: e
    for e in (
        Example(
            "classic",
            "Classic interview example",
            "Concatenate [[1, 2], [3, 4, 5], [6]] into blocks of 4 tokens, pad with 0, return loss masks.",
            "[[1, 2], [3, 4, 5], [6]]",
            4,
            "split",
        ),
        Example(
            "no_split",
            "Follow-up: pack without splitting sequences",
            "What if a sequence must never be cut across blocks? That is bin packing: the greedy strategies "
            "need 3 blocks here, the proven optimum 2.",
            "[[1, 2, 3, 4], [5, 6, 7], [8, 9, 10], [11, 12], [13, 14], [15, 16]]",
            8,
            "bfd",
            look_at="Compare",
            link="No-split bin packing",
        ),
        Example(
            "attention",
            "Follow-up: cross-document attention",
            "Packed documents share a block: what stops one from attending to another, and what about positions?",
            "[[1, 2, 3], [4, 5], [6, 7, 8]]",
            8,
            "bfd",
            look_at="Attention & positions",
            link="Cross-document attention and positions",
        ),
        Example(
            "masking",
            "Follow-up: instruction/response masking",
            "What if only the response should be trained on? The tokens before | are the prompt: loss mask 0. "
            "Each response stays in the block of its prompt, so the blocks are packed without cutting a sequence.",
            "5 6 7 | 8 9\n10 11 | 12 13 14\n15 16 17 18 | 19",
            8,
            "bfd",
            look_at="Result",
            link="Response-only loss",
        ),
        Example(
            "preference",
            "Follow-up: preference pairs and completion groups",
            "DPO trains on pairs, GRPO on groups: a prompt with several completions, packed whole in one block. "
            "What does storing the prompt once (share_prompt) save, and how does each completion still see only "
            "its prompt and itself?",
            PREFERENCE_TEXT,
            32,
            "bfd",
            look_at="Attention & positions",
        ),
    )
}
DEFAULT_EXAMPLE = "classic"
FOLLOW_UPS = tuple(key for key, example in EXAMPLES.items() if example.link)
"""The three follow-up questions, in the order the first screen names them."""


def example_of(text: str) -> Example | None:
    """The ready-made example whose text ``text`` is (None for one's own sequences). O(examples).

    >>> example_of("[[1, 2], [3, 4, 5], [6]]").key, example_of("[[1]]")
    ('classic', None)
    """
    return next((example for example in EXAMPLES.values() if example.text == text), None)


DISTRIBUTIONS: dict[str, str] = {
    "lognormal": "Log-normal (chat-like: many short, a long tail)",
    "uniform": "Uniform between 1 and the longest length",
    "bimodal": "Bimodal (short questions and long documents)",
}


def synthetic_lengths(count: int, distribution: str, seed: int, max_length: int) -> Int64Array:
    """``count`` random sequence lengths in ``[1, max_length]``; the same arguments give the same lengths.

    >>> synthetic_lengths(5, "uniform", 0, 10).tolist()
    [9, 7, 6, 3, 4]
    """
    rng = np.random.default_rng(seed)
    raw: npt.NDArray[Any]
    if distribution == "lognormal":
        raw = rng.lognormal(np.log(max_length / 8), 1.0, count)
    elif distribution == "uniform":
        raw = rng.integers(1, max_length + 1, count)
    elif distribution == "bimodal":
        long = rng.random(count) < 0.3
        raw = np.where(
            long,
            rng.normal(0.7 * max_length, 0.1 * max_length, count),
            rng.normal(max_length / 10, max_length / 30, count),
        )
    else:
        raise ValueError(f"unknown distribution {distribution!r}; expected one of: {', '.join(DISTRIBUTIONS)}")
    lengths: Int64Array = np.clip(np.round(raw), 1, max_length).astype(np.int64)
    return lengths


def synthetic_code(count: int, distribution: str, seed: int, max_length: int) -> str:
    """Python lines that rebuild ``synthetic_lengths(...)`` as ``lengths`` with numpy alone."""
    draw = {
        "lognormal": f"raw = rng.lognormal(np.log({max_length} / 8), 1.0, {count})",
        "uniform": f"raw = rng.integers(1, {max_length + 1}, {count})",
        "bimodal": (
            f"long = rng.random({count}) < 0.3\n"
            f"raw = np.where(long, rng.normal({0.7 * max_length!r}, {0.1 * max_length!r}, {count}), "
            f"rng.normal({max_length} / 10, {max_length} / 30, {count}))"
        ),
    }[distribution]
    return (
        f"rng = np.random.default_rng({seed})\n{draw}\n"
        f"lengths = np.clip(np.round(raw), 1, {max_length}).astype(np.int64)"
    )


def workload_sample(lengths: Int64Array, count: int, seed: int = 0) -> Int64Array:
    """The first ``count`` lengths of a seeded shuffle: shipped workloads are sorted, a data loader is not.

    >>> workload_sample(np.arange(1, 6), 3).tolist()
    [3, 5, 4]
    """
    order = np.random.default_rng(seed).permutation(len(lengths))
    return np.asarray(lengths, dtype=np.int64)[order[: max(0, count)]]


@dataclass(frozen=True)
class WorkloadInfo:
    """What the sidebar shows about a shipped distribution, without keeping its lengths."""

    title: str
    source: str
    max_seq_length: int
    sequences: int


@functools.cache
def workload_info(name: str) -> WorkloadInfo:
    """Title, source, max_seq_length and size of a shipped workload; loaded once per process (the largest takes ~1 s).

    >>> workload_info("squad_1_1_bert_384").sequences
    88641
    """
    loaded = load_workload(name)
    return WorkloadInfo(loaded.title, loaded.source, loaded.max_seq_length, len(loaded.lengths))


def suggested_max_seq_length(longest: int, ceiling: int) -> int:
    """The smallest power of two that holds the longest sequence (at least 4, at most ``ceiling``).

    >>> suggested_max_seq_length(3, 1 << 20), suggested_max_seq_length(299, 1 << 20), suggested_max_seq_length(5000, 4096)
    (4, 512, 4096)
    """
    size = 4
    while size < longest and size < ceiling:
        size *= 2
    return min(size, ceiling)
