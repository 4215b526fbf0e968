"""Masks from span ends looked up in the Rust encodings (``encode_masked``) equal masks from every token's
character span (``encode_texts`` + ``spans_mask``), for tokenizers whose offsets differ in kind: byte-level
BPE (every character held by a token, characters split over several tokens), WordPiece with a normalizer
(whitespace held by no token, accents stripped), Metaspace (spaces folded into the next token) and byte-level
BPE with a prefix space and trimmed offsets, as RoBERTa's (an empty token out of order after each special
token)."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("tokenizers")
pytest.importorskip("transformers")

from packing.text._encoding import encode_masked, encode_texts, spans_mask
from tests.helpers.text_fixtures import CORPUS, SPECIAL_TOKENS, train_backend

ALPHABET = "".join(sorted(set("".join(CORPUS)))) + "  \t\n\r😀"


def _wrap(backend: Any) -> Any:
    from transformers import PreTrainedTokenizerFast

    wrapper: Any = PreTrainedTokenizerFast
    return wrapper(tokenizer_object=backend, eos_token="<|endoftext|>", pad_token="<|pad|>")


def _wordpiece() -> Any:
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    backend = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    backend.normalizer = normalizers.BertNormalizer(lowercase=True, strip_accents=True)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(vocab_size=300, special_tokens=["[UNK]", *SPECIAL_TOKENS], show_progress=False)
    backend.train_from_iterator(CORPUS * 20, trainer)
    return backend


def _metaspace() -> Any:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    backend = Tokenizer(models.BPE(unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Metaspace()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", *SPECIAL_TOKENS], show_progress=False)
    backend.train_from_iterator(CORPUS * 20, trainer)
    return backend


def _trimmed() -> Any:
    """The byte-level BPE with a prefix space before each piece and its offsets trimmed of leading spaces: after
    a special token, a lone prefix space is a token ``(i + 1, i + 1)`` just before the token ``(i, i + 1)``."""
    from tokenizers import pre_tokenizers, processors

    backend = train_backend()
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    backend.post_processor = processors.ByteLevel(trim_offsets=True)
    return backend


@functools.cache
def tokenizers() -> tuple[Any, ...]:
    return tuple(_wrap(make()) for make in (train_backend, _wordpiece, _metaspace, _trimmed))


@st.composite
def texts_and_spans(draw: st.DrawFn) -> tuple[list[str], list[list[tuple[int, int]]]]:
    pieces = st.one_of(st.text(alphabet=ALPHABET, max_size=12), st.sampled_from(SPECIAL_TOKENS))
    texts = ["".join(draw(st.lists(pieces, max_size=6))) for _ in range(draw(st.integers(1, 4)))]
    spans = []
    for text in texts:
        cuts = sorted(set(draw(st.lists(st.integers(0, len(text) + 2), max_size=6))))
        spans.append([(a, b) for a, b in zip(cuts[::2], cuts[1::2], strict=False) if a < b])
    return texts, spans


@settings(max_examples=150, deadline=None)
@given(case=texts_and_spans(), which=st.integers(0, 3))
def test_span_lookup_equals_every_tokens_span(case: tuple[list[str], list[list[tuple[int, int]]]], which: int) -> None:
    texts, spans = case
    tokenizer = tokenizers()[which]
    expected_encoding = encode_texts(tokenizer, texts, add_special_tokens=False, spans=True)
    encoded, mask = encode_masked(tokenizer, texts, spans)
    assert np.array_equal(encoded.ids, expected_encoding.ids)
    assert np.array_equal(encoded.offsets, expected_encoding.offsets)
    assert mask.tolist() == spans_mask(expected_encoding, spans).tolist()


def test_a_character_split_over_tokens_is_trained_whole() -> None:
    tokenizer = tokenizers()[0]  # byte-level: "日" is three bytes, possibly three tokens with one span
    text = "ab日本cd"
    _, mask = encode_masked(tokenizer, [text], [[(2, 3)]])
    expected = spans_mask(encode_texts(tokenizer, [text], add_special_tokens=False, spans=True), [[(2, 3)]])
    assert mask.tolist() == expected.tolist() and mask.sum() >= 1


@pytest.mark.parametrize(
    ("text", "span"),
    [
        ("<|im_start|>d", (0, 13)),  # the empty token at 13 ends no span reaching 13: untrained
        ("<|im_start|>hi", (13, 14)),  # the empty token at 13, before the token holding 12, starts this span
    ],
)
def test_an_empty_token_out_of_order_is_masked_as_its_offsets_say(text: str, span: tuple[int, int]) -> None:
    tokenizer = tokenizers()[3]
    encoded = encode_texts(tokenizer, [text], add_special_tokens=False, spans=True)
    assert encoded.starts.tolist()[1:3] == [13, 12]  # the lone prefix space trimmed to (13, 13)
    _, mask = encode_masked(tokenizer, [text], [[span]])
    assert mask.tolist() == spans_mask(encoded, [[span]]).tolist()
