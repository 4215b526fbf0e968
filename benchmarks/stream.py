"""Streaming packing (``packing.stream``) against packing the whole dataset at once (global bfd).

Log-normal lengths (median 300, sigma 1, clipped to 1..2048, numpy ``default_rng(0)``), L = 2048. For each
stream length and buffer size: the efficiency of the streamed blocks (real tokens / block slots), the number of
blocks, and the peak memory traced by ``tracemalloc`` while streaming rows made on demand (the stream never
exists whole), and that peak per buffered token (``buffer_size`` × the mean length; target for a buffer
of 10,000: at most 12 bytes, flat as the stream grows). Rows are int32 arrays, as ``datasets`` hands
tokenized rows. The global row packs the same lengths with ``packing.plan(..., "bfd")``; its memory is the
peak of ``packing.pack`` over all rows held in a list (what packing a whole dataset needs).

    python benchmarks/stream.py            # 25,000 and 100,000 samples; buffers 1,000 / 10,000 / 100,000
    python benchmarks/stream.py --quick    # 5,000 and 20,000 samples, seconds

Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

import packing  # noqa: E402
from packing.streaming import stream  # noqa: E402

L = 2048
TARGET_POINTS = 0.2


def lengths_of(count: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    return np.clip(rng.lognormal(np.log(300), 1.0, count).astype(np.int64), 1, L)


def rows(lengths: np.ndarray) -> Iterator[np.ndarray]:
    for n in lengths.tolist():
        yield np.ones(n, dtype=np.int32)


def streamed(lengths: np.ndarray, buffer_size: int) -> tuple[int, float, int, float]:
    """Blocks, efficiency, peak traced bytes and seconds of streaming these lengths."""
    source = rows(lengths)
    blocks = tokens = 0
    tracemalloc.start()
    start = time.perf_counter()
    for block in stream(source, L, buffer_size=buffer_size):
        blocks += 1
        tokens += int(block["seq_lengths"].sum())
    seconds = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert tokens == int(lengths.sum())
    return blocks, tokens / (blocks * L), peak, seconds


def whole(lengths: np.ndarray) -> tuple[int, float, int]:
    """Blocks and efficiency of global bfd, and the peak traced bytes of packing every row at once."""
    layout = packing.plan(lengths, L, strategy="bfd")
    tracemalloc.start()
    everything = list(rows(lengths))
    packing.pack(everything, L, strategy="bfd")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return layout.num_blocks, layout.stats.efficiency, peak


def main() -> None:
    parser = argparse.ArgumentParser(description="streaming packing against global bfd")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    counts = (5_000, 20_000) if args.quick else (25_000, 100_000)
    buffers = (1_000, 10_000) if args.quick else (1_000, 10_000, 100_000)
    list(stream(rows(lengths_of(100)), L, buffer_size=50))  # compile once
    load_before = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    print(
        "| samples | packing | blocks | efficiency | vs global bfd | peak memory | per buffered token | time (under tracemalloc) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for count in counts:
        lengths = lengths_of(count)
        blocks, efficiency, peak = whole(lengths)
        print(f"| {count:,} | global bfd (`pack`, all rows in memory) | {blocks:,} | {efficiency:.3%} | — | "
              f"{peak / 2**20:,.0f} MiB | {peak / lengths.sum():.1f} B per input token | — |")  # fmt: skip
        for size in buffers:
            if size > count:
                continue
            b, e, p, seconds = streamed(lengths, size)
            points = (efficiency - e) * 100
            met = "met" if points <= TARGET_POINTS or size != 10_000 else "not met"
            note = f"−{points:.3f} points" + (f" (target ≤ {TARGET_POINTS}: {met})" if size == 10_000 else "")
            per_token = p / (size * lengths.mean())
            bytes_note = f"{per_token:.1f} B" + (
                f" (target ≤ 12: {'met' if per_token <= 12 else 'not met'})" if size == 10_000 else ""
            )
            print(f"| {count:,} | `stream`, buffer {size:,} | {b:,} | {e:.3%} | {note} | {p / 2**20:,.0f} MiB | "
                  f"{bytes_note} | {seconds:.1f} s |", flush=True)  # fmt: skip

    print()
    load_after = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    print(f"load average (1, 5, 15 min): {load_before} before, {load_after} after")


if __name__ == "__main__":
    main()
