"""Fixtures shared by the explorer's tests."""

from __future__ import annotations

import importlib

import pytest

import packing
import packing.errors


@pytest.fixture
def optimal_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    """``optimal`` refuses every input with ``TooManyDocuments`` (limit 40), as a strategy with a size limit does:
    in the page's own plan (``packing.plan``) and in the Compare tab's ``packing.compare``."""
    real = packing.plan

    def refusing(lengths, max_seq_length, *, strategy="bfd", overflow="truncate", **options):  # type: ignore[no-untyped-def]
        if strategy == "optimal":
            raise packing.errors.TooManyDocuments("optimal", 40, len(lengths))
        return real(lengths, max_seq_length, strategy=strategy, overflow=overflow, **options)

    real_of = importlib.import_module("packing.comparison").plan_of

    def refusing_of(sizes, recipe, seed=None):  # type: ignore[no-untyped-def]  # a contender's own plan
        if recipe.strategy == "optimal":
            raise packing.errors.TooManyDocuments("optimal", 40, len(sizes))
        return real_of(sizes, recipe, seed)

    monkeypatch.setattr(packing, "plan", refusing)
    monkeypatch.setattr(importlib.import_module("packing.comparison"), "plan_of", refusing_of)  # the module's name


@pytest.fixture(autouse=True)
def searches_in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """The page's searches run in the test's own process (so that fixtures like ``optimal_refuses`` reach them);
    ``test_ui_workers`` starts real worker processes."""
    from explorer.server import workers

    monkeypatch.setattr(workers, "WORKERS", 0)
    monkeypatch.setattr(workers, "start_soon", lambda delay=0.0: None)  # no timer may start real ones later
