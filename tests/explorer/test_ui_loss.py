"""The loss rules on the page: every source reads with the library's ``LossRules`` (masks equal to the library's
for each rule, on the byte tokenizer and on a BPE tokenizer folder built here), the caches are keyed by them, the
turns view shows what they train, the snippet repeats them, and the sidebar's controls round-trip through links."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

import packing
from explorer.core import export, links
from explorer.core.sources import Paste, Text, Upload
from explorer.core.text import CHATS
from explorer.server import cache
from packing.core._loss import DEFAULT_RULES, EOS_RULES, LOSS_RULES, LossRules
from tests.helpers.apptest import open_link

APP = str(Path(__file__).resolve().parents[2] / "app.py")
TIMEOUT = 120
TWO_TURNS = {
    "messages": [
        {"role": "user", "content": "Hello world"},
        {"role": "assistant", "content": "Hello today"},
        {"role": "user", "content": "What is 2 + 2?"},
        {"role": "assistant", "content": "It is 4."},
    ]
}
WITH_TOOL = {
    "messages": [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "Asking the tool."},
        {"role": "tool", "content": "sunny"},
        {"role": "assistant", "content": "It is sunny."},
    ]
}
ROWS = [TWO_TURNS, WITH_TOOL, {"prompt": "2+2=", "completion": "4"}, {"text": "plain words"}]
PASTED = "\n".join(json.dumps(row) for row in ROWS)
EVERY_RULE = [
    LossRules(loss, roles, eos)  # type: ignore[arg-type]
    for loss in LOSS_RULES
    for eos in EOS_RULES
    for roles in (("assistant",), ("assistant", "tool"))
]


def _name(rules: LossRules) -> str:
    return f"{rules.loss}-{rules.train_on_eos}-{'+'.join(rules.roles_to_train)}"


@pytest.fixture(scope="module")
def bpe_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder offered to the page (``PACKING_EXPLORER_TOKENIZERS``) holding ``chatml``: the tests' tiny BPE."""
    pytest.importorskip("transformers")
    pytest.importorskip("tokenizers")
    from tests.helpers import text_fixtures as fixtures

    root = tmp_path_factory.mktemp("offered")
    fixtures.save_tokenizer(root / "chatml", fixtures.CHATML)
    return root


# ---------------------------------------------------------------- the core and server layers


