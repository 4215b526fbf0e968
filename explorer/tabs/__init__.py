"""The tabs of the page, in order. Each module has one ``render(context)``; ``app.py`` loops over ``TABS``."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from explorer.model import Context
from explorer.tabs import attention, compare, export, practice, result, steps, sweep


@dataclass(frozen=True)
class Tab:
    """A tab: its title (also its value in the link's ``tab`` parameter), how it is drawn, and whether it needs
    readable data (Practice brings its own)."""

    title: str
    render: Callable[[Context], None]
    needs_data: bool = True


def _optional(module: str, title: str) -> list[Tab]:
    """A tab whose module may not be installed yet (it is added to the registry only when it imports)."""
    try:
        found = importlib.import_module(module)
    except ImportError:
        return []
    render = getattr(found, "render", None)
    return [Tab(title, render)] if callable(render) else []


TABS: tuple[Tab, ...] = (
    Tab("Result", result.render),
    *_optional("explorer.inspect_view", "Inspect"),
    Tab("Compare", compare.render),
    Tab("Sweep", sweep.render),
    Tab("Attention & positions", attention.render),
    Tab("Step through", steps.render),
    Tab("Practice", practice.render, needs_data=False),
    Tab("Export", export.render),
)
TITLES = tuple(tab.title for tab in TABS)
