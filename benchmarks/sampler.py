"""Compute balance of ``packing.torch.PackingSampler`` across data-parallel ranks.

A step waits for its slowest rank. For each workload and rank count, one epoch's blocks (bfd) are dealt to
ranks two ways: ours (blocks of similar cost in the same step) and a shuffled dealing of the very same blocks
(what a sampler does without balancing). The imbalance of an epoch is the sum over steps of
the slowest rank's cost over the sum of the mean rank's cost, minus 1: the extra time the epoch takes. The
cost of a document of ℓ tokens is 24576·ℓ + ℓ². Medians over ``--epochs`` epochs (seeds 0..).

    python benchmarks/sampler.py             # OpenChat V1 (L=2048) and 200,000 log-normal lengths (L=4096)
    python benchmarks/sampler.py --quick     # small sizes, seconds

Prints a Markdown table. Schedule time is the median time to build one epoch's schedule on one rank,
with the median time of ``packing.plan`` alone on the same lengths measured interleaved, in the same run.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

import packing  # noqa: E402
from packing._workloads import load_workload  # noqa: E402
from packing.torch import Schedule, build_schedule  # noqa: E402

TARGET = 0.02


def shuffled_dealing(schedule: Schedule, seed: int) -> Schedule:
    """The very same blocks dealt to steps and ranks in a random order (costs only)."""
    costs = np.random.default_rng(seed).permutation(schedule.costs.reshape(-1)).reshape(schedule.costs.shape)
    return dataclasses.replace(schedule, costs=costs)


def workloads(quick: bool) -> list[tuple[str, np.ndarray, int]]:
    rng = np.random.default_rng(0)
    count = 20_000 if quick else 200_000
    lognormal = np.clip(rng.lognormal(np.log(300), 1.2, count).astype(np.int64), 1, 4096)
    chat = load_workload("openchat_v1_2048")
    lengths = chat.lengths[:3000] if quick else chat.lengths
    return [
        (f"OpenChat V1, {len(lengths):,} samples, L=2048", np.asarray(lengths), 2048),
        (f"log-normal (median 300, sigma 1.2), {count:,} samples, L=4096", lognormal, 4096),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description="PackingSampler compute balance")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--epochs", type=int, default=5)
    args = parser.parse_args()
    epochs = 2 if args.quick else args.epochs
    print("| workload | ranks | steps | ours: imbalance | ours: worst step | shuffled: imbalance | shuffled: worst step"
          " | target ≤ 2 % | schedule time | plan alone |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, lengths, length in workloads(args.quick):
        build_schedule(lengths, length, 2)  # compile once
        for replicas in (2, 8):
            rows: dict[str, list[float]] = {k: [] for k in ("ours", "ours_worst", "dealt", "dealt_worst", "t", "p")}
            steps = 0
            for epoch in range(epochs):
                start = time.perf_counter()
                ours = build_schedule(lengths, length, replicas, epoch=epoch)
                rows["t"].append(time.perf_counter() - start)
                start = time.perf_counter()
                packing.plan(lengths, length, strategy="bfd")
                rows["p"].append(time.perf_counter() - start)
                dealt = shuffled_dealing(ours, epoch)
                rows["ours"].append(ours.imbalance)
                rows["ours_worst"].append(ours.worst_step_imbalance)
                rows["dealt"].append(dealt.imbalance)
                rows["dealt_worst"].append(dealt.worst_step_imbalance)
                steps = ours.num_steps
            med = {k: statistics.median(v) for k, v in rows.items()}
            met = "met" if med["ours"] <= TARGET else "not met"
            print(
                f"| {name} | {replicas} | {steps:,} | {med['ours']:.3%} | {med['ours_worst']:.2%} | "
                f"{med['dealt']:.3%} | {med['dealt_worst']:.2%} | {met} | {med['t'] * 1e3:.0f} ms | "
                f"{med['p'] * 1e3:.0f} ms |",
                flush=True,
            )


if __name__ == "__main__":
    main()
