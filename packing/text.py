"""Text rows through a tokenizer: plain text, prompt/completion pairs and chats, with exact loss masks.

Four row forms are text (everything else is left to the token reader):

- ``{"text": str}``: the tokenizer's tokens with its special tokens, then EOS if it did not add
  one; loss on every token.
- ``{"prompt": str, "completion": str}``: prompt tokens as the tokenizer makes them (with its
  special tokens), completion tokens after them (without), EOS at the end; loss on the completion
  and the EOS.
- ``{"messages": [{"role": ..., "content": ...}, ...]}``: the chat template renders the
  conversation; loss on each assistant turn: the tokens the template adds for that turn after its
  generation prompt (content and end-of-turn tokens).
- ``{"prompt": [messages], "completion": [messages]}`` (conversational prompt/completion): the
  prompt rendered with the generation prompt, the whole conversation after it; loss on what the
  completion adds.

``completion_only_loss=False`` trains on every token of every form. A row with a non-null
``input_ids`` is a token row, whatever text it also carries.

Chat masks come from the template's generation markers (``{% generation %}``, through
``return_assistant_tokens_mask``) when it has them; otherwise from rendering prefix by prefix: the
assistant turn ``k`` covers the characters between the rendering of the first ``k`` messages with
the generation prompt and the rendering of the first ``k + 1`` messages. A template whose prefix
renderings are not prefixes of the whole conversation is refused. A token is trained when its
characters overlap a trained span (the rule ``return_assistant_tokens_mask`` follows). Those
boundaries are found in one rendering of the whole chat (plus one probe per role), so a chat costs
O(characters), not O(turns) renderings; only chats that cannot be laid out that way (tool calls,
content the template changes) are rendered prefix by prefix, up to ``MAX_PREFIX_TURNS`` messages.
Every rendering is stopped past ``RENDER_FACTOR`` × the messages' characters + ``RENDER_SLACK``.

``"bytes"`` is a built-in UTF-8 byte tokenizer that needs no download (see :class:`ByteTokenizer`).

>>> tokenizer = load_tokenizer("bytes")
>>> tokens, mask, offsets = encode_rows([{"prompt": "Hi", "completion": "yo"}], tokenizer)
>>> tokens.tolist(), mask.tolist(), offsets.tolist()
([72, 105, 121, 111, 256], [0, 0, 1, 1, 1], [0, 5])
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
import json
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt

from packing.errors import SampleError, SettingError

if TYPE_CHECKING:  # pragma: no cover - typing only; imported where used, so io and reader may import this module
    from packing.reader import Samples

Int64Array = npt.NDArray[np.int64]
Int8Array = npt.NDArray[np.int8]
TextForm = Literal["text", "prompt_completion", "messages", "conversational"]
Message = Mapping[str, Any]

TEXT_FORMS: dict[str, str] = {
    "text": "{'text': str}",
    "prompt_completion": "{'prompt': str, 'completion': str}",
    "messages": "{'messages': [{'role': str, 'content': str}, ...]}",
    "conversational": "{'prompt': [messages], 'completion': [messages]}",
}
"""The text row forms, each with its shape."""

_GENERATION_MARKER = re.compile(r"\{%-?\s*generation\s*-?%\}")
_CHUNK_ROWS = 2048


# ---------------------------------------------------------------- the byte tokenizer


class ByteTokenizer:
    """A UTF-8 byte tokenizer with special tokens and a chat template of its own; no download, no dependency.

    Ids: byte ``b`` is id ``b`` (0-255, not shifted); then the special tokens ``<|endoftext|>`` = 256
    (EOS), ``<|pad|>`` = 257, ``<|im_start|>`` = 258, ``<|im_end|>`` = 259 (vocabulary of 260). Text that
    spells a special token is encoded as that token, as Hugging Face tokenizers do. No BOS.

    Chat template (ChatML): each message is ``<|im_start|>{role}\\n{content}<|im_end|>\\n``; the
    generation prompt is ``<|im_start|>assistant\\n``. An assistant turn's trained tokens are its content,
    ``<|im_end|>`` and the newline. A message's ``tool_calls`` (if any) follow its content as JSON.
    O(characters) for every method.

    >>> tok = ByteTokenizer()
    >>> tok.encode("né")
    [110, 195, 169]
    >>> tok.decode([110, 195, 169, 256]), tok.decode([110, 256], skip_special_tokens=True)
    ('né<|endoftext|>', 'n')
    >>> tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    '<|im_start|>user\\nhi<|im_end|>\\n<|im_start|>assistant\\n'
    """

    SPECIAL_TOKENS = ("<|endoftext|>", "<|pad|>", "<|im_start|>", "<|im_end|>")
    name_or_path = "bytes"
    eos_token = "<|endoftext|>"
    pad_token = "<|pad|>"
    bos_token_id: int | None = None
    eos_token_id: int | None = 256
    pad_token_id: int | None = 257
    vocab_size = 260
    chat_template = None
    is_fast = True

    def __init__(self) -> None:
        self._special = {token: 256 + index for index, token in enumerate(self.SPECIAL_TOKENS)}
        self._split = re.compile("(" + "|".join(map(re.escape, self.SPECIAL_TOKENS)) + ")")
        self.all_special_ids = list(self._special.values())

    def __len__(self) -> int:
        return self.vocab_size

    def __repr__(self) -> str:
        return "ByteTokenizer()"

    def encode_with_offsets(self, text: str) -> tuple[Int64Array, Int64Array, Int64Array]:
        """Ids and, per id, the character span ``[start, end)`` it comes from. O(characters).

        >>> ids, starts, ends = ByteTokenizer().encode_with_offsets("é<|im_end|>")
        >>> ids.tolist(), starts.tolist(), ends.tolist()
        ([195, 169, 259], [0, 0, 1], [1, 1, 11])
        """
        if not isinstance(text, str):
            raise SettingError("text", "a string", text)
        ids: list[Int64Array] = []
        starts: list[Int64Array] = []
        ends: list[Int64Array] = []
        position = 0
        for part in self._split.split(text):
            if not part:
                continue
            if part in self._special:
                ids.append(np.array([self._special[part]], dtype=np.int64))
                starts.append(np.array([position], dtype=np.int64))
                ends.append(np.array([position + len(part)], dtype=np.int64))
            else:
                raw = np.frombuffer(part.encode("utf-8", "surrogatepass"), dtype=np.uint8)
                char = np.cumsum((raw & 0xC0) != 0x80, dtype=np.int64) - 1 + position
                ids.append(raw.astype(np.int64))
                starts.append(char)
                ends.append(char + 1)
            position += len(part)
        if not ids:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty, empty
        return np.concatenate(ids), np.concatenate(starts), np.concatenate(ends)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of ``text`` (``add_special_tokens`` adds nothing: this tokenizer has no BOS)."""
        ids: list[int] = self.encode_with_offsets(text)[0].tolist()
        return ids

    def decode(self, ids: Sequence[int] | npt.NDArray[np.integer[Any]], skip_special_tokens: bool = False) -> str:
        """Text of ``ids``; bytes that are not valid UTF-8 become U+FFFD. O(len(ids)).

        >>> ByteTokenizer().decode([230, 151, 165, 258])
        '日<|im_start|>'
        """
        values = np.asarray(ids, dtype=np.int64).reshape(-1)
        bad = np.flatnonzero((values < 0) | (values >= self.vocab_size))
        if bad.size:
            raise SettingError("ids", f"token ids in 0..{self.vocab_size - 1}", int(values[bad[0]]))
        out: list[str] = []
        special = np.flatnonzero(values >= 256)
        start = 0
        for index in [*special.tolist(), len(values)]:
            out.append(values[start:index].astype(np.uint8).tobytes().decode("utf-8", "replace"))
            if index < len(values) and not skip_special_tokens:
                out.append(self.SPECIAL_TOKENS[int(values[index]) - 256])
            start = index + 1
        return "".join(out)

    def convert_ids_to_tokens(self, ids: Sequence[int]) -> list[str]:
        """One name per id: the character of an ASCII byte, ``<0xNN>`` for other bytes, special tokens by name.

        >>> ByteTokenizer().convert_ids_to_tokens([104, 195, 256])
        ['h', '<0xC3>', '<|endoftext|>']
        """
        names = []
        for value in ids:
            value = int(value)
            if 256 <= value < self.vocab_size:
                names.append(self.SPECIAL_TOKENS[value - 256])
            elif 32 <= value < 127:
                names.append(chr(value))
            elif 0 <= value < 256:
                names.append(f"<0x{value:02X}>")
            else:
                raise SettingError("ids", f"token ids in 0..{self.vocab_size - 1}", value)
        return names

    def apply_chat_template(
        self,
        conversation: Sequence[Message],
        tokenize: bool = True,
        add_generation_prompt: bool = False,
        **kwargs: Any,
    ) -> str | list[int]:
        """Render a conversation with the ChatML template above: text, or its ids when ``tokenize``."""
        parts = []
        for position, message in enumerate(conversation):
            role, content = message.get("role"), message.get("content")
            if content is None and message.get("tool_calls") is not None:
                content = ""
            if not isinstance(role, str) or not isinstance(content, str):
                raise ValueError(f"message {position}: expected {{'role': str, 'content': str}}")
            if message.get("tool_calls") is not None:
                content += json.dumps(message["tool_calls"], ensure_ascii=False)
            parts.append(f"<|im_start|>{role}\n{content}<|im_end|>\n")
        if add_generation_prompt:
            parts.append("<|im_start|>assistant\n")
        text = "".join(parts)
        return self.encode(text) if tokenize else text


