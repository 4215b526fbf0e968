"""Chat templates rendered as transformers renders them: the text ``apply_chat_template`` gives, the generation
blocks' spans ``render_jinja_template`` finds, a template's failure named by its sample.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from packing.errors import SampleError
from packing.text._chats import render_marked
from packing.text._templates import has_generation_markers, render
from packing.text._text_rows import encode_rows
from packing.text._tokenizers import load_tokenizer

pytest.importorskip("tokenizers")
pytest.importorskip("transformers")

from tests.helpers.text_fixtures import CHATML, MARKED, save_tokenizer


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from packing.text._tokenizers import load_tokenizer

    root = tmp_path_factory.mktemp("bound")
    reasoning = (
        "{%- for m in messages -%}{{- '<|im_start|>' + m['role'] + '\\n' -}}"
        "{%- if m.get('reasoning_content') -%}{{- '[' + m['reasoning_content'] + '|' + m.get('thinking', '') + ']' -}}"
        "{%- endif -%}{{- m.get('content') | string -}}{{- ' tools' if m.get('tool_calls') is not none else '' -}}"
        "{{- '<|im_end|>\\n' -}}{%- endfor -%}{{- eos_token -}}"
        "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
    )
    return {
        name: load_tokenizer(str(save_tokenizer(root / name, template)))
        for name, template in (("chatml", CHATML), ("marked", MARKED), ("reasoning", reasoning))
    }


CHATS = [
    [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
    [
        {"role": "system", "content": "Be brief.", "tool_calls": None},
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4", "reasoning_content": "sum", "tool_calls": None},
        {"role": "assistant", "content": None, "thinking": "more", "tool_calls": [{"name": "f"}]},
    ],
]


@pytest.mark.parametrize("name", ["chatml", "reasoning"])
@pytest.mark.parametrize("generation_prompt", [False, True])
def test_the_rendering_is_transformers_text(tokenizers: dict[str, Any], name: str, generation_prompt: bool) -> None:
    tokenizer = tokenizers[name]
    for chat in CHATS if name == "reasoning" else CHATS[:1]:
        expected = tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=generation_prompt)
        assert render(tokenizer, chat, generation_prompt, 0, "messages") == expected


def test_the_marked_rendering_is_transformers_spans(tokenizers: dict[str, Any]) -> None:
    from transformers.utils.chat_template_utils import render_jinja_template

    tokenizer = tokenizers["marked"]
    chats = [CHATS[0], [{**message, "tool_calls": None} for message in CHATS[0]]]
    plain = [[{k: v for k, v in m.items() if v is not None} for m in chat] for chat in chats]
    expected = render_jinja_template(
        conversations=plain,
        chat_template=tokenizer.get_chat_template(),
        return_assistant_tokens_mask=True,
        **tokenizer.special_tokens_map,
    )
    texts, spans = render_marked(tokenizer, chats, [0, 1])
    assert (texts, spans) == (list(expected[0]), [[tuple(span) for span in found] for found in expected[1]])


def test_a_dict_of_named_templates_renders_its_default(tokenizers: dict[str, Any]) -> None:
    named = copy.copy(tokenizers["chatml"])
    named.chat_template = {"default": CHATML, "tool_use": MARKED}
    assert not has_generation_markers(named)
    expected = named.apply_chat_template(CHATS[0], tokenize=False)
    assert render(named, CHATS[0], False, 0, "messages") == expected
    tokens, _, _ = encode_rows([{"messages": CHATS[0]}], named)
    assert named.decode(tokens.tolist()) == expected


def test_an_empty_conversation_is_refused_as_transformers_refuses_it(tokenizers: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="empty conversation"):
        tokenizers["chatml"].apply_chat_template([], tokenize=False)
    with pytest.raises(SampleError, match="a conversation the chat template can render, got <an empty conversation>"):
        render(tokenizers["chatml"], [], True, 3, "prompt")


def test_a_users_template_renders_in_full_as_transformers_renders_it(tmp_path: Path) -> None:
    """No cap of packing's own: a template that writes a million characters (whatever it does, the user's own
    template runs as ``apply_chat_template`` runs it; the explorer bounds a stranger's in its worker process)."""
    long = "{%- for i in range(99999) -%}0123456789{%- endfor -%}{%- for m in messages -%}{{- m['content'] -}}{%- endfor -%}"
    tokenizer = load_tokenizer(str(save_tokenizer(tmp_path / "long", CHATML)), chat_template=long)
    tokens, mask, _ = encode_rows([{"messages": CHATS[0]}], tokenizer)
    assert tokenizer.decode(tokens.tolist()) == tokenizer.apply_chat_template(CHATS[0], tokenize=False)
    assert len(tokenizer.decode(tokens.tolist())) == 999_990 + len("hiyo")
    assert tokenizer.decode(tokens[mask == 1].tolist()) == "yo"
