"""Text rows through tokenizers: masks checked token by token against an independent rendering.

A tiny byte-level BPE is trained here (no network), wrapped as ``PreTrainedTokenizerFast``, saved to a
temporary folder and loaded by path, with a chat template without generation markers (masks from prefix
renderings) and one with them (masks from ``return_assistant_tokens_mask``). The expected ids and masks
come from rendering each conversation as segments by hand and tokenizing every segment on its own with
the raw ``tokenizers`` backend; the segments end where the pre-tokenizer splits anyway (special tokens,
a newline before a word), so their concatenation is the tokenization of the whole.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import packing
from packing.core._forms import is_text_row, text_forms
from packing.errors import SampleError, SettingError
from packing.text._encoding import encode_texts, spans_mask
from packing.text._text_rows import decode_documents, encode_rows
from packing.text._tokenizers import ByteTokenizer, load_tokenizer

pytest.importorskip("tokenizers")
pytest.importorskip("transformers")

import itertools

from tests.helpers.text_fixtures import CHATML, LAST_TURN_SPECIAL, MARKED, save_tokenizer, train_backend

Segments = list[tuple[str, int]]


# ---------------------------------------------------------------- tokenizers and the hand rendering


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tokenizers")
    return {
        name: save_tokenizer(root / name, template)
        for name, template in (("chatml", CHATML), ("marked", MARKED), ("last", LAST_TURN_SPECIAL))
    }


@pytest.fixture(scope="module")
def chatml(folders: dict[str, Path]) -> Any:
    return load_tokenizer(str(folders["chatml"]))


@pytest.fixture(scope="module")
def marked(folders: dict[str, Path]) -> Any:
    return load_tokenizer(str(folders["marked"]))


@pytest.fixture(scope="module")
def backend() -> Any:
    return train_backend()


def chatml_segments(messages: list[dict[str, str]], trained: bool = True) -> Segments:
    """ChatML by hand; an assistant turn trains its content, <|im_end|> and the newline after it."""
    out: Segments = []
    for m in messages:
        t = int(trained and m["role"] == "assistant")
        out += [("<|im_start|>", 0), (m["role"] + "\n", 0), (m["content"], t), ("<|im_end|>", t), ("\n", t)]
    return out


def marked_segments(messages: list[dict[str, str]], trained: bool = True) -> Segments:
    """The marked template by hand; its {% generation %} block holds the content and <|endoftext|>."""
    out: Segments = []
    for m in messages:
        if m["role"] == "assistant":
            t = int(trained)
            out += [("<|assistant|>", 0), ("\n", 0), (m["content"], t), ("<|endoftext|>", t), ("\n", 0)]
        else:
            out += [(f"<|{m['role']}|>", 0), ("\n" + m["content"], 0), ("<|endoftext|>", 0), ("\n", 0)]
    return out


def tokenize_segments(tokenizer: Any, segments: Segments) -> tuple[list[int], list[int]]:
    """Each segment tokenized on its own (raw backend or the byte tokenizer), ids and mask concatenated."""
    ids: list[int] = []
    mask: list[int] = []
    for text, trained in segments:
        if not text:
            continue
        piece = tokenizer.encode(text) if isinstance(tokenizer, ByteTokenizer) else tokenizer.encode(text).ids
        ids += piece
        mask += [trained] * len(piece)
    return ids, mask


def rows_of(tokens: np.ndarray, mask: np.ndarray, offsets: np.ndarray) -> list[tuple[list[int], list[int]]]:
    return [(tokens[a:b].tolist(), mask[a:b].tolist()) for a, b in itertools.pairwise(offsets)]


words = st.text(
    alphabet=st.sampled_from(list("abcdefghijklmnopqrstuvwxyzABCXYZ0123456789.,!?'-éüñß日本語テ✓")),
    min_size=1,
    max_size=8,
)
contents = st.lists(words, max_size=6).map(" ".join)
conversations = st.lists(
    st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "system"]), "content": contents}),
    min_size=1,
    max_size=6,
)

CHAT = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi, café?"},
    {"role": "assistant", "content": "Hello! 日本語 ✓"},
    {"role": "user", "content": "What is 2 + 2?"},
    {"role": "assistant", "content": "It is 4."},
]
EXAMPLE_CHATS = [
    CHAT,
    CHAT[:3],
    [{"role": "assistant", "content": "I speak first."}, {"role": "user", "content": "ok"}],
    [{"role": "user", "content": "silence"}, {"role": "assistant", "content": ""}],
    [{"role": "user", "content": "no answer"}],
]


# ---------------------------------------------------------------- chat masks, token by token


@pytest.mark.parametrize("chat", EXAMPLE_CHATS)
def test_prefix_masks_match_the_hand_rendering(chatml: Any, backend: Any, chat: list[dict[str, str]]) -> None:
    [(ids, mask)] = rows_of(*encode_rows([{"messages": chat}], chatml))
    assert (ids, mask) == tokenize_segments(backend, chatml_segments(chat))


@pytest.mark.parametrize("chat", EXAMPLE_CHATS)
def test_generation_marker_masks_match_the_hand_rendering(
    marked: Any, backend: Any, chat: list[dict[str, str]]
) -> None:
    [(ids, mask)] = rows_of(*encode_rows([{"messages": chat}], marked))
    assert (ids, mask) == tokenize_segments(backend, marked_segments(chat))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(chats=st.lists(conversations, min_size=1, max_size=4))
def test_chat_masks_property(chatml: Any, marked: Any, backend: Any, chats: list[list[dict[str, str]]]) -> None:
    rows = [{"messages": chat} for chat in chats]
    for tokenizer, render in ((chatml, chatml_segments), (marked, marked_segments)):
        got = rows_of(*encode_rows(rows, tokenizer))
        assert got == [tokenize_segments(backend, render(chat)) for chat in chats]
    bytes_got = rows_of(*encode_rows(rows, "bytes"))
    assert bytes_got == [tokenize_segments(ByteTokenizer(), chatml_segments(chat)) for chat in chats]


def test_every_assistant_turn_is_trained_in_words(chatml: Any) -> None:
    tokens, mask, _ = encode_rows([{"messages": CHAT}], chatml)
    trained = chatml.decode(tokens[mask == 1].tolist())
    assert trained == "Hello! 日本語 ✓<|im_end|>\nIt is 4.<|im_end|>\n"
    assert chatml.decode(tokens.tolist()) == chatml.apply_chat_template(CHAT, tokenize=False)


def test_generation_markers_agree_with_transformers(marked: Any) -> None:
    """The marked path is transformers' own mask: same ids and assistant mask as a direct call."""
    chats = [chat for chat in EXAMPLE_CHATS]
    out = marked.apply_chat_template(chats, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
    got = rows_of(*encode_rows([{"messages": chat} for chat in chats], marked))
    assert got == [(list(i), list(m)) for i, m in zip(out["input_ids"], out["assistant_masks"], strict=True)]


def test_template_whose_prefixes_change_is_refused(folders: dict[str, Path]) -> None:
    tokenizer = load_tokenizer(str(folders["last"]))
    rows = [{"text": "fine"}, {"messages": CHAT}]
    with pytest.raises(SampleError) as caught:
        encode_rows(rows, tokenizer)
    assert (caught.value.sample, caught.value.field, caught.value.position) == (1, "messages", 2)
    assert "prefix" in caught.value.expected
    # a conversation of one assistant message has no earlier turn to disagree on; the template refuses an
    # empty conversation, so the opening is found through the generation prompt a one-message probe renders
    [(ids, mask)] = rows_of(
        *encode_rows([{"messages": [{"role": "assistant", "content": "I speak first."}]}], tokenizer)
    )
    assert tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if not m]) == "<|im_start|>assistant\n"
    assert tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if m]) == "I speak first.<|endoftext|>"