# ---------------------------------------------------------------- loading


def _is_tokenizer_object(value: object) -> bool:
    return callable(getattr(value, "decode", None)) and (callable(getattr(value, "encode", None)) or callable(value))


def load_tokenizer(spec: Any, *, local_files_only: bool = False) -> Any:
    """A tokenizer from ``spec``: a tokenizer object (returned as is), ``"bytes"``, a folder, a
    ``tokenizer.json`` file or a Hugging Face hub name.

    Folders, files and names are loaded with ``transformers`` (imported here, an optional dependency).
    A hub name is looked up in the local cache first, then on the hub, unless ``local_files_only=True`` or
    the ``HF_HUB_OFFLINE`` environment variable is set (then it never goes online); a hub that does not
    answer a 2 s probe fails at once instead of after ``transformers``' retries.
    Every failure is a :class:`SettingError` that says what to do. O(1) plus the loading.

    >>> load_tokenizer("bytes")
    ByteTokenizer()
    >>> load_tokenizer("./no/such/folder")
    Traceback (most recent call last):
    ...
    packing.errors.SettingError: tokenizer: expected 'bytes', a folder with tokenizer files, a tokenizer.json file or a hub name, got <'./no/such/folder' (no such folder or file)>
    """
    if isinstance(spec, ByteTokenizer) or (not isinstance(spec, (str, os.PathLike)) and _is_tokenizer_object(spec)):
        return spec
    expected = "'bytes', a folder with tokenizer files, a tokenizer.json file or a hub name"
    if not isinstance(spec, (str, os.PathLike)) or not os.fspath(spec).strip():
        raise SettingError("tokenizer", expected, spec)
    text = os.fspath(spec).strip()
    if text == "bytes":
        return ByteTokenizer()
    path = Path(text).expanduser()
    looks_like_path = path.is_absolute() or text.startswith((".", "~")) or text.count("/") > 1 or os.sep == "\\"
    if not path.exists() and looks_like_path:
        raise SettingError("tokenizer", expected, f"<{text!r} (no such folder or file)>")
    try:
        import transformers
    except ImportError:
        raise SettingError(
            "tokenizer", "'bytes', or transformers installed to load other tokenizers (pip install transformers)", text
        ) from None
    if path.exists():
        try:
            if path.is_file():
                fast: Any = transformers.PreTrainedTokenizerFast
                return fast(tokenizer_file=str(path))
            return transformers.AutoTokenizer.from_pretrained(str(path))
        except Exception as error:
            kind = "a file" if path.is_file() else "a folder"
            raise SettingError(
                "tokenizer", expected, f"<{text!r}: {kind} that cannot be loaded ({_reason(error)})>"
            ) from None
    try:
        return transformers.AutoTokenizer.from_pretrained(text, local_files_only=True)
    except Exception as error:
        cached_reason = _reason(error)
    if local_files_only or os.environ.get("HF_HUB_OFFLINE", "").lower() not in ("", "0", "false", "no"):
        raise SettingError("tokenizer", expected, f"<{text!r}: not a folder, and not in the local cache (offline)>")
    if not _hub_reachable():
        raise SettingError(
            "tokenizer", expected, f"<{text!r}: not a folder, not in the local cache, and the hub cannot be reached>"
        )
    try:
        return transformers.AutoTokenizer.from_pretrained(text)
    except Exception as error:
        online = _reason(error)
    if "connect" in online.lower() or "resolve" in online.lower():
        reason = "not a folder, not in the local cache, and the hub cannot be reached"
    else:
        reason = f"a hub name that cannot be loaded ({online or cached_reason})"
    raise SettingError("tokenizer", expected, f"<{text!r}: {reason}>")


