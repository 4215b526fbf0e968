"""What a learner meets first: the classic question answered before any number, the three follow-ups one click away,
labels explained once in words, the response-only example without the bad practice, and the page padding as the
library pads (the same recipe, the same blocks, exports and snippet)."""

from __future__ import annotations

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

import packing
import packing.strategies
import packing.text
from explorer.core.examples import EXAMPLES, FOLLOW_UPS, PREFERENCE_TEXT
from explorer.core.sources import TEXT_MAX_SEQ_LENGTH
from explorer.core.text import CHATS, cell_label, token_cells
from tests.helpers.apptest import open_link, plain

TAB_CHART = {"Result": "blocks", "Compare": "compare_0", "Attention & positions": "attention_causal"}
"""A drawing only each tab makes."""
CLASSIC = ["Block 1: [1, 2, 3, 4] -> mask: [1, 1, 1, 1]", "Block 2: [5, 6, 0, 0] -> mask: [1, 1, 0, 0]"]


def _shown(at: AppTest) -> list[tuple[str, str]]:
    """The main column's elements in order, as ``(kind, text)``: what a reader meets scrolling down."""
    kinds = ("markdown", "caption", "info", "warning", "button", "metric")
    out = []
    for element in at.main:
        if element.type not in kinds:
            continue
        text = element.label if element.type in ("button", "metric") else element.value
        out.append((element.type, plain(text).replace("**", "").replace("`", "")))
    return out


def _classic(at: AppTest) -> list[str]:
    spans = [m.value for m in at.markdown if m.value.startswith("`Block ")]
    return [line for span in spans for line in span.replace("`", "").split("  \n")]


def _follow_up_buttons(at: AppTest) -> list[str]:
    return [b.label for b in at.button if str(b.key).startswith("follow_")]


def test_the_first_screen_asks_answers_then_offers_the_three_follow_ups_before_any_number() -> None:
    at = open_link({})
    assert not at.exception
    shown = _shown(at)
    texts = [text for _, text in shown]
    question = next(i for i, text in enumerate(texts) if text.startswith("Classic interview example."))
    answer = next(i for i, text in enumerate(texts) if text.startswith(CLASSIC[0]))
    buttons = [i for i, (kind, _) in enumerate(shown) if kind == "button"]
    first_number = next(i for i, (kind, _) in enumerate(shown) if kind == "metric")
    assert question < answer < buttons[0] and buttons[-1] < first_number
    assert _follow_up_buttons(at) == [EXAMPLES[key].link for key in FOLLOW_UPS]
    assert _follow_up_buttons(at) == [
        "No-split bin packing",
        "Cross-document attention and positions",
        "Response-only loss",
    ]
    # nothing about labels or documents without a target comes before the answer
    assert not any("-100" in text or "target" in text.lower() for text in texts[:answer])
    assert "Tokens with mask 1" in [m.label for m in at.metric]  # no "Loss mask 1", which reads like a typo


@pytest.mark.parametrize("key", FOLLOW_UPS)
def test_each_follow_up_is_one_click_to_its_example_on_its_tab(key: str) -> None:
    at = open_link({})
    button = next(b for b in at.button if b.key == f"follow_{key}")
    at = button.click().run()
    assert not at.exception
    example = EXAMPLES[key]
    assert at.session_state["sequences"] == example.text
    assert at.session_state["strategy"] == example.strategy
    assert at.session_state["max_seq_length"] == example.max_seq_length
    assert at.session_state["tab"] == example.look_at
    drawn = {chart.key for chart in at.get("plotly_chart")}
    assert TAB_CHART[example.look_at] in drawn, drawn  # the tab is open: its own drawing is on the page


def test_labels_are_explained_once_in_words_after_the_answer() -> None:
    at = open_link({})
    texts = [text for _, text in _shown(at)]
    explained = [text for text in texts if text.startswith("From mask to labels.")]
    assert len(explained) == 1
    assert "6 tokens with mask 1, 2 are training targets" in explained[0] and "(#3) has none at all" in explained[0]
    assert texts.index(explained[0]) > next(i for i, t in enumerate(texts) if t.startswith("Block 1:"))


