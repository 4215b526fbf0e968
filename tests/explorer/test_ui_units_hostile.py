"""The page given pairs and groups as a careless or hostile visitor gives them: a group of thousands of
completions, JSON nested past any sense, a unit that is two forms at once, a link whose ``share_prompt`` is neither
value. No traceback, one line an error, a page of bounded size."""

from __future__ import annotations

import json
import re

import pytest
from streamlit.testing.v1 import AppTest

from explorer.core.preference import MAX_COMPLETION_ROLES, ROLE_NAMES
from tests.helpers.apptest import errors_of, no_leak, open_link

BFD = {"strategy": "bfd", "max_seq_length": "8192"}
LEGEND_LINE = 22
"""Pixels the blocks figure gives each line of its role legend."""


def _paste(text: str, share: bool = False) -> AppTest:
    at = open_link(BFD)
    at.sidebar.radio(key="source").set_value("paste").run()
    at.sidebar.text_area(key="sequences").set_value(text).run()
    if share:
        at.sidebar.toggle(key="share_prompt").set_value(True).run()
    return at


@pytest.mark.parametrize("share", [False, True])
def test_a_group_of_thousands_of_completions_draws_a_bounded_legend(share: bool) -> None:
    """Every completion of a group once had a role, a colour and a legend line of its own: 2,000 completions made a
    figure 44,000 pixels taller and 2,000 traces (seconds to build). The later ones now share the last role."""
    at = _paste(json.dumps({"prompt": [1, 2], "completions": [[3, 4]] * 2_000}), share)
    no_leak(at)
    assert not at.error, errors_of(at)
    blocks = next(json.loads(chart.proto.spec) for chart in at.get("plotly_chart") if chart.key == "blocks")
    legend = next(h.proto.body for h in at.get("html") if "Role of the token" in h.proto.body)  # drawn apart
    roles = re.findall(r"</span>(completion [^<]*)</span>", legend)
    assert len(roles) == MAX_COMPLETION_ROLES and roles[-1] == f"completion {MAX_COMPLETION_ROLES} and later"
    assert len(legend) < 200 * (MAX_COMPLETION_ROLES + len(ROLE_NAMES) + 4)
    assert blocks["layout"]["height"] < 260 + LEGEND_LINE * (MAX_COMPLETION_ROLES + len(ROLE_NAMES)) + 200


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('{"prompt": [1], "completions": ' + "[" * 5_000 + "]" * 5_000 + "}", "nested too deeply"),
        (
            '{"prompt": [1], "chosen": [2], "rejected": [3], "completion": [4]}',
            "line 1 (sequence 1), 'completion': expected one form: a pair or group has no 'completion'",
        ),
        ('{"prompt": [1], "chosen": "yes", "rejected": [3]}', "line 1 (sequence 1), 'chosen': expected token ids"),
        ('{"prompt": [1], "completions": 7}', "'completions': expected at least one completion"),
    ],
    ids=["nested", "two forms", "text among ids", "completions a number"],
)
def test_a_bad_unit_pasted_is_one_line(text: str, said: str) -> None:
    at = _paste(text)
    no_leak(at)
    assert any(said in error for error in errors_of(at)), errors_of(at)


def test_a_link_whose_share_prompt_is_neither_value_is_ignored_with_a_warning() -> None:
    at = open_link({**BFD, "share_prompt": "maybe"})
    no_leak(at)
    assert at.sidebar.toggle(key="share_prompt").value is False
    assert any("share_prompt='maybe' is not one of true, false" in str(w.value).replace("\\", "") for w in at.warning)
