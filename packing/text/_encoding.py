"""Texts to token ids through a fast tokenizer, with loss masks from trained character spans looked up at
each span's two ends. Internal.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from packing.core._arrays import offsets_of, ranges
from packing.errors import SettingError
from packing.text._tokenizers import ByteTokenizer, Int8Array, Int64Array, tokenizer_name

# ---------------------------------------------------------------- tokenizing


@dataclass(frozen=True)
class Encoded:
    """Texts tokenized together: flat ids, each token's character span, and per-text offsets into the ids."""

    ids: Int64Array
    starts: Int64Array
    ends: Int64Array
    offsets: Int64Array


def _flat(lists: Sequence[Sequence[int]]) -> tuple[Int64Array, Int64Array]:
    """Lists of ints as one int64 array and offsets. O(total)."""
    offsets = offsets_of([len(item) for item in lists])
    flat = np.fromiter(itertools.chain.from_iterable(lists), dtype=np.int64, count=int(offsets[-1]))
    return flat, offsets


def encode_texts(tokenizer: Any, texts: Sequence[str], *, add_special_tokens: bool, spans: bool = False) -> Encoded:
    """Tokenize many texts in one batch call (a fast tokenizer does it in Rust); ``spans`` also returns
    each token's character span (``starts``/``ends`` are empty otherwise). O(characters).

    >>> enc = encode_texts(ByteTokenizer(), ["ab", "c"], add_special_tokens=True, spans=True)
    >>> enc.ids.tolist(), enc.offsets.tolist(), enc.starts.tolist()
    ([97, 98, 99], [0, 2, 3], [0, 1, 0])
    """
    empty = np.zeros(0, dtype=np.int64)
    if isinstance(tokenizer, ByteTokenizer):
        parts = [tokenizer.encode_with_offsets(text) for text in texts]
        offsets = offsets_of([len(part[0]) for part in parts])
        if not parts:
            return Encoded(empty, empty, empty, offsets)
        ids, starts, ends = (np.concatenate([part[index] for part in parts]) for index in range(3))
        return Encoded(ids, starts if spans else empty, ends if spans else empty, offsets)
    if spans and not getattr(tokenizer, "is_fast", False):
        raise SettingError(
            "tokenizer", "a fast tokenizer (character offsets) for this chat template", tokenizer_name(tokenizer)
        )
    if not texts:
        return Encoded(empty, empty, empty, np.zeros(1, dtype=np.int64))
    backend = _plain_backend(tokenizer)
    if backend is not None:
        return _encode_by_backend(backend, texts, add_special_tokens, spans)
    batch = tokenizer(
        list(texts),
        add_special_tokens=add_special_tokens,
        return_attention_mask=False,
        return_token_type_ids=False,
        return_offsets_mapping=spans,
        verbose=False,
    )
    ids, offsets = _flat(batch["input_ids"])
    if not spans:
        return Encoded(ids, empty, empty, offsets)
    pairs = np.fromiter(
        itertools.chain.from_iterable(itertools.chain.from_iterable(batch["offset_mapping"])),
        dtype=np.int64,
        count=2 * len(ids),
    ).reshape(-1, 2)
    return Encoded(ids, pairs[:, 0].copy(), pairs[:, 1].copy(), offsets)


def _plain_backend(tokenizer: Any) -> Any:
    """The Rust tokenizer behind a fast ``tokenizer`` when calling it directly gives what ``tokenizer(texts,
    add_special_tokens=...)`` gives (no truncation or padding set on it, special tokens split as the wrapper
    splits them), else None. O(1)."""
    backend: Any = getattr(tokenizer, "_tokenizer", None)
    if not getattr(tokenizer, "is_fast", False) or not hasattr(backend, "encode_batch"):
        return None
    try:
        plain = backend.truncation is None and backend.padding is None
        same_split = bool(backend.encode_special_tokens) == bool(getattr(tokenizer, "split_special_tokens", False))
    except AttributeError:  # pragma: no cover - an older tokenizers without these properties
        return None
    return backend if plain and same_split else None