@pytest.mark.parametrize("rules", EVERY_RULE, ids=_name)
def test_text_rows_get_the_librarys_masks_for_every_rule(
    rules: LossRules, bpe_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PACKING_EXPLORER_TOKENIZERS", str(bpe_root))
    for name, library_tokenizer in (("bytes", "bytes"), ("chatml", str(bpe_root / "chatml"))):
        source = Text(PASTED, name)
        expected = packing.read_rows(ROWS, tokenizer=library_tokenizer, loss_rules=rules)
        for data in (source.load(rules), cache.dataset(source, _recipe(rules))):
            assert data.samples is not None
            assert data.samples.tokens.tolist() == expected.tokens.tolist()
            assert data.samples.loss_mask.tolist() == expected.loss_mask.tolist(), name


@pytest.mark.parametrize("rules", EVERY_RULE[::3], ids=_name)
def test_an_upload_of_chats_gets_the_librarys_masks(rules: LossRules) -> None:
    data = PASTED.encode()
    loaded = Upload.of("rows.jsonl", data, "bytes").load(rules)
    expected = packing.read_dataset(
        io.BytesIO(data), name="rows.jsonl", tokenizer="bytes", loss=rules.loss,
        roles_to_train=rules.roles_to_train, train_on_eos=rules.train_on_eos,
    )  # fmt: skip
    assert loaded.samples is not None
    assert loaded.samples.loss_mask.tolist() == expected.samples.loss_mask.tolist()


def test_pasted_tokens_follow_the_rule_as_pack_reads_them() -> None:
    source = Paste('{"prompt": [1, 2], "completion": [3]}\n{"input_ids": [4, 5], "loss_mask": [0, 1]}')
    masks = {loss: source.load(LossRules(loss)).samples.loss_mask.tolist() for loss in LOSS_RULES}  # type: ignore[arg-type, union-attr]
    assert masks == {"completion": [0, 0, 1, 0, 1], "last_turn": [0, 0, 1, 0, 1], "all": [1, 1, 1, 0, 1]}
    rows = [{"prompt": [1, 2], "completion": [3]}, {"input_ids": [4, 5], "loss_mask": [0, 1]}]
    assert masks == {
        loss: packing.read_rows(rows, loss_rules=LossRules(loss)).loss_mask.tolist() for loss in LOSS_RULES
    }  # type: ignore[arg-type]


def _trained(source: Text, rules: LossRules) -> list[tuple[str, str]]:
    """(role, trained text) of each turn of the first row, through the server's turns view."""
    return [(line["role"], line["trained text"]) for line in cache.turns(source, _recipe(rules), (0,))]


def test_the_turns_view_shows_what_each_rule_trains_on_a_two_turn_chat() -> None:
    """Hand-written expectations on the byte tokenizer's ChatML template."""
    source = Text(json.dumps(TWO_TURNS))
    end = "<|im_end|>\n"
    assert _trained(source, LossRules()) == [
        ("user", ""), ("assistant", "Hello today" + end), ("user", ""), ("assistant", "It is 4." + end),
    ]  # fmt: skip
    assert _trained(source, LossRules("last_turn")) == [
        ("user", ""), ("assistant", ""), ("user", ""), ("assistant", "It is 4." + end),
    ]  # fmt: skip
    assert _trained(source, LossRules("last_turn", train_on_eos="none"))[-1] == ("assistant", "It is 4.")
    assert [t for _, t in _trained(source, LossRules(train_on_eos="last"))] == ["", "Hello today", "", "It is 4." + end]
    assert [t for _, t in _trained(source, LossRules(train_on_eos="all"))] == [
        end,
        "Hello today" + end,
        end,
        "It is 4." + end,
    ]
    assert all(t for _, t in _trained(source, LossRules("all")))


def test_the_turns_view_trains_a_tool_turn_when_its_role_is_chosen() -> None:
    source = Text(json.dumps(WITH_TOOL))
    assert [t for r, t in _trained(source, LossRules()) if r == "tool"] == [""]
    assert [t for r, t in _trained(source, LossRules(roles_to_train=("assistant", "tool"))) if r == "tool"] == [
        "sunny<|im_end|>\n"
    ]
    assert source.roles() == ("user", "assistant", "tool")


def test_caches_are_keyed_by_the_rules() -> None:
    source = Text(json.dumps(TWO_TURNS))
    every = cache.dataset(source, _recipe(LossRules()))
    last = cache.dataset(source, _recipe(LossRules("last_turn")))
    assert every.samples is not None and last.samples is not None
    assert np.array_equal(every.lengths, last.lengths)
    assert int(last.samples.loss_mask.sum()) < int(every.samples.loss_mask.sum())
    assert cache.dataset(source, _recipe(LossRules("last_turn"), 64)) is last  # the same entry again
    recipes = [_recipe(rules) for rules in (LossRules(), LossRules("last_turn"))]
    counts = [cache.trainable(source, recipe).trainable_tokens for recipe in recipes]
    assert counts == [int(every.samples.loss_mask.sum()), int(last.samples.loss_mask.sum())]


def _recipe(rules: LossRules, max_seq_length: int = 1024) -> packing.Recipe:
    """The page's recipe of these loss rules (the sidebar's other choices at their defaults)."""
    return packing.Recipe(max_seq_length, pad_token_id=0, **dataclasses.asdict(rules))


def test_lengths_only_sources_keep_one_entry_whatever_the_rules() -> None:
    from explorer.core.sources import Synthetic

    source = Synthetic(20, "uniform", 3, 16)
    chosen = _recipe(LossRules("last_turn", train_on_eos="none"))
    assert cache.dataset(source, chosen) is cache.dataset(source, _recipe(DEFAULT_RULES))


def test_the_snippet_repeats_the_rules_and_packs_the_pages_masks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rules = LossRules("last_turn", ("assistant", "tool"), "none")
    data = PASTED.encode()
    (tmp_path / "rows.jsonl").write_bytes(data)
    monkeypatch.chdir(tmp_path)
    source = Upload.of("rows.jsonl", data, "bytes")
    code = export.snippet(source.origin(), _recipe(rules, 64), True)
    assert "loss='last_turn', roles_to_train=('assistant', 'tool'), train_on_eos='none'" in code
    with contextlib.redirect_stdout(io.StringIO()):
        exec(code, {})
    import pyarrow.parquet as pq

    page = packing.pack(source.load(rules).samples, 64, strategy="bfd")
    assert pq.read_table(tmp_path / "packed.parquet").column("loss_mask").to_pylist() == page.loss_mask.tolist()
    pasted = export.snippet(Paste("[[1, 2]]").origin(), packing.Recipe(4, strategy="split", loss="all"), True)
    assert "    loss='all'," in pasted


def test_links_take_the_rules_and_plain_role_names_only() -> None:
    ok = {"loss": "last_turn", "train_on_eos": "none", "roles_to_train": ["assistant", "tool_call"]}
    assert links.check_link(ok) == ([], [])
    drop, warnings = links.check_link({"loss": "some", "train_on_eos": "yes", "roles_to_train": ["a", "x](y)"]})
    assert drop == ["loss", "roles_to_train", "train_on_eos"] and len(warnings) == 3
    assert links.check_link({"roles_to_train": ["r"] * 9})[0] == ["roles_to_train"]


# ---------------------------------------------------------------- the sidebar's controls


def _clean(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def _frame(at: AppTest) -> Any:
    frames = [d.value for d in at.dataframe if "role" in d.value.columns]
    assert len(frames) == 1
    return frames[0]


def _turns(at: AppTest) -> list[tuple[str, str]]:
    frame = _frame(at)
    return [(str(r), str(t)) for r, t in zip(frame["role"], frame["trained text"], strict=True)]


def test_a_link_with_last_turn_trains_only_the_last_answer() -> None:
    at = open_link({"source": "text", "loss": "last_turn", "train_on_eos": "none"})
    _clean(at)
    assert at.sidebar.radio(key="loss").value == "last_turn"
    assert at.sidebar.selectbox(key="train_on_eos").value == "none"
    trained = [(role, text) for role, text in _turns(at) if text]
    rows = list(dict.fromkeys(int(r) - 1 for r in _frame(at)["sequence"]))  # the chats in the blocks' order
    assert trained == [("assistant", CHATS[r]["messages"][-1]["content"]) for r in rows]  # each chat's last answer
    assert not at.sidebar.multiselect  # the example chats have only user and assistant turns


@pytest.mark.slow
def test_the_controls_round_trip_through_the_share_link() -> None:
    at = open_link({"source": "text"})
    _clean(at)
    at.sidebar.radio(key="loss").set_value("last_turn").run()
    at.sidebar.selectbox(key="train_on_eos").set_value("last").run()
    at.sidebar.text_area(key="text_rows").set_value(json.dumps(WITH_TOOL)).run()
    _clean(at)
    roles = at.sidebar.multiselect(key="roles_to_train")  # offered: this chat has a tool turn
    assert "tool" in roles.options
    roles.set_value(["assistant", "tool"]).run()
    _clean(at)
    assert [t for _, t in _turns(at) if t] == ["It is sunny.<|im_end|>\n"]  # the last turn of a trained role
    at.sidebar.radio(key="loss").set_value("completion").run()  # every turn of a trained role, the last one's end
    assert [t for _, t in _turns(at) if t] == ["Asking the tool.", "sunny", "It is sunny.<|im_end|>\n"]
    at.sidebar.radio(key="loss").set_value("last_turn").run()
    at.session_state["tab"] = "Export"
    at.run()
    from urllib.parse import parse_qs, urlsplit

    link = parse_qs(urlsplit(at.code[-1].value.strip()).query)  # the share link
    params = {k: v if k == "roles_to_train" else v[0] for k, v in link.items()}
    assert params["loss"] == "last_turn" and params["train_on_eos"] == "last"
    assert params["roles_to_train"] == ["assistant", "tool"]
    again = open_link(params)  # a link does not carry text rows: the chat example, with the same rules
    _clean(again)
    assert again.sidebar.radio(key="loss").value == "last_turn"
    assert again.sidebar.selectbox(key="train_on_eos").value == "last"
    assert again.sidebar.multiselect(key="roles_to_train").value == ["assistant", "tool"]


@pytest.mark.slow
def test_the_controls_show_where_they_apply() -> None:
    synthetic = open_link({"source": "synthetic"})
    _clean(synthetic)
    assert not [r for r in synthetic.sidebar.radio if r.key == "loss"]
    assert not [s for s in synthetic.sidebar.selectbox if s.key == "train_on_eos"]
    pasted = open_link({"loss": "all"})
    _clean(pasted)
    assert pasted.sidebar.radio(key="loss").value == "all"
    assert not [s for s in pasted.sidebar.selectbox if s.key == "train_on_eos"]  # token rows have no turns
    text = open_link({"source": "text", "loss": "all"})
    assert text.sidebar.selectbox(key="train_on_eos").disabled  # every token is trained
    assert any("every token is trained" in re.sub(r"\\(.)", r"\1", str(c.value)) for c in text.sidebar.caption)


def test_a_role_the_recipe_refuses_is_one_short_line_not_a_traceback() -> None:
    """A typed role of blanks: the library's ``Recipe`` refuses it (``SettingError``), and the page says so in the
    sidebar and above the tabs in the library's words, with no exception."""
    at = open_link({"source": "text", "roles_to_train": ["assistant", "tool"]})
    _clean(at)
    at.sidebar.multiselect(key="roles_to_train").set_value(["  "]).run()
    assert not at.exception, [e.value for e in at.exception]
    said = [re.sub(r"\\(.)", r"\1", str(e.value)) for e in at.sidebar.error]
    assert said == ["roles_to_train: expected one or more role names (strings), got ('  ',) (tuple)"]
    assert any(said[0] in re.sub(r"\\(.)", r"\1", str(e.value)) for e in at.main.error)
