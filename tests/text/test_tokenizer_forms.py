"""More tokenizer forms: a ``.tiktoken`` file (built here), a chat template given as text or as a file, tool
calls through a template that renders them, and folders that ask for custom code refused in one line without a
prompt (a subprocess with standard input closed)."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import packing
import packing.core
import packing.text
from packing import Recipe
from packing.errors import SampleError, SettingError
from packing.text._text_rows import encode_rows
from packing.text._tokenizers import load_tokenizer, tiktoken_tokenizer

pytest.importorskip("tokenizers")
pytest.importorskip("transformers")

from tests.helpers.text_fixtures import CHATML, save_tokenizer

WORDS = [b"he", b"ll", b"hell", b"hello", b" w", b"or", b" wor", b"ld", b" world", b"!!", b"\xe6\x97", "日".encode()]


def write_tiktoken(path: Path) -> Path:
    """A tiny .tiktoken file: the 256 bytes, then a few merges, each made of two lower ranks."""
    ranks: dict[bytes, int] = {bytes([b]): b for b in range(256)}
    for word in WORDS:
        ranks[word] = len(ranks)
    lines = [f"{base64.b64encode(token).decode()} {rank}" for token, rank in ranks.items()]
    path.write_text("\n".join(lines) + "\n", encoding="ascii")
    return path


@pytest.fixture(scope="module")
def tiktoken_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiktoken(tmp_path_factory.mktemp("tik") / "tiny.tiktoken")


def test_tiktoken_file_encodes_by_rank(tiktoken_file: Path) -> None:
    tokenizer = load_tokenizer(str(tiktoken_file))
    ids = tokenizer.encode("hello world!!", add_special_tokens=False)
    assert ids == [256 + WORDS.index(b"hello"), 256 + WORDS.index(b" world"), 256 + WORDS.index(b"!!")]
    assert tokenizer.decode(ids) == "hello world!!"
    assert tokenizer.eos_token_id == 256 + len(WORDS)  # the special tokens follow the ranks
    assert tokenizer.encode("<|im_start|>", add_special_tokens=False) == [256 + len(WORDS) + 1]


def test_tiktoken_file_matches_tiktoken(tiktoken_file: Path) -> None:
    tiktoken = pytest.importorskip("tiktoken")
    from tiktoken.load import load_tiktoken_bpe

    from packing.text._tokenizers import TIKTOKEN_PATTERN

    reference = tiktoken.Encoding("tiny", pat_str=TIKTOKEN_PATTERN, mergeable_ranks=load_tiktoken_bpe(str(tiktoken_file)),
                                  special_tokens={})  # fmt: skip
    ours = tiktoken_tokenizer(tiktoken_file)
    for text in ["hello world", "hellohello  world!!!", "日本語 he ll o", "x\n\n  y", "Hello, WORLD 12345"]:
        assert ours.encode(text, add_special_tokens=False) == reference.encode_ordinary(text), text


def test_bad_tiktoken_file_is_refused_with_its_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.tiktoken"
    bad.write_text("aGVsbG8= 0\nnot-base64 1\n", encoding="ascii")
    with pytest.raises(SettingError, match=r"bad.tiktoken line 2: 'not-base64 1'"):
        load_tokenizer(str(bad))


def test_chat_template_as_text_or_file_for_any_tokenizer(tiktoken_file: Path, tmp_path: Path) -> None:
    chat = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hello world"}]
    template_file = tmp_path / "chatml.jinja"
    template_file.write_text(CHATML, encoding="utf-8")
    for given in (CHATML, str(template_file), template_file):
        tokenizer = load_tokenizer(str(tiktoken_file), chat_template=given)
        tokens, mask, _ = encode_rows([{"messages": chat}], tokenizer)
        assert tokenizer.decode(tokens[mask == 1].tolist()) == "hello world<|im_end|>\n"
    recipe = Recipe(64, tokenizer=str(tiktoken_file), chat_template=str(template_file))
    assert packing.text.prepare(recipe).tokenizer.chat_template == CHATML
    with pytest.raises(SettingError, match=r"^tokenizer: expected a tokenizer with a chat template"):
        encode_rows([{"messages": chat}], str(tiktoken_file))
    with pytest.raises(SettingError, match=r"^chat_template: expected a Jinja template that compiles"):
        load_tokenizer(str(tiktoken_file), chat_template="{% for m in messages %}")
    with pytest.raises(SettingError, match=r"^chat_template: expected a Jinja chat template, or the path"):
        load_tokenizer(str(tiktoken_file), chat_template=str(tmp_path / "missing.jinja"))


def test_a_template_renders_in_the_sandbox(tiktoken_file: Path) -> None:
    escape = "{{ messages.__class__.__mro__[1].__subclasses__() }}"
    tokenizer = load_tokenizer(str(tiktoken_file), chat_template=escape)
    with pytest.raises(SampleError, match="a conversation the chat template can render"):
        encode_rows([{"messages": [{"role": "user", "content": "x"}]}], tokenizer)


TOOLS = (
    "{%- for m in messages -%}"
    "{{- '<|im_start|>' + m['role'] + '\\n' -}}"
    "{%- if m.get('tool_calls') -%}{%- for call in m['tool_calls'] -%}"
    "{{- '<tool_call>' + call['function']['name'] + '(' + call['function']['arguments'] | tojson + ')</tool_call>' -}}"
    "{%- endfor -%}{%- else -%}{{- m['content'] -}}{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)
"""A ChatML template that renders an assistant's tool calls."""


