"""Packing on a local Ray cluster against one process: rows/s, tokens/s and driver memory.

From the repository root::

    python benchmarks/ray_pack.py --quick            # 20,000 rows: checks that everything runs (about a minute)
    python benchmarks/ray_pack.py                    # 1,000,000 rows, median length 32, L=512 (a few minutes)
    python benchmarks/ray_pack.py --rows 200000 --median 330 --max-seq-length 4096 --cpus 2

The rows (``input_ids`` with log-normal lengths) are written once to Parquet files in a
temporary directory; both sides read them, pack with ``bfd`` and shuffled blocks, and write
Parquet: one process with ``pyarrow`` and the library (Arrow reader, ``plan``, ``materialize``),
the cluster with ``ray.data.read_parquet`` -> ``packing.ray.pack_dataset`` -> ``write_parquet``.
Both outputs are checked to hold the same blocks. Times are medians of ``--repeat`` runs
(one warm-up first, which compiles the kernels), the two sides interleaved. Driver memory is
the driver's peak resident memory above its level before the run (sampled every 5 ms).
The second table is the cost of shard-local packing (``Dataset.map(pack_batch)``, TRL's
per-batch packing) against one global plan, from lengths alone.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import itertools
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import numpy.typing as npt  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

import packing  # noqa: E402
import packing.reading  # noqa: E402

Int64Array = npt.NDArray[np.int64]


def lognormal_lengths(n: int, median: float, seed: int = 0) -> Int64Array:
    rng = np.random.default_rng(seed)
    lengths: Int64Array = np.maximum(1, np.rint(rng.lognormal(np.log(median), 1.0, n))).astype(np.int64)
    return lengths


def write_rows(directory: Path, lengths: Int64Array, files: int, seed: int = 1) -> int:
    """``input_ids`` rows with these lengths in ``files`` Parquet files; returns the number of tokens."""
    rng = np.random.default_rng(seed)
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    tokens = rng.integers(1, 32_000, int(offsets[-1]), dtype=np.int64)
    directory.mkdir(parents=True, exist_ok=True)
    bounds = np.linspace(0, len(lengths), files + 1).astype(np.int64)
    for index, (lo, hi) in enumerate(itertools.pairwise(bounds)):
        values = pa.array(tokens[offsets[lo] : offsets[hi]])
        column = pa.LargeListArray.from_arrays(pa.array(offsets[lo : hi + 1] - offsets[lo]), values)
        pq.write_table(pa.table({"input_ids": column}), directory / f"part-{index:04d}.parquet")
    return int(offsets[-1])


def single_process(source: Path, target: Path, max_seq_length: int, seed: int) -> pa.Table:
    """Read, plan, shuffle, materialize and write in one process with the library."""
    samples = packing.reading.read_table(pq.read_table(source))
    layout = packing.plan(samples.lengths, max_seq_length, strategy="bfd").shuffle(seed)
    out = packing.materialize(layout, samples).to_arrow()
    pq.write_table(out, target)
    return out


def resident_bytes() -> int:
    """This process's resident memory (Linux), in bytes."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class PeakMemory:
    """The driver's peak resident memory above where it started, sampled every 5 ms in a thread."""

    def __init__(self) -> None:
        gc.collect()
        with contextlib.suppress(OSError):  # hand freed heap pages back, so new arrays show in the resident size
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        self.base = resident_bytes()
        self.peak = self.base
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, resident_bytes())

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return max(self.peak, resident_bytes()) - self.base


def on_ray(source: Path, target: Path, max_seq_length: int, seed: int) -> tuple[float, float, int]:
    """The cluster's run: returns (seconds in pack_dataset, seconds writing, peak driver bytes above the start)."""
    import ray.data

    from packing.ray import pack_dataset

    memory = PeakMemory()
    start = time.perf_counter()
    packed = pack_dataset(ray.data.read_parquet(str(source)), max_seq_length, strategy="bfd", seed=seed)
    planned = time.perf_counter()
    packed.write_parquet(str(target))
    done = time.perf_counter()
    return planned - start, done - planned, memory.stop()


def same_blocks(single: pa.Table, directory: Path) -> bool:
    files = sorted(directory.glob("*.parquet"))
    cluster = pa.concat_tables([pq.read_table(f) for f in files])
    return bool(cluster.num_rows == single.num_rows and cluster.equals(single.cast(cluster.schema)))


