"""Concurrent sessions against a running explorer, over Streamlit's own websocket protocol.

Each simulated user opens a series of links (a new session each: the page runs its script once from the link,
as after any widget change) and the time from sending the run request to the server's ``script_finished`` is
one interaction's server-side latency. Users work on 10,000-sequence synthetic data of their own seed (no two
users share a cache entry), visiting Result, Compare and Sweep with three strategies.

    python -P benchmarks/explorer_load.py --serve --sessions 1 5 20 [--think 3] [--heavy 1] [--repeat 3]

or, against a server you started (``streamlit run app.py --server.headless true --server.address 127.0.0.1
--server.port 8650 &``), ``python -P benchmarks/explorer_load.py --port 8650 --pid PID ...``.

- ``--think T``: each user pauses between interactions, exponentially distributed with mean ``T`` seconds (a
  person reading the chart before the next click); 0, the default, sends the next link the moment the last one
  finished, which keeps every session busy all the time (a load no two-core server can serve in 2x: 20 sessions
  need 20 interactions' work per interaction time, so the bound is ``sessions / cores`` times one session).
- ``--heavy K``: K of the users (at every level with more than K sessions) work on 1,000,000-sequence data
  instead; their own times are left out of the table, which shows what their heavy work costs everyone else.
- One session is the baseline: as many users as the busiest level has, one after the other (the same mix of
  datasets and tabs, nothing at the same time).
- ``--repeat R``: the levels run R times, interleaved (1, 5, 20, 1, 5, 20, ...), and each level's times are
  pooled, so that a quiet or busy minute of this shared machine does not fall on one level only.

- ``--hostile H``: H more sessions (at every level but the baseline), each opening a hostile link again and
  again: the proven optimum asked to search for 600 s (``HOSTILE``: 50,000 uniform lengths that keep it searching
  to its limit, a seed of its own each time), the tab closed after ``--hold`` seconds (six browser tabs of such
  a link, closed and opened again). The table's last columns give the load average at the level's end and the
  server's CPU per second in the ``--after`` seconds after the last hostile tab closed (about 0 when its work
  was stopped with it).
- ``--serve``: the benchmark starts ``streamlit run app.py`` itself, a new server for every level of every run,
  so that every level meets a cold cache with the same datasets (on one running server each level needs data of
  its own, and a few datasets make the proven optimum search to its 5 s limit: one level may get more of them).
  The server's environment is the benchmark's (``PACKING_EXPLORER_WORKERS=0`` to search in the server).
- ``--pid P``: the server's process id (and its search workers'); the table then gives the server's CPU seconds per interaction and the
  least p50 that ``sessions`` busy users can see on this machine's cores (``sessions x CPU / cores``, when every
  session always has work waiting).

Prints p50/p95 latency per concurrency level and the p50/p95 ratios to one session. Stop the server by its pid.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import statistics
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import websockets
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

TABS = ("Result", "Compare", "Sweep")
STRATEGIES = ("bfd", "first_fit", "split")
HEAVY_SEQUENCES = 1_000_000
HOSTILE = (
    "source=synthetic&count=50000&max_length=2048&distribution=uniform&seed={seed}&max_seq_length=2500"
    "&strategy=optimal&time_limit=600&tab=Result"
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from servers import start_server, stop_server  # noqa: E402


def links(user: int, rounds: int, sequences: int, shared: bool = False, run: int = 0, base: int = 1000) -> list[str]:
    """The links user ``user`` opens, in order (with ``shared``, every user opens the same links: one shared
    dataset, as when a class opens a link a teacher sent). Each ``run`` has seeds of its own, so that it meets a
    cold cache as the first one did; ``base`` sets them apart from earlier invocations."""
    seed = base + 1000 * run + (0 if shared else user)
    out = []
    for i in range(rounds):
        tab = TABS[i % len(TABS)]
        strategy = STRATEGIES[(i // len(TABS)) % len(STRATEGIES)]
        out.append(f"source=synthetic&count={sequences}&max_length=2048&seed={seed}&strategy={strategy}&tab={tab}")
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


async def hostile(url: str, index: int, stop: asyncio.Event, hold: float, run: int) -> int:
    """One hostile visitor's tab: open ``HOSTILE``, close the tab after ``hold`` seconds, again until ``stop``.
    Returns how many tabs it opened."""
    opened = 0
    while not stop.is_set():
        seed = 500_000 + 10_000 * run + 100 * index + opened
        async with websockets.connect(url, subprotocols=["streamlit"], max_size=None, open_timeout=60) as ws:
            message = BackMsg()
            message.rerun_script.query_string = HOSTILE.format(seed=seed)
            message.rerun_script.page_script_hash = ""
            await ws.send(message.SerializeToString())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(_drain(ws, stop), timeout=hold)
        opened += 1
    return opened


async def _drain(ws: websockets.ClientConnection, stop: asyncio.Event) -> None:
    while not stop.is_set():
        await ws.recv()


Timing = tuple[str, float]
"""One interaction: the tab its link opened, and its seconds."""


async def user(url: str, queries: list[str], timeout: float, think: float, rng: random.Random) -> list[Timing]:
    """One user's interactions, with a pause of mean ``think`` seconds before each (the first one staggered)."""
    times = []
    for query in queries:
        if think > 0:
            await asyncio.sleep(rng.expovariate(1 / think))
        times.append((query.rpartition("tab=")[2], await one_run(url, query, timeout)))
    return times


