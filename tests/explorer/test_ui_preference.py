"""The page teaches preference packing: its examples load, every number it shows of pairs and groups is the
library's (``PackedBatch.stats`` of both layouts), the blocks' colours are the tokens' roles, ``share_prompt``
reaches the library from the sidebar and from a link, and a bad pair is one line."""

from __future__ import annotations

import base64
import json
from typing import Any

import numpy as np
import numpy.typing as npt
from streamlit.testing.v1 import AppTest

import packing
from explorer.core import preference
from explorer.core.examples import EXAMPLES, PREFERENCE_TEXT
from explorer.core.parsing import parse_sequences
from explorer.core.text import PREFERENCE_CHATS
from tests.helpers.apptest import no_leak, open_link

EXAMPLE = EXAMPLES["preference"]
ROWS = parse_sequences(PREFERENCE_TEXT).samples


def _metrics(at: AppTest) -> dict[str, int]:
    """The page's headline numbers as integers (the whole-number ones)."""
    shown = {m.label: str(m.value).replace(",", "") for m in at.metric}
    return {label: int(value) for label, value in shown.items() if value.isdigit()}


def _open(at: AppTest, tab: str) -> AppTest:
    at.session_state["tab"] = tab
    return at.run()


def _z(trace: dict[str, Any]) -> npt.NDArray[Any]:
    """A heatmap's ``z`` from its Plotly JSON (a nested list, or Plotly's typed-array encoding)."""
    z = trace["z"]
    if isinstance(z, dict):
        values = np.frombuffer(base64.b64decode(z["bdata"]), dtype=np.dtype(z["dtype"]))
        shape = tuple(int(n) for n in str(z.get("shape", len(values))).split(","))
        return values.reshape(shape)
    return np.asarray(z)


def _library(share: bool, rows: list[Any] = ROWS, size: int = EXAMPLE.max_seq_length, **options: Any) -> Any:
    return packing.pack(rows, size, strategy=EXAMPLE.strategy, share_prompt=share, **options)


def _check_result(at: AppTest, share: bool) -> None:
    """The Result tab's numbers and role colours are those of the library's batch in this layout."""
    no_leak(at)
    assert not at.error, [e.value for e in at.error]
    batch = _library(share)
    stats, units = batch.stats, batch.stats.units
    shown = _metrics(at)
    assert shown["Blocks"] == stats.num_blocks and shown["Padding"] == stats.padding_tokens
    assert shown["Completions"] == units.completions == 7
    assert shown["Tokens saved"] == units.prompt_tokens_shared
    assert shown["Training targets"] == int((batch.prediction_positions >= 0).sum())
    assert int(at.table[-1].value["training targets"].sum()) == shown["Training targets"]  # the Blocks table
    charts = {chart.key: json.loads(chart.proto.spec) for chart in at.get("plotly_chart")}
    assert np.array_equal(_z(charts["blocks"]["data"][0]), preference.token_roles(batch))


def test_the_preference_example_shows_the_librarys_numbers_in_both_layouts() -> None:
    at = open_link({})
    at.sidebar.selectbox(key="example").set_value("preference").run()
    assert at.sidebar.toggle(key="share_prompt").value is False
    _check_result(at, share=False)
    assert _metrics(at)["Tokens saved"] == 0
    at.sidebar.toggle(key="share_prompt").set_value(True).run()
    _check_result(at, share=True)
    _open(at, EXAMPLE.look_at)
    no_leak(at)
    assert not at.error, [e.value for e in at.error]
    duplicated, shared = _library(False).stats, _library(True).stats
    shown = _metrics(at)
    assert shown["Tokens, duplicated"] == duplicated.packed_tokens
    assert shown["Tokens, shared"] == shared.packed_tokens
    assert shown["Tokens saved"] == duplicated.packed_tokens - shared.packed_tokens == shared.units.prompt_tokens_shared
    assert (shown["Blocks, duplicated"], shown["Blocks, shared"]) == (duplicated.num_blocks, shared.num_blocks)
    charts = {chart.key: json.loads(chart.proto.spec) for chart in at.get("plotly_chart")}
    for key, share in (("layouts_duplicated", False), ("layouts_shared", True)):
        batch = _library(share)
        assert np.array_equal(_z(charts[key]["data"][0]) > 0, batch.attention_mask(0))


def test_share_prompt_from_a_link_reaches_the_library_and_the_snippet() -> None:
    at = open_link({"sequences": PREFERENCE_TEXT, "max_seq_length": "32", "strategy": "bfd", "share_prompt": "true"})
    _check_result(at, share=True)
    _open(at, "Export")
    code = next(c.value for c in at.code if "packing.pack(" in c.value)
    assert "share_prompt=True" in code
    names: dict[str, Any] = {}
    exec(compile(code.replace("print(", "(lambda *a: None)("), "<snippet>", "exec"), names)
    assert names["batch"].stats == _library(True).stats


def test_a_pair_missing_rejected_is_the_librarys_one_line() -> None:
    at = open_link({"sequences": '{"prompt": [1, 2], "chosen": [3]}', "strategy": "bfd"})
    no_leak(at)
    errors = [str(e.value).replace("\\", "") for e in at.error]
    assert any(
        "line 1 (sequence 1), 'rejected': expected a completion (a pair has 'prompt', 'chosen' and 'rejected')" in e
        for e in errors
    ), errors


def test_chat_pairs_are_tokenized_and_packed_as_the_library_packs_them() -> None:
    at = open_link({"source": "text"})
    at.sidebar.selectbox(key="text_example").set_value("preference").run()
    no_leak(at)
    assert not at.error, [e.value for e in at.error]
    size = int(at.sidebar.number_input(key="max_seq_length").value)
    for share in (False, True):
        at.sidebar.toggle(key="share_prompt").set_value(share).run()
        batch = _library(share, PREFERENCE_CHATS, size, tokenizer="bytes", overflow="truncate")
        shown = _metrics(at)
        assert shown["Blocks"] == batch.stats.num_blocks and shown["Padding"] == batch.stats.padding_tokens
        assert shown["Tokens saved"] == batch.stats.units.prompt_tokens_shared
        pairs = next(m.value for m in at.metric if m.label == "Pairs / groups")
        assert pairs == f"{batch.stats.units.pairs} / {batch.stats.units.groups}" == "3 / 0"
