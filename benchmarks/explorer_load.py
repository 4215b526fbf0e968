"""Concurrent sessions against a running explorer, over Streamlit's own websocket protocol.

Each simulated user opens a series of links (a new session each: the page runs its script once from the link,
as after any widget change) and the time from sending the run request to the server's ``script_finished`` is
one interaction's server-side latency. Users work on 10,000-sequence synthetic data of their own seed (no two
users share a cache entry), visiting Result, Compare and Sweep with three strategies.

    streamlit run app.py --server.headless true --server.address 127.0.0.1 --server.port 8650 &
    python -P benchmarks/explorer_load.py --port 8650 --sessions 1 5 20 [--quick]

Prints a table of p50/p95 latency per concurrency level. Stop the server by its pid afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import urllib.request

import websockets
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

TABS = ("Result", "Compare", "Sweep")
STRATEGIES = ("bfd", "first_fit", "split")


def links(user: int, rounds: int, sequences: int, shared: bool = False) -> list[str]:
    """The links user ``user`` opens, in order (with ``shared``, every user opens the same links: one shared
    dataset, as when a class opens a link a teacher sent)."""
    out = []
    for i in range(rounds):
        tab = TABS[i % len(TABS)]
        strategy = STRATEGIES[(i // len(TABS)) % len(STRATEGIES)]
        out.append(
            f"source=synthetic&count={sequences}&max_length=2048&seed={1000 if shared else 1000 + user}&strategy={strategy}&tab={tab}"
        )
    return out


async def one_run(url: str, query: str, timeout: float) -> float:
    """Open a session, run the page for ``query``, return seconds until the script finished."""
    async with websockets.connect(url, subprotocols=["streamlit"], max_size=None, open_timeout=timeout) as ws:
        message = BackMsg()
        message.rerun_script.query_string = query
        message.rerun_script.page_script_hash = ""
        started = time.perf_counter()
        await ws.send(message.SerializeToString())
        while True:
            raw = await asyncio.wait_for(ws.recv(), timeout=timeout)
            forward = ForwardMsg()
            forward.ParseFromString(raw)
            if forward.WhichOneof("type") == "script_finished":
                return time.perf_counter() - started


async def user(url: str, queries: list[str], timeout: float) -> list[float]:
    return [await one_run(url, q, timeout) for q in queries]


async def level(url: str, sessions: int, rounds: int, sequences: int, timeout: float, shared: bool) -> list[float]:
    queries = [links(u, rounds, sequences, shared) for u in range(sessions)]
    results = await asyncio.gather(*(user(url, q, timeout) for q in queries))
    return [t for r in results for t in r]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8650)
    parser.add_argument("--sessions", type=int, nargs="+", default=[1, 5, 20])
    parser.add_argument("--rounds", type=int, default=6, help="links per user")
    parser.add_argument("--sequences", type=int, default=10_000)
    parser.add_argument("--quick", action="store_true", help="2 links per user")
    parser.add_argument("--shared", action="store_true", help="every user opens the same links (one dataset)")
    args = parser.parse_args()
    rounds = 2 if args.quick else args.rounds
    base = f"127.0.0.1:{args.port}"
    with urllib.request.urlopen(f"http://{base}/_stcore/health", timeout=5) as reply:
        assert reply.status == 200
    url = f"ws://{base}/_stcore/stream"
    asyncio.run(one_run(url, "", 120))  # the first run compiles or loads the kernels
    print("| sessions | interactions | p50 (s) | p95 (s) | mean (s) |")
    print("|---|---|---|---|---|")
    for sessions in args.sessions:
        times = asyncio.run(level(url, sessions, rounds, args.sequences, 600, args.shared))
        print(
            f"| {sessions} | {len(times)} | {percentile(times, 0.5):.2f} | {percentile(times, 0.95):.2f} | "
            f"{statistics.fmean(times):.2f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