def _hub_reachable(timeout: float = 2.0) -> bool:
    """Whether the Hugging Face hub answers at all (any HTTP status) within ``timeout`` seconds, through the
    hub client's own session (its proxies and endpoint). Without it a name missing from the cache takes
    ``transformers`` about 50 s of retries to fail when there is no network. The probe runs in a daemon
    thread so a resolver that hangs is bounded too. O(1).
    """
    import threading

    try:
        from huggingface_hub import constants, get_session
    except ImportError:  # pragma: no cover - transformers without the hub client: let it try
        return True
    answered: list[bool] = []

    def probe() -> None:
        try:
            get_session().head(constants.ENDPOINT, timeout=timeout)
            answered.append(True)
        except Exception:
            answered.append(False)

    thread = threading.Thread(target=probe, name="packing-hub-probe", daemon=True)
    thread.start()
    thread.join(timeout + 0.5)
    return bool(answered and answered[0])


def _reason(error: BaseException) -> str:
    """The first line of an error, cut to 100 characters, for a message."""
    text = str(error).strip()
    return text.splitlines()[0][:100] if text else type(error).__name__


def tokenizer_name(tokenizer: Any) -> str:
    """How messages name a tokenizer: its ``name_or_path`` or its class.

    >>> tokenizer_name(ByteTokenizer())
    'bytes'
    """
    name = getattr(tokenizer, "name_or_path", None)
    return str(name) if name else type(tokenizer).__name__


# ---------------------------------------------------------------- row forms


def _is_token_list(value: Any) -> bool:
    return isinstance(value, (list, tuple, np.ndarray)) and not _is_message_list(value)


