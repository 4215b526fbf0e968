"""Page plumbing shared by ``app.py`` and the tabs: the first-start compile, the error guard, and the ``Context``."""

from __future__ import annotations

import gc
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import streamlit as st

import packing
from explorer import cache, compute, workers
from explorer.model import Context, Settings
from explorer.parsing import InputError
from explorer.safety import describe, escape
from explorer.sources import Source

_LOG = logging.getLogger("explorer")
SWITCH_INTERVAL = float(os.environ.get("PACKING_EXPLORER_SWITCH_INTERVAL", "0.001"))
"""Seconds a thread holds the GIL before another waiting one gets it (Python's default: 0.005)."""
_WARM = threading.Event()
_WARM_LOCK = threading.Lock()


def compile_everything() -> float:
    """Run every strategy, ``explain``, ``count_trainable``, ``materialize`` and ``lower_bounds`` once on a tiny
    input, so that numba compiles (or loads from its on-disk cache) every kernel the page uses now, at start,
    and not piecemeal at the first use of each strategy. Returns the seconds it took."""
    started = time.perf_counter()
    compute.warm_searches()
    lengths = np.array(compute.WARM_LENGTHS, dtype=np.int64)
    rows: list[object] = [[1, 2, 3], {"prompt": [4, 5], "completion": [6, 7, 8]}, [9, 10], [1] * 4, [2], [3] * 6]
    samples = packing.read_rows(rows)
    for overflow in packing.OVERFLOW_POLICIES:
        for name in packing.STRATEGIES:
            layout = packing.plan(lengths, 6, compute.strategy_name(name), compute.overflow_policy(overflow))
            packing.count_trainable(layout, samples)
            compute.window(layout, samples, 0, 2, 0)
            compute.window(layout, None, 0, 2, 0)  # lengths-only data: placeholder tokens
    for name in packing.STRATEGIES:
        packing.explain(lengths, 6, compute.strategy_name(name))
    _read_files(rows)
    return time.perf_counter() - started


def _read_files(rows: list[object]) -> None:
    """Read a tiny upload in every file format, so the file readers' compiled loops are ready too."""
    import io
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    lines = "\n".join(json.dumps({"input_ids": r} if isinstance(r, list) else r) for r in rows).encode()
    packing.read_dataset(io.BytesIO(lines), name="warm.jsonl")
    packing.read_dataset(io.BytesIO(b"length\n3\n5\n"), name="warm.csv")
    table = pa.table({"input_ids": [[1, 2, 3], [4, 5]], "loss_mask": [[0, 1, 1], [1, 1]]})
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    packing.read_dataset(io.BytesIO(buffer.getvalue()), name="warm.parquet")


def warm_up() -> None:
    """Compile once per process behind one progress message; later sessions pass straight through."""
    if _WARM.is_set():
        return
    # every session that arrives meanwhile shows the same message and waits for the one compilation
    message = "Preparing the packing kernels (the first start after installing compiles them once)…"
    with st.spinner(message):
        prepare()


def prepare() -> None:
    """Compile (or load) every kernel once per process; callers at the same time wait for the one compilation."""
    with _WARM_LOCK:
        if _WARM.is_set():
            return
        seconds = compile_everything()
        _LOG.info("packing kernels ready in %.1f s", seconds)
        # What is loaded by now (Streamlit, Plotly, numba and the compiled kernels: most of the heap) lives as
        # long as the server; frozen, the garbage collector's full passes no longer walk it on every session's
        # behalf (with `runner.postScriptGC = false` in .streamlit/config.toml, see there).
        gc.collect()
        gc.freeze()
        # A session's kernels and LP solves release the GIL; each return waits for it, up to the switch interval,
        # while other sessions run Python. The proven optimum returns about a thousand times: 8.6 s instead of
        # 0.44 s next to a busy thread at the default 5 ms, 2.2 s at 1 ms (benchmarks/gil.py).
        sys.setswitchinterval(SWITCH_INTERVAL)
        workers.start_soon()  # the searches' processes, a few seconds from now
        _WARM.set()


def limits_note(settings: Settings) -> str:
    """What the page does not do as the link asked, in plain words ('' when it does all of it)."""
    return compute.time_limit_note(settings.strategy, settings.options)


@contextmanager
def guard(what: str) -> Iterator[None]:
    """Show an unexpected failure as one short line instead of a traceback; the rest of the page goes on."""
    try:
        yield
    except Exception as error:  # the page must never show a traceback or a server path
        _LOG.exception("%s failed", what)
        st.error(f"{what} could not be shown: {escape(describe(error))}")


def build_context(source: Source | None, settings: Settings, problem: str) -> Context:
    """Load the data and plan it; every problem is put in plain words in ``Context.problem``."""
    if source is None:
        return Context(None, settings, problem="Upload a file in the sidebar (JSONL, JSON, CSV or Parquet) to pack it.")
    try:
        dataset = cache.dataset(source, settings.completion_only)
    except InputError as error:
        return Context(source, settings, problem=f"Could not read the data: {error}")
    if not dataset.sequences:
        return Context(source, settings, dataset, problem="The data holds no sequences.")
    if problem:
        return Context(
            source, settings, dataset, problem=problem + " The tabs show the last valid result again once it is."
        )
    try:
        run = cache.settings_plan(source, settings)
    except (workers.TimedOut, workers.WorkerDied) as error:
        return Context(source, settings, dataset, problem=f"Planning the data: {error}.")
    refusal = ""
    if run.layout is None:
        from explorer.tables import refusal as word

        refusal = word(run)
    return Context(source, settings, dataset, run.layout, refusal)
