"""Cached calls for the page. Big inputs are passed as ``_``-prefixed arguments (not hashed) next to a
short ``key`` that identifies them, so a rerun never re-hashes millions of tokens.

Datasets and flattened samples are shared objects (``cache_resource``, never modified);
packing results are ``cache_data``.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import streamlit as st

import packing
from explorer import compute, data
from explorer.compute import StrategyRun, Window
from explorer.data import Dataset

Spec = tuple[Any, ...]


def spec_key(spec: Spec) -> str:
    """A short stable identifier of a data specification."""
    return hashlib.sha1(repr(spec).encode("utf-8")).hexdigest()[:16]


@st.cache_resource(max_entries=16, show_spinner="Reading the data…")
def load_dataset(key: str, spec: Spec, _upload: bytes | None = None) -> Dataset:
    """The dataset a specification describes; raises ``InputError`` on bad input (not cached)."""
    kind = spec[0]
    if kind == "paste":
        return data.from_text(spec[1])
    if kind == "synthetic":
        return data.synthetic(*spec[1:])
    if kind == "workload":
        return data.workload(*spec[1:])
    if kind == "upload" and _upload is not None:
        return data.from_upload(spec[1], _upload)
    raise ValueError(f"unknown data source {kind!r}")


@st.cache_resource(max_entries=16, show_spinner="Reading the samples…")
def flat_samples(key: str, _dataset: Dataset, completion_only: bool) -> packing.Samples | None:
    """All samples' tokens and loss masks, flat (None for lengths-only data)."""
    if _dataset.samples is None:
        return None
    return packing.read_samples(_dataset.samples, completion_only)


@st.cache_data(max_entries=64, show_spinner="Packing…")
def plan(key: str, _lengths: np.ndarray, max_seq_length: int, strategy: str, overflow: str) -> StrategyRun:
    """``packing.plan`` (timed; a refusal is reported in ``error``)."""
    return compute.run_strategy(_lengths, max_seq_length, strategy, overflow)


@st.cache_data(max_entries=64, show_spinner=False)
def bounds(key: str, _lengths: np.ndarray, max_seq_length: int, overflow: str) -> packing.LowerBounds:
    """``packing.lower_bounds``."""
    return packing.lower_bounds(_lengths, max_seq_length, overflow)


@st.cache_data(max_entries=64, show_spinner="Counting trainable tokens…")
def trainable(
    key: str, _layout: packing.PackingPlan, _flat: packing.Samples | None, pad: int
) -> packing.TrainableCounts:
    """Trainable tokens and training targets over the whole plan. ``key`` names data, settings and loss."""
    return compute.trainable_counts(_layout, _flat)


@st.cache_data(max_entries=128, show_spinner=False)
def window(
    key: str, _layout: packing.PackingPlan, _flat: packing.Samples | None, first: int, count: int, pad: int
) -> Window:
    """Blocks ``first .. first + count - 1`` materialized."""
    return compute.window(_layout, _flat, first, count, pad)


@st.cache_data(max_entries=32, show_spinner="Running every strategy…")
def compare(
    key: str, _lengths: np.ndarray, max_seq_length: int, overflow: str
) -> tuple[list[StrategyRun], dict[str, packing.ComputeCost]]:
    """Every strategy on the same lengths, with each one's compute estimate."""
    runs = compute.compare(_lengths, max_seq_length, overflow)
    costs = {run.strategy: packing.compute_cost(run.layout) for run in runs if run.layout is not None}
    return runs, costs


@st.cache_data(max_entries=32, show_spinner="Sweeping max_seq_length…")
def sweep(
    key: str, _lengths: np.ndarray, sizes: tuple[int, ...], strategies: tuple[str, ...], overflow: str
) -> list[dict[str, Any]]:
    """Blocks and efficiency per strategy and max_seq_length."""
    return compute.sweep(_lengths, list(sizes), list(strategies), overflow)


@st.cache_data(max_entries=32, show_spinner="Replaying the strategy…")
def explain(key: str, _lengths: np.ndarray, max_seq_length: int, strategy: str, overflow: str) -> list[packing.Step]:
    """``packing.explain`` steps (raises ``ValueError`` when the input is too large)."""
    return compute.explain_steps(_lengths, max_seq_length, strategy, overflow)
