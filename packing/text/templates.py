"""Chat templates rendered in transformers' Jinja sandbox with a bound on the output's size, per call.
Internal.
"""

from __future__ import annotations

import contextlib
import contextvars
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from packing.errors import SampleError, SettingError

if TYPE_CHECKING:  # pragma: no cover - typing only; imported where used, so io and reader may import this module
    pass
from packing.core.forms import Message
from packing.text.tokenizers import ByteTokenizer, tokenizer_name

_GENERATION_MARKER = re.compile(r"\{%-?\s*generation\s*-?%\}")


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


def has_generation_markers(tokenizer: Any) -> bool:
    """Whether the tokenizer's chat template marks assistant turns with ``{% generation %}``.

    >>> has_generation_markers(ByteTokenizer())
    False
    """
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):
        template = template.get("default")
    return isinstance(template, str) and _GENERATION_MARKER.search(template) is not None


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