def _is_message_list(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and len(value) > 0 and isinstance(value[0], Mapping)


def text_forms(row: Any) -> list[TextForm]:
    """The text forms a row has (more than one is an error for :func:`encode_rows`). O(1).

    >>> text_forms({"messages": [{"role": "user", "content": "hi"}]}), text_forms({"input_ids": [1]})
    (['messages'], [])
    """
    if not isinstance(row, Mapping) or row.get("input_ids") is not None:
        return []
    prompt, completion = row.get("prompt"), row.get("completion")
    if _is_token_list(prompt) and _is_token_list(completion):
        return []  # a token prompt/completion pair: other text columns are extra data
    forms: list[TextForm] = []
    if row.get("text") is not None:
        forms.append("text")
    if row.get("messages") is not None:
        forms.append("messages")
    prompt, completion = row.get("prompt"), row.get("completion")
    if isinstance(prompt, str) or isinstance(completion, str):
        forms.append("prompt_completion")
    elif _is_message_list(prompt) or _is_message_list(completion):
        forms.append("conversational")
    return forms


def is_text_row(row: Any) -> bool:
    """Whether a row is text (needs a tokenizer): any of the four forms, and no non-null ``input_ids``. O(1).

    >>> is_text_row({"text": "hello"}), is_text_row({"prompt": [1, 2], "completion": [3]}), is_text_row([1, 2])
    (True, False, False)
    """
    return bool(text_forms(row))


def _check_messages(value: Any, sample: int, field: str) -> list[Message]:
    """A list of messages, each a mapping with string 'role' and 'content'."""
    if not isinstance(value, (list, tuple)) or not value:
        raise SampleError(sample, field, None, "a non-empty list of messages {'role': str, 'content': str}", value)
    for position, message in enumerate(value):
        if not isinstance(message, Mapping):
            raise SampleError(sample, field, position, "a message {'role': str, 'content': str}", message)
        if not isinstance(message.get("role"), str):
            raise SampleError(
                sample, field, position, "a message with a string 'role'", message.get("role", "<missing>")
            )
        content = message.get("content")
        if not isinstance(content, str) and not (content is None and message.get("tool_calls") is not None):
            expected = "a message with a string 'content' (or none, with 'tool_calls')"
            raise SampleError(sample, field, position, expected, message.get("content", "<missing>"))
    return list(value)


@dataclass(frozen=True)
class _Row:
    """A checked text row: its form and its parts."""

    form: TextForm
    parts: tuple[Any, ...]


def _check_row(row: Any, sample: int) -> _Row:
    """Classify and check one text row; every problem names the sample and the field."""
    forms = text_forms(row)
    if not forms:
        raise SampleError(sample, None, None, "a text row (" + ", ".join(TEXT_FORMS.values()) + ")", row)
    if len(forms) > 1:
        first, second = ({"prompt_completion": "prompt", "conversational": "prompt"}.get(f, f) for f in forms[:2])
        raise SampleError(sample, second, None, f"one text form per row; the row also has {first!r}", "<both>")
    form = forms[0]
    if form in ("text", "messages") and (row.get("prompt") is not None or row.get("completion") is not None):
        raise SampleError(sample, "prompt", None, f"one form per row; the row also has {form!r}", "<both>")
    if form == "text":
        if not isinstance(row["text"], str):
            raise SampleError(sample, "text", None, "a string", row["text"])
        return _Row(form, (row["text"],))
    if form == "messages":
        return _Row(form, (_check_messages(row["messages"], sample, "messages"),))
    prompt, completion = row.get("prompt"), row.get("completion")
    if form == "prompt_completion":
        for field, value in (("prompt", prompt), ("completion", completion)):
            if not isinstance(value, str):
                other = "completion" if field == "prompt" else "prompt"
                raise SampleError(
                    sample, field, None, f"a string, like '{other}'", "<missing>" if value is None else value
                )
        return _Row(form, (prompt, completion))
    for field, value in (("prompt", prompt), ("completion", completion)):
        if value is None:
            raise SampleError(sample, field, None, "a list of messages, like the other field", "<missing>")
    return _Row(form, (_check_messages(prompt, sample, "prompt"), _check_messages(completion, sample, "completion")))


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
    offsets = np.zeros(len(lists) + 1, dtype=np.int64)
    np.cumsum([len(item) for item in lists], out=offsets[1:])
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
        offsets = np.zeros(len(texts) + 1, dtype=np.int64)
        np.cumsum([len(part[0]) for part in parts], out=offsets[1:])
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


def _eos(tokenizer: Any, sample: int, field: str) -> int:
    eos = getattr(tokenizer, "eos_token_id", None)
    if eos is None:
        raise SettingError(
            "tokenizer", f"a tokenizer with an end-of-text token (for {field!r} rows)", tokenizer_name(tokenizer)
        )
    return int(eos)


def _with_eos(encoded: Encoded, eos: int) -> tuple[Int64Array, Int64Array]:
    """Append ``eos`` to every text that does not end with it: new flat ids and offsets. O(tokens)."""
    ids, offsets = encoded.ids, encoded.offsets
    lengths = np.diff(offsets)
    last = ids[np.maximum(offsets[1:] - 1, 0)] if len(ids) else np.zeros(len(lengths), dtype=np.int64)
    needs = (lengths == 0) | (last != eos)
    new_lengths = lengths + needs
    new_offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(new_lengths, out=new_offsets[1:])
    out = np.full(int(new_offsets[-1]), eos, dtype=np.int64)
    positions = np.arange(len(ids), dtype=np.int64) + np.repeat(new_offsets[:-1] - offsets[:-1], lengths)
    out[positions] = ids
    return out, new_offsets


RENDER_FACTOR = 16
RENDER_SLACK = 1 << 20
"""A chat template's rendering may hold at most ``RENDER_FACTOR`` × the characters of the messages it
renders + ``RENDER_SLACK`` characters (a template of nested loops is stopped there, not run for minutes)."""

_RENDER_CAP: contextvars.ContextVar[int | None] = contextvars.ContextVar("render_cap", default=None)


class _RenderTooLarge(Exception):
    """A rendering went past the cap of its call (see :func:`_bounded_rendering`)."""


class _BoundedTemplate:
    """A compiled Jinja template (transformers' sandboxed one) whose output is produced block by block
    (``Template.generate``) and stopped past the cap set for the current call; without a cap it is the
    template itself."""

    def __init__(self, template: Any) -> None:
        self._template = template

    def __getattr__(self, name: str) -> Any:
        return getattr(self._template, name)

    def generate(self, *args: Any, **kwargs: Any) -> Iterator[str]:
        cap = _RENDER_CAP.get()
        if cap is None:
            yield from self._template.generate(*args, **kwargs)
            return
        size = 0
        for block in self._template.generate(*args, **kwargs):
            size += len(block)
            if size > cap:
                raise _RenderTooLarge(cap)
            yield block

    def render(self, *args: Any, **kwargs: Any) -> str:
        if _RENDER_CAP.get() is None:
            return str(self._template.render(*args, **kwargs))
        return "".join(self.generate(*args, **kwargs))


def _install_render_bound() -> None:
    """Make transformers compile chat templates as :class:`_BoundedTemplate` (once; a no-op without
    transformers or with a version that compiles elsewhere)."""
    try:
        from transformers.utils import chat_template_utils
    except ImportError:
        return
    original = getattr(chat_template_utils, "_compile_jinja_template", None)
    if original is None or getattr(original, "bounded_by_packing", False):
        return

    def compile_bounded(chat_template: Any) -> _BoundedTemplate:
        return _BoundedTemplate(original(chat_template))

    compile_bounded.bounded_by_packing = True  # type: ignore[attr-defined]
    chat_template_utils._compile_jinja_template = compile_bounded  # type: ignore[assignment]


def _text_size(value: Any) -> int:
    """Characters of the strings in messages (contents, roles, tool calls), for the rendering cap. O(size)."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, Mapping):
        return sum(_text_size(key) + _text_size(item) for key, item in value.items())
    if isinstance(value, (list, tuple)):
        return sum(_text_size(item) for item in value)
    return 8


@contextlib.contextmanager
def _bounded_rendering(tokenizer: Any, messages: Any) -> Iterator[int]:
    """Cap the chat template renderings done inside at ``RENDER_FACTOR`` × the messages' characters +
    ``RENDER_SLACK`` (this thread or task only); yields the cap."""
    cap = RENDER_FACTOR * _text_size(messages) + RENDER_SLACK
    if not isinstance(tokenizer, ByteTokenizer):
        _install_render_bound()
    token = _RENDER_CAP.set(cap)
    try:
        yield cap
    finally:
        _RENDER_CAP.reset(token)


def _too_large(sample: int, field: str, cap: int) -> SampleError:
    return SampleError(
        sample, field, None, f"a chat template rendering of at most {cap:,} characters", "<a longer rendering>"
    )


def _render(tokenizer: Any, messages: Sequence[Message], generation_prompt: bool, sample: int, field: str) -> str:
    """The chat template's text for ``messages``; a template error names the sample. The rendering is
    stopped past ``RENDER_FACTOR`` × the messages' characters + ``RENDER_SLACK`` (a :class:`SampleError`)."""
    if not isinstance(tokenizer, ByteTokenizer) and (
        not callable(getattr(tokenizer, "apply_chat_template", None)) or not getattr(tokenizer, "chat_template", None)
    ):
        raise SettingError("tokenizer", "a tokenizer with a chat template (for chat rows)", tokenizer_name(tokenizer))
    with _bounded_rendering(tokenizer, messages) as cap:
        try:
            text = tokenizer.apply_chat_template(
                list(messages), tokenize=False, add_generation_prompt=generation_prompt
            )
        except SettingError:
            raise
        except _RenderTooLarge:
            raise _too_large(sample, field, cap) from None
        except Exception as error:
            message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise SampleError(
                sample, field, None, "a conversation the chat template can render", f"<{message[:60]}>"
            ) from None
    if not isinstance(text, str):
        raise SettingError("tokenizer", "apply_chat_template(tokenize=False) to return a string", text)
    return text


def _prefix_error(sample: int, field: str, turn: int) -> SampleError:
    return SampleError(
        sample,
        field,
        turn,
        "a chat template whose rendering of the first turns is a prefix of the whole conversation "
        "(add {% generation %} markers to the template, or fix it)",
        "<a template that renders earlier turns differently>",
    )


def _opening(tokenizer: Any, whole: str, sample: int) -> str:
    """What precedes an assistant turn that opens a conversation: the template's rendering of no messages
    with the generation prompt, or (when the template refuses an empty conversation) the rendering up to
    the end of the first generation prompt in it, as a one-message probe renders it."""
    try:
        return _render(tokenizer, [], True, sample, "messages")
    except SampleError:
        pass
    probe = [{"role": "user", "content": "x"}]
    without = _render(tokenizer, probe, False, sample, "messages")
    with_prompt = _render(tokenizer, probe, True, sample, "messages")
    prompt = with_prompt[len(without) :] if with_prompt.startswith(without) else ""
    found = whole.find(prompt) if prompt else -1
    if found < 0:
        raise _prefix_error(sample, "messages", 0)
    return whole[: found + len(prompt)]


MAX_PREFIX_TURNS = 1024
"""Most messages in a chat whose turns cannot be found in one rendering (the fallback renders every
prefix: O(turns × rendering), quadratic in the chat's length)."""

_MAX_ROLES = 16
"""Most distinct roles a chat may have for the one-rendering path (each costs one probe rendering)."""


@dataclass(frozen=True)
class _Layout:
    """A chat rendered once: its text, where each message starts (``bounds[i]``; ``bounds[-1]`` is the
    end), and the generation prompt the template adds after a message, by that message's role."""

    whole: str
    bounds: list[int]
    prompts: dict[str, str]


def _layout(tokenizer: Any, messages: Sequence[Message], sample: int) -> _Layout | None:
    """Where each message of a chat starts in its one rendering, or None when that cannot be made out.

    Message 0 ends where the rendering of it alone ends. Every later message is ``header + content +
    footer``, the header and footer of its role learned from the rendering of the prefix that ends
    with the role's first message after message 0 (one probe per role) and then checked at every
    message of that role: the whole rendering must be exactly these pieces, end to end, or the chat
    goes to the prefix-by-prefix path. A message without string content (tool calls), content the
    template changes, or a template whose prefixes are not prefixes also go there. O(distinct roles
    renderings + characters), against O(turns) renderings prefix by prefix.
    """
    if len({str(m.get("role")) for m in messages}) > _MAX_ROLES:
        return None
    if any(not isinstance(m.get("content"), str) or m.get("tool_calls") is not None for m in messages):
        return None
    whole = _render(tokenizer, messages, False, sample, "messages")
    first = whole if len(messages) == 1 else _render(tokenizer, messages[:1], False, sample, "messages")
    if not whole.startswith(first):
        return None
    bounds = [0, len(first)]
    pieces: dict[str, tuple[str, str]] = {}  # role -> (header, footer)
    for index in range(1, len(messages)):
        role, content, start = messages[index]["role"], messages[index]["content"], bounds[-1]
        if role not in pieces:
            end = len(whole)
            if index < len(messages) - 1:
                prefix = _render(tokenizer, messages[: index + 1], False, sample, "messages")
                if not whole.startswith(prefix):
                    return None
                end = len(prefix)
            found = whole.find(content, start, end)
            if found < 0:
                return None
            pieces[role] = (whole[start:found], whole[found + len(content) : end])
        header, footer = pieces[role]
        middle = start + len(header)
        if not (whole.startswith(header, start) and whole.startswith(content, middle)):
            return None
        if not whole.startswith(footer, middle + len(content)):
            return None
        bounds.append(middle + len(content) + len(footer))
    if bounds[-1] != len(whole):
        return None
    return _Layout(whole, bounds, {})


def _generation_prompts(tokenizer: Any, messages: Sequence[Message], layout: _Layout, sample: int) -> bool:
    """Learn what the generation prompt adds after a message, for each role that precedes an assistant
    turn (one rendering per role), and check it at every assistant turn. False when the rendering with
    the generation prompt does not continue into the turn as it does in the whole."""
    whole, bounds = layout.whole, layout.bounds
    for turn in range(1, len(messages)):
        if messages[turn].get("role") != "assistant":
            continue
        before = str(messages[turn - 1]["role"])
        if before not in layout.prompts:
            rendered = _render(tokenizer, messages[:turn], True, sample, "messages")
            if not (whole.startswith(rendered) and bounds[turn] <= len(rendered) <= bounds[turn + 1]):
                return False
            layout.prompts[before] = rendered[bounds[turn] :]
        prompt = layout.prompts[before]
        if not whole.startswith(prompt, bounds[turn]) or bounds[turn] + len(prompt) > bounds[turn + 1]:
            return False
    return True


def _too_many_turns(sample: int, messages: Sequence[Message]) -> SampleError:
    return SampleError(
        sample,
        "messages",
        None,
        f"at most {MAX_PREFIX_TURNS:,} messages for a chat whose turns the template does not render one "
        "after the other (tool calls, changed content)",
        f"<{len(messages):,} messages>",
    )


def chat_spans(tokenizer: Any, messages: Sequence[Message], sample: int = 0) -> tuple[str, list[tuple[int, int]]]:
    """The rendered conversation and the character spans ``[start, end)`` of its assistant turns' trained
    parts: from the end of the generation prompt after the messages before the turn to the start of the
    next message. Rendered once (plus one probe per role, see :func:`_layout`): O(characters + roles
    renderings); a chat that cannot be laid out from one rendering is rendered prefix by prefix,
    O(turns × rendering), and refused over ``MAX_PREFIX_TURNS`` messages.

    >>> chat_spans(ByteTokenizer(), [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}])
    ('<|im_start|>user\\na<|im_end|>\\n<|im_start|>assistant\\nb<|im_end|>\\n', [(51, 63)])
    """
    layout = _layout(tokenizer, messages, sample)
    if layout is not None and _generation_prompts(tokenizer, messages, layout, sample):
        whole, bounds = layout.whole, layout.bounds
        spans = []
        for turn, message in enumerate(messages):
            if message.get("role") != "assistant":
                continue
            if turn:
                start = bounds[turn] + len(layout.prompts[str(messages[turn - 1]["role"])])
            else:
                opening = _opening(tokenizer, whole, sample)
                start = len(opening)
                if not whole.startswith(opening) or start > bounds[1]:
                    raise _prefix_error(sample, "messages", turn)
            if bounds[turn + 1] > start:
                spans.append((start, bounds[turn + 1]))
        return whole, spans
    return _prefix_spans(tokenizer, messages, sample)


def _prefix_spans(tokenizer: Any, messages: Sequence[Message], sample: int) -> tuple[str, list[tuple[int, int]]]:
    """:func:`chat_spans` prefix by prefix: O(turns × rendering), so refused over ``MAX_PREFIX_TURNS``."""
    if len(messages) > MAX_PREFIX_TURNS:
        raise _too_many_turns(sample, messages)
    whole = _render(tokenizer, messages, False, sample, "messages")
    spans = []
    for turn, message in enumerate(messages):
        if message.get("role") != "assistant":
            continue
        before = (
            _render(tokenizer, messages[:turn], True, sample, "messages")
            if turn
            else _opening(tokenizer, whole, sample)
        )
        through = (
            whole if turn == len(messages) - 1 else _render(tokenizer, messages[: turn + 1], False, sample, "messages")
        )
        if not (through.startswith(before) and whole.startswith(through)):
            raise _prefix_error(sample, "messages", turn)
        if len(through) > len(before):
            spans.append((len(before), len(through)))
    return whole, spans


def turn_bounds(tokenizer: Any, messages: Sequence[Message], sample: int = 0) -> tuple[str, list[int]]:
    """The rendered conversation and where each message starts in it (rendering of the messages before it),
    for showing roles. Rendered once as :func:`chat_spans` does, else prefix by prefix (refused over
    ``MAX_PREFIX_TURNS`` messages); refuses a template whose prefixes are not prefixes.

    >>> turn_bounds(ByteTokenizer(), [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}])[1]
    [0, 29]
    """
    layout = _layout(tokenizer, messages, sample)
    if layout is not None:
        return layout.whole, layout.bounds[:-1]
    if len(messages) > MAX_PREFIX_TURNS:
        raise _too_many_turns(sample, messages)
    whole = _render(tokenizer, messages, False, sample, "messages")
    bounds = [0]
    for turn in range(1, len(messages)):
        prefix = _render(tokenizer, messages[:turn], False, sample, "messages")
        if not whole.startswith(prefix):
            raise _prefix_error(sample, "messages", turn - 1)
        bounds.append(len(prefix))
    return whole, bounds


def _conversational_span(
    tokenizer: Any, prompt: Sequence[Message], completion: Sequence[Message], sample: int
) -> tuple[str, list[tuple[int, int]]]:
    """The rendered prompt + completion and the completion's span (after the prompt's generation prompt)."""
    before = _render(tokenizer, prompt, True, sample, "prompt")
    whole = _render(tokenizer, [*prompt, *completion], False, sample, "completion")
    if not whole.startswith(before):
        raise _prefix_error(sample, "completion", 0)
    return whole, [(len(before), len(whole))] if len(whole) > len(before) else []


def has_generation_markers(tokenizer: Any) -> bool:
    """Whether the tokenizer's chat template marks assistant turns with ``{% generation %}``.

    >>> has_generation_markers(ByteTokenizer())
    False
    """
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):
        template = template.get("default")
    return isinstance(template, str) and _GENERATION_MARKER.search(template) is not None


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
    base = np.zeros(len(counts), dtype=np.int64)
    if len(counts) > 1:
        np.cumsum(width[:-1] + 1, out=base[1:])
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


