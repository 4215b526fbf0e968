"""The Hugging Face ``datasets`` door against TRL and against the command line's memory bound.

    python benchmarks/hf_datasets.py                         # speed (20 M tokens) and memory (80 M tokens)
    python benchmarks/hf_datasets.py --quick                 # tiny sizes: checks that everything runs
    python benchmarks/hf_datasets.py --only speed --repeat 7 --speed-tokens 40e6
    python benchmarks/hf_datasets.py --only memory --root /work/main   # the memory of another checkout (before)
    python benchmarks/hf_datasets.py --output benchmarks/hf_datasets_results.md

**Speed.** One dataset of ``input_ids`` rows (list<int32>, log-normal lengths of mean about 496 tokens, seed 0),
written with ``save_to_disk`` and read back with ``load_from_disk`` (memory-mapped, with cache files, as a user's
dataset is), packed to ``--max-seq-length`` (4096) blocks with ``Dataset.map`` batches of 1,000 rows:

- *TRL*: ``trl.pack_dataset(ds, L, strategy="bfd")`` (its map path: ``with_format("arrow").map(_pack_bfd)``);
- *pack_batch, arrow*: ``ds.with_format("arrow").map(pack_batch, batched=True, remove_columns=...,
  fn_kwargs={"max_seq_length": L, "strategy": "bfd", "tie_break": "oldest"})``: the same blocks as TRL's (its tie
  break), and the schema's six columns where TRL writes two;
- *pack_batch, python*: the same map without ``with_format("arrow")`` (``datasets`` hands the batches over as Python
  lists), for comparison.

Each map writes its cache file (``load_from_cache_file=False``; the files are deleted after each run) and the
result's rows are counted. The three are timed in turn, ``--repeat`` times (the order rotated every round), and
each time is the median; the ratio divides two medians of the same run. The load average is given before and after.

**Memory.** In a fresh child, ``packing.hf.pack_dataset(load_from_disk(folder), L)`` on ``--memory-tokens`` (80 M)
tokens, the blocks written to the cache file next to the input's (and read back from it, memory-mapped): the
child's own peak resident memory (``VmHWM`` as it exits) against the input's Arrow size + 1 GiB (the bound of
``packing pack``). ``--root`` picks the checkout the child imports (``/work/main``: the library before).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [entry for entry in sys.path if os.path.abspath(entry or os.curdir) != _HERE]
ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

GIB = 2**30
MEAN_LOG, SIGMA = 5.8, 0.9  # mean exp(5.8 + 0.9**2 / 2) = 496 tokens a row
BATCH = 1_000

_CHILD = """
import atexit, sys, time
def peak():
    print('VmHWM', [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1], file=sys.stderr)
atexit.register(peak)
import datasets
import packing.hf
ds = datasets.load_from_disk(sys.argv[1])
start = time.perf_counter()
packed = packing.hf.pack_dataset(ds, int(sys.argv[2]))
rows, tokens = len(packed), 0
for batch in packed.with_format("arrow").iter(batch_size=1000):
    tokens += int(batch.column("input_ids").combine_chunks().values.__len__())
print("seconds", time.perf_counter() - start, "rows", rows, "tokens", tokens,
      "cached", bool(packed.cache_files), file=sys.stderr)
