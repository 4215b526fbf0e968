"""The examples in the explorer's docstrings hold."""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

MODULES = sorted(
    name
    for name in (
        ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for path in (ROOT / "explorer").rglob("*.py")
        if path.name != "__init__.py"
    )
    if ">>> " in (ROOT / (name.replace(".", "/") + ".py")).read_text()
)
"""Every explorer module with an example in a docstring."""


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
