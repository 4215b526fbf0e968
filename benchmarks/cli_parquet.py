"""``packing pack`` on a plain Parquet file against a pyarrow read and write of the same file, whole processes
(target: at most 2.5x).

    python benchmarks/cli_parquet.py                      # ~30 M tokens, 5 runs of each side
    python benchmarks/cli_parquet.py --quick              # ~200,000 tokens, 2 runs: checks that it runs
    python benchmarks/cli_parquet.py --tokens 40e6 --repeat 7 --output benchmarks/cli_parquet_results.md
    python benchmarks/cli_parquet.py --code /tmp/old --code .   # two checkouts (git archive of a commit), interleaved

The input is one ``input_ids`` column (list<int32>, random ids below 50,000) written by ``pq.write_table`` with
pyarrow's defaults; its row lengths are drawn (with replacement, seed 0) from OpenChat V1's real conversation
lengths (``packing/_workloads/openchat_v1_2048.json``, source: imoneoi/multipack_sampler testdata.json, the
Multipack sampler benchmark; capped at 2048 tokens) until about ``--tokens`` tokens. The file is built once; then
``--repeat`` times, in turn:

- *baseline*: a fresh ``python -c`` process doing ``pq.read_table(IN)`` and ``pq.write_table(table, OUT)``;
- *pack*: ``python -m packing pack IN --output OUT.parquet --max-seq-length 4096 --quiet`` (import, read, plan,
  fill, write, summary), once for each ``--code`` checkout given (default: this one).

One warm-up run of each comes first: the input in the page cache, numba's kernels in its on-disk cache and the
package's bytecode cached (in a temporary ``PYTHONPYCACHEPREFIX``, even where ``PYTHONDONTWRITEBYTECODE`` is set),
as an installed package finds them.

Both are wall times of the whole child process (its CPU time, user + system, is shown too: it varies less with
load, though pyarrow's reader uses more than one thread). The ratio is of the two medians of the same run, so load
from other processes hits both sides alike; the load average (1, 5, 15 min) is given before and after. One more run of
``packing pack`` reports its peak resident memory, against the bound of ``forms.py``: the input's Arrow size + 1 GiB.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [entry for entry in sys.path if os.path.abspath(entry or os.curdir) != _HERE]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from packing._workloads import load_workload  # noqa: E402

TARGET = 2.5
BASELINE = "import sys, pyarrow.parquet as pq; pq.write_table(pq.read_table(sys.argv[1]), sys.argv[2])"


def load_average() -> str:
    return ", ".join(f"{value:.2f}" for value in os.getloadavg())


def make_file(path: Path, tokens: float, seed: int = 0) -> tuple[int, int]:
    """The plain Parquet file: OpenChat V1 lengths resampled to about ``tokens`` tokens; its rows and tokens."""
    real = load_workload("openchat_v1_2048").lengths
    rng = np.random.default_rng(seed)
    lengths = rng.choice(real, max(1, round(tokens / real.mean())))
    offsets = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    ids = rng.integers(0, 50_000, int(offsets[-1]), dtype=np.int32)
    pq.write_table(pa.table({"input_ids": pa.ListArray.from_arrays(pa.array(offsets), pa.array(ids))}), path)
    return len(lengths), int(offsets[-1])


def timed(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU (user + system) seconds of ``command`` in a fresh child; its failure stops the run."""
    start, cpu = time.perf_counter(), _children_cpu()
    subprocess.run(command, check=True, cwd=env["PYTHONPATH"], env=env, capture_output=True)  # -m: cwd first
    return time.perf_counter() - start, _children_cpu() - cpu


def peak_rss(wrapper: str, arguments: list[str], env: dict[str, str]) -> int:
    """Peak resident bytes of the command line run with ``arguments`` under ``wrapper`` (``forms.py``'s, which
    prints the child's own ``VmHWM`` as it exits)."""
    command = [sys.executable, "-c", wrapper, *arguments]
    done = subprocess.run(command, check=True, cwd=env["PYTHONPATH"], env=env, capture_output=True, text=True)
    return int(done.stderr.rsplit("VmHWM", 1)[1].split()[0]) * 1024


