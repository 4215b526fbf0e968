"""Packing benchmarks: block counts, efficiency and speed on synthetic and real workloads.

One command, from the repository root::

    python benchmarks/run.py                 # everything: a few minutes, ~4 GiB peak memory (section `pack`)
    python benchmarks/run.py --quick         # tiny sizes, seconds: checks that everything runs
    python benchmarks/run.py --repeat 9 --only wikipedia,squad
    python benchmarks/run.py --output benchmarks/results.md

It prints a Markdown table on stdout (progress goes to stderr). Every time is the
median of ``--repeat`` runs after a warm-up call (numba compiles on first use);
every ratio compares two medians measured in the same run, with the two
measurements interleaved so that noise from other processes hits both alike.
Sizes in ``--quick`` mode are too small for the speed targets, which are then
not judged.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import gc
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `python benchmarks/run.py` puts benchmarks/, not the root, on the path
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import numpy.typing as npt  # noqa: E402

import packing  # noqa: E402
from packing import lower_bounds, pack, plan  # noqa: E402
from packing._workloads import load_workload  # noqa: E402
from packing.strategies._registry import STRATEGIES  # noqa: E402

Int64Array = npt.NDArray[np.int64]

SECTIONS = ("lognormal", "reference", "wikipedia", "squad", "openchat", "pack", "compile")
NO_SPLIT = ("next_fit", "first_fit", "ffd", "bfd", "spfhp", "none")
COLUMNS = (
    "workload",
    "strategy",
    "sequences",
    "blocks",
    "lower bound",
    "L2 bound",
    "efficiency",
    "max eff. (L2)",
    "time (median, min–max)",
    "baseline (median)",
    "ratio",
    "target",
    "met",
)


# --------------------------------------------------------------------------------------------
# Measuring


@contextmanager
def _no_gc() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _once(fn: Callable[[], Any]) -> float:
    with _no_gc():
        start = time.perf_counter()
        result = fn()
        elapsed = time.perf_counter() - start
    del result
    return elapsed


def measure(fn: Callable[[], Any], repeat: int) -> list[float]:
    """Wall times of ``repeat`` calls of ``fn`` (its result is dropped after each call)."""
    return [_once(fn) for _ in range(repeat)]


def measure_pair(fn: Callable[[], Any], baseline: Callable[[], Any], repeat: int) -> tuple[list[float], list[float]]:
    """Times of ``fn`` and ``baseline``, alternating, so both see the same machine load."""
    times: list[float] = []
    base: list[float] = []
    for _ in range(repeat):
        base.append(_once(baseline))
        times.append(_once(fn))
    return times, base


def progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------
# Rows and the table


@dataclass
class Row:
    workload: str
    strategy: str
    sequences: int
    blocks: int
    lower: int
    l2: int | None  # None: not a bound for a strategy that splits sequences
    tokens: int
    capacity: int
    times: list[float]
    baseline_name: str = ""
    baseline_times: list[float] = field(default_factory=list)
    ratio_kind: str = ""  # "speed-up" (baseline / time) or "times" (time / baseline)
    target: str = "—"
    met: str = "—"

    @property
    def time(self) -> float:
        return statistics.median(self.times)

    @property
    def baseline(self) -> float:
        return statistics.median(self.baseline_times)

    @property
    def efficiency(self) -> float:
        return self.tokens / (self.blocks * self.capacity) if self.blocks else 1.0

    @property
    def ratio(self) -> float:
        return self.baseline / self.time if self.ratio_kind == "speed-up" else self.time / self.baseline

    def cells(self) -> list[str]:
        bound_eff = f"{100 * self.tokens / (self.l2 * self.capacity):.3f} %" if self.l2 else "n/a (splits)"
        baseline = ratio = "—"
        if self.baseline_times:
            baseline = f"{self.baseline_name} {_seconds(self.baseline)}"
            value = f"{self.ratio:,.0f}" if self.ratio >= 100 else f"{self.ratio:.3g}"
            ratio = f"speed-up {value}×" if self.ratio_kind == "speed-up" else f"{value}× {self.baseline_name}"
        return [
            self.workload,
            self.strategy,
            f"{self.sequences:,}",
            f"{self.blocks:,}",
            f"{self.lower:,}",
            f"{self.l2:,}" if self.l2 is not None else "n/a (splits)",
            f"{100 * self.efficiency:.3f} %",
            bound_eff,
            f"{_seconds(self.time)} ({_seconds(min(self.times))}–{_seconds(max(self.times))})",
            baseline,
            ratio,
            self.target,
            self.met,
        ]


def _seconds(value: float) -> str:
    if value >= 10:
        return f"{value:.1f} s"
    if value >= 0.1:
        return f"{value:.2f} s"
    return f"{value * 1000:.1f} ms" if value >= 0.001 else f"{value * 1e6:.0f} µs"


def markdown_table(rows: Sequence[Row]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "|".join("---" for _ in COLUMNS) + "|"]
    lines += ["| " + " | ".join(row.cells()) + " |" for row in rows]
    return "\n".join(lines)


def _verdicts(checks: Sequence[tuple[str, bool]], quick: bool, judged_in_quick: Sequence[str] = ()) -> str:
    parts = []
    for name, ok in checks:
        if quick and name not in judged_in_quick:
            parts.append(f"{name}: n/a (quick)")
        else:
            parts.append(f"{name}: {'yes' if ok else 'NO'}")
    return "; ".join(parts)


# --------------------------------------------------------------------------------------------
# Workloads


@dataclass
class Target:
    """One speed target: ``ratio`` (time / baseline, both medians of the same interleaved runs) at most ``limit``."""

    name: str
    ratio: float
    limit: float
    judged: bool  # False in --quick mode: sizes too small to judge
    unit: str = "×"

    def line(self) -> str:
        verdict = ("met" if self.ratio <= self.limit else "NOT met") if self.judged else "not judged (quick)"
        return f"{self.name}: **{self.ratio:.2f}{self.unit}** (target ≤ {self.limit:g}{self.unit}): {verdict}"


@dataclass
class Settings:
    quick: bool
    repeat: int
    notes: list[str] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    pack_samples: int = 300_000


def lognormal_lengths(n: int, median: float, sigma: float = 1.0, seed: int = 0) -> Int64Array:
    """``n`` log-normal lengths with this median, rounded, at least 1."""
    rng = np.random.default_rng(seed)
    lengths: Int64Array = np.maximum(1, np.rint(rng.lognormal(np.log(median), sigma, n))).astype(np.int64)
    return lengths


def in_random_order(lengths: Int64Array) -> Int64Array:
    """Lengths expanded from a histogram have no order of their own, and next_fit / first_fit depend on it.

    ``load_workload`` returns them in a fixed random order; should they come sorted, fix one here.
    """
    if len(lengths) > 1 and bool(np.all(lengths[1:] >= lengths[:-1])):
        shuffled: Int64Array = np.random.default_rng(0).permutation(lengths)
        return shuffled
    return lengths


def plan_row(
    settings: Settings,
    workload: str,
    lengths: Int64Array,
    capacity: int,
    strategy: str,
    bounds: packing.LowerBounds,
    overflow: str = "truncate",
) -> Row:
    """Time ``plan`` on ``lengths`` (after a warm-up on a slice) and describe the result."""
    plan(lengths[:2000], capacity, strategy=strategy, overflow=overflow)  # warm-up: numba loads or compiles its kernels
    times = measure(lambda: plan(lengths, capacity, strategy=strategy, overflow=overflow), settings.repeat)
    layout = plan(lengths, capacity, strategy=strategy, overflow=overflow)
    return Row(
        workload,
        strategy,
        len(lengths),
        layout.num_blocks,
        bounds.simple,
        None if strategy == "split" else bounds.l2,
        layout.stats.packed_tokens,
        capacity,
        times,
    )


def section_lognormal(settings: Settings) -> list[Row]:
    n = 20_000 if settings.quick else 1_000_000
    capacity = 4096
    lengths = lognormal_lengths(n, 330)
    name = f"log-normal {n:,}, L={capacity}"
    settings.notes.append(
        f"**{name}**: lengths = max(1, round(lognormal(mean=log(330), sigma=1))) with numpy "
        f"`default_rng(0)`; median {int(np.median(lengths))}, {int((lengths > capacity).sum()):,} sequences "
        f"over {capacity} (truncated: overflow='truncate'). Time is one `packing.plan` call."
    )
    bounds = lower_bounds(lengths, capacity)
    rows = []
    for strategy in ("bfd", "ffd", "first_fit", "next_fit", "spfhp", "split"):
        progress(f"{name}: {strategy}")
        row = plan_row(settings, name, lengths, capacity, strategy, bounds)
        if strategy == "ffd":  # timed again, alternately with bfd, for the ratio
            times, bfd_times = measure_pair(
                lambda: plan(lengths, capacity, strategy="ffd"),
                lambda: plan(lengths, capacity, strategy="bfd"),
                settings.repeat,
            )
            row.times, row.baseline_name, row.baseline_times, row.ratio_kind = times, "bfd", bfd_times, "times"
            row.target = "plan < 1 s; time ≤ 3× bfd"
            row.met = _verdicts([("time", row.time < 1.0), ("ratio", row.ratio <= 3.0)], settings.quick)
            settings.targets.append(
                Target(f"`ffd` on {n:,} log-normal lengths / `bfd`", row.ratio, 3.0, not settings.quick)
            )
        elif strategy == "bfd":
            row.target = "plan < 0.3 s; blocks ≤ lower bound + 0.05 %"
            checks = [("time", row.time < 0.3), ("blocks", row.blocks <= bounds.simple * 1.0005)]
            row.met = _verdicts(checks, settings.quick, judged_in_quick=("blocks",))
        elif strategy != "split":
            row.target = "plan < 1 s"
            row.met = _verdicts([("time", row.time < 1.0)], settings.quick)
        rows.append(row)
    return rows


def section_reference(settings: Settings) -> list[Row]:
    n = 1_000 if settings.quick else 20_000
    capacity = 4096
    lengths = lognormal_lengths(n, 330)  # the first n lengths of the log-normal workload
    documents = np.minimum(lengths, capacity).tolist()  # what the strategies place after truncation
    name = f"log-normal subsample {n:,}, L={capacity}"
    settings.notes.append(
        f"**{name}**: the first {n:,} lengths of the log-normal workload. The baseline is the plain-Python "
        "version in `packing/reference.py` (O(n × blocks)); both sides get their natural input (a numpy "
        "array for `plan`, a list of capped lengths for the reference), prepared outside the timing. "
        "*Same blocks* checks that both assign every sequence to the same block."
    )
    bounds = lower_bounds(lengths, capacity)
    rows = []
    for strategy, entry in STRATEGIES.items():
        reference = entry.reference
        if reference is None or strategy == "none":
            continue
        progress(f"{name}: {strategy} against the reference")
        plan(lengths[:100], capacity, strategy=strategy)
        times, ref_times = measure_pair(
            functools.partial(plan, lengths, capacity, strategy=strategy),
            functools.partial(reference, documents, capacity),
            settings.repeat,
        )
        layout = plan(lengths, capacity, strategy=strategy)
        block_of = np.empty(n, dtype=np.int64)
        block_of[layout.piece_sequence] = layout.piece_block()
        same = block_of.tolist() == reference(documents, capacity)
        rows.append(
            Row(
                name,
                strategy,
                n,
                layout.num_blocks,
                bounds.simple,
                bounds.l2,
                layout.stats.packed_tokens,
                capacity,
                times,
                "reference",
                ref_times,
                "speed-up",
                target="same blocks as the reference",
                met=f"same blocks: {'yes' if same else 'NO'}",
            )
        )
    return rows


def section_wikipedia(settings: Settings) -> list[Row]:
    workload = load_workload("wikipedia_bert_512")
    capacity = workload.max_seq_length
    shuffled = in_random_order(workload.lengths)
    if settings.quick:
        shuffled = shuffled[:200_000]
    ascending = np.sort(shuffled)
    published = workload.published_results
    name = f"wikipedia_bert_512, L={capacity}"
    settings.notes.append(
        f"**{name}**: {len(shuffled):,} lengths expanded from the published histogram, in a fixed random "
        "order (as `load_workload` returns them), as in a real dataset; the row marked "
        "*(input sorted)* gets the same lengths sorted ascending. The baseline is one `numpy.sort` "
        "of the same array, timed alternately with the strategy, both after one full-size warm-up call."
    )
    bounds = lower_bounds(shuffled, capacity)
    rows = []
    for label, strategy, lengths in (
        ("bfd", "bfd", shuffled),
        ("bfd (input sorted)", "bfd", ascending),
        ("spfhp", "spfhp", shuffled),
    ):
        progress(f"{name}: {label}")
        (
            plan(lengths, capacity, strategy=strategy),
            np.sort(lengths),
        )  # warm-up at full size: kernels loaded, memory in use
        times, sort_times = measure_pair(
            functools.partial(plan, lengths, capacity, strategy=strategy),
            functools.partial(np.sort, lengths),
            settings.repeat,
        )
        layout = plan(lengths, capacity, strategy=strategy)
        row = Row(
            name,
            label,
            len(lengths),
            layout.num_blocks,
            bounds.simple,
            bounds.l2,
            layout.stats.packed_tokens,
            capacity,
            times,
            "numpy.sort",
            sort_times,
            "times",
        )
        if strategy == "bfd":
            row.target = (
                "efficiency ≥ 99.9 % (published: SPFHP {:.2f} %, LPFHP {:.2f} %, NNLSHP {:.2f} %); time ≤ 4× sort"
            ).format(
                100 * published["SPFHP_efficiency"],
                100 * published["LPFHP_efficiency"],
                100 * published["NNLSHP_efficiency"],
            )
            checks = [("efficiency", row.efficiency >= 0.999), ("time", row.ratio <= 4.0)]
            row.met = _verdicts(checks, settings.quick)
            settings.targets.append(
                Target(f"Wikipedia `plan(..., 'bfd')` ({label}) / one `numpy.sort`", row.ratio, 4.0, not settings.quick)
            )
        else:
            spfhp = published["SPFHP_efficiency"]
            row.target = f"published SPFHP {100 * spfhp:.3f} %"
            delta = 100 * (row.efficiency - spfhp)
            verdict = "matches" if abs(delta) < 0.001 else ("above" if delta > 0 else "below")
            row.met = "n/a (quick)" if settings.quick else f"{verdict} (Δ {delta:+.4f} pp)"
        rows.append(row)
    return rows


def section_real_no_split(settings: Settings, workload_name: str, from_histogram: bool) -> list[Row]:
    workload = load_workload(workload_name)
    capacity = workload.max_seq_length
    lengths = workload.lengths
    name = f"{workload_name}, L={capacity}"
    if from_histogram:
        lengths = in_random_order(lengths)
        settings.notes.append(
            f"**{name}**: {len(lengths):,} lengths expanded from the published histogram, in a fixed random "
            "order (as `load_workload` returns them), as in a real dataset."
        )
    else:
        settings.notes.append(f"**{name}**: {len(lengths):,} lengths in the order of the published data.")
    bounds = lower_bounds(lengths, capacity)
    multipack = workload.published_results.get("multipack_linear_efficiency_8_ranks")
    if multipack is not None:
        settings.notes.append(
            f"**{name}**: the published Multipack number ({100 * multipack:.2f} %, linear, 8 ranks, "
            "from imoneoi/multipack_sampler) packs per rank and batch, so it is a reference point rather "
            "than the same problem."
        )
    rows = []
    for strategy in NO_SPLIT:
        progress(f"{name}: {strategy}")
        row = plan_row(settings, name, lengths, capacity, strategy, bounds)
        if multipack is not None:
            row.target = f"published Multipack {100 * multipack:.2f} %"
            delta = 100 * (row.efficiency - multipack)
            row.met = f"{'above' if delta >= 0 else 'below'} ({delta:+.2f} pp)"
        rows.append(row)
    return rows


def _available_memory() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _reset_peak_memory() -> bool:
    """Reset this process's peak resident size (Linux), so a later reading covers one section."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as handle:
            handle.write("5")
        return True
    except OSError:
        return False