def shard_local_table(lengths: Int64Array, max_seq_length: int, batch_sizes: list[int]) -> list[dict[str, Any]]:
    """Blocks and efficiency of packing each batch of ``batch_size`` rows alone vs one global plan (bfd)."""
    tokens = int(np.minimum(lengths, max_seq_length).sum())
    bound = -(-tokens // max_seq_length)
    rows = []
    global_blocks = packing.plan(lengths, max_seq_length, strategy="bfd").num_blocks
    for size in batch_sizes:
        blocks = sum(
            packing.plan(lengths[lo : lo + size], max_seq_length, strategy="bfd").num_blocks
            for lo in range(0, len(lengths), size)
        )
        rows.append({"packing": f"shard-local, {size:,} rows a batch", "blocks": blocks})
    rows.append({"packing": "global (one plan)", "blocks": global_blocks})
    for row in rows:
        row["efficiency"] = tokens / (row["blocks"] * max_seq_length)
        row["over bound"] = row["blocks"] / bound - 1
        row["extra vs global"] = row["blocks"] / global_blocks - 1
    return rows


def driver_steps(lengths: Int64Array, max_seq_length: int) -> dict[str, float]:
    """What the driver does between receiving the lengths and launching the shuffle, timed step by step."""
    from packing.ray import _Layout, _RowIds

    uid = np.arange(len(lengths), dtype=np.int64)  # one task's row numbers
    steps: dict[str, list[float]] = {"row ids": [], "plan (bfd)": [], "shuffle": [], "groups by row": []}
    for _ in range(3):
        t0 = time.perf_counter()
        ids = _RowIds.of(uid)
        order = np.empty(len(uid), dtype=np.int64)
        order[ids.rows(uid)] = lengths
        t1 = time.perf_counter()
        layout = packing.plan(order, max_seq_length, strategy="bfd")
        t2 = time.perf_counter()
        shuffled = layout.shuffle(0)
        t3 = time.perf_counter()
        _Layout.of(shuffled, ids, 1, None)
        t4 = time.perf_counter()
        for name, seconds in zip(steps, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
            steps[name].append(seconds)
    return {name: statistics.median(values) for name, values in steps.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--median", type=float, default=32.0)
    parser.add_argument("--max-seq-length", type=int, default=512)
    parser.add_argument("--files", type=int, default=16)
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="20,000 rows, one run")
    args = parser.parse_args(argv)
    rows = 20_000 if args.quick else args.rows
    lengths = lognormal_lengths(rows, args.median)
    import ray

    ray.init(
        num_cpus=args.cpus,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}},
    )
    context = ray.data.DataContext.get_current()
    context.execution_options.preserve_order = True
    context.enable_progress_bars = False
    try:
        with tempfile.TemporaryDirectory() as scratch:
            work = Path(scratch)
            tokens = write_rows(work / "rows", lengths, args.files)
            print(f"{rows:,} rows, {tokens:,} tokens, L={args.max_seq_length}, {args.cpus} CPUs", file=sys.stderr)
            from packing.ray import pack_dataset

            warm = ray.data.from_items([{"input_ids": [1, 2, 3]}] * 100)  # fixed costs: imports, first calls
            pack_dataset(warm, args.max_seq_length).take_all()
            single_times, ray_times, prepare_times = [], [], []
            peak = 0
            for run in range(args.repeat + 1):  # run 0 warms up (kernels compile, workers start)
                # the cluster first: in run 0 the driver has never held the tokens, so its growth is the driver's
                prepare, write, growth = on_ray(work / "rows", work / f"ray-{run}", args.max_seq_length, 0)
                peak = growth if run == 0 else peak
                t0 = time.perf_counter()
                single = single_process(work / "rows", work / f"single-{run}.parquet", args.max_seq_length, 0)
                single_time = time.perf_counter() - t0
                if not same_blocks(single, work / f"ray-{run}"):
                    raise SystemExit("the cluster's blocks differ from one process's")
                print(f"run {run}: one process {single_time:.2f} s, Ray {prepare + write:.2f} s", file=sys.stderr)
                if run or not args.repeat:
                    single_times.append(single_time)
                    ray_times.append(prepare + write)
                    prepare_times.append(prepare)
                for leftover in (work / f"single-{run}.parquet", *(work / f"ray-{run}").glob("*")):
                    leftover.unlink()
    finally:
        ray.shutdown()
    one, many = statistics.median(single_times), statistics.median(ray_times)
    blocks = single.num_rows
    print(
        f"\n{rows:,} rows ({tokens:,} tokens, median length {args.median:g}), L={args.max_seq_length}, bfd, "
        f"shuffled; {blocks:,} blocks; {args.cpus} Ray CPUs on {os.cpu_count()} shared cores\n"
    )
    print("| run | time | rows/s | tokens/s | driver |")
    print("|---|---|---|---|---|")
    print(
        f"| one process (read, plan, materialize, write) | {one:.2f} s | {rows / one:,.0f} | {tokens / one:,.0f} | "
        f"all tokens and blocks |"
    )
    print(
        f"| Ray Data, `pack_dataset` + `write_parquet` | {many:.2f} s | {rows / many:,.0f} | {tokens / many:,.0f} | "
        f"+{peak / 2**20:.0f} MiB at the peak; {statistics.median(prepare_times):.2f} s to plan "
        f"(read, lengths, plan) |"
    )
    print(
        f"\nRay / one process: {many / one:.1f}x the time. Shuffled: the rows' columns to their groups of blocks "
        f"(groupby, a row cut across groups to each), then the blocks (sort).\n"
    )
    standard = lognormal_lengths(100_000 if args.quick else 1_000_000, 330)
    print(f"Driver work alone on {len(standard):,} lengths (median 330, L=4096), median of 3:\n")
    print("| step | time |")
    print("|---|---|")
    for step, seconds in driver_steps(standard, 4096).items():
        print(f"| {step} | {seconds * 1000:,.0f} ms |")
    for name, data, width in (
        (f"these {rows:,} rows, L={args.max_seq_length}", lengths, args.max_seq_length),
        (f"{len(standard):,} log-normal lengths (median 330), L=4096", standard, 4096),
    ):
        print(f"\nShard-local against global packing (bfd), {name}:\n")
        print("| packing | blocks | efficiency | over the bound | extra vs global |")
        print("|---|---|---|---|---|")
        for row in shard_local_table(data, width, [100, 1_000, 10_000]):
            print(
                f"| {row['packing']} | {row['blocks']:,} | {row['efficiency']:.3%} | {row['over bound']:+.3%} | "
                f"{row['extra vs global']:+.3%} |"
            )


if __name__ == "__main__":
    main()