def child_env(code: Path, folder: Path) -> dict[str, str]:
    """The children's environment: ``code`` first on the path, and bytecode cached (in ``folder``) as a ``pip
    install`` leaves it, even where ``PYTHONDONTWRITEBYTECODE`` is set: else every run would compile the
    package's modules from source again (about 0.3 s of CPU), which an installed package never does."""
    env = {**os.environ, "PYTHONPATH": str(code), "PYTHONPYCACHEPREFIX": str(folder / "pycache")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--tokens", type=float, default=30e6, help="tokens in the input (default 30 M)")
    parser.add_argument("--repeat", type=int, default=5, help="runs of each side (default 5)")
    parser.add_argument("--quick", action="store_true", help="~200,000 tokens, 2 runs: checks that it runs")
    parser.add_argument("--output", type=Path, help="also write the report to this Markdown file")
    parser.add_argument(
        "--code",
        type=Path,
        action="append",
        help="a checkout whose `packing` runs (default: this one); repeated, each is a side of its own, interleaved "
        "with the others (to compare commits in one run)",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.tokens, args.repeat = 2e5, 2
    args.code = [path.resolve() for path in args.code or [ROOT]]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import importlib.util

    spec = importlib.util.spec_from_file_location("_forms", Path(_HERE) / "forms.py")
    assert spec is not None and spec.loader is not None
    forms = importlib.util.module_from_spec(spec)
    sys.modules["_forms"] = forms  # its dataclasses look their module up
    spec.loader.exec_module(forms)
    with tempfile.TemporaryDirectory(prefix="cli-parquet-") as folder:
        source, copy, packed = (Path(folder) / name for name in ("in.parquet", "copy.parquet", "packed.parquet"))
        rows, tokens = make_file(source, args.tokens)
        baseline = [sys.executable, "-c", BASELINE, str(source), str(copy)]
        pack = [sys.executable, "-m", "packing", "pack", str(source), "--output", str(packed)]
        pack += ["--max-seq-length", "4096", "--quiet"]
        sides = [("pyarrow read + write", baseline, child_env(ROOT, Path(folder)))]
        sides += [(f"`packing pack` ({code})", pack, child_env(code, Path(folder))) for code in args.code]
        for _, command, env in sides:  # a first run of each fills the caches (bytecode, numba's kernels, files)
            timed(command, env)
        before = load_average()
        times: list[list[tuple[float, float]]] = [[] for _ in sides]
        for index in range(args.repeat):
            for side, (_, command, env) in zip(times, sides, strict=True):
                side.append(timed(command, env))
            print(f"run {index + 1}: " + ", ".join(f"{t[-1][0]:.2f} s" for t in times), file=sys.stderr)
        after = load_average()
        peaks = [peak_rss(forms._OWN_PEAK, pack[3:], env) for _, _, env in sides[1:]]
        arrow = pq.read_table(source).nbytes
        lines = [
            *forms.machine_lines(),
            f"- pyarrow {pa.__version__}; load average (1, 5, 15 min): {before} before, {after} after",
            f"- command: `python benchmarks/cli_parquet.py {' '.join(argv if argv is not None else sys.argv[1:])}`",
            f"- input: {rows:,} rows, {tokens:,} tokens, {source.stat().st_size / 2**20:.1f} MiB, Arrow size "
            f"{arrow / 2**30:.3f} GiB; output {pq.ParquetFile(packed).metadata.num_rows:,} blocks, "
            f"{packed.stat().st_size / 2**20:.1f} MiB (the last side's)",
        ]
    wall = [statistics.median(t[0] for t in side) for side in times]
    cpu = [statistics.median(t[1] for t in side) for side in times]
    lines += [
        "",
        "| side | median wall | wall of each run | median CPU (user + system) | wall ratio | CPU ratio | peak RSS |",
        "|---|---|---|---|---|---|---|",
    ]
    for i, (label, _, _) in enumerate(sides):
        runs = ", ".join(f"{t[0]:.2f}" for t in times[i])
        ratios = f"**{wall[i] / wall[0]:.2f}x** | {cpu[i] / cpu[0]:.2f}x" if i else "1 | 1"
        peak = f"{peaks[i - 1] / 2**30:.2f} GiB" if i else ""
        lines.append(f"| {label} | {wall[i]:.2f} s | {runs} | {cpu[i]:.2f} s | {ratios} | {peak} |")
    met = all(w / wall[0] <= TARGET for w in wall[1:])
    within = all(peak <= arrow + 2**30 for peak in peaks)
    lines += [
        "",
        f"Ratios are of medians, to the baseline's, in this run: target at most {TARGET}x: "
        f"{'met' if met else 'not met'}. Peak RSS (one more run of each, its own `VmHWM`) against the input's Arrow "
        f"size + 1 GiB = {(arrow + 2**30) / 2**30:.2f} GiB: {'within' if within else 'over'}.",
    ]
    text = "\n".join(lines)
    print(text)
    if args.output:
        args.output.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
