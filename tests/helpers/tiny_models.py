"""A tiny Llama and a word-level tokenizer built here (nothing downloaded), for the tests that train through the
peers (TRL's ``SFTTrainer``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

VOCAB = 96


def tiny_llama(vocab: int = VOCAB) -> Any:
    """A two-layer Llama of ``vocab`` ids with sdpa attention, the same weights every call (seed 0)."""
    import torch
    import transformers

    config = transformers.LlamaConfig(
        vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128, pad_token_id=0, eos_token_id=1, bos_token_id=2,
    )  # fmt: skip
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config)


def local_tokenizer(folder: Path, vocab: int = VOCAB) -> Any:
    """A word-level tokenizer over ``vocab`` ids, saved in ``folder``; ``SFTTrainer`` only needs its pad id."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    words = {"<pad>": 0, "</s>": 1, "<s>": 2} | {f"t{i}": i for i in range(3, vocab)}
    backend = Tokenizer(models.WordLevel(words, unk_token="<pad>"))
    wrapper: Any = PreTrainedTokenizerFast
    tokenizer = wrapper(tokenizer_object=backend, pad_token="<pad>", eos_token="</s>", bos_token="<s>")
    tokenizer.save_pretrained(str(folder))
    return tokenizer


def tiny_causal_lm(kind: str = "llama", attention: str = "sdpa", vocab: int = VOCAB, seed: int = 0) -> Any:
    """A two-layer transformers Llama (``kind="llama"``) or Qwen2 (``"qwen2"``) of ``vocab`` ids in float64, with
    ``attention`` (``eager``, ``sdpa``, ``flex_attention``), the same weights for a seed: small enough to run every
    sequence alone and compare, exact enough (float64) to compare within 1e-6."""
    import torch
    import transformers

    shape = {
        "vocab_size": vocab, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 512,
    }  # fmt: skip
    config = transformers.LlamaConfig(**shape) if kind == "llama" else transformers.Qwen2Config(**shape)
    config._attn_implementation = attention
    torch.manual_seed(seed)
    model = (transformers.LlamaForCausalLM if kind == "llama" else transformers.Qwen2ForCausalLM)(config)
    return model.double().eval()
