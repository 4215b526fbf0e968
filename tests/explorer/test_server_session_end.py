"""A real server: a visitor who closes the browser's connection while the page waits for a long search leaves
no search running (``explorer.server.workers``: the run is stopped, and the worker searching for it killed)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from explorer.server import workers
from tests.helpers.processes import alive

ROOT = Path(__file__).resolve().parents[2]
LINK = (
    "source=synthetic&count=50000&max_length=2048&distribution=uniform&seed=5&max_seq_length=2500"
    "&strategy=optimal&time_limit=600"
)
"""The recipe: the proven optimum asked for ten minutes, on lengths that keep it searching to its limit."""
LONG_LANE_NICENESS = workers.LOW_PRIORITY
PATIENCE = 200.0
"""Seconds a wait for a condition may last (the server up, the search in its worker, the worker gone): within the
test's timeout; on two cores kept busy by other processes each takes longer, and the test still passes."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def stat(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if int(stat(int(entry))[1]) == pid:
                    out.append(int(entry))
            except OSError:
                continue
    return out


def niceness(pid: int) -> int:
    return int(stat(pid)[16])


def long_lane_worker(server: int) -> int | None:
    """The server's worker of the long lane (the one niceness it runs at: the server's own plus ``LOW_PRIORITY``, as ``os.nice``
    adds, so that a suite run under ``nice`` finds it too), if one runs."""
    wanted = min(niceness(server) + LONG_LANE_NICENESS, 19)
    for child in children(server):
        try:
            if niceness(child) == wanted:
                return child
        except OSError:
            continue
    return None


def wait_for(predicate, seconds: float = PATIENCE):  # type: ignore[no-untyped-def]
    """``predicate()``'s first true value, looked for until it comes or ``seconds`` (the test's patience, within its
    timeout) pass: a condition, never a fixed pause."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    return predicate()


async def open_and_close(url: str, server: int) -> int | None:
    """Open the link in a session, wait until its search runs in a worker (reading what the server sends the
    while, as a browser does), close the connection."""
    import websockets
    from streamlit.proto.BackMsg_pb2 import BackMsg

    async with websockets.connect(url, subprotocols=["streamlit"], max_size=None, open_timeout=PATIENCE) as ws:
        message = BackMsg()
        message.rerun_script.query_string = LINK
        message.rerun_script.page_script_hash = ""
        await ws.send(message.SerializeToString())
        deadline = time.monotonic() + PATIENCE
        while time.monotonic() < deadline:
            worker = long_lane_worker(server)
            if worker is not None:
                return worker
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(ws.recv(), 0.1)
    return None


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_closing_the_browser_connection_kills_the_search_it_waited_for() -> None:
    port = free_port()
    command = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true"]
    command += ["--server.address", "127.0.0.1", "--server.port", str(port)]
    server = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:

        def healthy() -> bool:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=1):
                    return True
            except OSError:
                return False

        assert wait_for(healthy)
        worker = asyncio.run(open_and_close(f"ws://127.0.0.1:{port}/_stcore/stream", server.pid))
        assert worker is not None, "the search did not run in a worker of the long lane"
        assert wait_for(lambda: not alive(worker)), "the search went on after its visitor left"
        assert server.poll() is None
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
