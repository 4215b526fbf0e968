"""Page state <-> URL query string, so a link reopens the same data and settings.

``read_params`` turns query parameters into widget values (ignoring, with a warning, what it cannot use);
``write_params`` turns widget values into the parameters worth sharing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit

import packing
from explorer.examples import DEFAULT_EXAMPLE, DISTRIBUTIONS, EXAMPLES
from packing.workloads import WORKLOADS

SOURCES: dict[str, str] = {
    "paste": "Paste sequences or pick an example",
    "synthetic": "Synthetic dataset",
    "workload": "Real length distribution",
    "upload": "Upload a file",
}
MAX_URL_SEQUENCES = 4_000
"""Longest pasted text kept in the URL (browsers and servers cap URL length)."""
MAX_SEQ_LENGTH = 1_048_576

_classic = EXAMPLES[DEFAULT_EXAMPLE]
DEFAULTS: dict[str, Any] = {
    "source": "paste",
    "sequences": _classic.text,
    "max_seq_length": _classic.max_seq_length,
    "strategy": _classic.strategy,
    "overflow": "truncate",
    "pad_token_id": 0,
    "completion_only": True,
    "syn_count": 10_000,
    "syn_dist": "lognormal",
    "syn_seed": 0,
    "syn_max": 2048,
    "workload": "openchat_v1_2048",
    "workload_count": 0,
}
# widget key -> query parameter name
PARAMS: dict[str, str] = {
    "source": "source",
    "sequences": "sequences",
    "max_seq_length": "max_seq_length",
    "strategy": "strategy",
    "overflow": "overflow",
    "pad_token_id": "pad_token_id",
    "completion_only": "loss",
    "syn_count": "count",
    "syn_dist": "distribution",
    "syn_seed": "seed",
    "syn_max": "max_length",
    "workload": "workload",
    "workload_count": "sample",
}
_PER_SOURCE = {
    "paste": ("sequences",),
    "synthetic": ("syn_count", "syn_dist", "syn_seed", "syn_max"),
    "workload": ("workload", "workload_count"),
    "upload": (),
}
_CHOICES: dict[str, tuple[str, ...]] = {
    "source": tuple(SOURCES),
    "strategy": tuple(packing.STRATEGIES),
    "overflow": tuple(packing.OVERFLOW_POLICIES),
    "syn_dist": tuple(DISTRIBUTIONS),
    "workload": tuple(WORKLOADS),
}
_INTEGERS: dict[str, tuple[int, int]] = {
    "max_seq_length": (1, MAX_SEQ_LENGTH),
    "pad_token_id": (0, 2**31 - 1),
    "syn_count": (1, 1_000_000),
    "syn_seed": (0, 2**31 - 1),
    "syn_max": (1, MAX_SEQ_LENGTH),
    "workload_count": (0, 100_000_000),
}


@dataclass(frozen=True)
class Restored:
    """Widget values read from the URL, and a sentence for every parameter that was ignored."""

    values: dict[str, Any]
    warnings: list[str]


def _first(value: str | list[str]) -> str:
    return value[-1] if isinstance(value, list) else value


def _read_one(key: str, raw: str) -> Any:
    """The widget value for one parameter; raises ``ValueError`` with a plain sentence when unusable."""
    name = PARAMS[key]
    if key in _CHOICES:
        if raw not in _CHOICES[key]:
            raise ValueError(f"{name}={raw!r} is not one of {', '.join(_CHOICES[key])}")
        return raw
    if key in _INTEGERS:
        low, high = _INTEGERS[key]
        if not raw.strip().isdigit() or not low <= int(raw) <= high:
            raise ValueError(f"{name}={raw!r} is not a whole number between {low:,} and {high:,}")
        return int(raw)
    if key == "completion_only":
        if raw not in ("completion", "all"):
            raise ValueError(f"loss={raw!r} is not 'completion' or 'all'")
        return raw == "completion"
    return raw


def read_params(params: Mapping[str, str | list[str]]) -> Restored:
    """Widget values from query parameters; unknown names are ignored, bad values reported.

    >>> read_params({"sequences": "[[1,2]]", "max_seq_length": "4"}).values
    {'sequences': '[[1,2]]', 'max_seq_length': 4, 'source': 'paste'}
    >>> read_params({"strategy": "best"}).warnings
    ["strategy='best' is not one of split, next_fit, first_fit, ffd, bfd, spfhp, optimal, none"]
    """
    values: dict[str, Any] = {}
    warnings: list[str] = []
    for key, name in PARAMS.items():
        if name not in params:
            continue
        try:
            values[key] = _read_one(key, _first(params[name]))
        except ValueError as error:
            warnings.append(str(error))
    if "sequences" in values and "source" not in values:
        values["source"] = "paste"
    return Restored(values, warnings)


def write_params(state: Mapping[str, Any]) -> dict[str, str]:
    """The query parameters that describe ``state`` (widget values); long pasted text is left out.

    >>> write_params({**DEFAULTS, "max_seq_length": 8})["max_seq_length"]
    '8'
    """
    source = state.get("source", DEFAULTS["source"])
    keys = ["source", "max_seq_length", "strategy", "overflow", *_PER_SOURCE.get(source, ())]
    if state.get("pad_token_id", 0) != 0:
        keys.append("pad_token_id")
    if not state.get("completion_only", True):
        keys.append("completion_only")
    params = {}
    for key in keys:
        value = state.get(key, DEFAULTS[key])
        if key == "completion_only":
            params[PARAMS[key]] = "completion" if value else "all"
        elif key == "sequences" and len(str(value)) > MAX_URL_SEQUENCES:
            continue
        else:
            params[PARAMS[key]] = str(value)
    return params


def sequences_in_url(state: Mapping[str, Any]) -> bool:
    """False when the pasted text is too long to share in the URL."""
    return len(str(state.get("sequences", ""))) <= MAX_URL_SEQUENCES


def share_link(base_url: str | None, state: Mapping[str, Any]) -> str:
    """The page address with the query string that reopens ``state`` (just the query string without an address).

    >>> share_link("http://localhost:8501", {**DEFAULTS, "max_seq_length": 8}).split("&")[:3]
    ['http://localhost:8501/?source=paste', 'max_seq_length=8', 'strategy=split']
    """
    base = base_url or ""
    if base and not urlsplit(base).path:
        base += "/"
    return f"{base}?{urlencode(write_params(state))}"


def example_for(text: str) -> str | None:
    """The example whose text this is (so a link to an example shows it in the example picker), else None.

    >>> example_for(EXAMPLES["masking"].text), example_for("1 2 3")
    ('masking', None)
    """
    return next((key for key, example in EXAMPLES.items() if example.text == text), None)