"""
"""Packs the dataset at argv[1], reads every packed token back, and prints its own peak resident memory."""


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f}, {five:.2f}, {fifteen:.2f}"


def write_dataset(folder: Path, tokens: float, seed: int = 0) -> tuple[int, int, int]:
    """``save_to_disk`` of ``input_ids`` rows of about ``tokens`` tokens: (rows, tokens, Arrow size in bytes)."""
    import datasets

    rng = np.random.default_rng(seed)
    rows = max(1, int(tokens / np.exp(MEAN_LOG + SIGMA**2 / 2)))
    lengths = np.maximum(rng.lognormal(MEAN_LOG, SIGMA, rows).astype(np.int64), 1)
    offsets = np.zeros(rows + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    values = rng.integers(1, 50_000, int(offsets[-1]), dtype=np.int32)
    table = pa.table({"input_ids": pa.ListArray.from_arrays(pa.array(offsets), pa.array(values))})
    features = datasets.Features({"input_ids": datasets.List(datasets.Value("int32"))})
    datasets.Dataset(table, info=datasets.DatasetInfo(features=features)).save_to_disk(str(folder))
    return rows, int(offsets[-1]), table.nbytes


# ---------------------------------------------------------------- speed


def _trl(ds: Any, length: int) -> Any:
    import trl

    return trl.pack_dataset(ds, length, strategy="bfd", map_kwargs={"load_from_cache_file": False})


def _ours(arrow: bool) -> Callable[[Any, int], Any]:
    from packing.hf import pack_batch

    def run(ds: Any, length: int) -> Any:
        source = ds.with_format("arrow") if arrow else ds
        return source.map(
            pack_batch,
            batched=True,
            batch_size=BATCH,
            remove_columns=ds.column_names,
            load_from_cache_file=False,
            fn_kwargs={"max_seq_length": length, "strategy": "bfd", "tie_break": "oldest"},
        )

    return run


def _timed(run: Callable[[Any, int], Any], folder: Path, length: int) -> tuple[float, int]:
    """Seconds of one map from a freshly loaded copy of the dataset (its cache files deleted afterwards), and the
    blocks it made."""
    import datasets

    copy = Path(tempfile.mkdtemp(dir=folder.parent))
    try:
        shutil.copytree(folder, copy, dirs_exist_ok=True)
        ds = datasets.load_from_disk(str(copy))
        start = time.perf_counter()
        packed = run(ds, length)
        seconds = time.perf_counter() - start
        return seconds, len(packed)
    finally:
        shutil.rmtree(copy, ignore_errors=True)


def speed(
    folder: Path, length: int, repeat: int
) -> tuple[dict[str, list[float]], dict[str, int], dict[str, str], str, str]:
    """Each contender's times and blocks; the ones that refused (the library before took no Arrow batch)."""
    contenders: dict[str, Callable[[Any, int], Any]] = {
        "TRL pack_dataset": _trl,
        "pack_batch, arrow": _ours(arrow=True),
        "pack_batch, python": _ours(arrow=False),
    }
    refused: dict[str, str] = {}
    for name in list(contenders):  # warm up: imports, compiled kernels
        try:
            _timed(contenders[name], folder, length)
        except Exception as error:  # reported in the table
            refused[name] = f"{type(error).__name__}: {str(error).splitlines()[0][:100]}"
            del contenders[name]
    names = list(contenders)
    times: dict[str, list[float]] = {name: [] for name in names}
    blocks: dict[str, int] = {}
    before = load_average()
    for round_ in range(repeat):
        order = names[round_ % len(names) :] + names[: round_ % len(names)]
        for name in order:
            seconds, count = _timed(contenders[name], folder, length)
            times[name].append(seconds)
            blocks[name] = count
            say(f"  {name}: {seconds:.2f} s, {count:,} blocks")
    return times, blocks, refused, before, load_average()


# ---------------------------------------------------------------- memory


def memory(folder: Path, length: int, root: Path) -> tuple[int, float, str]:
    """Peak RSS (bytes) and seconds of ``pack_dataset`` in a child importing ``root``; its summary line."""
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(folder), str(length)],
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=3600,
        cwd=tempfile.gettempdir(),
    )
    if done.returncode != 0:
        raise SystemExit(f"the child failed:\n{done.stderr[-3000:]}")
    peak = int(done.stderr.rsplit("VmHWM", 1)[1].split()[0]) * 1024
    summary = next(line for line in done.stderr.splitlines() if line.startswith("seconds"))
    return peak, float(summary.split()[1]), summary