def data_run(sessions: int, run: int, args: argparse.Namespace) -> int:
    """Which data a level's run opens: with ``--serve`` (a new server, so a cold cache, for every level) every
    level of a run opens the same datasets; on one running server each level needs data of its own."""
    return run if args.serve else 100 * run + sessions


async def alone(url: str, users: int, rounds: int, sequences: int, args: argparse.Namespace, run: int) -> list[Timing]:
    """The one-session baseline: ``users`` users (data of their own, as at the busiest level) one after the other,
    so that it holds the same mix of work (some datasets make the proven optimum search longer) with nothing
    else running."""
    times = []
    for u in range(users):
        queries = links(u, rounds, sequences, args.shared, data_run(1, run, args), args.seed)
        times += await user(url, queries, 600, 0.0, random.Random(u))
    return times


async def level(
    url: str, sessions: int, rounds: int, sequences: int, args: argparse.Namespace, run: int
) -> list[Timing]:
    """The light users' latencies with ``sessions`` users at once (the heavy users' are left out); one session is
    ``alone``'s baseline."""
    if sessions == 1:
        return await alone(url, max(args.sessions), rounds, sequences, args, run)
    heavy = args.heavy if sessions > args.heavy else 0
    tasks: list[Any] = []
    for u in range(sessions):
        count = HEAVY_SEQUENCES if u < heavy else sequences
        rng = random.Random(7919 * u + run)
        queries = links(u, rounds, count, args.shared, data_run(sessions, run, args), args.seed)
        tasks.append(user(url, queries, 600, args.think, rng))
    stop = asyncio.Event()
    hostiles = [asyncio.create_task(hostile(url, i, stop, args.hold, run)) for i in range(args.hostile)]
    results = await asyncio.gather(*tasks)
    stop.set()
    args.hostile_tabs = sum(await asyncio.gather(*hostiles))
    return [t for r in results[heavy:] for t in r]


def _stat(pid: int) -> list[str]:
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()