def _peak_memory() -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


PAGE_INT32 = 1024
"""int32 values in a 4 KiB page: reading one value per page touches every page of a column."""


def touch_every_column(batch: packing.PackedBatch) -> int:
    """Make every column of ``batch`` (labels, positions and sequence ids are made on first access) and read
    one value from every 4 KiB page of each, so each column is built and resident. O(slots) to make,
    O(slots / 1024) to read."""
    total = 0
    for name in ("input_ids", "labels", "loss_mask", "position_ids", "sequence_ids"):
        flat = getattr(batch, name).reshape(-1)
        step = PAGE_INT32 * 4 // flat.itemsize
        total += int(flat[::step].sum())
    return total


def pack_and_touch(samples: list[Any], capacity: int) -> tuple[packing.PackedBatch, int]:
    """``pack(samples, capacity, strategy="split", overflow="split")`` with every column made and touched; the batch is
    returned, so that (as with the baseline's result) freeing it is not timed."""
    batch = pack(samples, capacity, strategy="split", overflow="split")
    return batch, touch_every_column(batch)


def traced_peak(fn: Callable[[], Any]) -> int:
    """Peak bytes traced by ``tracemalloc`` (numpy's allocations included) during ``fn()``."""
    import tracemalloc

    gc.collect()
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def section_pack(settings: Settings) -> list[Row]:
    n = 3_000 if settings.quick else settings.pack_samples
    capacity = 4096
    mean = 500
    # Memory: the samples (4 bytes a token, int32) plus `pack`'s output (17 bytes a token slot) and the
    # baseline's concatenation (4): budget 32 bytes a token. With less free memory, scale down and say so.
    available = _available_memory()
    needed_per_sample = mean * 32
    if not settings.quick and available is not None and n * needed_per_sample > 0.9 * available:
        scaled = int(0.9 * available // needed_per_sample)
        settings.notes.append(
            f"**pack**: only {available / 2**30:.1f} GiB available, so {scaled:,} samples instead of {n:,}."
        )
        n = scaled
    rng = np.random.default_rng(0)
    # log-normal lengths with mean 500: median = mean / exp(sigma² / 2)
    lengths = np.maximum(1, np.rint(rng.lognormal(np.log(mean) - 0.5, 1.0, n))).astype(np.int64)
    tokens = rng.integers(1, 32_000, int(lengths.sum()), dtype=np.int32)
    samples = np.split(tokens, np.cumsum(lengths)[:-1])  # n int32 arrays (views of one buffer), as tokenizers give
    total = int(lengths.sum())
    name = f"pack split, {n // 1000:,}k int32 samples, L={capacity}, every column made and touched"
    progress(f"{name}: {total:,} tokens")
    pack_and_touch(samples[:50], capacity)  # warm-up: kernels loaded
    reset = _reset_peak_memory()
    with _no_gc():
        check = pack(samples, capacity, strategy="split", overflow="split")
        flat = check.input_ids.reshape(-1)
        same = bool(np.array_equal(flat[:total], tokens)) and not flat[total:].any()
        same = same and check.input_ids.dtype == np.int32 and check.labels.dtype == np.int32
        blocks, efficiency_tokens = check.num_blocks, check.stats.packed_tokens
        del check, flat
    del tokens
    times, concat_times = measure_pair(
        lambda: pack_and_touch(samples, capacity), lambda: np.concatenate(samples), settings.repeat
    )
    peak = _peak_memory() if reset else None
    progress(f"{name}: traced memory")
    traced = traced_peak(lambda: pack_and_touch(samples, capacity))
    concat_traced = traced_peak(lambda: np.concatenate(samples))
    row = Row(
        name,
        "split",
        n,
        blocks,
        -(-total // capacity),
        None,
        efficiency_tokens,
        capacity,
        times,
        "numpy.concatenate",
        concat_times,
        "times",
        target="time ≤ 3× concatenate; traced peak ≤ 20 B/token",
    )
    per_token = traced / total
    row.met = _verdicts([("time", row.ratio <= 3.0), ("memory", per_token <= 20)], settings.quick)
    settings.targets.append(
        Target(
            f"`pack(..., 'split')` of {total / 1e6:.0f} M int32 tokens, every column made and touched / one "
            "`numpy.concatenate`",
            row.ratio,
            3.0,
            not settings.quick,
        )
    )
    settings.targets.append(
        Target("traced peak memory of that pack + touch", per_token, 20.0, not settings.quick, " bytes/token")
    )
    peak_text = f"{peak / 2**30:.1f} GiB" if peak is not None else "not measured"
    settings.notes.append(
        f"**{name}**: {n:,} samples of log-normal length (mean {total / n:.0f}, sigma 1) holding {total:,} "
        f"tokens, as numpy int32 arrays (views of one buffer, {total * 4 / 2**30:.2f} GiB). Time is "
        "`packing.pack(samples, L, strategy='split', overflow='split')` then every output column made (input_ids and "
        "loss_mask by `pack`, labels, position_ids and sequence_ids on first access) and one value read from "
        "every 4 KiB page of each; the baseline is one `numpy.concatenate(samples)`. Building the samples is "
        "timed in neither. Output checked: the packed tokens (int32) are the concatenation followed by "
        f"padding: {'yes' if same else 'NO'}. Peak traced memory (tracemalloc, numpy's allocations; the input "
        f"not counted) of pack + touch: {traced / 2**20:,.0f} MiB = {per_token:.1f} bytes per token "
        f"(one concatenate: {concat_traced / total:.1f}). Peak resident memory of the process during this "
        f"section: {peak_text}."
    )
    return [row]


COMPILE_SCRIPT = """
import time
start = time.perf_counter()
import numpy as np
from packing import pack, plan
for strategy in ("split", "next_fit", "first_fit", "ffd", "bfd", "spfhp", "none"):
    plan(np.array([3, 5, 2, 7]), 8, strategy=strategy)
pack([[1, 2, 3], {"prompt": [4], "completion": [5, 6]}], 4, strategy="bfd")
pack([[1, 2, 3], [4, 5]], 4, strategy="split", overflow="split")
print(time.perf_counter() - start)
"""


def section_compile(settings: Settings) -> list[Row]:
    """Time a fresh process's first plans and packs with an empty numba cache, then with the cache it left."""
    if settings.quick:
        settings.notes.append("**compile**: not measured in quick mode.")
        return []
    import tempfile

    times = []
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "NUMBA_CACHE_DIR": cache, "PYTHONPATH": str(ROOT)}
        for label in ("empty cache", "warm cache"):
            progress(f"compile: a new process, {label}")
            out = subprocess.run(
                [sys.executable, "-c", COMPILE_SCRIPT], capture_output=True, text=True, env=env, check=True
            )
            times.append(float(out.stdout.strip().splitlines()[-1]))
    settings.notes.append(
        f"**compile**: a new process that imports `packing` and makes its first plan with every no-split "
        f"strategy and `split`, and packs twice (plain and prompt/completion samples): {times[0]:.1f} s with "
        f"an empty numba cache (every kernel compiled once), {times[1]:.2f} s when the cache is warm "
        "(`cache=True`: kernels load from disk)."
    )
    return []


# --------------------------------------------------------------------------------------------
# Machine and report


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _git(*args: str) -> str:
    try:
        out = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True)
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def _git_commit() -> str:
    commit = _git("rev-parse", "--short", "HEAD") or "unknown"
    changed = _git("status", "--porcelain", "--", "packing")
    return f"{commit} (with uncommitted changes in packing/)" if changed else commit