def _encode_by_backend(backend: Any, texts: Sequence[str], add_special_tokens: bool, spans: bool) -> Encoded:
    """:func:`encode_texts` through the Rust tokenizer itself: one batch call, ids and spans read from its
    encodings straight into arrays (no per-token Python lists of the wrapper's). O(characters)."""
    empty = np.zeros(0, dtype=np.int64)
    texts = texts if isinstance(texts, list) else list(texts)
    fast = getattr(backend, "encode_batch_fast", None)  # no character offsets: cheaper when they are not needed
    encodings = (backend.encode_batch if spans or fast is None else fast)(texts, add_special_tokens=add_special_tokens)
    ids, offsets = _flat([encoding.ids for encoding in encodings])
    if not spans:
        return Encoded(ids, empty, empty, offsets)
    pairs = itertools.chain.from_iterable(encoding.offsets for encoding in encodings)
    flat = np.fromiter(itertools.chain.from_iterable(pairs), dtype=np.int64, count=2 * len(ids)).reshape(-1, 2)
    return Encoded(ids, flat[:, 0].copy(), flat[:, 1].copy(), offsets)


def encode_masked(
    tokenizer: Any, texts: Sequence[str], spans: Sequence[Sequence[tuple[int, int]]]
) -> tuple[Encoded, Int8Array]:
    """Tokenize ``texts`` (one batch call, no special tokens added) and mark the tokens whose characters
    overlap one of their text's ``spans`` (sorted, disjoint): :func:`encode_texts` then :func:`spans_mask`,
    with the same result. Through the Rust tokenizer itself, only the tokens at each span's two ends are
    looked up (:func:`_span_tokens`) instead of reading every token's character span into Python; a text
    where that lookup cannot be trusted is masked from its full spans. O(characters + spans).

    >>> encoded, mask = encode_masked(ByteTokenizer(), ["abcd", "xy"], [[(1, 3)], [(1, 2)]])
    >>> encoded.ids.tolist(), mask.tolist()
    ([97, 98, 99, 100, 120, 121], [0, 1, 1, 0, 0, 1])
    """
    backend = _plain_backend(tokenizer)
    if backend is None or not texts:
        encoded = encode_texts(tokenizer, texts, add_special_tokens=False, spans=True)
        return encoded, spans_mask(encoded, spans)
    encodings = backend.encode_batch(texts if isinstance(texts, list) else list(texts), add_special_tokens=False)
    ids, offsets = _flat([encoding.ids for encoding in encodings])
    mask = np.zeros(len(ids), dtype=np.int8)
    for encoding, text_spans, base, count in zip(
        encodings, spans, offsets[:-1].tolist(), np.diff(offsets).tolist(), strict=True
    ):
        ranges = [_span_tokens(encoding, a, b, count) for a, b in text_spans]
        if None in ranges:  # a span end no token holds, or an odd token there: every token's span decides
            mask[base : base + count] = _offsets_mask(encoding, text_spans)
            continue
        for first, stop in ranges:  # type: ignore[misc]
            mask[base + first : base + stop] = 1
    empty = np.zeros(0, dtype=np.int64)
    return Encoded(ids, empty, empty, offsets), mask


def _span_tokens(encoding: Any, a: int, b: int, count: int) -> tuple[int, int] | None:
    """The tokens ``[first, stop)`` of one Rust ``encoding`` whose characters overlap ``[a, b)`` as
    :func:`spans_mask` decides it (a token spans at least one character), found from the tokens holding
    characters ``a`` and ``b - 1`` and their neighbours; None when that is not certain (a character no
    token holds, an empty or out-of-order token at an end). Token starts are taken as non-decreasing but
    for the empty token trimmed offsets leave after a leading space (``trim_offsets``), just before the
    tokens sharing its last character: the tokens ending at ``a`` or later before ``first`` and the token
    before ``last`` are checked for it. O(tokens) in Rust, a few calls from Python."""
    first: int | None = encoding.char_to_token(a) if a < b else None
    last: int | None = encoding.char_to_token(b - 1) if first is not None else None
    if first is None or last is None or last < first:
        return None
    before = first - 1
    while before >= 0:  # the tokens sharing the character before a, and an empty token left before them
        start, end = encoding.token_to_chars(before) or (a + 1, a + 1)
        if end < a:
            break
        if max(end, start + 1) > a:
            return None
        before -= 1
    if last > first and (encoding.token_to_chars(last - 1) or (b, b))[0] >= b:  # an empty token at b
        return None
    stop = last + 1
    while stop < count:  # a character split over several tokens: each of them overlaps
        after = encoding.token_to_chars(stop)
        if after is None or after[1] < after[0]:
            return None
        if after[0] >= b:
            break
        stop += 1
    return first, stop