def test_loss_on_everything(chatml: Any) -> None:
    rows = [{"messages": CHAT}, {"prompt": CHAT[:2], "completion": CHAT[2:3]}, {"prompt": "a", "completion": "b"}]
    tokens, mask, offsets = encode_rows(rows, chatml, completion_only_loss=False)
    assert mask.tolist() == [1] * len(tokens)
    same_tokens, _, same_offsets = encode_rows(rows, chatml)
    assert same_tokens.tolist() == tokens.tolist() and same_offsets.tolist() == offsets.tolist()


# ---------------------------------------------------------------- prompt/completion and text


def test_conversational_prompt_completion(chatml: Any, marked: Any, backend: Any) -> None:
    prompt, completion = CHAT[:4], CHAT[4:]
    row = {"prompt": prompt, "completion": completion}
    [(ids, mask)] = rows_of(*encode_rows([row], chatml))
    head = [*chatml_segments(prompt, trained=False), ("<|im_start|>", 0), ("assistant\n", 0)]
    assert (ids, mask) == tokenize_segments(backend, [*head, ("It is 4.", 1), ("<|im_end|>", 1), ("\n", 1)])
    [(ids, mask)] = rows_of(*encode_rows([row], marked))
    head = [*marked_segments(prompt, trained=False), ("<|assistant|>", 0), ("\n", 0)]
    # the completion's turn is trained as the same turn of a 'messages' row: its generation block
    assert (ids, mask) == tokenize_segments(backend, [*head, ("It is 4.", 1), ("<|endoftext|>", 1), ("\n", 0)])


