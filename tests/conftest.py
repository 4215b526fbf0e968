"""Run-wide fixtures and safety: one Ray for every test that needs it; a stuck child process fails its own test,
never holds the whole run open."""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def cluster() -> Iterator[Any]:
    """One local two-CPU Ray for the whole run (it takes seconds to start), whose workers import this checkout;
    blocks read in order. Yields the ``ray`` module."""
    ray = pytest.importorskip("ray")
    pytest.importorskip("ray.data")
    # Ray's testing settings (``_system_config``): workers at the driver's priority, not Ray's default niceness of
    # 15 (next to a busy process they would get a few percent of a core), and up to 8 kept when idle, not as many
    # as CPUs (Ray Data's own actors take two; every task's worker was killed when idle and started again, seconds
    # of imports each time). Under two busy loops the Ray tests of test_recipe took 14 min; with these, 36 s.
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}},
        _system_config={"worker_niceness": 0, "num_workers_soft_limit": 8},
    )
    context = ray.data.DataContext.get_current()
    saved = context.execution_options.preserve_order, context.enable_progress_bars
    context.execution_options.preserve_order = True
    context.enable_progress_bars = False
    try:
        yield ray
    finally:
        context.execution_options.preserve_order, context.enable_progress_bars = saved
        ray.shutdown()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test that uses ``cluster`` is ``slow``: starting Ray and its shuffles take seconds to minutes."""
    for item in items:
        if "cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Kill any child process a test left behind: at exit the interpreter would wait for it forever."""
    for child in multiprocessing.active_children():
        child.kill()