def _encode_chats(tokenizer: Any, conversations: list[list[Message]], samples: list[int]) -> tuple[Encoded, Int8Array]:
    """Ids and assistant masks of many conversations. With generation markers: the template's own
    ``return_assistant_tokens_mask``; otherwise prefix renderings and character spans."""
    if has_generation_markers(tokenizer):
        try:
            with _bounded_rendering(tokenizer, conversations):
                out = tokenizer.apply_chat_template(
                    conversations, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
                )
        except Exception:
            # find the conversation that fails, so the error names it
            for conversation, sample in zip(conversations, samples, strict=True):
                _render(tokenizer, conversation, False, sample, "messages")
            raise
        ids, offsets = _flat(out["input_ids"])
        mask, _ = _flat(out["assistant_masks"])
        empty = np.zeros(0, dtype=np.int64)
        return Encoded(ids, empty, empty, offsets), mask.astype(np.int8)
    texts, spans = [], []
    for conversation, sample in zip(conversations, samples, strict=True):
        text, text_spans = chat_spans(tokenizer, conversation, sample)
        texts.append(text)
        spans.append(text_spans)
    encoded = encode_texts(tokenizer, texts, add_special_tokens=False, spans=True)
    return encoded, spans_mask(encoded, spans)


def _encode_group(
    tokenizer: Any, form: TextForm, rows: list[_Row], samples: list[int], completion_only_loss: bool
) -> tuple[Int64Array, Int8Array, Int64Array]:
    """Ids, masks and offsets of rows that share a form, in one batch."""
    if form == "text":
        eos = _eos(tokenizer, samples[0], "text")
        encoded = encode_texts(tokenizer, [row.parts[0] for row in rows], add_special_tokens=True)
        ids, offsets = _with_eos(encoded, eos)
        return ids, np.ones(len(ids), dtype=np.int8), offsets
    if form == "prompt_completion":
        eos = _eos(tokenizer, samples[0], "completion")
        prompts = encode_texts(tokenizer, [row.parts[0] for row in rows], add_special_tokens=True)
        completions = encode_texts(tokenizer, [row.parts[1] for row in rows], add_special_tokens=False)
        completion_ids, completion_offsets = _with_eos(completions, eos)
        prompt_lengths, completion_lengths = np.diff(prompts.offsets), np.diff(completion_offsets)
        offsets = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(prompt_lengths + completion_lengths, out=offsets[1:])
        # each row: its prompt tokens, then its completion tokens
        is_prompt = np.tile(np.array([1, 0], dtype=np.int8), len(rows))
        segment_lengths = np.column_stack((prompt_lengths, completion_lengths)).reshape(-1)
        kind = np.repeat(is_prompt, segment_lengths)
        ids = np.empty(int(offsets[-1]), dtype=np.int64)
        ids[kind == 1] = prompts.ids
        ids[kind == 0] = completion_ids
        mask = (kind == 0).astype(np.int8) if completion_only_loss else np.ones(len(ids), dtype=np.int8)
        return ids, mask, offsets
    if form == "messages":
        encoded, mask = _encode_chats(tokenizer, [list(row.parts[0]) for row in rows], samples)
    else:
        texts, spans = [], []
        for row, sample in zip(rows, samples, strict=True):
            text, text_spans = _conversational_span(tokenizer, row.parts[0], row.parts[1], sample)
            texts.append(text)
            spans.append(text_spans)
        encoded = encode_texts(tokenizer, texts, add_special_tokens=False, spans=True)
        mask = spans_mask(encoded, spans)
    if not completion_only_loss:
        mask = np.ones(len(encoded.ids), dtype=np.int8)
    return encoded.ids, mask, encoded.offsets