def machine_lines() -> list[str]:
    import numba

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    memory = "unknown"
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            memory = f"{int(handle.readline().split()[1]) / 2**20:.0f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    return [
        f"- date: {datetime.datetime.now().astimezone().strftime('%Y-%m-%d %H:%M %Z')}",
        f"- machine: nproc {cpus}, CPU {_cpu_model()}, memory {memory}, {platform.system()} {platform.release()}",
        f"- software: Python {platform.python_version()}, numpy {np.__version__}, numba {numba.__version__}",
        f"- code: git commit {_git_commit()}",
    ]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run in seconds (targets not judged)")
    parser.add_argument("--repeat", type=int, default=None, help="runs per measurement (default 5, 2 with --quick)")
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="NAME",
        help=f"run only these sections, comma-separated or repeated: {', '.join(SECTIONS)}",
    )
    parser.add_argument("--output", type=Path, help="also write the report to this Markdown file")
    parser.add_argument(
        "--pack-samples",
        type=int,
        default=300_000,
        help="samples in the `pack` section (default 300,000: ~150 M tokens)",
    )
    args = parser.parse_args(argv)
    if args.repeat is None:
        args.repeat = 2 if args.quick else 5
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    chosen = [name.strip() for item in args.only for name in item.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in SECTIONS]
    if unknown:
        parser.error(f"unknown section {unknown[0]!r}; choose from: {', '.join(SECTIONS)}")
    args.sections = [name for name in SECTIONS if not chosen or name in chosen]
    return args