def test_the_chats_and_preference_pages_do_not_repeat_the_classic_paragraph() -> None:
    for at in (
        open_link({"source": "text"}),
        open_link({"sequences": PREFERENCE_TEXT, "max_seq_length": "32", "strategy": "bfd"}),
    ):
        assert not at.exception
        texts = [text for _, text in _shown(at)]
        assert not any("classic answer's loss mask" in text for text in texts)
        assert not any(text.startswith("From mask to labels.") for text in texts)  # every trained token is a target


def test_the_response_only_example_keeps_each_response_with_its_prompt_and_says_what_split_would_do() -> None:
    masking = EXAMPLES["masking"]
    assert packing.strategies.STRATEGIES[masking.strategy].keeps_boundaries  # opens with a no-split strategy
    at = next(b for b in open_link({}).button if b.key == "follow_masking").click().run()
    assert not at.exception
    assert {m.label: m.value for m in at.metric}["Sequences cut"] == "0"
    lines = _classic(at)
    assert lines[1] == "Block 2: [10, 11, 12, 13, 14, 0, 0, 0] -> mask: [0, 0, 1, 1, 1, 0, 0, 0]"
    said = [c for c in (plain(e.value) for e in at.caption) if "With `split`" in c]
    assert len(said) == 1 and "13 14 would train in block 2 without their prompt 10 11" in said[0]
    assert not at.warning
    # the same data under split: these blocks do it, said as a warning where the answer is
    cut = open_link({"sequences": masking.text, "max_seq_length": "8", "strategy": "split"})
    warnings = [plain(w.value) for w in cut.warning]
    assert any(w.startswith("`split` cuts sequence 2") and "13 14 train in block 2" in w for w in warnings)


def test_cut_note_names_what_split_does_to_every_shape_of_prompt() -> None:
    """Brute force on tiny inputs: the note's block and tokens are the library's split blocks'."""
    from explorer.core.runs import responses_cut

    rng = np.random.default_rng(0)
    for _ in range(300):
        rows = [
            {"prompt": rng.integers(1, 50, rng.integers(1, 4)).tolist(), "completion": rng.integers(50, 99, rng.integers(1, 4)).tolist()}
            for _ in range(rng.integers(1, 5))
        ]  # fmt: skip
        size = int(rng.integers(2, 8))
        count, cuts = responses_cut(packing.read_rows(rows), size)
        batch = packing.pack(rows, size, strategy="split")
        expected = []  # every block that opens with the rest of a sequence: its trained tokens, if a prompt is behind
        for block in range(1, batch.num_blocks):
            ids, mask, seqs = batch.input_ids[block], batch.loss_mask[block], batch.sequence_ids[block]
            first = int(seqs[0])
            earlier = batch.sequence_ids[:block] == first
            if first < 0 or not earlier.any():
                continue
            trained = ids[(seqs == first) & (mask == 1)].tolist()
            prompt_behind = int((earlier & (batch.loss_mask[:block] == 0)).sum())
            if trained and prompt_behind:
                expected.append((first, block, trained))
        got = [(c.sequence, c.block, c.trained.tolist()) for c in cuts]
        assert count == len(expected) and got == expected[:3], (rows, size)


def test_the_page_pads_text_rows_as_the_library_does() -> None:
    at = open_link({"source": "text"})
    assert not at.exception
    recipe = packing.Recipe(TEXT_MAX_SEQ_LENGTH, strategy="bfd", overflow="split", tokenizer="bytes")
    assert packing.text.prepare(recipe).pad_id == 257
    batch = packing.pack(CHATS, recipe=recipe)
    blocks, masks = batch.to_lists()
    expected = [
        f"Block {i + 1}: {ids} -> mask: {mask}" for i, (ids, mask) in enumerate(zip(blocks, masks, strict=True))
    ]
    assert _classic(at) == expected and any(257 in ids for ids in blocks)
    at.session_state["tab"] = "Export"
    at = at.run()
    snippet = next(c.value for c in at.code if "packing.pack(" in c.value)
    assert "pad_token_id=257," in snippet and "tokenizer='bytes'" in snippet
    # a chosen pad id is the page's, as it is the library's
    chosen = open_link({"source": "text", "pad_token_id": "3"})
    blocks, masks = packing.pack(CHATS, recipe=packing.Recipe.of(recipe, pad_token_id=3)).to_lists()
    assert _classic(chosen) == [
        f"Block {i + 1}: {ids} -> mask: {m}" for i, (ids, m) in enumerate(zip(blocks, masks, strict=True))
    ]


