"""Chat templates rendered by this project in transformers' Jinja sandbox (its compiled templates, read and
never patched), with a bound on each rendering's size. Internal.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

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

Spans = list[tuple[int, int]]


class _RenderTooLarge(Exception):
    """A rendering went past its cap (the first argument)."""


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


def _too_large(sample: int, field: str, cap: int) -> SampleError:
    return SampleError(
        sample, field, None, f"a chat template rendering of at most {cap:,} characters", "<a longer rendering>"
    )


def _transformers_step(name: str) -> Callable[[Any], Any]:
    """transformers' own step ``name`` of preparing what a chat template sees (``chat_template_utils``), or
    no change with a transformers that does not take that step."""
    from transformers.utils import chat_template_utils

    step: Callable[[Any], Any] | None = getattr(chat_template_utils, name, None)
    return step if callable(step) else (lambda value: value)


def _compiled(tokenizer: Any) -> Any:
    """The tokenizer's chat template (the one transformers picks from a dict of named templates) compiled
    in transformers' Jinja sandbox, by its own compiler (cached there); read, never replaced."""
    try:
        from transformers.utils.chat_template_utils import _compile_jinja_template
    except ImportError as error:  # pragma: no cover - transformers without its chat template module
        raise SettingError("tokenizer", "transformers with its chat template sandbox", f"<{error}>") from None
    getter = getattr(tokenizer, "get_chat_template", None)
    return _compile_jinja_template(getter() if callable(getter) else tokenizer.chat_template)


def _variables(tokenizer: Any, messages: Sequence[Message], generation_prompt: bool) -> dict[str, Any]:
    """What transformers' ``apply_chat_template`` hands the template for one conversation: the messages
    without their keys whose value is None, as plain data, reasoning under the names templates read; no
    tools or documents; the generation prompt flag; the tokenizer's special tokens. O(size)."""
    normalize = _transformers_step("_normalize_chat_messages")
    plain = _transformers_step("_plain_template_data")
    chat = plain(normalize(list(messages)))
    return {
        "messages": _transformers_step("_alias_reasoning_fields")(chat),
        "tools": None,
        "documents": None,
        "add_generation_prompt": generation_prompt,
        **plain(dict(getattr(tokenizer, "special_tokens_map", {}))),
    }


def _blocks(template: Any, variables: dict[str, Any]) -> Iterator[str]:
    """The template's output, block by block (``Template.generate``, what ``render`` joins)."""
    return iter(template.generate(**variables))


def _bounded(template: Any, variables: dict[str, Any], cap: int, marked: bool) -> tuple[str, Spans]:
    """The template rendered with ``variables``, stopped (:class:`_RenderTooLarge`) once its output passes
    ``cap`` characters; with ``marked``, the character spans of its ``{% generation %}`` blocks too, from
    the assistant tracker transformers' sandbox holds, activated as ``render_jinja_template`` does."""
    blocks: list[str] = []
    spans: Spans = []
    tracker = template.environment.activate_tracker(blocks, spans) if marked else contextlib.nullcontext()
    size = 0
    with tracker:
        for block in _blocks(template, variables):
            size += len(block)
            if size > cap:
                raise _RenderTooLarge(cap)
            blocks.append(block)
    return "".join(blocks), [(int(start), int(end)) for start, end in spans]


def _rendered(
    tokenizer: Any, messages: Sequence[Message], generation_prompt: bool, cap: int, marked: bool
) -> tuple[str, Spans]:
    """The text (and with ``marked`` the generation blocks' spans) of ``messages``: the byte tokenizer's own
    ChatML (linear in the messages), or the tokenizer's chat template bounded at ``cap`` characters."""
    if isinstance(tokenizer, ByteTokenizer):
        text = tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=generation_prompt)
        return cast(str, text), []
    if not messages and not marked:  # as apply_chat_template refuses it
        raise ValueError("an empty conversation")
    return _bounded(_compiled(tokenizer), _variables(tokenizer, messages, generation_prompt), cap, marked)


def rendering(
    tokenizer: Any, messages: Sequence[Message], generation_prompt: bool, sample: int, field: str, marked: bool = False
) -> tuple[str, Spans]:
    """The chat template's text for ``messages`` (and with ``marked`` its generation blocks' spans), as
    transformers renders it; a template error names the sample. The rendering is stopped past
    ``RENDER_FACTOR`` × the messages' characters + ``RENDER_SLACK`` (a :class:`SampleError`)."""
    if not isinstance(tokenizer, ByteTokenizer) and (
        not callable(getattr(tokenizer, "apply_chat_template", None)) or not getattr(tokenizer, "chat_template", None)
    ):
        raise SettingError("tokenizer", "a tokenizer with a chat template (for chat rows)", tokenizer_name(tokenizer))
    cap = RENDER_FACTOR * _text_size(messages) + RENDER_SLACK
    try:
        return _rendered(tokenizer, messages, generation_prompt, cap, marked)
    except SettingError:
        raise
    except _RenderTooLarge:
        raise _too_large(sample, field, cap) from None
    except Exception as error:
        message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise SampleError(
            sample, field, None, "a conversation the chat template can render", f"<{message[:60]}>"
        ) from None


def render(tokenizer: Any, messages: Sequence[Message], generation_prompt: bool, sample: int, field: str) -> str:
    """The chat template's text for ``messages`` (:func:`rendering`, bounded the same way)."""
    return rendering(tokenizer, messages, generation_prompt, sample, field)[0]


def prefix_error(sample: int, field: str, turn: int) -> SampleError:
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


def render_all(tokenizer: Any, conversations: list[list[Message]], samples: list[int]) -> list[str]:
    """Every conversation rendered (no generation prompt), each capped as :func:`render` caps it; a
    failure is reported for the first conversation that fails, as :func:`render` words it."""
    return [render(tokenizer, c, False, s, "messages") for c, s in zip(conversations, samples, strict=True)]
