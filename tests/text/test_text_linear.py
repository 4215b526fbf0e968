"""Chat masks from one rendering: the same spans as prefix by prefix, in O(1) renderings per chat.

The prefix-by-prefix path (``_prefix_spans``, what every chat went through before) is the reference:
on random chats and several templates (real ``PreTrainedTokenizerFast`` folders trained on the spot,
and the byte tokenizer) the one-rendering path must give the same text and spans, or the same error.
Linearity is checked by counting renderings, not by timing.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from packing.errors import SampleError
from packing.text._chats import MAX_PREFIX_TURNS, _prefix_spans, chat_spans, turn_bounds
from packing.text._text_rows import encode_rows
from packing.text._tokenizers import ByteTokenizer

pytest.importorskip("tokenizers")
pytest.importorskip("transformers")

from tests.helpers.text_fixtures import CHATML, LAST_TURN_SPECIAL, save_tokenizer

BODY = CHATML.split("{%- if add_generation_prompt")[0]
DEFAULT_SYSTEM = (
    "{%- if messages and messages[0]['role'] != 'system' -%}"
    "{{- '<|im_start|>system\\nYou are helpful.<|im_end|>\\n' -}}{%- endif -%}" + CHATML
)
"""A Qwen-like template: a default system message when the chat has none."""
TRIMMED = (
    "{%- for m in messages -%}{{- '<|' + m['role'] + '|>\\n' + m['content'] | trim + '<|endoftext|>\\n' -}}"
    "{%- endfor -%}{%- if add_generation_prompt -%}{{- '<|assistant|>\\n' -}}{%- endif -%}"
)
"""A Zephyr-like template that trims content: contents with spaces around cannot be found as given."""
PROMPT_BY_ROLE = (
    BODY + "{%- if add_generation_prompt -%}{%- if messages[-1]['role'] == 'tool' -%}{{- '<|im_start|>assistant\\n"
    "(after a tool) ' -}}{%- else -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}{%- endif -%}"
)
"""A template whose generation prompt depends on the message before it."""
SEPARATED = (
    "{%- for m in messages -%}{%- if not loop.first -%}{{- '\\n\\n' -}}{%- endif -%}"
    "{{- m['role'] + ': ' + m['content'] -}}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '\\n\\nassistant: ' -}}{%- endif -%}"
)
"""Messages joined by a separator that comes before each message but the first."""
TEMPLATES = {
    "chatml": CHATML,
    "default_system": DEFAULT_SYSTEM,
    "trimmed": TRIMMED,
    "prompt_by_role": PROMPT_BY_ROLE,
    "separated": SEPARATED,
    "last": LAST_TURN_SPECIAL,
}


class CountingBytes(ByteTokenizer):
    """The byte tokenizer, counting its renderings."""

    def __init__(self) -> None:
        super().__init__()
        self.renders = 0

    def apply_chat_template(self, *args: Any, **kwargs: Any) -> str | list[int]:
        self.renders += 1
        return super().apply_chat_template(*args, **kwargs)


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from packing.text._tokenizers import load_tokenizer

    root = tmp_path_factory.mktemp("linear")
    out: dict[str, Any] = {"bytes": ByteTokenizer()}
    for name, template in TEMPLATES.items():
        out[name] = load_tokenizer(str(save_tokenizer(root / name, template)))
    return out


def outcome(function: Any, *args: Any) -> Any:
    """A function's result, or its error's type and text."""
    try:
        return function(*args)
    except SampleError as error:
        return type(error), str(error)


pieces = st.sampled_from(["hi", "user", "assistant", "a", " ", "\n", "<|im_end|>", "日本", "2+2", "ok."])
contents = st.lists(pieces, max_size=5).map("".join)
messages = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "system", "tool"]), "content": contents}
)
chats = st.lists(messages, min_size=1, max_size=8)


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(chat=chats, name=st.sampled_from(["bytes", *TEMPLATES]))
def test_one_rendering_gives_the_prefix_spans(
    tokenizers: dict[str, Any], chat: list[dict[str, str]], name: str
) -> None:
    tokenizer = tokenizers[name]
    assert outcome(chat_spans, tokenizer, chat, 0) == outcome(_prefix_spans, tokenizer, chat, 0)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(chat=chats, name=st.sampled_from(["bytes", *TEMPLATES]))
def test_turn_bounds_are_the_prefix_renderings(
    tokenizers: dict[str, Any], chat: list[dict[str, str]], name: str
) -> None:
    tokenizer = tokenizers[name]
    expected: Any
    try:
        whole = tokenizer.apply_chat_template(chat, tokenize=False)
        prefixes = [tokenizer.apply_chat_template(chat[:turn], tokenize=False) for turn in range(1, len(chat))]
        expected = (whole, [0, *map(len, prefixes)]) if all(map(whole.startswith, prefixes)) else SampleError
    except Exception:
        expected = SampleError
    got = outcome(turn_bounds, tokenizer, chat)
    assert got[0] is SampleError if expected is SampleError else got == expected


def long_chat(turns: int) -> list[dict[str, str]]:
    roles = ["system", *["user", "assistant"] * turns][:turns]
    return [{"role": role, "content": f"turn {index}: hello"} for index, role in enumerate(roles)]


@pytest.mark.parametrize("turns", [10, 1000, 5000])
def test_a_chat_is_rendered_a_constant_number_of_times(turns: int) -> None:
    tokenizer = CountingBytes()
    tokens, mask, _ = encode_rows([{"messages": long_chat(turns)}], tokenizer)
    assert tokenizer.renders <= 6  # the whole, message 0, one probe per role, one generation prompt
    tokenizer.renders = 0
    turn_bounds(tokenizer, long_chat(turns))
    assert tokenizer.renders <= 4
    # the mask is every assistant turn's content and end of turn
    trained = ByteTokenizer().decode(tokens[mask == 1])
    assert trained == "".join(f"{m['content']}<|im_end|>\n" for m in long_chat(turns) if m["role"] == "assistant")


def test_long_chats_with_a_real_template_too(tokenizers: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    from packing.text import _templates as templates

    tokenizer = tokenizers["default_system"]
    calls = []
    original = templates._rendered

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(templates, "_rendered", counted)
    chat = long_chat(2001)[1:]  # no system message: the template adds its own
    whole, spans = chat_spans(tokenizer, chat)
    assert len(calls) <= 6 and len(spans) == 1000
    assert whole[spans[0][0] : spans[0][1]] == "turn 2: hello<|im_end|>\n"  # numbered as in long_chat


@pytest.mark.slow
def test_a_long_chat_that_needs_the_prefix_path_is_refused_in_one_line(tokenizers: dict[str, Any]) -> None:
    chat: list[dict[str, Any]] = long_chat(MAX_PREFIX_TURNS + 1)
    chat[3] = {"role": "assistant", "content": None, "tool_calls": [{"name": "f"}]}  # no content to find
    tokenizer = CountingBytes()
    with pytest.raises(SampleError, match=r"at most 1,024 messages .*got <1,025 messages>$") as caught:
        encode_rows([{"messages": chat}], tokenizer)
    assert (caught.value.sample, caught.value.field) == (0, "messages")
    assert tokenizer.renders <= 3
    with pytest.raises(SampleError, match="at most 1,024 messages"):
        turn_bounds(tokenizers["last"], long_chat(MAX_PREFIX_TURNS + 1))
    # at the limit the prefix path still runs, and gives the tool call's turn its tokens
    tokens, mask, _ = encode_rows([{"messages": chat[:MAX_PREFIX_TURNS]}], "bytes")
    assert '[{"name": "f"}]<|im_end|>' in ByteTokenizer().decode(tokens[mask == 1])
    assert int(np.sum(mask)) > 0