def run(args: argparse.Namespace) -> str:
    settings = Settings(quick=args.quick, repeat=args.repeat, pack_samples=args.pack_samples)
    runners: dict[str, Callable[[], list[Row]]] = {
        "lognormal": lambda: section_lognormal(settings),
        "reference": lambda: section_reference(settings),
        "wikipedia": lambda: section_wikipedia(settings),
        "squad": lambda: section_real_no_split(settings, "squad_1_1_bert_384", from_histogram=True),
        "openchat": lambda: section_real_no_split(settings, "openchat_v1_2048", from_histogram=False),
        "pack": lambda: section_pack(settings),
        "compile": lambda: section_compile(settings),
    }
    rows: list[Row] = []
    started = time.perf_counter()
    for name in args.sections:
        rows.extend(runners[name]())
        gc.collect()
    elapsed = time.perf_counter() - started
    command = "python benchmarks/run.py" + (" --quick" if args.quick else "") + f" --repeat {args.repeat}"
    if args.sections != list(SECTIONS):
        command += f" --only {','.join(args.sections)}"
    lines = [
        "# Packing benchmarks" + (" (quick: tiny sizes, speed targets not judged)" if args.quick else ""),
        "",
        *machine_lines(),
        f"- command: `{command}`; {args.repeat} runs per measurement; total {elapsed:.0f} s",
        "",
        "Times are medians (min–max in brackets) after a warm-up call; a ratio divides two medians measured "
        "alternately in the same run. *lower bound* = ceil(tokens / L); *L2 bound* = Martello–Toth L2 "
        "(`packing.lower_bounds`), valid when no sequence is split; *max eff. (L2)* = the efficiency of a "
        "packing with exactly L2 blocks; efficiency = tokens / (blocks × L).",
        "",
        *(["Speed targets (ratios of medians measured alternately in the same run):", ""] if settings.targets else []),
        *[f"- {target.line()}" for target in settings.targets],
        *([""] if settings.targets else []),
        markdown_table(rows),
        "",
        "Notes:",
        "",
        *[f"- {note}" for note in settings.notes],
        "",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    report = run(args)
    print(report)
    if args.output is not None:
        args.output.write_text(report, encoding="utf-8")
        progress(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
