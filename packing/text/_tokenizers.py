"""Tokenizers: the built-in byte tokenizer, loading a folder, a tokenizer.json, a .tiktoken file or a hub name,
and a chat template set on a copy. Internal: the public names are in ``packing``.
"""

from __future__ import annotations

import base64
import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from packing.core._forms import Message
from packing.errors import SettingError, first_line

Int64Array = npt.NDArray[np.int64]
Int8Array = npt.NDArray[np.int8]


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
    huggingface_hub is offline (``HF_HUB_OFFLINE``; then it never goes online); a hub that does not answer
    within huggingface_hub's own timeout (``HF_HUB_ETAG_TIMEOUT``, 10 s by default) fails at once instead of
    after ``transformers``' retries.
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
                "tokenizer", expected, f"<{text!r}: {kind} that cannot be loaded ({first_line(error)})>"
            ) from None
    try:
        return transformers.AutoTokenizer.from_pretrained(text, local_files_only=True, trust_remote_code=False)
    except Exception as error:
        cached_reason = first_line(error)
    if local_files_only or _offline():
        raise SettingError("tokenizer", expected, f"<{text!r}: not a folder, and not in the local cache (offline)>")
    if not _hub_answers(text):
        raise SettingError(
            "tokenizer", expected, f"<{text!r}: not a folder, not in the local cache, and the hub cannot be reached>"
        )
    try:
        return transformers.AutoTokenizer.from_pretrained(text, trust_remote_code=False)
    except Exception as error:
        online = first_line(error)
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
    sandbox, so a syntax error is a ``SettingError`` at once. The tokenizer given is left as it was. O(template).

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
        raise SettingError("chat_template", "a Jinja template that compiles", f"<{first_line(error)}>") from None
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
        raise SettingError("chat_template", expected, f"<{str(path)!r}: {first_line(error)}>") from None
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


def _tiktoken_ranks(file: Path) -> dict[bytes, int]:
    """The ranks of a ``.tiktoken`` file (lines of ``base64-token rank``), checked: a bad line is named, the
    ranks are distinct. O(file)."""
    expected = "a .tiktoken file: lines of 'base64-token rank'"
    try:
        lines = file.read_text(encoding="ascii").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise SettingError("tokenizer", expected, f"<{str(file)!r}: {first_line(error)}>") from None
    ranks: dict[bytes, int] = {}
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        parts = line.split()
        try:
            token, rank = base64.b64decode(parts[0], validate=True), int(parts[1])
            if len(parts) != 2 or not token or rank < 0:
                raise ValueError
        except (ValueError, IndexError):
            raise SettingError("tokenizer", expected, f"<{file.name} line {number}: {line[:40]!r}>") from None
        ranks[token] = rank
    if not ranks or len(set(ranks.values())) != len(ranks):
        raise SettingError("tokenizer", expected + " (distinct ranks)", f"<{file.name}: {len(ranks)} tokens>")
    return ranks


def tiktoken_tokenizer(path: str | os.PathLike[str]) -> Any:
    """A fast (Rust) tokenizer from a ``.tiktoken`` file (lines of ``base64-token rank``), converted by
    transformers' own ``TikTokenConverter``: the same byte-level BPE, the text split by ``TIKTOKEN_PATTERN``,
    ``TIKTOKEN_SPECIAL_TOKENS`` after the ranks (EOS is ``<|endoftext|>``); no chat template (give one with
    ``chat_template``). The file is read and checked here (a bad line is named), so ``tiktoken`` itself is not
    needed; ``transformers`` is. O(vocabulary × token length) to build the merges.
    """
    try:
        from transformers import PreTrainedTokenizerFast
        from transformers.convert_slow_tokenizer import TikTokenConverter
    except ImportError:
        raise SettingError(
            "tokenizer", "transformers installed to read a .tiktoken file (pip install transformers)", str(path)
        ) from None
    file = Path(path)
    ranks = _tiktoken_ranks(file)

    class Converter(TikTokenConverter):
        @staticmethod
        def load_tiktoken_bpe(_url: str) -> dict[bytes, int]:
            return ranks  # read and checked above: tiktoken need not be installed

    convert: Any = Converter
    backend = convert(str(file), TIKTOKEN_PATTERN, extra_special_tokens=list(TIKTOKEN_SPECIAL_TOKENS)).converted()
    first = max(ranks.values()) + 1
    if [backend.token_to_id(special) for special in TIKTOKEN_SPECIAL_TOKENS] != list(
        range(first, first + len(TIKTOKEN_SPECIAL_TOKENS))
    ):
        expected = "a .tiktoken file: lines of 'base64-token rank' (ranks 0..n-1)"
        raise SettingError("tokenizer", expected, f"<{file.name}: ranks with gaps>")
    wrapper: Any = PreTrainedTokenizerFast
    tokenizer = wrapper(tokenizer_object=backend, eos_token=TIKTOKEN_SPECIAL_TOKENS[0])
    tokenizer.name_or_path = str(file)
    return tokenizer


def _offline() -> bool:
    """huggingface_hub's offline mode: ``HF_HUB_OFFLINE`` (or ``TRANSFORMERS_OFFLINE``) true as it reads them,
    when it was imported or set since (the hub reads them once). O(1)."""
    from huggingface_hub import constants, is_offline_mode

    now = (os.environ.get(name, "").upper() in constants.ENV_VARS_TRUE_VALUES for name in _OFFLINE_VARIABLES)
    return is_offline_mode() or any(now)


_OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")


def _hub_answers(name: str) -> bool:
    """Whether the hub answers a question about ``name`` at all (any HTTP status), asked once through
    huggingface_hub's own client (its endpoint, proxies and token) within its own timeout
    (``HF_HUB_ETAG_TIMEOUT``): a hub that does not answer takes ``transformers`` about 50 s of retries to
    fail. A name the client refuses is left to ``transformers`` to word. O(1).
    """
    from huggingface_hub import constants, model_info
    from huggingface_hub.errors import HfHubHTTPError

    try:
        model_info(name, timeout=constants.HF_HUB_ETAG_TIMEOUT)
    except (HfHubHTTPError, ValueError):  # an answer (no such repository, gated, ...), or a name refused
        return True
    except Exception:  # no answer: no network, no such host, refused, timed out
        return False
    return True


def tokenizer_name(tokenizer: Any) -> str:
    """How messages name a tokenizer: its ``name_or_path`` or its class.

    >>> tokenizer_name(ByteTokenizer())
    'bytes'
    """
    name = getattr(tokenizer, "name_or_path", None)
    return str(name) if name else type(tokenizer).__name__
