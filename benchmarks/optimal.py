"""Proven-optimal packing of the shipped workloads: blocks, bound, gap, proof kind and time, next to bfd.

From the repository root::

    python benchmarks/optimal.py            # the four workloads of issue 9, about a minute on 2 cores
    python benchmarks/optimal.py --quick    # smaller inputs and a 2 s budget: checks that everything runs
    python benchmarks/optimal.py --repeat 5 --only squad,openchat

Prints a Markdown table on stdout (progress on stderr). Times are wall-clock medians of ``--repeat`` calls
of ``packing.optimal.solve`` after a warm-up call on a slice (numba loads its kernels), with the process's
CPU time next to them (on a shared machine wall time also counts other processes' work). The bfd column
is one ``best_fit_decreasing_blocks`` call, timed interleaved with the optimal runs. Every certificate is
rechecked with ``Certificate.verify`` (not timed). In ``--quick`` mode targets are not judged.
"""

from __future__ import annotations

import os
import sys

# `python benchmarks/optimal.py` puts benchmarks/ first on the path, where a module may shadow one of the
# standard library (benchmarks/tokenization.py would stand in for `tokenize`): the repository root goes there
_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(_HERE)
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import dataclass  # noqa: E402

import numpy as np  # noqa: E402
import numpy.typing as npt  # noqa: E402

from packing._workloads import load_workload  # noqa: E402
from packing.optimal import OptimalResult, solve  # noqa: E402
from packing.strategies._bounds import martello_toth_l2, simple_bound  # noqa: E402
from packing.strategies._kernels import best_fit_decreasing_blocks  # noqa: E402

Int64Array = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Case:
    key: str
    title: str
    capacity: int
    lengths: Callable[[bool], Int64Array]
    target_blocks: int | None  # the proven optimum (full size only)
    target_seconds: float


def lognormal_lengths(n: int, median: float, capacity: int, sigma: float = 1.0, seed: int = 0) -> Int64Array:
    """As in ``benchmarks/run.py``: max(1, round(lognormal(log(median), sigma))), truncated to ``capacity``."""
    rng = np.random.default_rng(seed)
    lengths: Int64Array = np.maximum(1, np.rint(rng.lognormal(np.log(median), sigma, n))).astype(np.int64)
    return np.minimum(lengths, capacity)


def workload_lengths(name: str, quick_size: int | None) -> Callable[[bool], Int64Array]:
    def lengths(quick: bool) -> Int64Array:
        workload = load_workload(name)
        docs = np.minimum(np.asarray(workload.lengths, dtype=np.int64), workload.max_seq_length)
        docs = docs[docs > 0]
        return docs[:quick_size] if quick and quick_size else docs

    return lengths


CASES = (
    Case("squad", "SQuAD 1.1 @384", 384, workload_lengths("squad_1_1_bert_384", None), 40_195, 0.5),
    Case("wikipedia", "Wikipedia @512", 512, workload_lengths("wikipedia_bert_512", 200_000), 8_135_727, 1.2),
    Case("openchat", "OpenChat V1 @2048", 2048, workload_lengths("openchat_v1_2048", None), 4_664, 12.0),
    Case(
        "lognormal",
        "log-normal 1 M @4096",
        4096,
        lambda quick: lognormal_lengths(20_000 if quick else 1_000_000, 330, 4096),
        130_369,
        6.0,
    ),
)


def progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def timed(fn: Callable[[], object]) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def spread(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.2f} s"
    return f"{statistics.median(values):.2f} s ({min(values):.2f}–{max(values):.2f})"


def run_case(case: Case, quick: bool, repeat: int, time_limit: float) -> list[str]:
    lengths = case.lengths(quick)
    capacity = case.capacity
    progress(f"{case.title}: {len(lengths):,} sequences")
    solve(lengths[:1000], capacity, time_limit)  # warm-up: numba loads its kernels, HiGHS is imported
    l1 = simple_bound(int(lengths.sum()), capacity)
    l2 = martello_toth_l2(lengths, capacity)
    results: list[OptimalResult] = []
    walls: list[float] = []
    cpus: list[float] = []
    bfd_walls: list[float] = []
    for _ in range(repeat):
        bfd_walls.append(timed(lambda: best_fit_decreasing_blocks(lengths, capacity))[0])
        wall, cpu = timed(lambda: results.append(solve(lengths, capacity, time_limit)))
        walls.append(wall)
        cpus.append(cpu)
    result = results[-1]
    certificate = result.certificate
    verified = certificate.verify(lengths, capacity)
    bfd_blocks = len(best_fit_decreasing_blocks(lengths, capacity)[0]) - 1
    tokens = int(lengths.sum())
    if quick or case.target_blocks is None:
        met = "n/a (quick)" if quick else ""
    else:
        exact = result.proven and verified and certificate.num_blocks == case.target_blocks
        if not exact:
            met = "no (blocks)"
        elif statistics.median(walls) <= case.target_seconds:
            met = "yes"
        elif statistics.median(cpus) <= case.target_seconds:
            met = "yes in CPU time (wall time over: shared machine)"
        else:
            met = "no (time)"
    target = f"{case.target_blocks:,} in ≤ {case.target_seconds:g} s" if case.target_blocks else ""
    return [
        case.title,
        f"{len(lengths):,}",
        f"{l1:,}",
        f"{l2:,}",
        f"{bfd_blocks:,} ({tokens / (bfd_blocks * capacity):.4%}), {statistics.median(bfd_walls):.3f} s",
        f"{certificate.num_blocks:,} ({tokens / (certificate.num_blocks * capacity):.4%})",
        f"{certificate.lower_bound:,}",
        str(certificate.gap),
        certificate.kind + (" ✓" if verified else " ✗ (verify failed)"),
        spread(walls),
        spread(cpus),
        target,
        met,
    ]


HEADER = [
    "workload",
    "sequences",
    "L1",
    "L2",
    "bfd (efficiency), time",
    "optimal (efficiency)",
    "proven bound",
    "gap",
    "proof (rechecked)",
    "optimal wall time",
    "optimal CPU time",
    "target",
    "met",
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small inputs, 2 s budget, targets not judged")
    parser.add_argument("--repeat", type=int, default=None, help="runs per workload (default 3; 1 with --quick)")
    parser.add_argument("--only", default="", help="comma-separated: " + ",".join(c.key for c in CASES))
    parser.add_argument("--time-limit", type=float, default=None, help="seconds per solve (default 60; 2 quick)")
    args = parser.parse_args(argv)
    repeat = args.repeat or (1 if args.quick else 3)
    time_limit = args.time_limit if args.time_limit is not None else (2.0 if args.quick else 60.0)
    keys = {k.strip() for k in args.only.split(",") if k.strip()}
    unknown = keys - {c.key for c in CASES}
    if unknown:
        parser.error(f"unknown workload(s): {', '.join(sorted(unknown))}")
    rows = [run_case(c, args.quick, repeat, time_limit) for c in CASES if not keys or c.key in keys]
    print("| " + " | ".join(HEADER) + " |")
    print("|" + "---|" * len(HEADER))
    for row in rows:
        print("| " + " | ".join(row) + " |")
    mode = "quick mode: smaller inputs, " if args.quick else ""
    print(f"\n{mode}time limit {time_limit:g} s per solve, {repeat} run(s) each; targets from issue 9.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
