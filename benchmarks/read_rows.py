"""Reading Python rows: ``read_rows`` (and ``read_batch``, a ``datasets`` batch) against pyarrow's conversion of
the same lists, and against ``read_rows`` at an earlier commit (``--against REV``), timed alternately in one run.

    python benchmarks/read_rows.py                                 # 40,000 rows of 300-700 tokens (~20 M)
    python benchmarks/read_rows.py --against 6ab1fd3 --output benchmarks/read_rows_results.md
    python benchmarks/read_rows.py --quick                         # 2,000 rows: checks that it runs

Inputs (ids uniform below 50,000, lengths uniform in 300-700, ``numpy.random.default_rng(0)``): a list of int
lists; dicts ``{"input_ids": [...]}``; dicts with ``labels`` too (-100 over each row's first third); a list of
int64 numpy arrays; and the dicts' batch as ``datasets.map(batched=True)`` gives it (a dict of lists), read by
``read_batch`` (the earlier commit: ``read_rows`` of its rows, as ``hf.pack_batch`` read it). The floor is
``pyarrow.array`` of the same lists, every field (what any check of Python lists must at least do: look at every
item). Medians of ``--repeat`` alternating runs; the load average is stated.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

from packing.reading._reader import read_batch, read_rows  # noqa: E402


def inputs(rows: int) -> dict[str, Any]:
    """The five inputs, made once."""
    rng = np.random.default_rng(0)
    arrays = [rng.integers(0, 50_000, int(n)) for n in rng.integers(300, 700, rows)]
    lists = [array.tolist() for array in arrays]
    labels = [[-100] * (len(ids) // 3) + ids[len(ids) // 3 :] for ids in lists]
    return {
        "int lists": lists,
        "input_ids dicts": [{"input_ids": ids} for ids in lists],
        "input_ids + labels dicts": [{"input_ids": ids, "labels": lab} for ids, lab in zip(lists, labels, strict=True)],
        "int64 numpy arrays": arrays,
        "batch (dict of lists) + labels": {"input_ids": lists, "labels": labels},
    }


def floor(data: Any) -> None:
    """pyarrow's conversion of every field's lists."""
    if isinstance(data, dict):
        for column in data.values():
            pa.array(column)
    elif isinstance(data[0], dict):
        for name in data[0]:
            pa.array([row[name] for row in data])
    else:
        pa.array(data)


def earlier(rev: str) -> Callable[..., Any]:
    """``read_rows`` of ``packing/reading/_reader.py`` at ``rev``, loaded beside the current package."""
    source = subprocess.run(
        ["git", "show", f"{rev}:packing/reading/_reader.py"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout
    path = Path(tempfile.mkdtemp()) / "reader_before.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("reader_before", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.read_rows  # type: ignore[no-any-return]


def timed(call: Callable[[], Any]) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=40_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--against", help="a git revision whose read_rows is timed too")
    parser.add_argument("--output", type=Path)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    rows, repeat = (2_000, 2) if args.quick else (args.rows, args.repeat)
    before = earlier(args.against) if args.against else None
    load = os.getloadavg()
    lines = [
        f"# read_rows: {rows:,} rows of 300-700 tokens, medians of {repeat} alternating runs (seconds)",
        "",
        f"Machine: {os.cpu_count()} cores; load average at the start {load[0]:.2f}, {load[1]:.2f}, {load[2]:.2f}.",
        "",
        "| input | pyarrow.array (floor) | now | "
        + (f"at {args.against} | now / before |" if before else "now / floor |"),
        "|---|---|---|---|---|" if before else "|---|---|---|---|",
    ]
    for name, data in inputs(rows).items():
        batch = isinstance(data, dict)
        now: Callable[[], Any] = partial(read_batch, data) if batch else partial(read_rows, data)
        sides: dict[str, Callable[[], Any]] = {"floor": partial(floor, data), "now": now}
        if before is not None:
            rows_of = (
                [dict(zip(data, values, strict=True)) for values in zip(*data.values(), strict=True)] if batch else data
            )
            sides["before"] = partial(before, rows_of)
        times: dict[str, list[float]] = {side: [] for side in sides}
        for _ in range(repeat):
            for side, call in sides.items():
                times[side].append(timed(call))
        median = {side: statistics.median(values) for side, values in times.items()}
        cells = [f"{median['floor']:.3f}", f"{median['now']:.3f}"]
        if before is not None:
            cells += [f"{median['before']:.3f}", f"{median['now'] / median['before']:.2f}"]
        else:
            cells.append(f"{median['now'] / median['floor']:.2f}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
        print(lines[-1], file=sys.stderr)
    end = os.getloadavg()
    lines += ["", f"Load average at the end {end[0]:.2f}, {end[1]:.2f}, {end[2]:.2f}."]
    report = "\n".join(lines) + "\n"
    print(report)
    if args.output:
        args.output.write_text(report)


if __name__ == "__main__":
    main()
