"""Run-wide safety: a stuck child process fails its own test, never holds the whole run open."""

from __future__ import annotations

import multiprocessing

import pytest


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Kill any child process a test left behind: at exit the interpreter would wait for it forever."""
    for child in multiprocessing.active_children():
        child.kill()