def _offsets_mask(encoding: Any, text_spans: Sequence[tuple[int, int]]) -> Int8Array:
    """:func:`spans_mask` of one Rust ``encoding`` from every token's character span. O(tokens)."""
    flat = np.fromiter(itertools.chain.from_iterable(encoding.offsets), dtype=np.int64).reshape(-1, 2)
    one = Encoded(np.zeros(len(flat), dtype=np.int64), flat[:, 0].copy(), flat[:, 1].copy(), np.array([0, len(flat)]))
    return spans_mask(one, [text_spans])


def eos_id(tokenizer: Any, sample: int, field: str) -> int:
    eos = getattr(tokenizer, "eos_token_id", None)
    if eos is None:
        raise SettingError(
            "tokenizer", f"a tokenizer with an end-of-text token (for {field!r} rows)", tokenizer_name(tokenizer)
        )
    return int(eos)


def with_eos(encoded: Encoded, eos: int) -> tuple[Int64Array, Int64Array]:
    """Append ``eos`` to every text that does not end with it: new flat ids and offsets. O(tokens)."""
    ids, offsets = encoded.ids, encoded.offsets
    lengths = np.diff(offsets)
    last = ids[np.maximum(offsets[1:] - 1, 0)] if len(ids) else np.zeros(len(lengths), dtype=np.int64)
    needs = (lengths == 0) | (last != eos)
    new_lengths = lengths + needs
    new_offsets = offsets_of(new_lengths)
    out = np.full(int(new_offsets[-1]), eos, dtype=np.int64)
    out[ranges(new_offsets[:-1], lengths)] = ids
    return out, new_offsets


def spans_mask(encoded: Encoded, spans: Sequence[Sequence[tuple[int, int]]]) -> Int8Array:
    """1 for every token whose character span overlaps one of its text's ``spans`` (sorted, disjoint), else 0.
    O(tokens × log spans), vectorized.

    >>> enc = encode_texts(ByteTokenizer(), ["abcd", "xy"], add_special_tokens=False, spans=True)
    >>> spans_mask(enc, [[(1, 3)], [(1, 2)]]).tolist()
    [0, 1, 1, 0, 0, 1]
    """
    counts = np.diff(encoded.offsets)
    # put every text on one line of characters: text t starts at base[t]
    width = np.zeros(len(counts), dtype=np.int64)
    if len(encoded.ends):
        last = np.maximum(encoded.offsets[1:] - 1, 0)
        width = np.where(counts > 0, encoded.ends[last], 0)
    for index, text_spans in enumerate(spans):
        if text_spans:
            width[index] = max(int(width[index]), max(end for _, end in text_spans))
    base = offsets_of(width + 1)[:-1]
    flat_spans = [(int(base[t]) + a, int(base[t]) + b) for t, text_spans in enumerate(spans) for a, b in text_spans]
    if not flat_spans or not len(encoded.ids):
        return np.zeros(len(encoded.ids), dtype=np.int8)
    span_starts = np.array([a for a, _ in flat_spans], dtype=np.int64)
    span_ends = np.array([b for _, b in flat_spans], dtype=np.int64)
    shift = np.repeat(base, counts)
    starts, ends = encoded.starts + shift, encoded.ends + shift
    # the first span ending after the token's start is the only one it can overlap
    candidate = np.searchsorted(span_ends, starts, side="right")
    inside = candidate < len(span_ends)
    overlap = np.zeros(len(starts), dtype=bool)
    overlap[inside] = span_starts[candidate[inside]] < np.maximum(ends[inside], starts[inside] + 1)
    return overlap.astype(np.int8)
