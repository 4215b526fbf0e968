"""The tabs of the page, in order. Each module has one ``render(context)``; ``app.py`` loops over ``TABS``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from explorer.core.context import Context
from explorer.ui.tabs import attention, compare, export, images, inspect, practice, result, steps, sweep, weights


@dataclass(frozen=True)
class Tab:
    """A tab: its title (also its value in the link's ``tab`` parameter), how it is drawn, and whether it needs
    readable data (Practice, Images and Inspect bring their own)."""

    title: str
    render: Callable[[Context], None]
    needs_data: bool = True


TABS: tuple[Tab, ...] = (
    Tab("Result", result.render),
    Tab("Compare", compare.render),
    Tab("Sweep", sweep.render),
    Tab("Attention & positions", attention.render),
    Tab("Images", images.render, needs_data=False),
    Tab("Loss weights", weights.render),
    Tab("Step through", steps.render),
    Tab("Practice", practice.render, needs_data=False),
    Tab("Inspect", inspect.render, needs_data=False),
    Tab("Export", export.render),
)
TITLES = tuple(tab.title for tab in TABS)
TAB_STYLE = (
    "<style>[data-testid='stTabs'] [role='tablist'] {flex-wrap: wrap; row-gap: 0.25rem;}"
    " [data-testid='stTabs'] [data-baseweb='tab-highlight'], [data-testid='stTabs'] [data-baseweb='tab-border']"
    " {display: none;} [data-testid='stTabs'] [role='tab'][aria-selected='true'] {border-bottom: 2px solid"
    " currentColor;}</style>"
)
"""The tab bar wraps instead of scrolling (ten tabs do not fit a phone or a laptop beside the sidebar), the
open tab underlined on its own line."""
