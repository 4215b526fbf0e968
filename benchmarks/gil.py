"""Does heavy packing work hold the GIL? A Python thread counts loop iterations while the main thread packs;
its speed during the work, over its speed alone (measured just before, interleaved), is the share of the GIL
the work leaves to everyone else. 100 % means the work never holds it; a pure-Python loop would leave about
half (the two threads take turns).

This is what lets many explorer sessions share one server process: a session planning a million sequences
must not stop the others' pages from running.

The other side is the work's own time next to a busy Python thread: each time a kernel or the LP solver
returns, the caller waits for the GIL, up to the interpreter's switch interval (5 ms by default), and the proven
optimum's column generation returns to Python about a thousand times. ``--switch-interval`` sets it (the
explorer uses 1 ms).

    python benchmarks/gil.py [--repeat 5] [--switch-interval 0.001]

Prints a Markdown table of median shares and work times (alone, and next to the busy thread).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

import packing  # noqa: E402
from explorer.core.examples import synthetic_lengths  # noqa: E402

TARGET = 0.8
"""Least share of the GIL a heavy call should leave to other threads."""


def _spin(stop: threading.Event, out: list[int]) -> None:
    count = 0
    while not stop.is_set():
        count += 1
    out.append(count)


def per_call(work: Callable[[], object], least: float = 0.5) -> float:
    """Seconds per ``work()``, called again and again for at least ``least`` seconds (so that starting a thread
    next to it is noise)."""
    started = time.perf_counter()
    calls = 0
    while calls == 0 or time.perf_counter() - started < least:
        work()
        calls += 1
    return (time.perf_counter() - started) / calls


def spin_rate(work: Callable[[], object], least: float = 0.5) -> tuple[float, float]:
    """Iterations per second of a spinning thread while ``work()`` runs (``per_call``), and the seconds one
    ``work()`` took next to it."""
    stop, out = threading.Event(), []  # type: ignore[var-annotated]
    thread = threading.Thread(target=_spin, args=(stop, out))
    started = time.perf_counter()
    thread.start()
    took = per_call(work, least)
    stop.set()
    thread.join()
    return out[0] / (time.perf_counter() - started), took


def workloads() -> dict[str, Callable[[], object]]:
    rng = np.random.default_rng(0)
    million = np.clip(rng.lognormal(6.0, 1.0, 1_000_000).astype(np.int64), 1, 4096)
    hard = synthetic_lengths(10_000, "lognormal", 1_434_000_004, 2048)  # bfd is 1 block above L2: a real search
    return {
        "plan bfd, 1,000,000 lengths": lambda: packing.plan(million, 4096, strategy="bfd"),
        "plan optimal, 10,000 lengths": lambda: packing.plan(hard, 2048, strategy="optimal", time_limit=10),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--switch-interval", type=float, default=sys.getswitchinterval())
    args = parser.parse_args()
    sys.setswitchinterval(args.switch_interval)
    work = workloads()
    for call in work.values():  # compile and warm up
        call()
    shares: dict[str, list[float]] = {name: [] for name in work}
    seconds: dict[str, list[float]] = {name: [] for name in work}
    solo: dict[str, list[float]] = {name: [] for name in work}
    for _ in range(args.repeat):
        for name, call in work.items():
            solo[name].append(per_call(call))
            alone, _ = spin_rate(lambda: time.sleep(0.05))  # the baseline, right before
            during, took = spin_rate(call)
            shares[name].append(during / alone)
            seconds[name].append(took)
    print(f"switch interval {sys.getswitchinterval() * 1000:g} ms, medians of {args.repeat} interleaved runs")
    print("| work | time alone | next to a busy thread | GIL left to the busy thread | target |")
    print("|---|---|---|---|---|")
    for name in work:
        share = statistics.median(shares[name])
        print(
            f"| {name} | {statistics.median(solo[name]):.3f} s | {statistics.median(seconds[name]):.3f} s | "
            f"{share:.0%} | {'met' if share >= TARGET else 'missed'} (≥ {TARGET:.0%}) |"
        )


if __name__ == "__main__":
    main()
