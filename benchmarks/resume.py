"""Long runs: resuming ``PackingSampler`` against the steps consumed, and the THD padding of context parallelism.

1. **Resume time.** A job restarts at step ``k`` of an epoch: it makes its sampler and loads the saved state, then
   takes its first step. Measured for ``k`` from 0 to the last step, on as many ranks as saved (2) and on 3
   (the rest of the epoch packed anew), against two replays: a fresh sampler stepped ``k`` times (indices only:
   the least a replay can cost) and a ``DataLoader`` skipping ``k`` batches (rows read and collated: what a loader
   without sampler state does, and how trainers skip batches on resume). Medians of
   ``--repeats`` interleaved runs (every ``k`` and method in turn, in a new order each round), in one process.
2. **THD padding.** For each real length distribution (``packing/workloads``) and context-parallel size ``cp``, every
   document padded to a multiple of ``2·cp``: the padding added per real token, and the blocks the planner then
   needs (``bfd``, counting the padding) against ``cp = 1``.

    python benchmarks/resume.py             # 200,000 log-normal lengths (L=4096); every workload (Wikipedia: 1M)
    python benchmarks/resume.py --quick     # small sizes, seconds

Prints Markdown tables and the load average.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

import packing  # noqa: E402
from packing._workloads import WORKLOADS, load_workload  # noqa: E402
from packing.core._thd import padded_lengths  # noqa: E402
from packing.torch import PackingSampler  # noqa: E402

SAVED_RANKS = 2


def resumed(lengths: np.ndarray, length: int, state: dict[str, object], ranks: int) -> Callable[[], object]:
    def run() -> object:
        sampler = PackingSampler(lengths, length, num_replicas=ranks, rank=0, seed=0)
        sampler.load_state_dict(state)
        return next(iter(sampler), None)

    return run


def replayed(lengths: np.ndarray, length: int, steps: int) -> Callable[[], object]:
    def run() -> object:
        sampler = PackingSampler(lengths, length, num_replicas=SAVED_RANKS, rank=0, seed=0)
        iterator = iter(sampler)
        for _ in range(steps):
            next(iterator)
        return next(iterator, None)

    return run


class Rows:
    """``count`` rows of token ids made when read (as a dataset reads them), ``lengths[i]`` tokens each."""

    def __init__(self, lengths: np.ndarray) -> None:
        self.lengths = lengths

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, index: int) -> np.ndarray:
        return np.full(int(self.lengths[index]), 1 + index % 1000, dtype=np.int64)


def replayed_batches(lengths: np.ndarray, length: int, steps: int) -> Callable[[], object]:
    def run() -> object:
        sampler = PackingSampler(lengths, length, num_replicas=SAVED_RANKS, rank=0, seed=0)
        loader = DataLoader(Rows(lengths), batch_sampler=sampler, collate_fn=sampler.collate)  # type: ignore[arg-type]
        iterator = iter(loader)
        for _ in range(steps):
            next(iterator)
        return next(iterator, None)

    return run


def resume_table(quick: bool, repeats: int) -> list[str]:
    rng = np.random.default_rng(0)
    count = 20_000 if quick else 200_000
    lengths = np.clip(rng.lognormal(np.log(300), 1.2, count).astype(np.int64), 1, 4096)
    sampler = PackingSampler(lengths, 4096, num_replicas=SAVED_RANKS, rank=0, seed=0)
    steps = len(sampler)
    points = sorted({0, steps // 100, steps // 10, steps // 2, steps - 1})
    states = {}
    for k in points:  # the state after k steps: the same on every rank
        iterator = iter(sampler)
        for _ in range(k):
            next(iterator)
        states[k] = sampler.state_dict()
        sampler.set_epoch(1)
        sampler.set_epoch(0)
    started = time.perf_counter()
    sampler.state_dict()
    saving = time.perf_counter() - started
    methods = {
        "resume, 2 ranks": lambda k: resumed(lengths, 4096, states[k], SAVED_RANKS),
        "resume, 3 ranks": lambda k: resumed(lengths, 4096, states[k], 3),
        "replay of indices, 2 ranks": lambda k: replayed(lengths, 4096, k),
        "replay of batches, 2 ranks": lambda k: replayed_batches(lengths, 4096, k),
    }
    times: dict[tuple[str, int], list[float]] = {(m, k): [] for m in methods for k in points}
    order = [(m, k) for m in methods for k in points]
    for round_ in range(repeats):
        for method, k in np.random.default_rng(round_).permutation(np.array(order, dtype=object)).tolist():
            run = methods[method](k)
            started = time.perf_counter()
            run()
            times[(method, k)].append(time.perf_counter() - started)
    median = {key: statistics.median(values) for key, values in times.items()}
    lines = [
        f"{count:,} log-normal lengths (median 300, sigma 1.2), L=4096, bfd, saved on {SAVED_RANKS} ranks: {steps:,} "
        f"steps an epoch; `state_dict()` takes {saving * 1e3:.1f} ms (it fingerprints the lengths).",
        "",
        "| steps consumed | " + " | ".join(f"{m} (s)" for m in methods) + " | resume 2 ranks / at step 0 |",
        "|---|" + "---|" * (len(methods) + 1),
    ]
    for k in points:
        cells = [f"{median[(m, k)]:.3f}" for m in methods]
        ratio = median[("resume, 2 ranks", k)] / median[("resume, 2 ranks", 0)]
        lines.append(f"| {k:,} | " + " | ".join(cells) + f" | {ratio:.2f} |")
    return lines


def padding_table(quick: bool) -> list[str]:
    lines = [
        "| workload | L | cp | padding per real token | blocks (bfd, padding counted) | vs cp = 1 | efficiency |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in WORKLOADS:
        workload = load_workload(name)
        lengths = np.asarray(workload.lengths)
        limit = 100_000 if quick else 1_000_000
        label = workload.title if len(lengths) <= limit else f"{workload.title} (first {limit:,})"
        lengths = lengths[:limit]
        capacity = workload.max_seq_length
        real = int(np.minimum(lengths, capacity).sum())
        base = None
        for cp in (1, 2, 4, 8, 16):
            multiple = 2 * cp if cp > 1 else 1
            padded = int(padded_lengths(np.minimum(lengths, capacity), multiple).sum())
            layout = packing.plan(lengths, capacity, strategy="bfd", context_parallel_size=cp)
            base = base or layout.num_blocks
            lines.append(
                f"| {label if cp == 1 else 'same'} | {capacity} | {cp} | {100 * (padded - real) / real:.2f} % | "
                f"{layout.num_blocks:,} | {100 * (layout.num_blocks / base - 1):+.2f} % | "
                f"{100 * layout.stats.efficiency:.2f} % |"
            )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description="PackingSampler resume time; THD padding overhead")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print("\n".join(resume_table(args.quick, 3 if args.quick else args.repeats)))
    print()
    print("\n".join(padding_table(args.quick)))
    print()
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