def test_conversational_prompt_completion_agrees_with_trl(chatml: Any) -> None:
    data_utils = pytest.importorskip("trl.data_utils")
    row = {"prompt": CHAT[:4], "completion": CHAT[4:]}
    expected = data_utils.apply_chat_template(row, chatml)
    [(ids, mask)] = rows_of(*encode_rows([row], chatml))
    assert chatml.decode([t for t, m in zip(ids, mask, strict=True) if not m]) == expected["prompt"]
    assert chatml.decode([t for t, m in zip(ids, mask, strict=True) if m]) == expected["completion"]
    assert data_utils.is_conversational(row) and data_utils.is_conversational({"messages": CHAT})
    assert not data_utils.is_conversational({"prompt": "a", "completion": "b"})


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pairs=st.lists(st.tuples(contents, contents), min_size=1, max_size=5))
def test_prompt_completion_text(chatml: Any, backend: Any, pairs: list[tuple[str, str]]) -> None:
    eos = chatml.eos_token_id
    got = rows_of(*encode_rows([{"prompt": p, "completion": c} for p, c in pairs], chatml))
    expected = []
    for p, c in pairs:
        prompt_ids, completion_ids = backend.encode(p).ids, backend.encode(c).ids
        expected.append((prompt_ids + completion_ids + [eos], [0] * len(prompt_ids) + [1] * (len(completion_ids) + 1)))
    assert got == expected


def test_text_rows_end_with_one_eos(chatml: Any, backend: Any) -> None:
    eos = chatml.eos_token_id
    rows = [{"text": "Hello world"}, {"text": "already ended<|endoftext|>"}, {"text": ""}]
    got = rows_of(*encode_rows(rows, chatml))
    assert got[0] == ([*backend.encode("Hello world").ids, eos], [1] * (len(backend.encode("Hello world").ids) + 1))
    assert got[1][0] == backend.encode("already ended<|endoftext|>").ids and got[1][0][-1] == eos
    assert got[2] == ([eos], [1])


def test_forms_mixed_in_one_call_keep_their_order(chatml: Any) -> None:
    rows = [
        {"text": "a"},
        {"messages": CHAT},
        {"prompt": "p", "completion": "c"},
        {"prompt": CHAT[:2], "completion": CHAT[2:3]},
    ]
    together = rows_of(*encode_rows(rows, chatml))
    assert together == [rows_of(*encode_rows([row], chatml))[0] for row in rows]


# ---------------------------------------------------------------- the byte tokenizer


