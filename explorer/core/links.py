"""Links: which query parameters the page reads (today's names, so shared links keep working), and the check
that runs on a session's first run before Streamlit binds them to widgets.

The widgets themselves are bound with Streamlit's ``bind="query-params"`` (the widget key is the parameter
name). Streamlit drops an unusable value silently, and crashes on a number of hundreds of digits, so the first
run checks every parameter here, reports what it ignores (quoted, at most a few dozen characters) and removes
it before any widget reads it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import packing
import packing.core
import packing.recipe
import packing.strategies
from explorer.core.examples import DISTRIBUTIONS
from explorer.core.model import MAX_PAD_TOKEN_ID, MAX_SEED, MAX_SEQUENCES
from explorer.core.safety import quote
from packing._workloads import WORKLOADS
from packing.core._loss import EOS_RULES
from packing.core._validation import MAX_SEQ_LENGTH

_INTEGER = re.compile(r"[+-]?\d{1,12}")
"""What a number in a link may look like: Streamlit reads it as a float, so longer numbers are refused first."""


@dataclass(frozen=True)
class Choice:
    options: tuple[str, ...]


@dataclass(frozen=True)
class Whole:
    low: int | None
    high: int | None


@dataclass(frozen=True)
class Names:
    """One or more plain names (a multiselect's repeated parameter), at most ``most`` of them."""

    most: int


_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,39}")
"""What a role name in a link may look like: a word, no markup, no spaces."""
MAX_ROLES = 8


SOURCES = ("paste", "text", "synthetic", "workload", "upload")
PARAMS: dict[str, Choice | Whole | Names] = {
    "source": Choice(SOURCES),
    "max_seq_length": Whole(None, None),  # any whole number; an out-of-range one is answered on the page
    "strategy": Choice(tuple(packing.strategies.STRATEGIES)),
    "overflow": Choice(tuple(packing.recipe.OVERFLOW_POLICIES)),
    "pad_token_id": Whole(0, MAX_PAD_TOKEN_ID),
    "loss": Choice(tuple(packing.recipe.LOSS_RULES)),
    "train_on_eos": Choice(tuple(EOS_RULES)),
    "roles_to_train": Names(MAX_ROLES),
    "count": Whole(1, MAX_SEQUENCES),
    "distribution": Choice(tuple(DISTRIBUTIONS)),
    "seed": Whole(0, MAX_SEED),
    "max_length": Whole(1, MAX_SEQ_LENGTH),
    "workload": Choice(tuple(WORKLOADS)),
    "sample": Whole(0, 100_000_000),
    "problem": Whole(1, 999_999),
    "strategy_seed": Whole(0, MAX_SEED),
    "time_limit": Whole(1, 600),
    "max_sequences_per_block": Whole(0, MAX_SEQUENCES),
    "share_prompt": Choice(("true", "false")),
}
"""Parameter name (= widget key) and the values it takes. ``sequences`` is checked where it is read (the parser),
``tab`` against the page's tabs (``check_link``'s ``tabs``)."""
READ_ELSEWHERE = frozenset({"sequences", "tokenizer", "embed", "embed_options"})
"""Parameters read but not checked here: the pasted text (by its parser), the tokenizer (by the tokenizer choice)
and Streamlit's own."""


def check_link(params: Mapping[str, str | list[str]], tabs: Sequence[str] = ()) -> tuple[list[str], list[str]]:
    """The parameters to drop, and a plain sentence for each: a value a parameter cannot take, a ``tab`` that is
    none of ``tabs``, a name the page does not read.

    >>> check_link({"roles_to_train": ["assistant", "tool"], "loss": "last_turn"})
    ([], [])
    >>> check_link({"roles_to_train": ["assistant", "<b>x</b>"]})
    (['roles_to_train'], ["roles_to_train='<b>x</b>' is not a role name (a word of letters, digits, _ and -)"])
    >>> check_link({"strategy": "[Click here](https://x.y)", "max_seq_length": "9" * 500, "seed": "3"})
    (['max_seq_length', 'strategy'], ["max_seq_length='99999999999999999999999999999999999999… is not a whole number", "strategy='[Click here](https://x.y)' is not one of split, wrapped, next_fit, first_fit, first_fit_shuffle, ffd, bfd, spfhp, optimal, none"])
    >>> check_link({"tab": "Nope", "foo": "1"}, tabs=("Result", "Compare"))
    (['foo', 'tab'], ['foo is not a parameter this page reads', "tab='Nope' is not one of Result, Compare"])
    """
    drop, warnings = [], []
    for name in sorted(params):
        rule = PARAMS.get(name)
        if name == "tab":
            rule = Choice(tuple(tabs))
        elif rule is None:
            if name not in READ_ELSEWHERE:
                drop.append(name)
                warnings.append(f"{name if _NAME.fullmatch(name) else quote(name)} is not a parameter this page reads")
            continue
        value = params[name]
        raw = value[-1] if isinstance(value, list) else value
        shown = f"{name}={quote(raw)}"
        if isinstance(rule, Names):
            names = value if isinstance(value, list) else [value]
            bad = next((n for n in names if not _NAME.fullmatch(n)), None)
            if bad is not None:
                drop.append(name)
                warnings.append(f"{name}={quote(bad)} is not a role name (a word of letters, digits, _ and -)")
            elif len(names) > rule.most:
                drop.append(name)
                warnings.append(f"{name} names {len(names)} roles; a link may name up to {rule.most}")
            continue
        if isinstance(rule, Choice):
            if raw not in rule.options:
                drop.append(name)
                warnings.append(f"{shown} is not one of {', '.join(rule.options)}")
            continue
        if not _INTEGER.fullmatch(raw.strip()):
            drop.append(name)
            warnings.append(f"{shown} is not a whole number")
            continue
        number = int(raw)
        if (rule.low is not None and number < rule.low) or (rule.high is not None and number > rule.high):
            drop.append(name)
            warnings.append(f"{shown} is not a whole number between {rule.low:,} and {rule.high:,}")
    return drop, warnings
