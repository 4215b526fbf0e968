"""A real server: a visitor who closes the browser's connection while the page waits for a long search leaves
no search running (``explorer.server.workers``: the run is stopped, and the worker searching for it killed)."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.helpers.processes import alive

ROOT = Path(__file__).resolve().parents[2]
LINK = (
    "source=synthetic&count=50000&max_length=2048&distribution=uniform&seed=5&max_seq_length=2500"
    "&strategy=optimal&time_limit=600"
)
"""The recipe: the proven optimum asked for ten minutes, on lengths that keep it searching to its limit."""
LONG_LANE_NICENESS = 15


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


def long_lane_worker(server: int) -> int | None:
    """The server's worker of the long lane (the one niceness it runs at), if one runs."""
    for child in children(server):
        try:
            if int(stat(child)[16]) == LONG_LANE_NICENESS:
                return child
        except OSError:
            continue
    return None


def wait_for(predicate, seconds: float):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    return predicate()


async def open_and_close(url: str, server: int) -> int | None:
    """Open the link in a session, wait until its search runs in a worker, close the connection."""
    import websockets
    from streamlit.proto.BackMsg_pb2 import BackMsg

    async with websockets.connect(url, subprotocols=["streamlit"], max_size=None, open_timeout=60) as ws:
        message = BackMsg()
        message.rerun_script.query_string = LINK
        message.rerun_script.page_script_hash = ""
        await ws.send(message.SerializeToString())
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            worker = long_lane_worker(server)
            if worker is not None:
                return worker
            await asyncio.sleep(0.1)
    return None


@pytest.mark.slow
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

        assert wait_for(healthy, 60)
        worker = asyncio.run(open_and_close(f"ws://127.0.0.1:{port}/_stcore/stream", server.pid))
        assert worker is not None, "the search did not run in a worker of the long lane"
        assert wait_for(lambda: not alive(worker), 60), "the search went on after its visitor left"
        assert server.poll() is None
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
