"""Reading and packing a Parquet file against pyarrow reading it alone (target: at most 1.5x), and the peak
resident memory of ``packing pack`` on a large file (target: the input's Arrow size + 1 GiB).

    python benchmarks/read.py                      # 100,000 rows, about 23 M tokens
    python benchmarks/read.py --quick              # 2,000 rows: checks that it runs
    python benchmarks/read.py --cli-tokens 150e6   # also `packing pack` of a ~150 M-token file, peak RSS
    python benchmarks/read.py --cli-tokens 150e6 --cli-forms mask labels arrow --repeat 0   # RSS of each form

The file is what ``datasets`` stores for tokenized data: ``input_ids`` as list<int32> and a loss mask
(list<int8>), log-normal lengths (mean about 230). The command line's file takes one of these forms
(``--cli-forms``): ``mask`` (that Parquet file), ``labels`` (a Parquet file of ``input_ids`` and
transformers' ``labels``, list<int64> with -100 over the first third of each row) or ``arrow`` (the
``labels`` columns as an Arrow IPC stream in record batches of 1,000 rows, what ``save_to_disk`` writes). Both sides are timed alternately in the same run
(medians of ``--repeat`` runs), so load from other processes hits both alike. The packed side is
``packing.pack(packing.read_dataset(path), 4096)`` with every output column made and one value read from
every 4 KiB page of each (``run.touch_every_column``): the one reader checks every row once, column by
column, then the plan and the materializer build the blocks.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from run import touch_every_column  # noqa: E402

import packing  # noqa: E402


def make_file(path: Path, rows: int, seed: int = 0, int64: bool = False) -> int:
    """A Parquet file of ``rows`` token rows (log-normal lengths, mean about 230) with a loss mask; ids int32
    (as ``datasets`` stores tokenizer output) unless ``int64``. Written in slices of 100,000 rows."""
    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.lognormal(5.2, 0.7, rows).astype(np.int64), 1, 4096)
    kind = pa.int64() if int64 else pa.int32()
    schema = pa.schema([("input_ids", pa.list_(kind)), ("loss_mask", pa.list_(pa.int8()))])
    with pq.ParquetWriter(path, schema) as writer:
        for lo in range(0, rows, 100_000):
            part = lengths[lo : lo + 100_000]
            offsets = np.concatenate(([0], np.cumsum(part))).astype(np.int32)
            tokens = rng.integers(0, 50_000, int(offsets[-1]), dtype=np.int64 if int64 else np.int32)
            mask_values = (rng.random(int(offsets[-1])) < 0.7).astype(np.int8)
            ids = pa.ListArray.from_arrays(pa.array(offsets), pa.array(tokens, kind))
            masks = pa.ListArray.from_arrays(pa.array(offsets), pa.array(mask_values))
            if rows <= 2_000:
                masks = pa.array([m if i % 2 else None for i, m in enumerate(masks.to_pylist())], pa.list_(pa.int8()))
            writer.write_table(pa.table({"input_ids": ids, "loss_mask": masks}, schema=schema))
    return int(lengths.sum())


def make_labels_file(path: Path, rows: int, seed: int = 0, arrow: bool = False) -> int:
    """A file of ``rows`` rows of ``input_ids`` (list<int32>) and ``labels`` (list<int64>, -100 over the first
    third of each row, else the id), log-normal lengths as :func:`make_file`: Parquet, or an Arrow IPC stream
    in record batches of 1,000 rows (``arrow``). Written in slices of 100,000 rows."""
    import pyarrow.ipc as ipc

    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.lognormal(5.2, 0.7, rows).astype(np.int64), 1, 4096)
    schema = pa.schema([("input_ids", pa.list_(pa.int32())), ("labels", pa.list_(pa.int64()))])
    sink = pa.OSFile(str(path), "wb")
    writer = ipc.new_stream(sink, schema) if arrow else pq.ParquetWriter(path, schema)
    with sink, writer:
        for lo in range(0, rows, 100_000):
            part = lengths[lo : lo + 100_000]
            offsets = np.concatenate(([0], np.cumsum(part)))
            tokens = rng.integers(0, 50_000, int(offsets[-1]), dtype=np.int32)
            place = np.arange(int(offsets[-1])) - np.repeat(offsets[:-1], part)
            labels = np.where(place < np.repeat(part // 3, part), -100, tokens).astype(np.int64)
            ids = pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(tokens))
            given = pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(labels))
            table = pa.table({"input_ids": ids, "labels": given}, schema=schema)
            if arrow:
                writer.write_table(table, max_chunksize=1_000)
            else:
                writer.write_table(table)
    return int(lengths.sum())


def timed(call: object) -> float:
    """Seconds of ``call()``; its result is freed after the clock stops (for both sides alike)."""
    start = time.perf_counter()
    result = call()  # type: ignore[operator]
    elapsed = time.perf_counter() - start
    del result
    return elapsed


def read_and_pack(path: Path) -> tuple[packing.PackedBatch, int]:
    """Read and pack with every column made and touched; the batch is returned so that freeing it is not
    timed (as the baseline's table is not)."""
    batch = packing.pack(packing.read_dataset(path), 4096)
    return batch, touch_every_column(batch)


_OWN_PEAK = (
    "import atexit, runpy, sys\n"
    "def peak():\n"
    "    print('VmHWM', [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1], file=sys.stderr)\n"
    "atexit.register(peak)\n"
    "sys.argv = ['packing', *sys.argv[1:]]\n"
    "runpy.run_module('packing', run_name='__main__', alter_sys=True)\n"
)
"""Runs the command line and prints its own peak resident memory (``VmHWM``, in KiB) as it exits. The
child's ``ru_maxrss`` is not used: Linux carries the forking parent's resident size into it (the parent here
holds the benchmark's data), which overstated the command line's peak."""


def cli_peak(tokens: float, folder: Path, form: str = "mask") -> None:
    """Peak resident memory of ``python -m packing pack`` on a file of about ``tokens`` tokens of ``form``
    (``mask``, ``labels``, ``arrow``), against the Arrow size of the table pyarrow reads from it."""
    path = folder / ("big.arrow" if form == "arrow" else "big.parquet")
    rows = int(tokens / 232)
    if form == "mask":
        total = make_file(path, rows, seed=1)
    else:
        total = make_labels_file(path, rows, seed=1, arrow=form == "arrow")
    if form == "arrow":
        with pa.memory_map(str(path)) as source:
            arrow = pa.ipc.open_stream(source).read_all().nbytes
    else:
        arrow = pq.read_table(path).nbytes
    out = folder / "packed.parquet"
    arguments = ["pack", str(path), "--output", str(out), "--max-seq-length", "4096"]
    command = [sys.executable, "-c", _OWN_PEAK, *arguments]
    start = time.perf_counter()
    done = subprocess.run(
        command, check=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True
    )
    seconds = time.perf_counter() - start
    peak = int(done.stderr.decode().rsplit("VmHWM", 1)[1].split()[0]) * 1024
    limit = arrow + 2**30
    blocks = pq.ParquetFile(out).metadata.num_rows
    path.unlink()
    print(
        f"packing pack ({form}): {rows:,} rows, {total:,} tokens -> {blocks:,} blocks in {seconds:.0f} s; input Arrow size "
        f"{arrow / 2**30:.2f} GiB; peak RSS {peak / 2**30:.2f} GiB; target <= Arrow size + 1 GiB = "
        f"{limit / 2**30:.2f} GiB: {'met' if peak <= limit else 'not met'}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--cli-tokens", type=float, default=0, help="also measure `packing pack` on this many tokens")
    parser.add_argument("--cli-forms", nargs="+", default=["mask"], choices=["mask", "labels", "arrow"])
    args = parser.parse_args()
    rows = 2_000 if args.quick else args.rows
    print(f"load average {os.getloadavg()[0]:.2f}, {os.getloadavg()[1]:.2f}, {os.getloadavg()[2]:.2f} (1, 5, 15 min)")
    with tempfile.TemporaryDirectory() as folder:
        if args.cli_tokens:  # first, so that it is the only child process measured
            for form in args.cli_forms:
                cli_peak(args.cli_tokens, Path(folder), form)
        if not args.repeat:
            return
        path = Path(folder) / "rows.parquet"
        tokens = make_file(path, rows)
        read_and_pack(path)  # warm-up: compiled kernels, file cache
        arrow, reading, ours = [], [], []
        for _ in range(args.repeat):
            arrow.append(timed(lambda: pq.read_table(path)))
            reading.append(timed(lambda: packing.read_dataset(path)))
            ours.append(timed(lambda: read_and_pack(path)))
    a, r, o = statistics.median(arrow), statistics.median(reading), statistics.median(ours)
    verdict = "n/a (quick)" if args.quick else ("met" if o <= 1.5 * a else "not met")
    print(f"rows {rows:,}, tokens {tokens:,} (int32 ids and a loss mask), repeat {args.repeat}")
    print(f"pyarrow read_table: median {a:.3f} s (min {min(arrow):.3f}, max {max(arrow):.3f})")
    print(f"read_dataset (every row checked): median {r:.3f} s (min {min(reading):.3f}), {r / a:.2f}x pyarrow")
    print(f"read_dataset + pack(4096, bfd), every column made and touched: median {o:.3f} s (min {min(ours):.3f}, "
          f"max {max(ours):.3f})")  # fmt: skip
    print(f"ratio {o / a:.2f}x; target at most 1.5x: {verdict}")
    print(f"load average {os.getloadavg()[0]:.2f}, {os.getloadavg()[1]:.2f}, {os.getloadavg()[2]:.2f} (1, 5, 15 min)")


if __name__ == "__main__":
    main()
