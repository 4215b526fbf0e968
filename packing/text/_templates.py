"""Chat templates rendered as transformers renders them (``render_jinja_template``, what ``apply_chat_template``
calls, in its Jinja sandbox), with the ``{% generation %}`` blocks' character spans; a failure is named by its
sample. A rendering runs as long as the template makes it, as in transformers: the user's own template is the
user's to run. A server that renders chats for strangers bounds the process that renders them (the explorer's
load lane: a deadline and a memory limit). Internal.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, cast

from packing.core._forms import Message
from packing.errors import SampleError, SettingError, first_line
from packing.text._tokenizers import ByteTokenizer, tokenizer_name

_GENERATION_MARKER = re.compile(r"\{%-?\s*generation\s*-?%\}")

Spans = list[tuple[int, int]]


def _rendered(tokenizer: Any, messages: Sequence[Message], generation_prompt: bool, marked: bool) -> tuple[str, Spans]:
    """The text of ``messages`` (and with ``marked`` the spans of its generation blocks): the byte tokenizer's own
    ChatML, or transformers' ``render_jinja_template`` given what ``apply_chat_template`` gives it (the messages
    without their keys whose value is None, the tokenizer's special tokens). O(the template's work)."""
    if isinstance(tokenizer, ByteTokenizer):
        text = tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=generation_prompt)
        return cast(str, text), []
    if not messages and not marked:  # as apply_chat_template refuses it
        raise ValueError("an empty conversation")
    from transformers.utils.chat_template_utils import render_jinja_template

    rendered: Any = render_jinja_template(  # annotated as a str, it returns the texts and the blocks' spans
        conversations=[[{key: value for key, value in m.items() if value is not None} for m in messages]],
        chat_template=tokenizer.get_chat_template(),
        return_assistant_tokens_mask=marked,
        add_generation_prompt=generation_prompt,
        **tokenizer.special_tokens_map,
    )
    texts, blocks = rendered
    return texts[0], [(int(start), int(end)) for start, end in blocks[0]] if marked else []


def rendering(
    tokenizer: Any, messages: Sequence[Message], generation_prompt: bool, sample: int, field: str, marked: bool = False
) -> tuple[str, Spans]:
    """The chat template's text for ``messages`` (and with ``marked`` its generation blocks' spans), as
    transformers renders it; a template error names the sample (a :class:`SampleError`).

    >>> rendering(ByteTokenizer(), [{"role": "user", "content": "hi"}], True, 0, "messages")
    ('<|im_start|>user\\nhi<|im_end|>\\n<|im_start|>assistant\\n', [])
    """
    if not isinstance(tokenizer, ByteTokenizer) and (
        not callable(getattr(tokenizer, "apply_chat_template", None)) or not getattr(tokenizer, "chat_template", None)
    ):
        raise SettingError("tokenizer", "a tokenizer with a chat template (for chat rows)", tokenizer_name(tokenizer))
    try:
        return _rendered(tokenizer, messages, generation_prompt, marked)
    except MemoryError:  # the process's limit, not the template's error
        raise
    except Exception as error:
        raise SampleError(
            sample, field, None, "a conversation the chat template can render", f"<{first_line(error, 60)}>"
        ) from None


def render(tokenizer: Any, messages: Sequence[Message], generation_prompt: bool, sample: int, field: str) -> str:
    """The chat template's text for ``messages`` (:func:`rendering`)."""
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
    """Every conversation rendered (no generation prompt); a failure is reported for the first conversation that
    fails, as :func:`render` words it."""
    return [render(tokenizer, c, False, s, "messages") for c, s in zip(conversations, samples, strict=True)]