def test_tool_calls_are_trained_where_the_template_renders_them(tmp_path: Path) -> None:
    tokenizer = load_tokenizer(str(save_tokenizer(tmp_path / "tools", TOOLS)))
    call = {"type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 2}}}
    chat = [
        {"role": "user", "content": "What is 2 + 2?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "content": "4"},
        {"role": "assistant", "content": "It is 4."},
    ]
    tokens, mask, _ = encode_rows([{"messages": chat}], tokenizer)
    trained = tokenizer.decode(tokens[mask == 1].tolist())
    assert trained == '<tool_call>add({"a": 2, "b": 2})</tool_call><|im_end|>\nIt is 4.<|im_end|>\n'
    from packing.core._loss import LossRules

    tokens, mask, _ = encode_rows([{"messages": chat}], tokenizer, loss_rules=LossRules(roles_to_train=["tool"]))
    assert tokenizer.decode(tokens[mask == 1].tolist()) == "4<|im_end|>\n"


def custom_code_folder(root: Path, where: str) -> Path:
    folder = save_tokenizer(root / where, CHATML)
    name = "tokenizer_config.json" if where == "tokenizer" else "config.json"
    config_path = folder / name
    config: dict[str, Any] = json.loads(config_path.read_text()) if config_path.exists() else {}
    config["auto_map"] = {"AutoTokenizer": ["tokenization_evil.EvilTokenizer", None]}
    config_path.write_text(json.dumps(config))
    (folder / "tokenization_evil.py").write_text("import pathlib\npathlib.Path('RAN').write_text('ran')\n")
    return folder


@pytest.mark.slow
@pytest.mark.parametrize("where", ["tokenizer", "model"])
def test_a_folder_asking_for_custom_code_is_refused_in_one_line_without_a_prompt(tmp_path: Path, where: str) -> None:
    folder = custom_code_folder(tmp_path, where)
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"text": "hello"}) + "\n")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "packing",
            "pack",
            str(rows),
            "--tokenizer",
            str(folder),
            "--max-seq-length",
            "16",
            "--output",
            str(tmp_path / "out.parquet"),
        ],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]), "HF_HUB_OFFLINE": "1"},
    )
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert "Do you wish to run the custom code" not in output and "[y/N]" not in output
    assert not (tmp_path / "RAN").exists()
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert "asks for custom code (auto_map)" in lines[0]
