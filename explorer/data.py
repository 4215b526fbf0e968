"""Datasets the explorer works on: pasted text, synthetic lengths, shipped workloads and uploaded files."""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

import packing
from explorer.examples import DISTRIBUTIONS, synthetic_lengths, workload_sample
from explorer.formatting import plural
from explorer.parsing import InputError, parse_sequences
from packing.workloads import load_workload

Int64Array = npt.NDArray[np.int64]
MAX_UPLOAD_MB = 200
MAX_SYNTHETIC = 1_000_000


@dataclass(frozen=True)
class Dataset:
    """What gets packed: ``lengths`` always; ``samples`` (token lists or dicts) unless the data is lengths only."""

    label: str
    lengths: Int64Array
    samples: list[Any] | None = None
    note: str = ""

    @property
    def has_tokens(self) -> bool:
        return self.samples is not None

    @property
    def has_prompts(self) -> bool:
        """True if some sample carries a prompt or an explicit loss mask."""
        return self.samples is not None and any(
            isinstance(s, dict) and ("prompt" in s or "loss_mask" in s) for s in self.samples
        )


def from_text(text: str) -> Dataset:
    """Parse pasted sequences; raises ``InputError`` naming the line at fault."""
    parsed = parse_sequences(text)
    try:
        lengths = packing.read_samples(parsed.samples).lengths
    except (TypeError, ValueError, OverflowError) as error:
        raise InputError(str(error)) from None
    return Dataset(plural(len(parsed.samples), "pasted sequence"), lengths, parsed.samples)


def synthetic(count: int, distribution: str, seed: int, max_length: int) -> Dataset:
    """Random lengths (lengths only) from one of ``DISTRIBUTIONS``."""
    if not 1 <= count <= MAX_SYNTHETIC:
        raise InputError(f"the number of sequences must be between 1 and {MAX_SYNTHETIC:,}, got {count:,}")
    lengths = synthetic_lengths(count, distribution, seed, max_length)
    return Dataset(
        f"{plural(count, 'synthetic length')} ({DISTRIBUTIONS[distribution].split(' (')[0].lower()}, seed {seed})",
        lengths,
    )


def workload(name: str, count: int) -> Dataset:
    """A shipped real length distribution, shuffled with seed 0, first ``count`` sequences (lengths only)."""
    loaded = load_workload(name)
    total = len(loaded.lengths)
    count = total if count <= 0 else min(count, total)
    note = f"Source: {loaded.source}."
    if count < total:
        note += f" Using {count:,} of {total:,} sequences (a seeded random sample)."
    return Dataset(f"{loaded.title} ({plural(count, 'sequence')})", workload_sample(loaded.lengths, count), note=note)


def from_upload(name: str, data: bytes) -> Dataset:
    """Read an uploaded JSONL, JSON, CSV or Parquet file with ``packing.io.read_dataset``."""
    if len(data) > MAX_UPLOAD_MB * 2**20:
        raise InputError(f"{name} is {len(data) / 2**20:.0f} MB; files up to {MAX_UPLOAD_MB} MB can be read")
    try:
        from packing.io import DatasetError, read_dataset
    except Exception:  # the reader is optional: a broken or missing module must not take the page down
        raise InputError("reading files is not available in this installation of packing") from None
    try:
        read = read_dataset(io.BytesIO(data), name=name)
    except DatasetError as error:
        raise InputError(str(error)) from None
    lengths = np.asarray(read.lengths, dtype=np.int64)
    samples = list(read.samples) if read.samples is not None else None
    kind = "sample" if samples is not None else "length"
    return Dataset(f"{name}: {plural(len(lengths), kind)}", lengths, samples)
