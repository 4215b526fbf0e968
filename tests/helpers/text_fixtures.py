"""A tiny byte-level BPE tokenizer built on the spot (no network) and the chat templates the text tests use."""

from __future__ import annotations

from pathlib import Path
from typing import Any

CHATML = (
    "{%- for m in messages -%}"
    "{{- '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>' + '\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)
"""ChatML without generation markers: masks come from prefix renderings."""

MARKED = (
    "{%- for m in messages -%}"
    "{%- if m['role'] == 'assistant' -%}"
    "{{- '<|assistant|>\\n' -}}{% generation %}{{- m['content'] + '<|endoftext|>' -}}{% endgeneration %}"
    "{{- '\\n' -}}"
    "{%- else -%}"
    "{{- '<|' + m['role'] + '|>\\n' + m['content'] + '<|endoftext|>\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|assistant|>\\n' -}}{%- endif -%}"
)
"""A Zephyr-like template with {% generation %} markers around each assistant reply and its end token."""

LAST_TURN_SPECIAL = (
    "{%- for m in messages -%}"
    "{{- '<|im_start|>' + m['role'] + '\\n' + m['content'] -}}"
    "{%- if loop.last -%}{{- '<|endoftext|>' -}}{%- else -%}{{- '<|im_end|>\\n' -}}{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)
"""A template that ends the last message differently: its prefixes are not prefixes of the whole."""

SPECIAL_TOKENS = ["<|endoftext|>", "<|pad|>", "<|im_start|>", "<|im_end|>", "<|user|>", "<|assistant|>", "<|system|>"]
CORPUS = [
    "Hello world, how are you today?",
    "The quick brown fox jumps over the lazy dog.",
    "Packing puts many short samples into one block of tokens.",
    "naïve café — 日本語のテキスト ✓ Größe señor",
    "What is 2 + 2? It is 4. Thanks!",
    "user\nassistant\nsystem\n",
]


def train_backend() -> Any:
    """A byte-level BPE (vocabulary 600) trained on CORPUS, as a ``tokenizers.Tokenizer``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(CORPUS * 20, trainer)
    return backend


def save_tokenizer(folder: Path, chat_template: str) -> Path:
    """Wrap the trained BPE as a ``PreTrainedTokenizerFast`` with ``chat_template`` and save it to ``folder``."""
    from transformers import PreTrainedTokenizerFast

    wrapper: Any = PreTrainedTokenizerFast
    tokenizer = wrapper(
        tokenizer_object=train_backend(), eos_token="<|endoftext|>", pad_token="<|pad|>", chat_template=chat_template
    )
    tokenizer.save_pretrained(str(folder))
    return folder
