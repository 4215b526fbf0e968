"""How long one visitor's short load waits while another visitor's long load runs, in the explorer's load lane.

Two sessions call ``explorer.server.workers.run`` in the "load" lane, as the page does for an upload or pasted
text rows: the first a load of ``--long`` seconds (a chat template that runs that long), the second, once the
first runs in its worker, a load of ``--short`` seconds. The time from the second's request to its result is
what its visitor waits. Two lane designs in the same run, interleaved ``--repeat`` times:

- ``one worker``: the lane as it was (one process, no rule per session): the short load waits for the long one;
- ``per session``: two processes and one call per session at a time (``ONE_PER_SESSION``): the short load
  takes the other worker at once; ``cold`` when that worker's process starts for it (the first time two
  sessions load at once: the process spawned and the kernels loaded, as the page's warm-up configures its
  workers), ``warm`` when it already runs.

    python -P benchmarks/explorer_load_lane.py [--long 20] [--short 0.1] [--repeat 3]

Prints the median and range of the short load's wait for each design, and the load average. Real processes
(``spawn``), about ``repeat × (long + 10)`` seconds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from explorer.core import runs as compute
from explorer.server import workers


def hold(marker: str, release: str, seconds: float) -> int:
    """A long load: its process id in ``marker``, then ``seconds`` of work or until ``release`` exists."""
    Path(marker).write_text(str(os.getpid()))
    deadline = time.monotonic() + seconds
    while not os.path.exists(release) and time.monotonic() < deadline:
        time.sleep(0.01)
    return os.getpid()


def short(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


def one_pair(long: float, brief: float, folder: Path, name: str) -> float:
    """The second session's wait for its ``brief`` load while the first session's ``long`` load runs."""
    marker, release = folder / f"{name}.pid", folder / f"{name}.release"
    with ThreadPoolExecutor(1, "first") as first, ThreadPoolExecutor(1, "second") as second:
        running = first.submit(workers.run, hold, str(marker), str(release), long, lane_name="load", seconds=600)
        while not marker.exists():
            time.sleep(0.01)
        began = time.monotonic()
        waited = second.submit(lambda: (workers.run(short, brief, lane_name="load"), time.monotonic() - began)[1])
        took = waited.result()
        release.touch()  # the long load's visitor leaves: the next pair starts at once
        running.result()
    return took


def design(per_session: bool) -> None:
    workers.shutdown()
    workers.LANES["load"] = 2 if per_session else 1
    workers.ONE_PER_SESSION = frozenset({"load"} if per_session else ())
    workers.set_session(lambda: threading.current_thread().name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--long", type=float, default=20.0)
    parser.add_argument("--short", type=float, default=0.1)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    workers.WORKERS = 1
    workers.configure(compute.warm_searches)  # as the page's warm-up does: a new worker loads the kernels first
    waits: dict[str, list[float]] = {"one worker": [], "per session, cold": [], "per session, warm": []}
    with tempfile.TemporaryDirectory() as folder:
        for run in range(args.repeat):
            design(per_session=False)
            waits["one worker"].append(one_pair(args.long, args.short, Path(folder), f"one{run}"))
            design(per_session=True)
            waits["per session, cold"].append(one_pair(args.long, args.short, Path(folder), f"cold{run}"))
            waits["per session, warm"].append(one_pair(args.long, args.short, Path(folder), f"warm{run}"))
            print(f"run {run + 1}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in waits.items()), file=sys.stderr)
    workers.shutdown()
    print(f"long load {args.long:g} s, short load {args.short:g} s, {args.repeat} runs, load average "
          f"{os.getloadavg()[0]:.2f}\n")  # fmt: skip
    print("| load lane | the short load's wait, median (s) | min–max (s) |\n|---|---|---|")
    for name, values in waits.items():
        print(f"| {name} | {statistics.median(values):.2f} | {min(values):.2f}–{max(values):.2f} |")


if __name__ == "__main__":
    main()