def _commit(root: Path) -> str:
    done = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


def machine_lines() -> list[str]:
    """Date, machine, software and commit, as ``run.py`` reports them."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_run", Path(_HERE) / "run.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["_run"] = module
    spec.loader.exec_module(module)
    return list(module.machine_lines())


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks that it runs")
    parser.add_argument("--only", choices=["speed", "memory"], default=None, help="one part (default: both)")
    parser.add_argument("--speed-tokens", type=float, default=20e6)
    parser.add_argument("--memory-tokens", type=float, default=80e6)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--max-seq-length", type=int, default=4096)
    parser.add_argument("--root", default=str(ROOT), help="the checkout the memory child imports")
    parser.add_argument("--workdir", default=None, help="where the datasets are written (default: the temp folder)")
    parser.add_argument("--output", default=None, help="also write the report to this Markdown file")
    args = parser.parse_args(argv)
    if args.quick:
        args.speed_tokens, args.memory_tokens, args.repeat = 200_000, 200_000, 2
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="hf-datasets-", dir=args.workdir))
    lines = ["# The datasets door: pack_batch under Dataset.map against TRL, pack_dataset's peak memory", ""]
    lines += machine_lines()
    lines.append(f"- command: `python benchmarks/hf_datasets.py {' '.join(sys.argv[1:] if argv is None else argv)}`")
    try:
        if args.only in (None, "speed"):
            folder = work / "speed"
            rows, tokens, arrow = write_dataset(folder, args.speed_tokens)
            say(f"speed: {rows:,} rows, {tokens:,} tokens")
            times, blocks, refused, before, after = speed(folder, args.max_seq_length, args.repeat)
            trl = statistics.median(times["TRL pack_dataset"])
            lines += ["", "## Speed", ""]
            lines.append(
                f"{rows:,} rows, {tokens:,} tokens (Arrow {arrow / GIB:.3f} GiB), max_seq_length "
                f"{args.max_seq_length:,}, map batches of {BATCH:,} rows, {args.repeat} interleaved runs each; "
                f"load average (1, 5, 15 min) {before} before, {after} after."
            )
            lines += ["", "| map path | median | min – max | ratio to TRL | blocks |", "|---|---|---|---|---|"]
            for name, values in times.items():
                median = statistics.median(values)
                lines.append(
                    f"| {name} | {median:.2f} s | {min(values):.2f} – {max(values):.2f} s | "
                    f"{median / trl:.2f}× | {blocks[name]:,} |"
                )
            lines += [f"| {name} | refused: `{reason}` | | | |" for name, reason in refused.items()]
        if args.only in (None, "memory"):
            folder = work / "memory"
            rows, tokens, arrow = write_dataset(folder, args.memory_tokens)
            say(f"memory: {rows:,} rows, {tokens:,} tokens, root {args.root}")
            before = load_average()
            peak, seconds, summary = memory(folder, args.max_seq_length, Path(args.root))
            bound = arrow + GIB
            lines += ["", "## Memory", ""]
            lines.append(
                f"`packing.hf.pack_dataset(load_from_disk(...), {args.max_seq_length})` in a fresh child importing "
                f"`{args.root}` (commit {_commit(Path(args.root))}); load average {before} before, "
                f"{load_average()} after."
            )
            lines += [
                "",
                "| rows | tokens | Arrow size | peak RSS | bound (Arrow + 1 GiB) | ratio | within | seconds | child |",
                "|---|---|---|---|---|---|---|---|---|",
                f"| {rows:,} | {tokens:,} | {arrow / GIB:.3f} GiB | {peak / GIB:.2f} GiB | {bound / GIB:.2f} GiB | "
                f"{peak / bound:.2f} | {'yes' if peak <= bound else '**no**'} | {seconds:.1f} | `{summary}` |",
            ]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report = "\n".join(lines) + "\n"
    print(report)
    if args.output:
        Path(args.output).write_text(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