@settings(max_examples=200, deadline=None)
@given(text=st.text(alphabet=st.characters(blacklist_categories=("Cs",))))
def test_bytes_round_trip(text: str) -> None:
    tokenizer = ByteTokenizer()
    ids = tokenizer.encode(text)
    assert tokenizer.decode(ids) == text
    if not any(token in text for token in tokenizer.SPECIAL_TOKENS):
        assert ids == list(text.encode("utf-8"))
        assert tokenizer.decode([*ids, 256], skip_special_tokens=True) == text


@settings(max_examples=100, deadline=None)
@given(text=st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=30))
def test_bytes_offsets_cover_each_character(text: str) -> None:
    ids, starts, ends = ByteTokenizer().encode_with_offsets(text)
    if not any(token in text for token in ByteTokenizer.SPECIAL_TOKENS):
        for index, char in enumerate(text):
            assert bytes(ids[(starts == index) & (ends == index + 1)].tolist()) == char.encode("utf-8")


def test_bytes_decode_refuses_unknown_ids() -> None:
    with pytest.raises(SettingError, match=r"token ids in 0\.\.259"):
        ByteTokenizer().decode([300])


def test_bytes_text_and_prompt_completion() -> None:
    got = rows_of(*encode_rows([{"text": "é"}, {"prompt": "a", "completion": "b"}], "bytes"))
    assert got == [([195, 169, 256], [1, 1, 1]), ([97, 98, 256], [0, 1, 1])]


def test_spans_mask_overlap_rule() -> None:
    encoded = encode_texts(ByteTokenizer(), ["aéb", "", "xyz"], add_special_tokens=False, spans=True)
    # "é" is two bytes with the same character span; a span covering only it trains both
    assert spans_mask(encoded, [[(1, 2)], [], [(0, 1), (2, 3)]]).tolist() == [0, 1, 1, 0, 1, 0, 1]


# ---------------------------------------------------------------- forms, errors, loading


@pytest.mark.parametrize(
    ("row", "forms"),
    [
        ({"text": "x"}, ["text"]),
        ({"prompt": "x", "completion": "y"}, ["prompt_completion"]),
        ({"messages": CHAT}, ["messages"]),
        ({"prompt": CHAT[:2], "completion": CHAT[2:3]}, ["conversational"]),
        ({"prompt": [1, 2], "completion": [3]}, []),
        ({"input_ids": [1, 2], "text": "pre-tokenized"}, []),
        ({"text": None, "input_ids": None, "messages": CHAT}, ["messages"]),
        ([1, 2, 3], []),
        ({"text": "x", "messages": CHAT}, ["text", "messages"]),
    ],
)
def test_text_forms(row: Any, forms: list[str]) -> None:
    assert text_forms(row) == forms
    assert is_text_row(row) == bool(forms)


@pytest.mark.parametrize(
    ("row", "field", "position", "expected"),
    [
        ({"text": 3}, "text", None, "a string"),
        ({"messages": []}, "messages", None, "a non-empty list of messages"),
        ({"messages": [{"role": "user", "content": "a"}, {"role": "assistant"}]}, "messages", 1, "string 'content'"),
        ({"messages": [{"content": "a"}]}, "messages", 0, "string 'role'"),
        ({"messages": ["hello"]}, "messages", 0, "a message"),
        ({"prompt": "x"}, "completion", None, "a string"),
        ({"prompt": "x", "completion": [1]}, "completion", None, "a string"),
        ({"prompt": CHAT[:1]}, "completion", None, "a list of messages"),
        ({"text": "x", "messages": CHAT}, "messages", None, "one text form"),
        ({"text": "x", "prompt": "y", "completion": "z"}, "prompt", None, "one text form"),
        ({"text": "x", "prompt": [1], "completion": [2]}, None, None, "a text row"),  # a token pair, text extra
        ([1, 2], None, None, "a text row"),
    ],
)
def test_bad_rows_name_sample_and_field(row: Any, field: str | None, position: int | None, expected: str) -> None:
    with pytest.raises(SampleError) as caught:
        encode_rows([{"text": "ok"}, row], "bytes", indices=[10, 11])
    error = caught.value
    assert (error.sample, error.field, error.position) == (11, field, position)
    assert expected in error.expected
    assert str(error).startswith("sample 11")
    assert isinstance(error, ValueError)


