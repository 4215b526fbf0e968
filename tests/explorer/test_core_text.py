"""The explorer's text views (pure functions): decoded pieces, roles per token, turn summaries, examples."""

from __future__ import annotations

import doctest
import itertools
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import explorer.core.text as text_view  # noqa: E402
from explorer.core.text import EXAMPLES, parse_text_rows, token_cells, token_pieces, turn_table, view_row  # noqa: E402
from packing.core._forms import text_forms  # noqa: E402
from packing.errors import DatasetError  # noqa: E402
from packing.text._text_rows import encode_rows  # noqa: E402
from packing.text._tokenizers import ByteTokenizer, load_tokenizer  # noqa: E402

CHAT = EXAMPLES["messages"]["messages"]
no_surrogates = st.characters(blacklist_categories=("Cs",))


@pytest.fixture(scope="module")
def bpe(tmp_path_factory: pytest.TempPathFactory) -> Any:
    pytest.importorskip("tokenizers")
    pytest.importorskip("transformers")
    from tests.helpers.text_fixtures import CHATML, save_tokenizer

    return load_tokenizer(str(save_tokenizer(tmp_path_factory.mktemp("tok") / "chatml", CHATML)))


def test_docstring_examples() -> None:
    result = doctest.testmod(text_view, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0


@settings(max_examples=150, deadline=None)
@given(text=st.text(alphabet=no_surrogates, max_size=40))
def test_byte_pieces_join_to_the_text(text: str) -> None:
    tokenizer = ByteTokenizer()
    ids = tokenizer.encode(text)
    pieces, groups = token_pieces(ids, tokenizer)
    assert "".join(pieces) == text
    # every token of a character shows that character on hover; only the last one carries it
    for index, piece in enumerate(pieces):
        assert ids[index] >= 256 or bytes([ids[index]]) in groups[index].encode("utf-8")
        assert piece in ("", groups[index])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(alphabet=st.sampled_from(list("ab cd\nxyzé日本語✓!?")), max_size=40))
def test_bpe_pieces_join_to_the_decoded_ids(bpe: Any, text: str) -> None:
    ids = bpe.encode(text, add_special_tokens=False)
    cells = token_cells(ids, bpe)
    assert "".join(cells.pieces) == bpe.decode(ids) == text
    assert len(cells.labels) == len(cells.hovers) == len(ids)
    assert all(hover.startswith(f"id {value}: ") for hover, value in zip(cells.hovers, ids, strict=True))


@pytest.mark.parametrize("tokenizer_name", ["bytes", "bpe"])
def test_chat_roles_and_trained_turns(tokenizer_name: str, bpe: Any) -> None:
    tokenizer = bpe if tokenizer_name == "bpe" else ByteTokenizer()
    view = view_row({"messages": CHAT}, tokenizer)
    tokens, mask, _ = encode_rows([{"messages": CHAT}], tokenizer)
    assert view.ids == tokens.tolist() and view.trained == mask.tolist()
    assert "".join(view.pieces) == tokenizer.decode(view.ids)
    # each turn's tokens decode to exactly that message as the template renders it
    table = turn_table(view)
    assert [line["role"] for line in table] == [m["role"] for m in CHAT]
    assert [line["text"] for line in table] == [f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in CHAT]
    assert [line["trained text"] for line in table] == [
        f"{m['content']}<|im_end|>\n" if m["role"] == "assistant" else "" for m in CHAT
    ]
    assert all(view.roles[i] == "assistant" for i, flag in enumerate(view.trained) if flag)


def test_conversational_roles(bpe: Any) -> None:
    row = EXAMPLES["conversational"]
    view = view_row(row, bpe)
    table = turn_table(view)
    assert [line["role"] for line in table] == ["user", "assistant"]
    assert table[1]["text"] == "<|im_start|>assistant\n4.<|im_end|>\n"
    assert table[1]["trained text"] == "4.<|im_end|>\n"


def test_prompt_completion_and_text_roles(bpe: Any) -> None:
    view = view_row(EXAMPLES["prompt_completion"], bpe)
    table = turn_table(view)
    assert [(line["role"], line["text"]) for line in table] == [
        ("prompt", "Translate to French: cheese\n"),
        ("completion", "fromage<|endoftext|>"),
    ]
    assert table[0]["trained"] == 0 and table[1]["trained"] == table[1]["tokens"]
    text_view_row = view_row(EXAMPLES["text"], "bytes")
    assert set(text_view_row.roles) == {"text"} and all(text_view_row.trained)