def encode_rows(
    rows: Iterable[Any],
    tokenizer: Any,
    *,
    completion_only_loss: bool = True,
    indices: Sequence[int] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[Int64Array, Int8Array, Int64Array]:
    """Tokenize text rows: flat ``tokens`` (int64), ``loss_mask`` (int8) and ``offsets`` (int64, n + 1).

    Row ``i`` is ``tokens[offsets[i]:offsets[i + 1]]``. Rows are tokenized in chunks, each form of a
    chunk in one batch call. ``indices[i]`` is how errors number row ``i`` (default ``i``);
    ``progress(done, total)`` is called after each chunk with the number of rows done. Every row must be text
    (:func:`is_text_row`); errors are :class:`SampleError` (the row) or :class:`SettingError` (the
    tokenizer). O(characters + a few template renderings per chat, see :func:`chat_spans`).

    >>> tokens, mask, offsets = encode_rows(
    ...     [{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}], "bytes")
    >>> ByteTokenizer().decode(tokens[mask == 1])
    'b<|im_end|>\\n'
    """
    if not isinstance(completion_only_loss, bool):
        raise SettingError("completion_only_loss", "True or False", completion_only_loss)
    tokenizer = load_tokenizer(tokenizer)
    if isinstance(rows, (str, bytes, Mapping)) or not isinstance(rows, Iterable):
        raise SettingError("rows", "a list of text rows", rows)
    row_list = rows if isinstance(rows, Sequence) else list(rows)
    if indices is not None and len(indices) != len(row_list):
        raise SettingError("indices", f"{len(row_list)} indices, one per row", f"<{len(indices)} indices>")
    ids_parts: list[Int64Array] = []
    mask_parts: list[Int8Array] = []
    lengths: list[Int64Array] = []
    for chunk_start in range(0, len(row_list), _CHUNK_ROWS):
        chunk = range(chunk_start, min(chunk_start + _CHUNK_ROWS, len(row_list)))
        names = [int(indices[i]) if indices is not None else i for i in chunk]
        checked = [_check_row(row_list[i], name) for i, name in zip(chunk, names, strict=True)]
        groups: dict[TextForm, list[int]] = {}
        for position, row in enumerate(checked):
            groups.setdefault(row.form, []).append(position)
        chunk_ids: list[Int64Array | None] = [None] * len(checked)
        chunk_mask: list[Int8Array | None] = [None] * len(checked)
        for form, members in groups.items():
            ids, mask, offsets = _encode_group(
                tokenizer, form, [checked[m] for m in members], [names[m] for m in members], completion_only_loss
            )
            for slot, member in enumerate(members):
                chunk_ids[member] = ids[offsets[slot] : offsets[slot + 1]]
                chunk_mask[member] = mask[offsets[slot] : offsets[slot + 1]]
        for ids_item, mask_item in zip(chunk_ids, chunk_mask, strict=True):
            assert ids_item is not None and mask_item is not None
            ids_parts.append(ids_item)
            mask_parts.append(mask_item)
        lengths.append(np.array([len(item) for item in chunk_ids if item is not None], dtype=np.int64))
        if progress is not None:
            progress(chunk.stop, len(row_list))
    offsets = np.zeros(len(row_list) + 1, dtype=np.int64)
    if lengths:
        np.cumsum(np.concatenate(lengths), out=offsets[1:])
    tokens = np.concatenate(ids_parts).astype(np.int64, copy=False) if ids_parts else np.zeros(0, np.int64)
    loss_mask = np.concatenate(mask_parts).astype(np.int8, copy=False) if mask_parts else np.zeros(0, np.int8)
    return tokens, loss_mask, offsets


# ---------------------------------------------------------------- decoding


def decode_documents(batch: Any, tokenizer: Any, *, skip_special_tokens: bool = False) -> list[str]:
    """The text of every document of a ``PackedBatch``, block by block, in order (a sample cut across
    blocks gives one text per piece). O(tokens).

    >>> import packing
    >>> rows = [{"text": "héllo"}, {"prompt": "2+2=", "completion": "4"}]
    >>> tokens, mask, offsets = encode_rows(rows, "bytes")
    >>> samples = [{"input_ids": tokens[a:b], "loss_mask": mask[a:b]} for a, b in zip(offsets[:-1], offsets[1:])]
    >>> decode_documents(packing.pack(samples, 16), "bytes")
    ['héllo<|endoftext|>', '2+2=4<|endoftext|>']
    """
    tokenizer = load_tokenizer(tokenizer)
    texts = []
    for block in range(int(batch.num_blocks)):
        start = 0
        row = batch.input_ids[block]
        for length in batch.seq_lengths(block).tolist():
            texts.append(
                tokenizer.decode(row[start : start + length].tolist(), skip_special_tokens=skip_special_tokens)
            )
            start += length
    return texts


def read_text_rows(
    rows: Iterable[Any],
    tokenizer: Any,
    *,
    completion_only_loss: bool = True,
    progress: Callable[[int, int], None] | None = None,
) -> Samples:
    """Rows of any form as one :class:`~packing.reader.Samples`: text rows tokenized (:func:`encode_rows`),
    every other row read by :func:`packing.reader.read_rows`; errors number rows from 0 in the input order.
    O(characters + tokens).

    >>> s = read_text_rows([{"text": "hi"}, [7, 8], {"prompt": "a", "completion": "b"}], "bytes")
    >>> s.tokens.tolist(), s.loss_mask.tolist(), s.lengths.tolist()
    ([104, 105, 256, 7, 8, 97, 98, 256], [1, 1, 1, 1, 1, 0, 1, 1], [3, 2, 3])
    """
    from packing.reader import Samples, read_rows

    row_list = list(rows)
    positions = [index for index, row in enumerate(row_list) if is_text_row(row)]
    tokens, mask, offsets = encode_rows(
        [row_list[i] for i in positions],
        tokenizer,
        completion_only_loss=completion_only_loss,
        indices=positions,
        progress=progress,
    )
    if len(positions) == len(row_list):
        return Samples(tokens, mask, offsets)
    for slot, index in enumerate(positions):
        start, end = offsets[slot], offsets[slot + 1]
        row_list[index] = {"input_ids": tokens[start:end], "loss_mask": mask[start:end]}
    return read_rows(row_list, completion_only_loss=completion_only_loss)