def test_tokenizer_without_chat_template(folders: dict[str, Path], backend: Any, tmp_path: Path) -> None:
    from transformers import PreTrainedTokenizerFast

    wrapper: Any = PreTrainedTokenizerFast
    plain = wrapper(tokenizer_object=backend, eos_token="<|endoftext|>")
    assert rows_of(*encode_rows([{"text": "Hello"}], plain))[0][0][-1] == plain.eos_token_id
    with pytest.raises(SettingError, match="chat template"):
        encode_rows([{"messages": CHAT}], plain)
    no_eos = wrapper(tokenizer_object=backend)
    with pytest.raises(SettingError, match="end-of-text"):
        encode_rows([{"text": "Hello"}], no_eos)


def test_load_tokenizer_forms(folders: dict[str, Path], chatml: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_tokenizer(chatml) is chatml
    assert isinstance(load_tokenizer("bytes"), ByteTokenizer)
    from_file = load_tokenizer(folders["chatml"] / "tokenizer.json")
    assert from_file.encode("Hello world", add_special_tokens=False) == chatml.encode(
        "Hello world", add_special_tokens=False
    )
    assert packing.load_tokenizer is load_tokenizer
    with pytest.raises(SettingError, match="no such folder"):
        load_tokenizer(str(folders["chatml"] / "missing"))
    with pytest.raises(SettingError, match=r"not in the local cache \(offline\)"):
        load_tokenizer("packing-tests/no-such-tokenizer", local_files_only=True)
    with pytest.raises(SettingError):
        load_tokenizer(42)
    empty = folders["chatml"].parent / "empty"
    empty.mkdir(exist_ok=True)
    with pytest.raises(SettingError, match="a folder that cannot be loaded"):
        load_tokenizer(str(empty))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(SettingError, match=r"not in the local cache \(offline\)"):
        load_tokenizer("packing-tests/no-such-tokenizer")
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(SettingError, match="pip install transformers"):
        load_tokenizer(str(folders["chatml"]))
    assert isinstance(load_tokenizer("bytes"), ByteTokenizer)


# ---------------------------------------------------------------- decoding packed output


def samples_of(tokens: np.ndarray, mask: np.ndarray, offsets: np.ndarray) -> list[dict[str, Any]]:
    return [{"input_ids": tokens[a:b], "loss_mask": mask[a:b]} for a, b in itertools.pairwise(offsets)]


def test_decode_documents_round_trip(chatml: Any) -> None:
    rows = [{"messages": chat} for chat in EXAMPLE_CHATS] + [
        {"text": "naïve café"},
        {"prompt": "2+2=", "completion": "4"},
    ]
    tokens, mask, offsets = encode_rows(rows, chatml)
    texts = [chatml.decode(tokens[a:b].tolist()) for a, b in itertools.pairwise(offsets)]
    batch = packing.pack(samples_of(tokens, mask, offsets), int(np.diff(offsets).max()), strategy="bfd")
    documents = decode_documents(batch, chatml)
    assert sorted(documents) == sorted(texts)
    assert texts[0] == chatml.apply_chat_template(CHAT, tokenize=False)


def test_decode_documents_of_cut_samples() -> None:
    """The split strategy cuts samples at block boundaries: documents in block order join to the input."""
    rows = [{"messages": CHAT[:4]}, {"text": "plain words"}, {"prompt": "2+2=", "completion": "4"}]
    rows[0]["messages"][1] = {"role": "user", "content": "Hi, cafe?"}  # ASCII: no character cut in two
    rows[0]["messages"][2] = {"role": "assistant", "content": "Hello!"}
    tokens, mask, offsets = encode_rows(rows, "bytes")
    batch = packing.pack(samples_of(tokens, mask, offsets), 16, strategy="split", overflow="split")
    documents = decode_documents(batch, "bytes")
    assert len(documents) == sum(len(batch.seq_lengths(b)) for b in range(batch.num_blocks)) > len(rows)
    assert "".join(documents) == ByteTokenizer().decode(tokens)


def test_decode_documents_bytes_skip_special_tokens() -> None:
    tokens, mask, offsets = encode_rows([{"text": "日本"}, {"prompt": "Q:", "completion": "A"}], "bytes")
    batch = packing.pack(samples_of(tokens, mask, offsets), 16)
    assert decode_documents(batch, "bytes") == ["日本<|endoftext|>", "Q:A<|endoftext|>"]
    assert decode_documents(batch, "bytes", skip_special_tokens=True) == ["日本", "Q:A"]


# ---------------------------------------------------------------- the command line


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    return path


def test_cli_packs_a_chat_jsonl(
    folders: dict[str, Path], backend: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from packing._cli import main

    chats = [*EXAMPLE_CHATS, CHAT[2:], [*CHAT[:4], {"role": "assistant", "content": "Four."}]]
    source = write_jsonl(tmp_path / "chats.jsonl", [{"messages": chat} for chat in chats])
    output = tmp_path / "blocks.parquet"
    code = main(["pack", str(source), "--tokenizer", str(folders["chatml"]), "--max-seq-length", "96",
                 "--strategy", "bfd", "--output", str(output)])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0, out
    blocks = pq.read_table(output).to_pylist()
    found: dict[int, tuple[list[int], list[int]]] = {}
    for block in blocks:
        start = 0
        for length in block["seq_lengths"]:
            sample = block["sequence_ids"][start]
            found[sample] = (block["input_ids"][start : start + length], block["loss_mask"][start : start + length])
            start += length
    expected = [tokenize_segments(backend, chatml_segments(chat)) for chat in chats]
    assert sorted(found) == list(range(len(chats)))
    assert [found[i] for i in range(len(chats))] == expected
    trained = sum(sum(mask) for _, mask in expected)
    assert f"{trained:,} (loss on completion)" in out
    # the chat without an assistant turn trains nothing, and is counted as such
    assert re.search(r"^samples training nothing +1$", out, re.MULTILINE)


def test_cli_compare_and_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from packing._cli import main

    source = write_jsonl(tmp_path / "mixed.jsonl", [{"text": "héllo"}, {"prompt": "a", "completion": "b"}, [1, 2, 3]])
    assert main(["compare", str(source), "--tokenizer", "bytes", "--max-seq-length", "8", "--strategies", "bfd"]) == 0
    # héllo + EOS = 7 tokens, a b EOS = 3, the token row 3: 13 tokens
    assert "3 sequences, 13 tokens, longest 7" in capsys.readouterr().out
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"text": "ok"}, {"messages": [{"role": "user"}]}])
    argv = ["pack", str(bad), "--tokenizer", "bytes", "--max-seq-length", "8", "--strategy", "bfd"]
    assert main([*argv, "--output", str(tmp_path / "o.parquet")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        f"packing: error: {bad}, line 2, 'messages', position 0: expected a message with a string 'content'"
    )
    assert not (tmp_path / "o.parquet").exists()
    assert main(["pack", str(source), "--tokenizer", "./missing", "--max-seq-length", "8", "--strategy", "bfd",
                 "--output", str(tmp_path / "o.parquet")]) == 2  # fmt: skip
    assert "tokenizer: expected" in capsys.readouterr().err
    # without --tokenizer text rows are refused as before
    assert main(["compare", str(write_jsonl(tmp_path / "t.jsonl", [{"text": "a"}])), "--max-seq-length", "8"]) == 2


def test_cli_reads_text_rows_from_parquet(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import pyarrow as pa

    from packing._cli import main

    source = tmp_path / "chats.parquet"
    pq.write_table(pa.Table.from_pylist([{"messages": CHAT[:3]}, {"messages": CHAT[1:3]}]), source)
    output = tmp_path / "blocks.jsonl"
    argv = ["pack", str(source), "--tokenizer", "bytes", "--max-seq-length", "256", "--no-shuffle"]
    assert main([*argv, "--strategy", "next_fit", "--output", str(output)]) == 0
    capsys.readouterr()
    [block] = [json.loads(line) for line in output.read_text().splitlines()]
    expected = [tokenize_segments(ByteTokenizer(), chatml_segments(chat)) for chat in (CHAT[:3], CHAT[1:3])]
    assert block["seq_lengths"] == [len(ids) for ids, _ in expected]
    assert block["input_ids"][: sum(block["seq_lengths"])] == expected[0][0] + expected[1][0]
    assert block["loss_mask"][: sum(block["seq_lengths"])] == expected[0][1] + expected[1][1]


@pytest.mark.slow
def test_tokenize_benchmark_runs() -> None:
    """Smoke run of benchmarks/tokenization.py on a few chats (from another folder: it finds the package itself)."""
    import subprocess

    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, str(root / "benchmarks" / "tokenization.py"), "--quick", "--chats", "60", "--repeat", "1"],
        capture_output=True,
        text=True,
        cwd=root / "tests",
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith("| ")]
    assert lines[0].startswith("| case | rows | tokens | trained |")
    assert [line.split(" | ")[1] for line in lines[1:]] == ["60"] * 7  # the seven cases


