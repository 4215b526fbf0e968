"""Auditing packed files of every layout against pyarrow reading the same file alone.

    python benchmarks/audit.py            # 40,000 documents, about 13 M tokens, max_seq_length 4096
    python benchmarks/audit.py --quick    # 1,000 documents: checks that it runs

For each layout the blocks are exported and written to Parquet once; then ``packing.layouts.audit.audit(path)``
and ``pyarrow.parquet.read_table(path)`` plus one flat numpy copy of every list column (the least any
reader must do) are timed alternately in the same run, medians of ``--repeat`` runs, so load from other
processes hits both alike. The ratio is audit time / baseline time.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

import packing  # noqa: E402
from packing.layouts import LAYOUTS  # noqa: E402
from packing.layouts._export import export  # noqa: E402
from packing.layouts.audit import audit  # noqa: E402


def make_batch(documents: int, seed: int = 0) -> packing.PackedBatch:
    """Log-normal document lengths (median about 330), a prompt/completion split, packed by bfd into 4096."""
    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.lognormal(np.log(330), 0.8, documents).astype(np.int64), 2, 4096)
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    tokens = rng.integers(1, 50_000, int(offsets[-1]), dtype=np.int64)
    rows = [
        {
            "prompt": tokens[offsets[i] : offsets[i] + lengths[i] // 3],
            "completion": tokens[offsets[i] + lengths[i] // 3 : offsets[i + 1]],
        }
        for i in range(documents)
    ]
    return packing.pack(rows, 4096, strategy="bfd")


def baseline(path: Path) -> None:
    """Read the file and copy every list column's values into one numpy array."""
    table = pq.read_table(path)
    for name in table.column_names:
        pc.list_flatten(table.column(name)).to_numpy(zero_copy_only=False)


def seconds(call: Callable[[Path], object], path: Path) -> float:
    start = time.perf_counter()
    call(path)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    batch = make_batch(1_000 if args.quick else 40_000)
    tokens = int((batch.sequence_ids >= 0).sum())
    print(f"{batch.num_blocks:,} blocks, {tokens:,} tokens, max_seq_length {batch.max_seq_length:,}")
    print(f"{'layout':12}  {'audit':>9}  {'read only':>9}  {'ratio':>6}  {'M tokens/s':>10}  findings")
    with tempfile.TemporaryDirectory() as folder:
        for layout in LAYOUTS:
            path = Path(folder) / f"{layout}.parquet"
            pq.write_table(export(batch, layout), path)
            report = audit(path)  # warm up (and check)
            times_audit, times_base = [], []
            for _ in range(args.repeat):  # interleaved
                times_audit.append(seconds(audit, path))
                times_base.append(seconds(baseline, path))
            mine, base = statistics.median(times_audit), statistics.median(times_base)
            print(
                f"{layout:12}  {mine:8.3f}s  {base:8.3f}s  {mine / base:5.1f}x  {tokens / mine / 1e6:10.1f}  "
                f"{report.counts() or 'none'}"
            )


if __name__ == "__main__":
    main()