def family(pid: int) -> list[int]:
    """Process ``pid`` and its living children (the server and its search workers) (Linux)."""
    out = [pid]
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != pid:
            try:
                if int(_stat(int(entry))[1]) == pid:
                    out.append(int(entry))
            except OSError:  # gone meanwhile
                continue
    return out


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time so far of process ``pid`` and of its living children (the search workers) (Linux)."""
    total = 0
    for member in family(pid):
        try:
            fields = _stat(member)
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def _mean(values: list[float]) -> str:
    return f"{statistics.fmean(values):.2f}" if values else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8650)
    parser.add_argument("--sessions", type=int, nargs="+", default=[1, 5, 20])
    parser.add_argument("--rounds", type=int, default=6, help="links per user")
    parser.add_argument("--sequences", type=int, default=10_000)
    parser.add_argument("--quick", action="store_true", help="2 links per user")
    parser.add_argument("--shared", action="store_true", help="every user opens the same links (one dataset)")
    parser.add_argument("--think", type=float, default=0.0, help="mean pause between a user's interactions (s)")
    parser.add_argument("--heavy", type=int, default=0, help="users on 1,000,000-sequence data")
    parser.add_argument("--hostile", type=int, default=0, help="sessions opening a 600 s optimal link, closing it")
    parser.add_argument("--hold", type=float, default=8.0, help="seconds a hostile tab stays open")
    parser.add_argument("--after", type=float, default=10.0, help="seconds the server's CPU is read after a level")
    parser.add_argument("--repeat", type=int, default=1, help="interleaved runs of every level")
    parser.add_argument("--pid", type=int, default=0, help="the server's pid, to report its CPU per interaction")
    parser.add_argument("--serve", action="store_true", help="a new server for every level (the same data in each)")
    parser.add_argument("--settle", type=float, default=8.0, help="with --serve: seconds after the first run")
    parser.add_argument(
        "--seed", type=int, default=int(time.time()) % 2000 * 1_000_000, help="first seed (default: new data)"
    )
    args = parser.parse_args()
    rounds = 2 if args.quick else args.rounds
    url = f"ws://127.0.0.1:{args.port}/_stcore/stream"
    if not args.serve:
        with urllib.request.urlopen(f"http://127.0.0.1:{args.port}/_stcore/health", timeout=5) as reply:
            assert reply.status == 200
        asyncio.run(one_run(url, "", 120))  # the first run compiles or loads the kernels
    pooled: dict[int, list[Timing]] = {s: [] for s in args.sessions}
    cpu: dict[int, float] = dict.fromkeys(args.sessions, 0.0)
    load: dict[int, list[float]] = {s: [] for s in args.sessions}
    idle: dict[int, list[float]] = {s: [] for s in args.sessions}
    tabs: dict[int, int] = dict.fromkeys(args.sessions, 0)
    for run in range(args.repeat):
        for sessions in args.sessions:
            server = start_server(args.port) if args.serve else None
            try:
                if server is not None:
                    args.pid = server.pid
                    asyncio.run(one_run(url, "", 120))  # the server has warmed up; its workers start meanwhile
                    time.sleep(args.settle)
                before = cpu_seconds(args.pid) if args.pid else 0.0
                args.hostile_tabs = 0
                pooled[sessions] += asyncio.run(level(url, sessions, rounds, args.sequences, args, run))
                cpu[sessions] += cpu_seconds(args.pid) - before if args.pid else 0.0
                load[sessions].append(os.getloadavg()[0])
                tabs[sessions] += args.hostile_tabs
                if args.pid:  # what the server still burns once every tab is closed
                    time.sleep(2.0)
                    before, started = cpu_seconds(args.pid), time.monotonic()
                    time.sleep(args.after)
                    idle[sessions].append((cpu_seconds(args.pid) - before) / (time.monotonic() - started))
            finally:
                if server is not None:
                    stop_server(server)
    first = [t for _, t in pooled[args.sessions[0]]]
    base_p50, base_p95 = percentile(first, 0.5), percentile(first, 0.95)
    server_note = ", a new server per level" if args.serve else ""
    workers = os.environ.get("PACKING_EXPLORER_WORKERS", "default")
    print(
        f"think {args.think:g} s, heavy users {args.heavy}, {args.repeat} interleaved run(s), seed {args.seed}"
        f"{server_note}, PACKING_EXPLORER_WORKERS={workers}, hostile sessions {args.hostile} (tabs held "
        f"{args.hold:g} s)"
    )
    cores = os.cpu_count() or 1
    print(
        "| sessions | interactions | p50 (s) | p95 (s) | mean (s) | p50 ratio | p95 ratio | CPU (s) | busy bound (s) "
        "| hostile tabs | load avg (1 min) | CPU/s after |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for sessions, timings in pooled.items():
        times = [t for _, t in timings]
        p50, p95 = percentile(times, 0.5), percentile(times, 0.95)
        # CPU per interaction, counting the heavy users' interactions too (their work is on the same cores)
        total = args.repeat * (max(args.sessions) if sessions == 1 else sessions) * rounds
        per = cpu[sessions] / total if args.pid else float("nan")
        print(
            f"| {sessions} | {len(times)} | {p50:.3f} | {p95:.3f} | {statistics.fmean(times):.3f} | "
            f"{p50 / base_p50:.1f}x | {p95 / base_p95:.1f}x | {per:.3f} | {max(1, sessions / cores) * per:.3f} | "
            f"{tabs[sessions]} | {_mean(load[sessions])} | {_mean(idle[sessions])} |",
            flush=True,
        )
    print("\n| sessions | tab | interactions | p50 (s) | p95 (s) | max (s) |\n|---|---|---|---|---|---|")
    for sessions, timings in pooled.items():
        for tab in TABS:
            times = [t for name, t in timings if name == tab]
            print(
                f"| {sessions} | {tab} | {len(times)} | {percentile(times, 0.5):.3f} | {percentile(times, 0.95):.3f} | "
                f"{max(times):.3f} |"
            )


if __name__ == "__main__":
    main()
