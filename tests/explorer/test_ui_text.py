"""The text source: examples of every form through the page, bad rows and tokenizers as one line, user text
kept out of Markdown and Plotly markup, decoded cells that follow the packed tokens, and the decoded export."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from streamlit.testing.v1 import AppTest

import packing
from explorer.core import export
from explorer.core.safety import plot_text
from explorer.core.sources import TEXT_MAX_SEQ_LENGTH, Text
from explorer.core.text import CHATS, EXAMPLES, example_text, window_cells
from explorer.views import figures

APP = str(Path(__file__).resolve().parents[2] / "app.py")
TIMEOUT = 120
MESSAGES = ("markdown", "caption", "warning", "error", "info", "success")
TRAINED_ROLE = {
    "text": "text",
    "prompt_completion": "completion",
    "messages": "assistant",
    "conversational": "assistant",
}


def _app(**params: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.query_params.update({"source": "text", **params})
    return at.run()


def _clean(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def _turns(at: AppTest) -> Any:
    frames = [d.value for d in at.dataframe if "role" in d.value.columns]
    assert len(frames) == 1
    return frames[0]


def _chart(at: AppTest) -> dict[str, Any]:
    spec: dict[str, Any] = json.loads(at.get("plotly_chart")[0].proto.spec)
    return spec


def _no_markup_from_users(at: AppTest) -> None:
    for kind in MESSAGES:
        for element in at.get(kind):
            live = re.sub(r"\\.", "", str(element.value))
            assert "](" not in live and "<" not in live, (kind, element.value)


@pytest.mark.slow
@pytest.mark.parametrize("form", list(EXAMPLES))
def test_every_example_loads_and_shows_its_trained_turns(form: str) -> None:
    at = _app()
    at.sidebar.selectbox(key="text_example").set_value(form).run()
    _clean(at)
    assert at.session_state["text_rows"] == example_text(form)
    turns = _turns(at)
    trained = turns[turns["loss mask 1"] > 0]
    assert set(trained["role"]) == {TRAINED_ROLE[form]}
    # independently of the page: every trained turn trains its own content (text, completion, assistant message)
    row = EXAMPLES[form]
    if form == "messages":
        answers = [m["content"] for m in row["messages"] if m["role"] == "assistant"]
    elif form == "conversational":
        answers = [m["content"] for m in row["completion"]]
    else:
        answers = [row["text" if form == "text" else "completion"]]
    assert [t.startswith(a) for t, a in zip(trained["trained text"], answers, strict=True)] == [True] * len(answers)
    # the loss on the page matches the library's count of trained tokens
    samples = packing.read_rows([row], tokenizer="bytes")
    assert int(turns["loss mask 1"].sum()) == int(samples.loss_mask.sum())
    if form == "messages":  # the assistant's header is masked, its content and end of turn trained
        assert set(turns.loc[turns["role"] == "assistant", "loss"]) == {"partly trained"}
        assert set(turns.loc[turns["role"] != "assistant", "loss"]) == {"not trained"}


def test_cells_print_the_decoded_tokens_with_their_ids_on_hover() -> None:
    at = _app()
    _clean(at)
    blocks = _chart(at)["data"][0]
    samples = packing.read_rows(CHATS, tokenizer="bytes")
    first_block = packing.pack(samples, TEXT_MAX_SEQ_LENGTH, strategy="bfd").input_ids[0].tolist()
    shown = figures.PIECE_CHARACTERS // TEXT_MAX_SEQ_LENGTH  # characters a cell of these blocks holds
    assert blocks["text"][0][:3] == [plot_text("<|im_start|>"[: shown - 1] + "…"), "u", "s"]
    assert blocks["hovertext"][0][1] == f"id {first_block[1]}: 'u'"
    assert "%{hovertext}" in blocks["hovertemplate"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"text": 3}', "row 1, 'text': expected a string, got 3"),
        ('{"text": "ok"}\n{"messages": "not a list"', "line 2: invalid JSON"),
        ('{"text": "ok"}\n{"nothing": 1}', "row 2: expected a text row"),
        ("[[1, 2, 3], [4, 5]]", "row 1: expected a text row"),
        ('{"text": "ok"}\n{"input_ids": [1, 2]}', "row 2: expected a text row"),
    ],
)
def test_a_malformed_row_is_one_line(text: str, expected: str) -> None:
    at = _app()
    at.sidebar.text_area(key="text_rows").set_value(text).run()
    assert not at.exception
    assert len(at.error) == 1
    message = str(at.error[0].value)
    assert "\n" not in message and expected in re.sub(r"\\(.)", r"\1", message)


def test_a_tokenizer_that_cannot_be_loaded_is_one_plain_line() -> None:
    at = _app(tokenizer="/no/such/folder")
    assert not at.exception
    assert len(at.error) == 1 and "Cannot load the tokenizer" in re.sub(r"\\(.)", r"\1", str(at.error[0].value))


@pytest.mark.slow
def test_markdown_and_html_in_user_text_are_shown_as_text() -> None:
    hostile = "[Click](https://example.com) **bold** <b>x</b> <a href='https://e.x'>y</a>"
    at = _app(tokenizer="[t](https://example.com)")
    assert not at.exception
    _no_markup_from_users(at)
    at = _app()
    at.sidebar.text_area(key="text_rows").set_value(json.dumps({"prompt": hostile, "completion": "<i>ok</i>"})).run()
    _clean(at)
    _no_markup_from_users(at)
    turns = _turns(at)
    assert turns["text"].iloc[0] == hostile and turns["trained text"].iloc[1].startswith("<i>ok</i>")
    blocks = _chart(at)["data"][0]
    cells = [c for row in blocks["text"] for c in row] + [h for row in blocks["hovertext"] for h in row]
    assert not any("<" in c or ">" in c for c in cells)


def test_the_export_offers_decoded_documents() -> None:
    at = _app(tab="Export")
    _clean(at)
    assert "Download decoded documents (JSON lines)" in [b.label for b in at.get("download_button")]
    assert "tokenizer='bytes'" in at.code[0].value


def test_decoded_documents_join_back_to_each_row() -> None:
    rows = [EXAMPLES["messages"], {"text": "Größe ✓ " * 9}, EXAMPLES["prompt_completion"]]
    samples = packing.read_rows(rows, tokenizer="bytes")
    batch = packing.pack(samples, 16, strategy="split", overflow="split")
    lines = [json.loads(line) for line in export.documents_jsonl(batch, "bytes").decode().splitlines()]
    tokenizer = packing.load_tokenizer("bytes")
    for sample in range(len(rows)):
        ids = samples.tokens[samples.offsets[sample] : samples.offsets[sample + 1]].tolist()
        parts = [line for line in lines if line["sample"] == sample]
        assert sum(p["tokens"] for p in parts) == len(ids)
        assert sum(p["loss_mask"] for p in parts) == int(
            samples.loss_mask[samples.offsets[sample] : samples.offsets[sample + 1]].sum()
        )
        if sample != 1:  # pure ASCII: pieces cut anywhere decode back to the row
            assert "".join(p["text"] for p in parts) == tokenizer.decode(ids)


def test_the_snippet_packs_the_same_blocks() -> None:
    source = Text(example_text("messages") + "\n" + example_text("text"))
    code = export.snippet(source.origin(), packing.Recipe(64, strategy="ffd", overflow="split"), True)
    scope: dict[str, Any] = {}
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(code, "snippet", "exec"), scope)
    layout = packing.plan(source.load().lengths, 64, strategy="ffd", overflow="split")
    assert scope["batch"].num_blocks == layout.num_blocks


@settings(max_examples=40, deadline=None)
@given(st.lists(st.text(min_size=0, max_size=12), min_size=1, max_size=5), st.integers(1, 9))
def test_window_cells_follow_every_packed_token(texts: list[str], width: int) -> None:
    samples = packing.read_rows([{"text": t} for t in texts], tokenizer="bytes")
    batch = packing.pack(samples, width, strategy="ffd", overflow="split")
    labels, hovers = window_cells(batch, samples, "bytes")
    assert np.shape(labels) == np.shape(hovers) == batch.input_ids.shape
    for block in range(batch.num_blocks):
        for position in range(width):
            if batch.sequence_ids[block, position] < 0:
                assert (labels[block][position], hovers[block][position]) == ("", "padding")
            else:
                assert hovers[block][position].startswith(f"id {batch.input_ids[block, position]}: ")
                assert labels[block][position]


def test_pieces_print_in_cells_only_when_wide_enough() -> None:
    ids = np.array([[104, 105, 0]])
    seq = np.array([[0, 0, -1]])
    pieces = ([["h", "i", ""]], [["id 104: 'h'", "id 105: 'i'", "padding"]])
    narrow = figures.block_figure(seq, np.array([[1, 1, 0]]), np.array([[0, 1, 0]]), ids, pieces=pieces)
    assert list(narrow.data[0].text[0]) == ["h", "i", ""] and narrow.data[0].hovertext[0][2] == "padding"
    wide_ids = np.zeros((1, figures.MAX_PIECE_WIDTH + 1), dtype=np.int64)
    wide = figures.block_figure(
        wide_ids, wide_ids, wide_ids, wide_ids, pieces=([["a"] * wide_ids.size], [["id 0: 'a'"] * wide_ids.size])
    )
    assert wide.data[0].text is None and wide.data[0].hovertext is not None


def _fixtures() -> Any:
    """``tests/helpers/text_fixtures.py``: the tiny BPE tokenizer built on the spot."""
    from tests.helpers import text_fixtures

    return text_fixtures


@pytest.mark.parametrize("template", ["CHATML", "MARKED"])
def test_a_tokenizer_folder_is_used_with_its_chat_template(
    tmp_path: Path, template: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("tokenizers")
    fixtures = _fixtures()
    folder = fixtures.save_tokenizer(tmp_path / template.lower(), getattr(fixtures, template))
    monkeypatch.setenv("PACKING_EXPLORER_TOKENIZERS", str(tmp_path))  # the operator offers its folders by name
    at = _app(tokenizer=template.lower())  # a name per folder: the page's shared memo is keyed by the name
    _clean(at)
    turns = _turns(at)
    rows = list(dict.fromkeys(int(r) - 1 for r in turns["sequence"]))  # the chats in the order the blocks show them
    answers = [m["content"] for r in rows for m in CHATS[r]["messages"] if m["role"] == "assistant"]
    end = "<|im_end|>" if template == "CHATML" else "<|endoftext|>"
    assert list(turns.loc[turns["loss mask 1"] > 0, "trained text"]) == [
        a + end + ("\n" if end == "<|im_end|>" else "") for a in answers
    ]
    samples = packing.read_rows(CHATS, tokenizer=str(folder))
    assert sorted(rows) == list(range(len(CHATS)))
    assert int(turns["loss mask 1"].sum()) == int(samples.loss_mask.sum())
    hovers = [h for row in _chart(at)["data"][0]["hovertext"] for h in row if h != "padding"]
    size = int(at.session_state["max_seq_length"])
    batch = packing.pack(samples, size, strategy="bfd", overflow="split")
    assert [int(h.split(":")[0][3:]) for h in hovers] == batch.input_ids[batch.sequence_ids >= 0].tolist()


def test_a_folder_without_tokenizer_files_is_one_plain_line(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    at = _app(tokenizer=str(tmp_path))
    assert not at.exception
    assert len(at.error) == 1 and "Cannot load the tokenizer" in re.sub(r"\\(.)", r"\1", str(at.error[0].value))
