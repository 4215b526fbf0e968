"""Start and stop ``streamlit run app.py`` for the explorer's benchmarks (``explorer_load``, ``explorer_start``)."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def start_server(port: int, timeout: float = 60.0) -> subprocess.Popen[bytes]:
    """``streamlit run app.py`` on ``port`` (this process's environment), returned once it answers its health
    check. Refuses a port that already answers (a server left running would answer the health check instead)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=1):
            raise SystemExit(f"port {port} already answers: stop that server first")
    except OSError:
        pass
    command = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true"]
    command += ["--server.address", "127.0.0.1", "--server.port", str(port)]
    server = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=1):
                return server
        except OSError:
            time.sleep(0.1)
    server.kill()
    raise SystemExit(f"the server on port {port} did not answer within {timeout:g} s")


def stop_server(server: subprocess.Popen[bytes]) -> None:
    """Stop the server (and with it its search workers)."""
    server.terminate()
    try:
        server.wait(timeout=10)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()