def test_pasted_token_ids_pad_with_zero_as_the_seed_says() -> None:
    at = open_link({})
    assert _classic(at) == CLASSIC
    assert at.number_input(key="pad_token_id").value is None  # the library's rule, not a number of the page's


def test_the_data_line_counts_pairs_and_groups_not_sequences() -> None:
    at = open_link({"sequences": PREFERENCE_TEXT, "max_seq_length": "32", "strategy": "bfd"})
    data = next(plain(c.value).replace("**", "") for c in at.caption if "Data:" in c.value)
    assert data == "Data: 2 preference pairs and 1 completion group, pasted."


def test_a_drawing_of_pairs_has_two_legends_apart_and_no_reserved_gap() -> None:
    at = open_link({"sequences": PREFERENCE_TEXT, "max_seq_length": "32", "strategy": "bfd"})
    import json

    spec = json.loads(next(c for c in at.get("plotly_chart") if c.key == "blocks").proto.spec)
    assert spec["layout"].get("showlegend") is False and spec["layout"]["margin"]["b"] <= 60
    legends = [h.proto.body for h in at.get("html") if "Role of the token" in h.proto.body]
    assert len(legends) == 1 and "Loss mask (bottom row)" in legends[0]
    roles, states = legends[0].split("Loss mask (bottom row)")
    assert "prompt" in roles and "rejected" in roles and "padding" not in roles
    assert "not trained" in states and "chosen" not in states


def test_the_attention_tab_of_pairs_has_one_block_picker_for_every_drawing() -> None:
    at = open_link(
        {"sequences": PREFERENCE_TEXT, "max_seq_length": "16", "strategy": "bfd", "tab": "Attention & positions"}
    )
    assert not at.exception
    pickers = [n.label for n in at.number_input if n.label.startswith("Block")]
    assert pickers == ["Block"]
    import json

    for chosen in (1, 2):
        at.number_input(key="attention_block").set_value(chosen).run()
        titles = [
            json.loads(c.proto.spec)["layout"]["title"]["text"]
            for c in at.get("plotly_chart")
            if c.key in ("layouts_duplicated", "layouts_shared")
        ]
        assert titles and all(t.startswith(f"Block {chosen},") for t in titles), titles


def test_the_turns_table_shows_the_trained_text_first_on_a_phone() -> None:
    at = open_link({"source": "text"})
    turns = next(frame.value for frame in at.dataframe if "trained text" in frame.value.columns)
    assert list(turns.columns[:2]) == ["role", "trained text"]


def test_the_export_tab_says_how_its_files_count_against_the_page() -> None:
    at = open_link({"tab": "Export"})
    said = " ".join(plain(m.value) for m in at.markdown)
    assert "The files count from 0" in said and "document 1 of the page" in said


def test_a_cell_tells_part_of_a_character_from_a_token_cut_to_its_cell() -> None:
    cells = token_cells([195, 169, 256], "bytes", limit=1)  # 'é' in two bytes, then <|endoftext|>
    assert cells.labels == ["·", "é", "…"]
    assert cell_label("") != cell_label("<|im_start|>", 1)


def test_the_follow_up_sentence_never_takes_user_text_to_markdown() -> None:
    """The question and the note are the page's words and integers only: a hostile paste changes neither."""
    at = open_link({"sequences": "[Click](https://example.com) | ![x](https://example.com/x.png)"})
    assert not any("example.com" in m.value for m in at.markdown)
    assert not _follow_up_buttons(at)  # one's own sequences: no example, no question