def test_cli_shows_tokenizing_progress(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import packing._cli as cli

    monkeypatch.setattr(cli, "_stderr_is_terminal", lambda: True)
    source = write_jsonl(
        tmp_path / "chats.jsonl", [{"messages": CHAT}, {"text": "a"}, {"prompt": "b", "completion": "c"}]
    )
    argv = [
        "pack",
        str(source),
        "--tokenizer",
        "bytes",
        "--max-seq-length",
        "256",
        "--output",
        str(tmp_path / "o.jsonl"),
    ]
    assert cli.main(argv) == 0
    err = capsys.readouterr().err
    assert f"\rreading {source} and tokenizing with bytes ... 3/3 rows done in " in err


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(prompt=conversations, answer=contents)
def test_conversational_prompt_completion_property(
    chatml: Any, backend: Any, prompt: list[dict[str, str]], answer: str
) -> None:
    completion = [{"role": "assistant", "content": answer}]
    [(ids, mask)] = rows_of(*encode_rows([{"prompt": prompt, "completion": completion}], chatml))
    head = [*chatml_segments(prompt, trained=False), ("<|im_start|>", 0), ("assistant\n", 0)]
    assert (ids, mask) == tokenize_segments(backend, [*head, (answer, 1), ("<|im_end|>", 1), ("\n", 1)])
    # the same conversation as 'messages' trains the same answer, plus the prompt's own assistant turns
    [(chat_ids, chat_mask)] = rows_of(*encode_rows([{"messages": [*prompt, *completion]}], chatml))
    assert chat_ids == ids
    assert [m for m, c in zip(chat_mask, mask, strict=True) if c] == [1] * sum(mask)


def test_tool_calls_without_content(chatml: Any) -> None:
    call = [{"type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 2}}}]
    chat = [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": None, "tool_calls": call},
        {"role": "tool", "content": "4"},
        {"role": "assistant", "content": "It is 4."},
    ]
    tokens, mask, _ = encode_rows([{"messages": chat}], "bytes")
    trained = ByteTokenizer().decode(tokens[mask == 1])
    assert trained == json.dumps(call) + "<|im_end|>\nIt is 4.<|im_end|>\n"
    # a template that cannot render a message without content: the error names the sample
    with pytest.raises(SampleError) as caught:
        encode_rows([{"text": "a"}, {"messages": chat}], chatml)
    assert (caught.value.sample, caught.value.field) == (1, "messages")
    assert caught.value.expected == "a conversation the chat template can render"
