"""Real sequence-length distributions with their published packing results.

>>> squad = load_workload("squad_1_1_bert_384")
>>> squad.max_seq_length, len(squad.lengths)
(384, 88641)

Internal: the length distributions the benchmarks and the explorer measure strategies on.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import numpy as np
import numpy.typing as npt

WORKLOADS = ("squad_1_1_bert_384", "openchat_v1_2048", "wikipedia_bert_512")


@dataclass(frozen=True)
class Workload:
    """A named length distribution: ``lengths`` (one per sequence), its source and published results."""

    name: str
    title: str
    source: str
    max_seq_length: int
    lengths: npt.NDArray[np.int64] = field(repr=False)
    published_results: dict[str, float]


def lengths_from_histogram(histogram: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """Expand ``histogram[i]`` = count of length ``i + 1`` into lengths, shortest first. O(n).

    >>> lengths_from_histogram([2, 0, 1]).tolist()
    [1, 1, 3]
    """
    counts = np.asarray(histogram, dtype=np.int64)
    return np.repeat(np.arange(1, len(counts) + 1, dtype=np.int64), counts)


def workload_from_json(name: str, data: dict[str, Any]) -> Workload:
    """Build a workload from the JSON form (``histogram`` or ``lengths``).

    A histogram carries no order, and sorted lengths would flatter or hurt the
    strategies that keep input order, so its lengths come in a fixed random order (seed 0).
    """
    if "histogram" in data:
        lengths = lengths_from_histogram(data["histogram"])
        np.random.default_rng(0).shuffle(lengths)
    else:
        lengths = np.asarray(data["lengths"], dtype=np.int64)
    return Workload(
        name=name,
        title=str(data.get("name", name)),
        source=str(data.get("source", "")),
        max_seq_length=int(data["max_seq_length"]),
        lengths=lengths,
        published_results=dict(data.get("published_results", {})),
    )


@functools.cache
def load_workload(name: str) -> Workload:
    """Load one of ``WORKLOADS`` from the package data, once per process (its arrays are read-only). O(sequences)."""
    if name not in WORKLOADS:
        raise ValueError(f"unknown workload {name!r}; expected one of: {', '.join(WORKLOADS)}")
    text = resources.files(__package__).joinpath(f"{name}.json").read_text(encoding="utf-8")
    workload = workload_from_json(name, json.loads(text))
    workload.lengths.flags.writeable = False  # shared by every caller
    return workload
