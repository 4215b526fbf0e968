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

What is trained follows the loss rules (:class:`packing.loss.LossRules`: ``loss`` ``completion``,
``last_turn`` or ``all``, ``roles_to_train``, ``train_on_eos``, and each message's ``weight`` of 0 or 1);
the default is the above, ``completion_only_loss=False`` (``loss="all"``) trains on every token of every
form. A row with a non-null ``input_ids`` is a token row, whatever text it also carries.

Each chat is rendered once, the chats of a chunk in one batch call of the template, and tokenized in one
batch call of the fast tokenizer; the trained character spans are mapped to tokens through its character
offsets (a token is trained when its characters overlap a trained span, the rule
``return_assistant_tokens_mask`` follows), looked up at each span's two ends (:func:`encode_masked`). With generation markers (``{% generation %}``) the assistant
spans are the template's own blocks, from transformers' renderer. Otherwise each message's place in the
rendering is found as its role's header + content + footer, learned once per call from a few probe
renderings and checked end to end on every chat (:func:`_layout`); the assistant turn ``k`` covers the
characters between the rendering of the first ``k`` messages with the generation prompt and the start of
message ``k + 1``. Chats that cannot be laid out that way (tool calls, content the template changes) are
rendered prefix by prefix, up to ``MAX_PREFIX_TURNS`` messages; a template whose prefix renderings are not
prefixes of the whole conversation is refused. Every rendering runs in transformers' Jinja sandbox and is
stopped past ``RENDER_FACTOR`` × the messages' characters + ``RENDER_SLACK``. ``num_proc`` processes
share the chunks, with the one process's result.

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt

from packing.errors import SampleError, SettingError
from packing.loss import LossRules

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


def load_tokenizer(spec: Any, *, local_files_only: bool = False, chat_template: Any = None) -> Any:
    """A tokenizer from ``spec``: a tokenizer object (returned as is), ``"bytes"``, a folder, a
    ``tokenizer.json`` file, a ``.tiktoken`` file (:func:`tiktoken_tokenizer`) or a Hugging Face hub name;
    with ``chat_template`` (a Jinja template, or the path of a file holding one), a copy of it that renders
    chats with that template (:func:`with_chat_template`).

    Loading never runs code from a folder or the hub and never asks a question on standard input: a folder
    whose configuration asks for a tokenizer of its own code (``auto_map``) is refused, and transformers is
    called with ``trust_remote_code=False``.

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
    packing.errors.SettingError: tokenizer: expected 'bytes', a folder with tokenizer files, a tokenizer.json or .tiktoken file, or a hub name, got <'./no/such/folder' (no such folder or file)>
    """
    tokenizer = _load(spec, local_files_only)
    return tokenizer if chat_template is None else with_chat_template(tokenizer, chat_template)


def _load(spec: Any, local_files_only: bool) -> Any:
    """:func:`load_tokenizer` without the chat template."""
    if isinstance(spec, ByteTokenizer) or (not isinstance(spec, (str, os.PathLike)) and _is_tokenizer_object(spec)):
        return spec
    expected = "'bytes', a folder with tokenizer files, a tokenizer.json or .tiktoken file, or a hub name"
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
    if path.is_dir():
        _refuse_custom_code(path, text)
    if path.is_file() and path.suffix == ".tiktoken":
        return tiktoken_tokenizer(path)
    if path.exists():
        try:
            if path.is_file():
                fast: Any = transformers.PreTrainedTokenizerFast
                return fast(tokenizer_file=str(path))
            return transformers.AutoTokenizer.from_pretrained(str(path), trust_remote_code=False)
        except Exception as error:
            kind = "a file" if path.is_file() else "a folder"
            raise SettingError(
                "tokenizer", expected, f"<{text!r}: {kind} that cannot be loaded ({_reason(error)})>"
            ) from None
    try:
        return transformers.AutoTokenizer.from_pretrained(text, local_files_only=True, trust_remote_code=False)
    except Exception as error:
        cached_reason = _reason(error)
    if local_files_only or os.environ.get("HF_HUB_OFFLINE", "").lower() not in ("", "0", "false", "no"):
        raise SettingError("tokenizer", expected, f"<{text!r}: not a folder, and not in the local cache (offline)>")
    if not _hub_reachable():
        raise SettingError(
            "tokenizer", expected, f"<{text!r}: not a folder, not in the local cache, and the hub cannot be reached>"
        )
    try:
        return transformers.AutoTokenizer.from_pretrained(text, trust_remote_code=False)
    except Exception as error:
        online = _reason(error)
    if "connect" in online.lower() or "resolve" in online.lower():
        reason = "not a folder, not in the local cache, and the hub cannot be reached"
    else:
        reason = f"a hub name that cannot be loaded ({online or cached_reason})"
    raise SettingError("tokenizer", expected, f"<{text!r}: {reason}>")


def _refuse_custom_code(folder: Path, text: str) -> None:
    """Refuse, in one line, a folder whose configuration asks for a tokenizer of its own code (an
    ``auto_map`` naming a tokenizer in ``tokenizer_config.json``, or ``AutoTokenizer`` in ``config.json``):
    transformers would ask on standard input whether to run it. O(size of the two files)."""
    for name in ("tokenizer_config.json", "config.json"):
        try:
            config = json.loads((folder / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        auto_map = config.get("auto_map") if isinstance(config, dict) else None
        if auto_map and (name == "tokenizer_config.json" or "AutoTokenizer" in auto_map):
            raise SettingError(
                "tokenizer",
                "a folder whose tokenizer needs no code of its own (packing never runs code from a folder)",
                f"<{text!r}: its {name} asks for custom code (auto_map)>",
            )


def with_chat_template(tokenizer: Any, template: Any) -> Any:
    """A copy of ``tokenizer`` that renders chats with ``template``: Jinja text (anything with ``{{`` or
    ``{%``), or the path of a file holding it. The template is compiled once here, in transformers'
    sandbox, so a syntax error is a ``SettingError`` at once; renderings are bounded as every rendering is
    (:func:`_render`). The tokenizer given is left as it was. O(template).

    >>> with_chat_template(ByteTokenizer(), "{{ messages }}")
    Traceback (most recent call last):
    ...
    packing.errors.SettingError: chat_template: expected a tokenizer loaded with transformers (the byte tokenizer has its own template), got ByteTokenizer() (ByteTokenizer)
    """
    text = _template_text(template)
    if isinstance(tokenizer, ByteTokenizer) or not callable(getattr(tokenizer, "apply_chat_template", None)):
        raise SettingError(
            "chat_template", "a tokenizer loaded with transformers (the byte tokenizer has its own template)", tokenizer
        )
    try:
        from transformers.utils.chat_template_utils import _compile_jinja_template

        _compile_jinja_template(text)
    except ImportError:  # pragma: no cover - an older layout: the first rendering will say it
        pass
    except Exception as error:
        raise SettingError("chat_template", "a Jinja template that compiles", f"<{_reason(error)}>") from None
    import copy

    changed = copy.copy(tokenizer)
    changed.chat_template = text
    return changed


def _template_text(template: Any) -> str:
    """The text of a chat template given as Jinja text or as a path (a ``str`` without ``{{``/``{%``)."""
    expected = "a Jinja chat template, or the path of a file holding one"
    if isinstance(template, str) and ("{{" in template or "{%" in template):
        return template
    if not isinstance(template, (str, os.PathLike)) or not os.fspath(template).strip():
        raise SettingError("chat_template", expected, template)
    path = Path(os.fspath(template).strip()).expanduser()
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise SettingError("chat_template", expected, f"<{str(path)!r}: {_reason(error)}>") from None
    if path.suffix == ".json":  # a tokenizer_config.json or chat_template.json holding the template
        try:
            value = json.loads(text).get("chat_template")
        except (ValueError, AttributeError):
            value = None
        if not isinstance(value, str):
            raise SettingError("chat_template", expected, f"<{str(path)!r}: JSON without a 'chat_template' string>")
        text = value
    if not text.strip():
        raise SettingError("chat_template", expected, f"<{str(path)!r}: an empty file>")
    return text


TIKTOKEN_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"""
    r"""|\s+(?!\S)|\s+"""
)
"""How a ``.tiktoken`` file's text is split before merging (the file does not say; this is ``cl100k_base``'s)."""
TIKTOKEN_SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
"""Special tokens given the ids after a ``.tiktoken`` file's ranks, in this order (Qwen's layout)."""


def _byte_names() -> dict[int, str]:
    """The printable character a byte-level BPE writes for each byte (GPT-2's table)."""
    kept = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    names = {b: chr(b) for b in kept}
    extra = 0
    for b in range(256):
        if b not in names:
            names[b] = chr(256 + extra)
            extra += 1
    return names


def _merge_parts(ranks: Mapping[bytes, int], token: bytes, limit: int) -> list[bytes]:
    """``token`` merged from its bytes by ranks below ``limit``, lowest rank first (tiktoken's rule)."""
    parts = [token[i : i + 1] for i in range(len(token))]
    while len(parts) > 1:
        best, where = limit, -1
        for index in range(len(parts) - 1):
            rank = ranks.get(parts[index] + parts[index + 1], limit)
            if rank < best:
                best, where = rank, index
        if where < 0:
            break
        parts[where : where + 2] = [parts[where] + parts[where + 1]]
    return parts


def tiktoken_tokenizer(path: str | os.PathLike[str]) -> Any:
    """A fast (Rust) tokenizer from a ``.tiktoken`` file (lines of ``base64-token rank``): the same byte-level
    BPE, the text split by ``TIKTOKEN_PATTERN``, ``TIKTOKEN_SPECIAL_TOKENS`` after the ranks (EOS is
    ``<|endoftext|>``); no chat template (give one with ``chat_template``). Needs ``tokenizers`` and
    ``transformers``, not ``tiktoken``. O(vocabulary × token length²) to build the merges.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    file = Path(path)
    expected = "a .tiktoken file: lines of 'base64-token rank'"
    ranks: dict[bytes, int] = {}
    try:
        lines = file.read_text(encoding="ascii").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise SettingError("tokenizer", expected, f"<{str(file)!r}: {_reason(error)}>") from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        parts = line.split()
        try:
            token, rank = __import__("base64").b64decode(parts[0], validate=True), int(parts[1])
            if len(parts) != 2 or not token or rank < 0:
                raise ValueError
        except (ValueError, IndexError):
            raise SettingError("tokenizer", expected, f"<{file.name} line {number}: {line[:40]!r}>") from None
        ranks[token] = rank
    if not ranks or len(set(ranks.values())) != len(ranks):
        raise SettingError("tokenizer", expected + " (distinct ranks)", f"<{file.name}: {len(ranks)} tokens>")
    names = _byte_names()

    def name(token: bytes) -> str:
        return "".join(names[b] for b in token)

    merges = []
    for token, rank in sorted(ranks.items(), key=lambda item: item[1]):
        if len(token) < 2:
            continue
        halves = _merge_parts(ranks, token, rank)
        if len(halves) != 2:
            raise SettingError("tokenizer", expected + " (each token a merge of two lower ranks)", f"<{token!r}>")
        merges.append((name(halves[0]), name(halves[1])))
    vocab = {name(token): rank for token, rank in ranks.items()}
    backend = Tokenizer(models.BPE(vocab, merges, ignore_merges=False))
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(TIKTOKEN_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    backend.decoder = decoders.ByteLevel()
    from tokenizers import AddedToken
    from transformers import PreTrainedTokenizerFast

    first = max(ranks.values()) + 1
    for offset, special in enumerate(TIKTOKEN_SPECIAL_TOKENS):
        backend.add_special_tokens([AddedToken(special, special=True)])
        if backend.token_to_id(special) != first + offset:
            raise SettingError("tokenizer", expected + " (ranks 0..n-1)", f"<{file.name}: ranks with gaps>")
    wrapper: Any = PreTrainedTokenizerFast
    tokenizer = wrapper(tokenizer_object=backend, eos_token=TIKTOKEN_SPECIAL_TOKENS[0])
    tokenizer.name_or_path = str(file)
    return tokenizer


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
    if isinstance(value, Mapping):  # strings counted here, not by a call each: this runs over every message
        return sum(
            (len(key) if type(key) is str else _text_size(key)) + (len(item) if type(item) is str else _text_size(item))
            for key, item in value.items()
        )
    if isinstance(value, (list, tuple)):
        return sum(_text_size(item) for item in value)
    return 8


@contextlib.contextmanager
def _bounded_rendering(tokenizer: Any, size: int) -> Iterator[int]:
    """Cap each chat template rendering done inside at ``RENDER_FACTOR`` × ``size`` (the characters of the
    messages it renders, see :func:`_text_size`) + ``RENDER_SLACK`` (this thread or task only); yields the cap."""
    cap = RENDER_FACTOR * size + RENDER_SLACK
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
    with _bounded_rendering(tokenizer, _text_size(messages)) as cap:
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


def _opening(tokenizer: Any, whole: str, sample: int, shape: _Shape | None = None) -> str:
    """What precedes an assistant turn that opens a conversation: the template's rendering of no messages
    with the generation prompt, or (when the template refuses an empty conversation) the rendering up to
    the end of the first generation prompt in it, as a one-message probe renders it. Learned once per
    ``shape``."""
    if shape is None or shape.opening is None:
        try:
            learned = (True, _render(tokenizer, [], True, sample, "messages"))
        except SampleError:
            probe = [{"role": "user", "content": "x"}]
            without = _render(tokenizer, probe, False, sample, "messages")
            with_prompt = _render(tokenizer, probe, True, sample, "messages")
            learned = (False, with_prompt[len(without) :] if with_prompt.startswith(without) else "")
        if shape is None:
            shape = _Shape()
        shape.opening = learned
    empty, text = shape.opening
    if empty:
        return text
    found = whole.find(text) if text else -1
    if found < 0:
        raise _prefix_error(sample, "messages", 0)
    return whole[: found + len(text)]


MAX_PREFIX_TURNS = 1024
"""Most messages in a chat whose turns cannot be found in one rendering (the fallback renders every
prefix: O(turns × rendering), quadratic in the chat's length)."""

_MAX_ROLES = 16
"""Most distinct roles a chat may have for the one-rendering path (each costs one probe rendering)."""


@dataclass
class _Shape:
    """What one call has learned of a chat template, so that later chats are laid out from their one
    rendering alone: how message 0 renders alone (``first``: header and footer around its content, by
    role), how every later message renders (``pieces``, by role), the generation prompt after a message
    (``prompts``, by its role) and what opens a chat before an assistant turn at position 0
    (``opening``: ``(True, text)`` from the empty rendering, ``(False, generation prompt)`` from a probe).
    Every piece is checked on every chat it lays out: the chat's rendering must be exactly the pieces and
    contents end to end, or the chat is learned afresh."""

    first: dict[str, tuple[str, str]] = field(default_factory=dict)
    pieces: dict[str, tuple[str, str]] = field(default_factory=dict)
    prompts: dict[str, str] = field(default_factory=dict)
    opening: tuple[bool, str] | None = None


@dataclass(frozen=True)
class _Layout:
    """A chat rendered once: its text; where each message starts (``bounds[i]``; ``bounds[-1]`` is the
    end); for each assistant turn, where its generation prompt ends (``opens[i]``, else None); each
    message's content span in the text where it is known for certain (``contents[i]``, else None)."""

    whole: str
    bounds: list[int]
    opens: list[int | None]
    contents: list[tuple[int, int] | None]
    opening_error: SampleError | None = None
    """Why an assistant turn at position 0 has no start (raised only when that turn is trained)."""


def _fits(whole: str, start: int, header: str, content: str, footer: str) -> int:
    """The end of ``header + content + footer`` laid at ``start`` in ``whole``, or -1 if they are not there."""
    middle = start + len(header)
    fits = whole.startswith(header, start) and whole.startswith(content, middle)
    if fits and whole.startswith(footer, middle + len(content)):
        return middle + len(content) + len(footer)
    return -1


def _laid_out(messages: Sequence[Message]) -> bool:
    """Whether a chat may be laid out from one rendering: string contents, no tool calls, few roles."""
    if len({str(m.get("role")) for m in messages}) > _MAX_ROLES:
        return False
    return all(isinstance(m.get("content"), str) and m.get("tool_calls") is None for m in messages)


def _opens(
    tokenizer: Any, messages: Sequence[Message], whole: str, bounds: list[int], prompts: dict[str, str], sample: int
) -> list[int | None] | None:
    """Where each assistant turn's generation prompt ends, from the prompts known by preceding role (a
    missing one learned by one rendering); None when a rendering with the generation prompt does not
    continue into the turn as the whole does."""
    opens: list[int | None] = [None] * len(messages)
    for turn, message in enumerate(messages):
        if message.get("role") != "assistant" or turn == 0:
            continue
        before = str(messages[turn - 1]["role"])
        if before not in prompts:
            rendered = _render(tokenizer, messages[:turn], True, sample, "messages")
            if not (whole.startswith(rendered) and bounds[turn] <= len(rendered) <= bounds[turn + 1]):
                return None
            prompts[before] = rendered[bounds[turn] :]
        prompt = prompts[before]
        if not whole.startswith(prompt, bounds[turn]) or bounds[turn] + len(prompt) > bounds[turn + 1]:
            return None
        opens[turn] = bounds[turn] + len(prompt)
    return opens


def _cached_layout(messages: Sequence[Message], whole: str, shape: _Shape) -> _Layout | None:
    """The layout of a chat from pieces learned on earlier chats alone (no rendering), or None when a
    piece is missing or the rendering is not exactly those pieces and contents end to end. O(characters)."""
    first = shape.first.get(str(messages[0]["role"]))
    if first is None:
        return None
    bounds: list[int] = [0]
    contents: list[tuple[int, int] | None] = []
    for index, message in enumerate(messages):
        piece = first if index == 0 else shape.pieces.get(str(message["role"]))
        if piece is None:
            return None
        start, content = bounds[-1], message["content"]
        end = _fits(whole, start, piece[0], content, piece[1])
        if end < 0:
            return None
        contents.append((start + len(piece[0]), start + len(piece[0]) + len(content)))
        bounds.append(end)
    if bounds[-1] != len(whole):
        return None
    opens: list[int | None] = [None] * len(messages)
    for turn, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        if turn == 0:
            if shape.opening is None or not shape.opening[0] or not whole.startswith(shape.opening[1]):
                return None
            end = len(shape.opening[1])
        else:
            prompt = shape.prompts.get(str(messages[turn - 1]["role"]))
            if prompt is None or not whole.startswith(prompt, bounds[turn]):
                return None
            end = bounds[turn] + len(prompt)
        if end > bounds[turn + 1]:
            return None
        opens[turn] = end
    return _Layout(whole, bounds, opens, contents)


def _learned_layout(
    tokenizer: Any, messages: Sequence[Message], whole: str, sample: int, shape: _Shape, opens_too: bool = True
) -> _Layout | None:
    """Where each message of a chat starts in its one rendering, or None when that cannot be made out.

    Message 0 ends where the rendering of it alone ends. Every later message is ``header + content +
    footer``, the header and footer of its role learned from the rendering of the prefix that ends
    with the role's first message after message 0 (one probe per role) and then checked at every
    message of that role: the whole rendering must be exactly these pieces, end to end, or the chat
    goes to the prefix-by-prefix path. A message without string content (tool calls), content the
    template changes, or a template whose prefixes are not prefixes also go there. What is learned
    without ambiguity (a content found once where it was learned) goes into ``shape`` for the next
    chats. O(distinct roles renderings + characters), against O(turns) renderings prefix by prefix.
    """
    first = whole if len(messages) == 1 else _render(tokenizer, messages[:1], False, sample, "messages")
    if not whole.startswith(first):
        return None
    bounds = [0, len(first)]
    content0 = str(messages[0]["content"])
    known0 = shape.first.get(str(messages[0]["role"]))
    if known0 is not None and first == known0[0] + content0 + known0[1]:
        contents: list[tuple[int, int] | None] = [(len(known0[0]), len(known0[0]) + len(content0))]
    else:
        contents = [_once(first, content0, 0, len(first))]
    pieces: dict[str, tuple[str, str]] = {}
    certain: dict[str, bool] = {}
    for index in range(1, len(messages)):
        role, content, start = str(messages[index]["role"]), str(messages[index]["content"]), bounds[-1]
        if role not in pieces and role in shape.pieces:  # learned for certain on an earlier chat
            header, footer = shape.pieces[role]
            if _fits(whole, start, header, content, footer) >= 0:
                pieces[role], certain[role] = (header, footer), True
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
            certain[role] = _once(whole, content, start, end) is not None
        header, footer = pieces[role]
        end = _fits(whole, start, header, content, footer)
        if end < 0:
            return None
        middle = start + len(header)
        contents.append((middle, middle + len(content)) if certain[role] else None)
        bounds.append(end)
    if bounds[-1] != len(whole):
        return None
    prompts = dict(shape.prompts)
    opens: list[int | None] | None = [None] * len(messages)
    if opens_too:
        opens = _opens(tokenizer, messages, whole, bounds, prompts, sample)
    if opens is None:
        return None
    opening_error = None
    if messages[0].get("role") == "assistant" and opens_too:
        try:
            opening = _opening(tokenizer, whole, sample, shape)
            if not whole.startswith(opening) or len(opening) > bounds[1]:
                raise _prefix_error(sample, "messages", 0)
            opens[0] = len(opening)
        except SampleError as error:
            opening_error = error
    for turn, message in enumerate(messages):  # an assistant's content starts where its generation prompt ends
        opened = opens[turn]
        if contents[turn] is None and opened is not None:
            contents[turn] = _content_in(whole, message, opened, bounds[turn + 1])
    for role, piece in pieces.items():
        if certain[role]:
            shape.pieces.setdefault(role, piece)
    if contents[0] is not None:
        shape.first.setdefault(str(messages[0]["role"]), (first[: contents[0][0]], first[contents[0][1] :]))
    for role, prompt in prompts.items():
        shape.prompts.setdefault(role, prompt)
    return _Layout(whole, bounds, opens, contents, opening_error)


def _once(text: str, content: str, start: int, end: int) -> tuple[int, int] | None:
    """The span of ``content`` in ``text[start:end]`` if it occurs there exactly once (and is not empty)."""
    if not content:
        return None
    found = text.find(content, start, end)
    if found < 0 or text.find(content, found + 1, end) >= 0:
        return None
    return found, found + len(content)


def _layout(
    tokenizer: Any,
    messages: Sequence[Message],
    sample: int,
    whole: str | None = None,
    shape: _Shape | None = None,
    opens_too: bool = True,
) -> _Layout | None:
    """The layout of a chat from its one rendering (``whole``, rendered here if not given): from the pieces
    ``shape`` holds when they fit, else learned with a few probe renderings (:func:`_learned_layout`);
    None when the chat cannot be laid out that way. ``opens_too=False``: the message bounds alone."""
    if not _laid_out(messages):
        return None
    if whole is None:
        whole = _render(tokenizer, messages, False, sample, "messages")
    shape = shape if shape is not None else _Shape()
    if opens_too:
        cached = _cached_layout(messages, whole, shape)
        if cached is not None:
            return cached
    return _learned_layout(tokenizer, messages, whole, sample, shape, opens_too)


def _too_many_turns(sample: int, messages: Sequence[Message]) -> SampleError:
    return SampleError(
        sample,
        "messages",
        None,
        f"at most {MAX_PREFIX_TURNS:,} messages for a chat whose turns the template does not render one "
        "after the other (tool calls, changed content)",
        f"<{len(messages):,} messages>",
    )


def _content_in(whole: str, message: Message, start: int, end: int) -> tuple[int, int] | None:
    """Where a message's content is in ``whole[start:end]``: at ``start``, or found once there (as given, or
    trimmed as templates often do); None when it cannot be told."""
    content = message.get("content")
    if not isinstance(content, str) or not content:
        return None
    if whole.startswith(content, start) and start + len(content) <= end:
        return start, start + len(content)
    return _once(whole, content, start, end) or _once(whole, content.strip(), start, end)


def _prefix_layout(
    tokenizer: Any, messages: Sequence[Message], sample: int, needed: Sequence[int] | None = None
) -> _Layout:
    """The layout prefix by prefix (the fallback): the bounds around each message of ``needed`` (default
    every assistant turn) from the renderings of the messages before and through it; the generation prompt
    of each assistant turn among them from the rendering with it. O(turns × rendering), so refused over
    ``MAX_PREFIX_TURNS`` messages; refuses a template whose prefixes are not prefixes."""
    if len(messages) > MAX_PREFIX_TURNS:
        raise _too_many_turns(sample, messages)
    if needed is None:
        needed = [turn for turn, message in enumerate(messages) if message.get("role") == "assistant"]
    whole = _render(tokenizer, messages, False, sample, "messages")
    known: dict[int, int] = {0: 0, len(messages): len(whole)}

    def bound(turn: int) -> int:
        if turn not in known:
            prefix = _render(tokenizer, messages[:turn], False, sample, "messages")
            if not whole.startswith(prefix):
                raise _prefix_error(sample, "messages", turn - 1)
            known[turn] = len(prefix)
        return known[turn]

    opens: list[int | None] = [None] * len(messages)
    contents: list[tuple[int, int] | None] = [None] * len(messages)
    for turn in needed:
        message = messages[turn]
        if message.get("role") == "assistant":
            before = (
                _render(tokenizer, messages[:turn], True, sample, "messages")
                if turn
                else _opening(tokenizer, whole, sample)
            )
            through = bound(turn + 1)
            if not whole[:through].startswith(before):
                raise _prefix_error(sample, "messages", turn)
            opens[turn] = len(before)
            contents[turn] = _content_in(whole, message, len(before), through)
        else:
            contents[turn] = _content_in(whole, message, bound(turn), bound(turn + 1))
    bounds = [known.get(turn, -1) for turn in range(len(messages) + 1)]
    return _Layout(whole, bounds, opens, contents)


def _unknown_content(sample: int, turn: int) -> SampleError:
    return SampleError(
        sample,
        "messages",
        turn,
        "a message whose content the chat template renders as it is, once (to train its role's tokens, or "
        "its end of turn without the rest of it)",
        "<content the template changes, repeats or leaves out>",
    )


def _rule_spans(
    layout: _Layout, messages: Sequence[Message], trained: Sequence[bool], ends: Sequence[bool], sample: int
) -> list[tuple[int, int]]:
    """The character spans the loss rules train in a laid-out chat: for each trained message, from the end
    of its generation prompt (assistant turns) or the start of its content (other roles) to the start of
    the next message when its end of turn is trained (``ends``), else to the end of its content; for an
    untrained message whose end of turn is trained, from the end of its content to the start of the next
    message. O(messages)."""
    spans = []
    for turn, message in enumerate(messages):
        if not trained[turn] and not ends[turn]:
            continue
        if turn == 0 and trained[turn] and layout.opening_error is not None:
            raise layout.opening_error
        start, content = layout.opens[turn], layout.contents[turn]
        if content is None and (not ends[turn] or not trained[turn] or start is None):
            if message.get("content") == "" and (not ends[turn] or not trained[turn]):
                continue  # an empty content: nothing of it trained, and no end of it to start an end of turn at
            raise _unknown_content(sample, turn)
        if not trained[turn]:
            assert content is not None  # checked above
            start = content[1]
        elif start is None:
            assert content is not None  # checked above
            start = content[0]
        end = layout.bounds[turn + 1] if ends[turn] else content[1] if content is not None else start
        if end > start:
            spans.append((start, end))
    return spans


_DEFAULT_RULES = LossRules()


def chat_spans(
    tokenizer: Any,
    messages: Sequence[Message],
    sample: int = 0,
    rules: LossRules = _DEFAULT_RULES,
    *,
    whole: str | None = None,
    shape: _Shape | None = None,
) -> tuple[str, list[tuple[int, int]]]:
    """The rendered conversation and the character spans ``[start, end)`` the loss ``rules`` train (by
    default every assistant turn: from the end of the generation prompt after the messages before the turn
    to the start of the next message). Rendered once (plus one probe per role on the first chats of a
    ``shape``, see :func:`_layout`): O(characters); a chat that cannot be laid out from one rendering is
    rendered prefix by prefix, O(turns × rendering), and refused over ``MAX_PREFIX_TURNS`` messages.

    >>> chat_spans(ByteTokenizer(), [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}])
    ('<|im_start|>user\\na<|im_end|>\\n<|im_start|>assistant\\nb<|im_end|>\\n', [(51, 63)])
    >>> chat_spans(ByteTokenizer(), [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}],
    ...            rules=LossRules(train_on_eos=False))[1]
    [(51, 52)]
    """
    trained = rules.trained(messages, sample)
    ends = rules.ends(trained)
    layout = _layout(tokenizer, messages, sample, whole, shape)
    if layout is None:
        needed = [turn for turn in range(len(messages)) if trained[turn] or ends[turn]]
        layout = _prefix_layout(tokenizer, messages, sample, needed)
    return layout.whole, _rule_spans(layout, messages, trained, ends, sample)


def _prefix_spans(tokenizer: Any, messages: Sequence[Message], sample: int) -> tuple[str, list[tuple[int, int]]]:
    """:func:`chat_spans` (default rules) prefix by prefix: O(turns × rendering), refused over ``MAX_PREFIX_TURNS``."""
    layout = _prefix_layout(tokenizer, messages, sample)
    trained = _DEFAULT_RULES.trained(messages, sample)
    return layout.whole, _rule_spans(layout, messages, trained, trained, sample)


def turn_bounds(tokenizer: Any, messages: Sequence[Message], sample: int = 0) -> tuple[str, list[int]]:
    """The rendered conversation and where each message starts in it (rendering of the messages before it),
    for showing roles. Rendered once as :func:`chat_spans` does, else prefix by prefix (refused over
    ``MAX_PREFIX_TURNS`` messages); refuses a template whose prefixes are not prefixes.

    >>> turn_bounds(ByteTokenizer(), [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}])[1]
    [0, 29]
    """
    layout = _layout(tokenizer, messages, sample, opens_too=False)
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
    tokenizer: Any,
    prompt: Sequence[Message],
    completion: Sequence[Message],
    sample: int,
    train_on_eos: bool = True,
) -> tuple[str, list[tuple[int, int]]]:
    """The rendered prompt + completion and the completion's span (after the prompt's generation prompt);
    without ``train_on_eos`` the span ends where the completion's last content ends."""
    before = _render(tokenizer, prompt, True, sample, "prompt")
    whole = _render(tokenizer, [*prompt, *completion], False, sample, "completion")
    if not whole.startswith(before):
        raise _prefix_error(sample, "completion", 0)
    end = len(whole)
    if not train_on_eos:
        last = completion[-1].get("content")
        found = whole.rfind(last, len(before)) if isinstance(last, str) and last else -1
        if found < 0 and isinstance(last, str) and last.strip():
            last = last.strip()
            found = whole.rfind(last, len(before))
        if found < 0 or not isinstance(last, str):
            if last == "":
                return whole, []
            raise SampleError(
                sample,
                "completion",
                len(completion) - 1,
                "a completion whose last content the chat template renders (to leave its end of turn out)",
                "<content the template changes or leaves out>",
            )
        end = found + len(last)
    return whole, [(len(before), end)] if end > len(before) else []


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


def _render_all(tokenizer: Any, conversations: list[list[Message]], samples: list[int]) -> list[str]:
    """Every conversation rendered (no generation prompt), in one batch call of the template when the
    tokenizer takes one; each rendering capped as :func:`_render` caps it (at the largest chat's cap). A
    failure is reported for the first conversation that fails, as :func:`_render` words it."""
    if isinstance(tokenizer, ByteTokenizer) or not conversations:
        return [_render(tokenizer, c, False, s, "messages") for c, s in zip(conversations, samples, strict=True)]
    _render(tokenizer, conversations[0], False, samples[0], "messages")  # the tokenizer has a template
    cap = max(_text_size(conversation) for conversation in conversations)
    try:
        with _bounded_rendering(tokenizer, cap):
            texts = tokenizer.apply_chat_template(conversations, tokenize=False)
    except Exception:
        for conversation, sample in zip(conversations, samples, strict=True):
            _render(tokenizer, conversation, False, sample, "messages")
        raise
    if not isinstance(texts, list) or not all(isinstance(text, str) for text in texts):
        raise SettingError("tokenizer", "apply_chat_template(tokenize=False) to return strings", type(texts).__name__)
    return texts


def _render_marked(
    tokenizer: Any, conversations: list[list[Message]], samples: list[int]
) -> tuple[list[str], list[list[tuple[int, int]]]] | None:
    """Every conversation rendered once with the character spans of its ``{% generation %}`` blocks, in
    the template's own sandbox (transformers' renderer); None when this transformers has no such renderer."""
    try:
        from transformers.utils.chat_template_utils import render_jinja_template
    except ImportError:  # pragma: no cover - older transformers: its own masks, see _encode_chats
        return None
    _install_render_bound()
    template = tokenizer.get_chat_template()
    plain: Any = [  # as apply_chat_template gives them: keys whose value is None left out
        [{k: v for k, v in m.items() if v is not None} if None in m.values() else m for m in c] for c in conversations
    ]
    cap = max((_text_size(conversation) for conversation in conversations), default=0)
    try:
        with _bounded_rendering(tokenizer, cap):
            rendered: Any = render_jinja_template(
                conversations=plain,
                chat_template=template,
                return_assistant_tokens_mask=True,
                **tokenizer.special_tokens_map,
            )
    except Exception:
        for conversation, sample in zip(conversations, samples, strict=True):
            _render(tokenizer, conversation, False, sample, "messages")
        raise
    texts, indices = rendered
    return list(texts), [[(int(a), int(b)) for a, b in spans] for spans in indices]


def _marked_spans(
    tokenizer: Any,
    messages: Sequence[Message],
    whole: str,
    blocks: list[tuple[int, int]],
    rules: LossRules,
    sample: int,
    shape: _Shape,
) -> list[tuple[int, int]]:
    """The spans the loss rules train in a chat whose template marks assistant turns with ``{% generation
    %}``: every block (what ``return_assistant_tokens_mask`` trains) under the default rules; otherwise
    block ``k`` is assistant turn ``k`` (cut at its content's end when its end of turn is not trained, or
    only its end of turn, after its content, for an untrained turn whose end is), and the turns of other
    roles are found by the chat's layout. O(messages + characters)."""
    trained = rules.trained(messages, sample)
    ends = rules.ends(trained)
    assistants = [turn for turn, message in enumerate(messages) if message.get("role") == "assistant"]
    others = [
        turn
        for turn, message in enumerate(messages)
        if (trained[turn] or ends[turn]) and message.get("role") != "assistant"
    ]
    if not others and all(trained[turn] and ends[turn] for turn in assistants):
        return blocks
    if len(blocks) != len(assistants):
        raise SampleError(
            sample,
            "messages",
            None,
            "a chat template with one {% generation %} block per assistant message (for these loss rules)",
            f"<{len(blocks)} blocks for {len(assistants)} assistant messages>",
        )
    spans = []
    for (start, end), turn in zip(blocks, assistants, strict=True):
        if not trained[turn] and not ends[turn]:
            continue
        if not (trained[turn] and ends[turn]):
            content = _content_in(whole, messages[turn], start, end)
            if content is None:
                if messages[turn].get("content") == "":
                    continue
                raise _unknown_content(sample, turn)
            start, end = (start, content[1]) if trained[turn] else (content[1], end)
        if end > start:
            spans.append((start, end))
    if others:
        layout = _layout(tokenizer, messages, sample, whole, shape) or _prefix_layout(
            tokenizer, messages, sample, others
        )
        chosen = [turn in others and trained[turn] for turn in range(len(messages))]
        their_ends = [turn in others and ends[turn] for turn in range(len(messages))]
        spans += _rule_spans(layout, messages, chosen, their_ends, sample)
    return sorted(spans)


def _encode_chats(
    tokenizer: Any, conversations: list[list[Message]], samples: list[int], rules: LossRules = _DEFAULT_RULES
) -> tuple[Encoded, Int8Array]:
    """Ids and loss masks of many conversations: each rendered once (one batch call of the template),
    all tokenized in one batch call with character offsets, the spans the loss ``rules`` train mapped to
    tokens (:func:`spans_mask`). With generation markers the spans start from the template's blocks (the
    masks of ``return_assistant_tokens_mask``); otherwise from the chat's layout (:func:`chat_spans`)."""
    if not rules.masks_anything:
        texts = _render_all(tokenizer, conversations, samples)
        encoded = encode_texts(tokenizer, texts, add_special_tokens=False)
        return encoded, np.ones(len(encoded.ids), dtype=np.int8)
    shape = _Shape()
    marked = _render_marked(tokenizer, conversations, samples) if has_generation_markers(tokenizer) else None
    if marked is not None:
        texts, blocks = marked
        spans = [
            _marked_spans(tokenizer, conversation, text, found, rules, sample, shape)
            for conversation, text, found, sample in zip(conversations, texts, blocks, samples, strict=True)
        ]
    elif has_generation_markers(tokenizer):  # pragma: no cover - older transformers
        return _encode_marked_by_transformers(tokenizer, conversations, samples)
    else:
        texts = _render_all(tokenizer, conversations, samples)
        spans = []
        for index, (conversation, sample) in enumerate(zip(conversations, samples, strict=True)):
            texts[index], found = chat_spans(tokenizer, conversation, sample, rules, whole=texts[index], shape=shape)
            spans.append(found)
    return encode_masked(tokenizer, texts, spans)


def _encode_marked_by_transformers(  # pragma: no cover - older transformers without render_jinja_template
    tokenizer: Any, conversations: list[list[Message]], samples: list[int]
) -> tuple[Encoded, Int8Array]:
    """Ids and assistant masks from the template's own ``return_assistant_tokens_mask`` (default rules)."""
    try:
        with _bounded_rendering(tokenizer, max(_text_size(c) for c in conversations)):
            out = tokenizer.apply_chat_template(
                conversations, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
            )
    except Exception:
        for conversation, sample in zip(conversations, samples, strict=True):
            _render(tokenizer, conversation, False, sample, "messages")
        raise
    ids, offsets = _flat(out["input_ids"])
    mask, _ = _flat(out["assistant_masks"])
    empty = np.zeros(0, dtype=np.int64)
    return Encoded(ids, empty, empty, offsets), mask.astype(np.int8)


def _encode_group(
    tokenizer: Any, form: TextForm, rows: list[_Row], samples: list[int], rules: LossRules
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
        if not rules.masks_anything:
            return ids, np.ones(len(ids), dtype=np.int8), offsets
        mask = (kind == 0).astype(np.int8)
        if not rules.completion_eos:  # every completion ends with the EOS (_with_eos): leave it out
            mask[offsets[1:] - 1] = 0
        return ids, mask, offsets
    if form == "messages":
        encoded, mask = _encode_chats(tokenizer, [list(row.parts[0]) for row in rows], samples, rules)
        return encoded.ids, mask, encoded.offsets
    texts, spans = [], []
    for row, sample in zip(rows, samples, strict=True):
        text, text_spans = _conversational_span(tokenizer, row.parts[0], row.parts[1], sample, rules.completion_eos)
        texts.append(text)
        spans.append(text_spans)
    if not rules.masks_anything:
        plain = encode_texts(tokenizer, texts, add_special_tokens=False)
        return plain.ids, np.ones(len(plain.ids), dtype=np.int8), plain.offsets
    encoded, mask = encode_masked(tokenizer, texts, spans)
    return encoded.ids, mask, encoded.offsets


def _encode_chunk(
    tokenizer: Any, rows: Sequence[Any], names: Sequence[int], rules: LossRules
) -> tuple[Int64Array, Int8Array, Int64Array]:
    """Ids, masks and per-row lengths of a chunk of rows: each form in one batch call, then the rows put
    back in their order (vectorized). O(characters + tokens)."""
    checked = [_check_row(row, name) for row, name in zip(rows, names, strict=True)]
    groups: dict[TextForm, list[int]] = {}
    for position, row in enumerate(checked):
        groups.setdefault(row.form, []).append(position)
    lengths = np.zeros(len(checked), dtype=np.int64)
    results = []
    for form, members in groups.items():
        ids, mask, offsets = _encode_group(
            tokenizer, form, [checked[m] for m in members], [int(names[m]) for m in members], rules
        )
        if len(groups) == 1:
            return ids, mask, np.diff(offsets)
        lengths[members] = np.diff(offsets)
        results.append((np.asarray(members, dtype=np.int64), ids, mask, offsets))
    starts = np.zeros(len(checked) + 1, dtype=np.int64)
    np.cumsum(lengths, out=starts[1:])
    out_ids = np.empty(int(starts[-1]), dtype=np.int64)
    out_mask = np.empty(int(starts[-1]), dtype=np.int8)
    for members_array, ids, mask, offsets in results:
        where = np.repeat(starts[members_array] - offsets[:-1], np.diff(offsets)) + np.arange(len(ids))
        out_ids[where] = ids
        out_mask[where] = mask
    return out_ids, out_mask, lengths


_WORKER: list[Any] = []
"""A tokenizing process's tokenizer and loss rules (set once when it starts)."""


def _start_worker(tokenizer: Any, rules: LossRules) -> None:
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one thread per process: the processes are the parallelism
    _WORKER[:] = [tokenizer, rules]


def _worker_chunk(rows: Sequence[Any], names: Sequence[int]) -> tuple[Int64Array, Int8Array, Int64Array]:
    return _encode_chunk(_WORKER[0], rows, names, _WORKER[1])


def chunk_bounds(rows: int, num_proc: int = 1) -> list[tuple[int, int]]:
    """``[start, stop)`` of the chunks ``rows`` rows are tokenized in: at most ``_CHUNK_ROWS`` each; for
    ``num_proc`` processes and more than one chunk's rows, a multiple of ``num_proc`` chunks of equal size
    (give or take a row), so that no process is left with the last chunk alone. O(chunks).

    >>> chunk_bounds(5000), chunk_bounds(5000, num_proc=2)
    ([(0, 2048), (2048, 4096), (4096, 5000)], [(0, 1250), (1250, 2500), (2500, 3750), (3750, 5000)])
    """
    if num_proc <= 1 or rows <= _CHUNK_ROWS:  # one chunk is not worth starting processes for
        return [(start, min(start + _CHUNK_ROWS, rows)) for start in range(0, rows, _CHUNK_ROWS)]
    count = num_proc * -(-rows // (num_proc * _CHUNK_ROWS))
    return list(itertools.pairwise(rows * index // count for index in range(count + 1)))


def _chunks(
    tokenizer: Any, row_list: Sequence[Any], names: Sequence[int], rules: LossRules, num_proc: int
) -> Iterator[tuple[Int64Array, Int8Array, Int64Array]]:
    """Every chunk (:func:`chunk_bounds`) encoded, in order: here, or by ``num_proc`` processes (forked
    where the platform can, so the tokenizer is not copied; each chunk's rows sent to one process and its
    arrays sent back, taken in the input order, so the result is the one process's)."""
    import multiprocessing

    # a daemonic process (a pool's worker, a server's) may not start processes: it tokenizes every chunk itself
    if multiprocessing.current_process().daemon:
        num_proc = 1
    bounds = chunk_bounds(len(row_list), num_proc)
    if num_proc <= 1 or len(bounds) <= 1:
        for start, stop in bounds:
            yield _encode_chunk(tokenizer, row_list[start:stop], names[start:stop], rules)
        return
    from concurrent.futures import ProcessPoolExecutor

    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    pool = ProcessPoolExecutor(
        min(num_proc, len(bounds)), mp_context=context, initializer=_start_worker, initargs=(tokenizer, rules)
    )
    try:
        yield from pool.map(_worker_chunk, [row_list[a:b] for a, b in bounds], [list(names[a:b]) for a, b in bounds])
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def encode_rows(
    rows: Iterable[Any],
    tokenizer: Any,
    *,
    completion_only_loss: bool = True,
    loss_rules: LossRules | None = None,
    num_proc: int | None = None,
    indices: Sequence[int] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[Int64Array, Int8Array, Int64Array]:
    """Tokenize text rows: flat ``tokens`` (int64), ``loss_mask`` (int8) and ``offsets`` (int64, n + 1).

    Row ``i`` is ``tokens[offsets[i]:offsets[i + 1]]``. What is trained follows ``loss_rules``
    (:class:`packing.loss.LossRules`: ``loss``, ``roles_to_train``, ``train_on_eos``, and each message's
    ``weight``); without them ``completion_only_loss`` chooses ``completion`` (True) or ``all``. Rows are
    tokenized in chunks, each form of a chunk in one batch call; ``num_proc`` processes share the chunks
    (same result, same order, as one process; a daemonic process, which may not start any, does it alone). ``indices[i]`` is how errors number row ``i`` (default
    ``i``); ``progress(done, total)`` is called after each chunk with the number of rows done. Every row
    must be text (:func:`is_text_row`); errors are :class:`SampleError` (the row) or
    :class:`SettingError` (the tokenizer). O(characters), one template rendering per chat (see
    :func:`chat_spans`).

    >>> chat = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    >>> tokens, mask, offsets = encode_rows([{"messages": chat}], "bytes")
    >>> ByteTokenizer().decode(tokens[mask == 1])
    'b<|im_end|>\\n'
    >>> tokens, mask, offsets = encode_rows([{"messages": chat}], "bytes", loss_rules=LossRules(train_on_eos=False))
    >>> ByteTokenizer().decode(tokens[mask == 1])
    'b'
    """
    rules = LossRules.of(loss_rules, completion_only_loss)
    processes = 1
    if num_proc is not None:
        from packing.validation import check_positive_int

        processes = check_positive_int(num_proc, "num_proc")
    tokenizer = load_tokenizer(tokenizer)
    if isinstance(rows, (str, bytes, Mapping)) or not isinstance(rows, Iterable):
        raise SettingError("rows", "a list of text rows", rows)
    row_list = rows if isinstance(rows, Sequence) else list(rows)
    if indices is not None and len(indices) != len(row_list):
        raise SettingError("indices", f"{len(row_list)} indices, one per row", f"<{len(indices)} indices>")
    names = [int(i) for i in indices] if indices is not None else range(len(row_list))
    ids_parts: list[Int64Array] = []
    mask_parts: list[Int8Array] = []
    lengths: list[Int64Array] = []
    done = 0
    for ids, mask, chunk_lengths in _chunks(tokenizer, row_list, names, rules, processes):
        ids_parts.append(ids)
        mask_parts.append(mask)
        lengths.append(chunk_lengths)
        if progress is not None:
            done += len(chunk_lengths)
            progress(done, len(row_list))
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
    loss_rules: LossRules | None = None,
    num_proc: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Samples:
    """Rows of any form as one :class:`~packing.reader.Samples`: text rows tokenized (:func:`encode_rows`),
    every other row read by :func:`packing.reader.read_rows`; errors number rows from 0 in the input order.
    ``loss_rules`` and ``num_proc`` as :func:`encode_rows` takes them. O(characters + tokens).

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
        loss_rules=loss_rules,
        num_proc=num_proc,
        indices=positions,
        progress=progress,
    )
    if len(positions) == len(row_list):
        return Samples(tokens, mask, offsets)
    for slot, index in enumerate(positions):
        start, end = offsets[slot], offsets[slot + 1]
        row_list[index] = {"input_ids": tokens[start:end], "loss_mask": mask[start:end]}
    return read_rows(row_list, completion_only_loss=LossRules.of(loss_rules, completion_only_loss).masks_anything)
