"""The examples in the explorer's docstrings hold."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "explorer.parsing",
    "explorer.examples",
    "explorer.links",
    "explorer.memo",
    "explorer.model",
    "explorer.safety",
    "explorer.tabs.export",
    "explorer.tabs.steps",
    "explorer.tabs.sweep",
    "explorer.tables",
    "explorer.formatting",
    "explorer.figures",
    "explorer.workers",
    "explorer.compute",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
