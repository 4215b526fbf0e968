"""Chat templates rendered by packing itself, bounded per call: transformers is left as it was.

Packing renders a chat template with transformers' compiled template (its sandbox) and stops the output
past its cap; it must not replace anything in transformers for the process, and must give the text and
generation spans transformers gives.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from packing.errors import SampleError
from packing.text._chats import render_marked
from packing.text._templates import has_generation_markers, render
from packing.text._text_rows import encode_rows

pytest.importorskip("tokenizers")
pytest.importorskip("transformers")

from tests.helpers.text_fixtures import CHATML, MARKED, save_tokenizer

ROOT = Path(__file__).resolve().parents[2]

CLEAN_INTERPRETER = """
import json, sys
from pathlib import Path
from transformers.utils import chat_template_utils
original = chat_template_utils._compile_jinja_template
import packing
from packing.errors import SampleError
from tests.helpers.text_fixtures import CHATML, MARKED, save_tokenizer

root = Path(sys.argv[1])
chat = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
for name, template in (("chatml", CHATML), ("marked", MARKED)):
    tokenizer = packing.load_tokenizer(str(save_tokenizer(root / name, template)))
    packing.encode_rows([{"messages": chat}], tokenizer)
loops = "{%- for a in range(3000) -%}{%- for b in range(3000) -%}x{%- endfor -%}{%- endfor -%}"
tokenizer = packing.load_tokenizer(str(save_tokenizer(root / "loops", loops)))
try:
    packing.encode_rows([{"messages": chat}], tokenizer)
    error = None
except SampleError as caught:
    error = str(caught)
same = chat_template_utils._compile_jinja_template is original
print(json.dumps({"same": same, "error": error}))
"""


@pytest.mark.slow
def test_packing_leaves_transformers_compiler_as_it_was(tmp_path: Path) -> None:
    """In a clean interpreter: after packing chats through real tokenizers (plain and marked templates),
    transformers' template compiler is still its own function, and a template of nested loops is still
    stopped at the cap."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", CLEAN_INTERPRETER, str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["same"] is True
    assert (
        result["error"] is not None and "a chat template rendering of at most 1,049,200 characters" in result["error"]
    )


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
    with pytest.raises(SampleError, match="a conversation the chat template can render, got <an empty conversation>"):
        render(tokenizers["chatml"], [], True, 3, "prompt")
