"""Memory soak: open many different large datasets on a running explorer and report the server's memory.

    streamlit run app.py --server.headless true --server.address 127.0.0.1 --server.port 8652 &
    python -P benchmarks/explorer_soak.py --port 8652 --pid <server pid> [--links 42] [--sequences 1000000]

Each link is a new session on synthetic data of its own seed (nothing shared), visiting Result and Compare;
the resident set size (``VmRSS``) of the server and of its children (the search workers, the resource tracker) is
printed every few links and after an idle minute.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # after the standard library is loaded (run with python -P)
from explorer_load import family, one_run


def _rss_mb(pid: int) -> float:
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:  # gone meanwhile
        return 0.0
    return next((int(line.split()[1]) / 1024 for line in lines if line.startswith("VmRSS:")), 0.0)


def rss_mb(pid: int) -> float:
    """Resident memory of the server and its search workers, in MB."""
    return sum(_rss_mb(member) for member in family(pid))


def memory(pid: int) -> str:
    """``1,234 MB (server 800 MB + 2 workers ...)``."""
    members = family(pid)
    server, others = _rss_mb(pid), [_rss_mb(m) for m in members[1:]]
    parts = " + ".join(f"{m:,.0f}" for m in others)
    return f"{server + sum(others):,.0f} MB (server {server:,.0f} MB" + (f", children {parts} MB)" if others else ")")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8652)
    parser.add_argument("--pid", type=int, required=True)
    parser.add_argument("--links", type=int, default=42)
    parser.add_argument("--sequences", type=int, default=1_000_000)
    parser.add_argument("--idle", type=float, default=0.0, help="seconds to wait at the end, then measure again")
    args = parser.parse_args()
    url = f"ws://127.0.0.1:{args.port}/_stcore/stream"
    print(f"start: {memory(args.pid)}", flush=True)
    peak = 0.0
    started = time.perf_counter()
    for i in range(args.links):
        for tab in ("Result", "Compare"):
            query = f"source=synthetic&count={args.sequences}&max_length=4096&seed={5000 + i}&strategy=bfd&tab={tab}"
            asyncio.run(one_run(url, query, 600))
        peak = max(peak, rss_mb(args.pid))
        if (i + 1) % 6 == 0 or i + 1 == args.links:
            print(f"after {i + 1} links: {memory(args.pid)}, peak {peak:,.0f} MB", flush=True)
    print(f"{args.links} links in {time.perf_counter() - started:.0f} s", flush=True)
    if args.idle:
        time.sleep(args.idle)
        print(f"after {args.idle:.0f} s idle: {memory(args.pid)}", flush=True)


if __name__ == "__main__":
    main()
