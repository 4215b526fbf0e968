"""Fingerprints: short digests that change when what they describe changes, for caches and "same recipe" checks.

A recipe's options are plain values, shown as they are (:func:`shown`); a long text (a chat template) and a
tokenizer object are shown by a digest of their content (:func:`tokenizer_fingerprint`), so two tokenizers with
the same name but another vocabulary, special tokens or chat template never share a cache. Duck-typed: nothing is
imported (a transformers tokenizer is read through ``backend_tokenizer.to_str()`` or ``get_vocab()``).

>>> shown(("user", "assistant")), shown(8), shown("{% for m in messages %}" * 4)[:18]
('user,assistant', '8', '<text of 92 chars,')

Internal: used by ``packing.recipe`` (``Recipe.describe``) and ``packing.text.prepare`` (``Prepared.fingerprint``).
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

_SHORT = 60
"""Texts up to this many characters (on one line) are shown whole; longer ones by their digest."""

_ATTRIBUTES = (
    "name_or_path",
    "chat_template",
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
    "unk_token_id",
    "add_bos_token",
    "add_eos_token",
    "special_tokens_map",
    "added_tokens_encoder",
    "vocab_size",
)
"""What a tokenizer object is fingerprinted by beside its vocabulary: what changes the ids, masks or padding."""


def digest(text: str, size: int = 8) -> str:
    """The first ``size`` hex digits of ``text``'s SHA-256. O(len(text)).

    >>> digest("abc")
    'ba7816bf'
    """
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:size]


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """A digest of what a tokenizer object encodes with: its class, its vocabulary and rules (a fast tokenizer's
    ``backend_tokenizer.to_str()``, else ``get_vocab()``) and the attributes that change ids, masks and padding
    (special tokens and their ids, chat template, BOS/EOS flags). Two objects loaded from the same files agree; a
    changed chat template or special token changes it. O(vocabulary).

    >>> class Tokenizer:
    ...     chat_template = "{{ messages }}"
    >>> first, second = Tokenizer(), Tokenizer()
    >>> second.chat_template = "{{ other }}"
    >>> tokenizer_fingerprint(first) == tokenizer_fingerprint(Tokenizer()), tokenizer_fingerprint(first) == tokenizer_fingerprint(second)
    (True, False)
    """
    parts = [type(tokenizer).__module__, type(tokenizer).__qualname__]
    backend = getattr(tokenizer, "backend_tokenizer", None)
    to_str = getattr(backend, "to_str", None)
    if callable(to_str):
        parts.append(str(to_str()))
    elif callable(getattr(tokenizer, "get_vocab", None)):
        parts.append(repr(sorted(tokenizer.get_vocab().items())))
    for name in _ATTRIBUTES:
        try:
            value = getattr(tokenizer, name, None)
        except Exception:  # a property that cannot answer (no such token): the same for equal tokenizers
            value = None
        if isinstance(value, dict):
            value = sorted((str(k), str(v)) for k, v in value.items())
        parts.append(f"{name}={value!r}")
    return digest("\n".join(parts), 16)


def shown(value: Any) -> str:
    """An option's value as one line without ``", "`` (``Recipe.describe`` joins options with it): numbers and short
    texts as they are, a tuple of texts joined by commas, a long or multi-line text by its length and digest, any
    other object (a tokenizer) by its class, name and :func:`tokenizer_fingerprint`. O(size of the value).

    >>> shown(("assistant",)), shown(None), shown(True), shown(("a,b",)), shown(("a", "b"))
    ('assistant', 'None', 'True', '["a,b"]', 'a,b')
    """
    if isinstance(value, (tuple, list)):
        items = [shown(item) for item in value]
        if any("," in item or not item for item in items):  # joined by commas, they would read as other items
            return json.dumps(list(items), ensure_ascii=False).replace(", ", ",")
        return ",".join(items)
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if isinstance(value, str):
        if len(value) <= _SHORT and "\n" not in value and ", " not in value:
            return value
        return f"<text of {len(value)} chars, sha256 {digest(value)}>"
    if value is None or isinstance(value, (bool, int, float)):
        return str(value)
    name = str(getattr(value, "name_or_path", "") or "").replace(", ", ",")[:_SHORT]
    label = " ".join(part for part in (type(value).__name__, name) if part)
    return f"<{label} {tokenizer_fingerprint(value)[:8]}>"
