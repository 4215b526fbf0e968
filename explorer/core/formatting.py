"""How numbers and counts read on the page."""

from __future__ import annotations


def percent(value: float) -> str:
    """A fraction as a percentage with two decimals, and more when two would round a shortfall up to 100 %.

    >>> percent(0.75), percent(1.0), percent(0.99998), percent(0.9999999999)
    ('75.00%', '100.00%', '99.998%', '> 99.9999%')
    """
    if value >= 1:
        return f"{value:.2%}"
    for digits in (2, 3, 4):
        text = f"{value:.{digits}%}"
        if not text.startswith("100."):
            return text
    return "> 99.9999%"


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """``count`` with the noun in the right number, thousands separated.

    >>> plural(1, "sample"), plural(2_000, "sequence"), plural(3, "match", "matches")
    ('1 sample', '2,000 sequences', '3 matches')
    """
    return f"{count:,} {noun if count == 1 else (nouns or noun + 's')}"
