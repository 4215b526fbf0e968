"""Reading and packing a Parquet file against pyarrow reading it alone (issue target: at most 1.5x).

    python benchmarks/read.py            # 100,000 rows, about 25 M tokens
    python benchmarks/read.py --quick    # 2,000 rows: checks that it runs

Both sides are timed alternately in the same run (medians of ``--repeat`` runs), so load
from other processes hits both alike. The packed side is ``packing.pack(packing.read_dataset(path),
4096)``: the one reader checks every row once, column by column, then the plan and the
materializer build every output array.
"""

from __future__ import annotations

import argparse
import statistics
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

import packing  # noqa: E402


def make_file(path: Path, rows: int, seed: int = 0) -> int:
    """A Parquet file of ``rows`` token rows (log-normal lengths, mean about 250) and half with a loss mask."""
    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.lognormal(5.2, 0.7, rows).astype(np.int64), 1, 4096)
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    tokens = rng.integers(0, 50_000, int(offsets[-1]), dtype=np.int64)
    ids = pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(tokens))
    mask_values = (rng.random(int(offsets[-1])) < 0.7).astype(np.int8)
    masks = pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(mask_values))
    masks = pa.array([m if i % 2 else None for i, m in enumerate(masks.to_pylist())]) if rows <= 2_000 else masks
    pq.write_table(pa.table({"input_ids": ids, "loss_mask": masks}), path)
    return int(offsets[-1])


def timed(call: object) -> float:
    start = time.perf_counter()
    call()  # type: ignore[operator]
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    rows = 2_000 if args.quick else 100_000
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "rows.parquet"
        tokens = make_file(path, rows)
        packing.pack(packing.read_dataset(path), 4096)  # warm-up: compiled kernels, file cache
        arrow, reading, ours = [], [], []
        for _ in range(args.repeat):
            arrow.append(timed(lambda: pq.read_table(path)))
            reading.append(timed(lambda: packing.read_dataset(path)))
            ours.append(timed(lambda: packing.pack(packing.read_dataset(path), 4096)))
    a, r, o = statistics.median(arrow), statistics.median(reading), statistics.median(ours)
    verdict = "n/a (quick)" if args.quick else ("met" if o <= 1.5 * a else "not met")
    print(f"rows {rows:,}, tokens {tokens:,}, repeat {args.repeat}")
    print(f"pyarrow read_table: median {a:.3f} s (min {min(arrow):.3f}, max {max(arrow):.3f})")
    print(f"read_dataset (every row checked): median {r:.3f} s (min {min(reading):.3f}), {r / a:.2f}x pyarrow")
    print(f"read_dataset + pack(4096, bfd): median {o:.3f} s (min {min(ours):.3f}, max {max(ours):.3f})")
    print(f"ratio {o / a:.2f}x; target at most 1.5x: {verdict}")


if __name__ == "__main__":
    main()