@pytest.mark.parametrize("form", list(EXAMPLES))
def test_every_example_has_its_form_and_views(form: str, bpe: Any) -> None:
    row = parse_text_rows(text_view.example_text(form))[0]
    assert row == EXAMPLES[form] and text_forms(row) == [form]
    for tokenizer in (ByteTokenizer(), bpe):
        view = view_row(row, tokenizer)
        assert view.form == form
        assert len(view.ids) == len(view.pieces) == len(view.roles) == len(view.trained) > 0
        assert 0 < sum(view.trained) <= len(view.ids)
    assert parse_text_rows("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in EXAMPLES.values())) == list(
        EXAMPLES.values()
    )


def test_parse_text_rows() -> None:
    assert parse_text_rows("") == []
    assert parse_text_rows('{"prompt": "a", "completion": "b"}') == [{"prompt": "a", "completion": "b"}]
    assert parse_text_rows('[{"text": "a"}, {"text": "b"}]') == [{"text": "a"}, {"text": "b"}]
    assert parse_text_rows("two\nlines") == [{"text": "two\nlines"}]
    with pytest.raises(DatasetError) as caught:
        parse_text_rows('{"text": "a"}\n{"text": ')
    assert (caught.value.source, caught.value.where) == ("pasted text", "line 2")


@pytest.mark.parametrize(("strategy", "capacity"), [("split", 24), ("bfd", 128)])
def test_block_labels_follow_samples_into_blocks(strategy: str, capacity: int) -> None:
    import packing
    from explorer.core.text import block_labels

    rows = list(EXAMPLES.values())
    views = [view_row(row, "bytes") for row in rows]
    samples = [{"input_ids": v.ids, "loss_mask": v.trained} for v in views]
    batch = packing.pack(samples, capacity, strategy=strategy, overflow="split")
    roles = [v.roles for v in views]
    for block in range(batch.num_blocks):
        got = block_labels(batch, block, roles)
        assert len(got) == capacity
        for sample, label in zip(batch.sequence_ids[block].tolist(), got, strict=True):
            assert (label == "padding") == (sample < 0)
        # the pieces shown are the tokens the block holds
        pieces = block_labels(batch, block, [[str(i) for i in v.ids] for v in views], padding="-")
        real = batch.sequence_ids[block] >= 0
        assert [int(p) for p in pieces if p != "-"] == batch.input_ids[block][real].tolist()
    if strategy == "split":  # input order, cut at block boundaries: every role in order
        flat = [label for b in range(batch.num_blocks) for label in block_labels(batch, b, roles) if label != "padding"]
        assert flat == [role for v in views for role in v.roles]


def test_choose_tokenizer(bpe: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A folder under the operator's PACKING_EXPLORER_TOKENIZERS loads by its name; a typed path, a missing
    folder and a hub name all get the same refusal."""
    from explorer.core.text import TOKENIZERS_ENV, choose_tokenizer

    folder = Path(bpe.name_or_path)
    monkeypatch.setenv(TOKENIZERS_ENV, str(folder.parent))
    tokenizer, message = choose_tokenizer(folder.name)
    assert message is None and tokenizer.encode("ab", add_special_tokens=False) == bpe.encode(
        "ab", add_special_tokens=False
    )
    names = (str(folder), "missing", "packing-tests/not-cached")
    refusals = {str(choose_tokenizer(name)[1]).split(": ", 1)[-1] for name in names}
    assert len(refusals) == 1 and "expected bytes or the name of a tokenizer folder" in refusals.pop()
    assert all(choose_tokenizer(name)[0] is None for name in (str(folder), "missing"))


def test_documents_table_round_trip(bpe: Any) -> None:
    import packing
    from explorer.core.text import documents_table

    rows = list(EXAMPLES.values())
    tokens, mask, offsets = encode_rows(rows, bpe)
    samples = [{"input_ids": tokens[a:b], "loss_mask": mask[a:b]} for a, b in itertools.pairwise(offsets)]
    batch = packing.pack(samples, 128, strategy="bfd")
    table = documents_table(batch, bpe)
    assert sorted(line["sample"] for line in table) == list(range(len(rows)))
    for line in table:
        a, b = offsets[line["sample"]], offsets[line["sample"] + 1]
        assert line["tokens"] == b - a and line["loss_mask"] == int(mask[a:b].sum())
        assert line["text"] == bpe.decode(tokens[a:b].tolist())
    chat_line = next(line for line in table if line["sample"] == list(EXAMPLES).index("messages"))
    assert chat_line["text"] == bpe.apply_chat_template(EXAMPLES["messages"]["messages"], tokenize=False)


def test_roles_with_generation_markers(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    from tests.helpers.text_fixtures import MARKED, save_tokenizer

    tokenizer = load_tokenizer(str(save_tokenizer(tmp_path / "marked", MARKED)))
    view = view_row({"messages": CHAT}, tokenizer)
    table = turn_table(view)
    assert [line["role"] for line in table] == [m["role"] for m in CHAT]
    assert [line["trained text"] for line in table] == [
        f"{m['content']}<|endoftext|>" if m["role"] == "assistant" else "" for m in CHAT
    ]
