"""What the page's first use would compile, compiled once: every kernel its tabs reach, on tiny inputs of every kind
it reads. No Streamlit, no server: ``explorer.server.warmup`` runs it once per process, before the first visitor."""

from __future__ import annotations

import time

import numpy as np

import packing
import packing.recipe
import packing.strategies
from explorer.core import runs as compute


def compile_everything() -> float:
    """Run every strategy, ``explain``, ``count_trainable``, ``materialize`` (every column read) and
    ``lower_bounds`` once on tiny inputs of every kind the page reads (Python rows, each file format, 32- and
    64-bit ids, masked or not, lengths only), so that numba compiles (or loads from its on-disk cache) every kernel
    the page uses now, at start, and not piecemeal at the first use of each. Returns the seconds it took."""
    started = time.perf_counter()
    compute.warm_searches()
    lengths = np.array(compute.WARM_LENGTHS, dtype=np.int64)
    rows: list[object] = [[1, 2, 3], {"prompt": [4, 5], "completion": [6, 7, 8]}, [9, 10], [1] * 4, [2], [3] * 6]
    kinds = [packing.read_rows(rows), packing.read_rows([[1, 2, 3], [4, 5], [6], [7] * 4, [8], [9] * 6]), None]
    kinds += _read_files(rows)
    for overflow in packing.recipe.OVERFLOW_POLICIES:
        for name in packing.strategies.STRATEGIES:
            plan = packing.plan(
                lengths, 6, strategy=compute.strategy_name(name), overflow=compute.overflow_policy(overflow)
            )
            for samples in kinds:
                _use(plan, samples)
    for name in packing.strategies.STRATEGIES:
        packing.explain(lengths, 6, strategy=compute.strategy_name(name))
    return time.perf_counter() - started


def _use(plan: packing.PackingPlan, samples: packing.Samples | None) -> None:
    """What the tabs do with a plan and its samples: count what trains, build blocks and read every column,
    weigh the documents (``samples`` None: lengths-only data)."""
    from explorer.core.weighting import targets_per_document

    if samples is not None and not np.array_equal(samples.lengths, plan.lengths):
        strategy, overflow = compute.strategy_name(plan.strategy), compute.overflow_policy(plan.overflow)
        plan = packing.plan(samples.lengths, 6, strategy=strategy, overflow=overflow)
    if samples is not None:
        packing.count_trainable(plan, samples)
    window = compute.window(plan, samples, 0, 2, 0)
    for column in ("labels", "position_ids", "sequence_ids", "loss_mask"):
        getattr(window.batch, column)
    targets_per_document(plan, samples)


def _read_files(rows: list[object]) -> list[packing.Samples | None]:
    """A tiny upload read in every file format, with 32- and 64-bit ids: the file readers' compiled loops
    ready too. Returns the samples read."""
    import io
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    lines = "\n".join(json.dumps({"input_ids": r} if isinstance(r, list) else r) for r in rows).encode()
    read: list[packing.Samples | None] = [packing.read_dataset(io.BytesIO(lines), name="warm.jsonl").samples]
    packing.read_dataset(io.BytesIO(b"length\n3\n5\n"), name="warm.csv")
    for ids in (pa.int64(), pa.int32()):
        table = pa.table(
            {
                "input_ids": pa.array([[1, 2, 3], [4, 5]], pa.list_(ids)),
                "loss_mask": pa.array([[0, 1, 1], [1, 1]], pa.list_(pa.int8())),
            }
        )
        buffer = io.BytesIO()
        pq.write_table(table, buffer)
        read.append(packing.read_dataset(io.BytesIO(buffer.getvalue()), name="warm.parquet").samples)
        plain = io.BytesIO()
        pq.write_table(table.select(["input_ids"]), plain)
        read.append(packing.read_dataset(io.BytesIO(plain.getvalue()), name="warm.parquet").samples)
    return read
