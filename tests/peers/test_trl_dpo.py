"""``packing.trl.PackedDPOTrainer`` against ``trl.DPOTrainer`` itself: the same tiny Llama, tokenizer, dataset and
seed, trained a few steps by both; the losses and TRL's metrics agree (exactly in float64, within float32's rounding
of differently shaped attention in float32) while the packed forwards run on fewer tokens."""

from __future__ import annotations

import random
from typing import Any

import pytest

pytest.importorskip("trl")
torch = pytest.importorskip("torch")

from datasets import Dataset  # noqa: E402
from trl import DPOConfig, DPOTrainer  # noqa: E402
from trl.trainer.dpo_trainer import DataCollatorForPreference  # noqa: E402

from packing.errors import SettingError  # noqa: E402
from packing.trl import PackedDPOTrainer, PackedPreferenceCollator  # noqa: E402
from tests.helpers.tiny_models import VOCAB, tiny_llama  # noqa: E402

METRICS = (
    "loss", "rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins", "logps/chosen",
    "logps/rejected", "entropy", "logits/chosen", "logits/rejected", "mean_token_accuracy", "num_tokens",
)  # fmt: skip


def word_tokenizer() -> Any:
    """Word-level ids ``t3`` ... ``t95`` split at spaces, ``</s>`` the end of a sequence; nothing downloaded."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = {"<pad>": 0, "</s>": 1, "<s>": 2} | {f"t{i}": i for i in range(3, VOCAB)}
    backend = Tokenizer(models.WordLevel(words, unk_token="<pad>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    wrapper: Any = PreTrainedTokenizerFast
    return wrapper(tokenizer_object=backend, pad_token="<pad>", eos_token="</s>", bos_token="<s>")


def preference_rows(count: int = 24, seed: int = 0) -> Dataset:
    """TRL's text preference dataset: prompts of 8-30 words, answers of 1-8 (TRL adds the end token)."""
    rng = random.Random(seed)

    def words(n: int) -> str:
        return " ".join(f"t{rng.randrange(3, VOCAB)}" for _ in range(n))

    rows = [
        {"prompt": words(rng.randint(8, 30)), "chosen": " " + words(rng.randint(1, 8)), "rejected": " " + words(rng.randint(1, 8))}
        for _ in range(count)
    ]  # fmt: skip
    return Dataset.from_list(rows)


def train(trainer_class: type, tmp_path: Any, dtype: Any, **options: Any) -> Any:
    """A trainer of ``trainer_class`` trained 3 steps of 4 pairs on the tiny Llama in ``dtype``."""
    settings = {
        "output_dir": str(tmp_path / trainer_class.__name__), "max_steps": 3, "per_device_train_batch_size": 4,
        "learning_rate": 1e-3, "logging_steps": 1, "report_to": [], "use_cpu": True, "save_strategy": "no",
        "seed": 0, "dataloader_num_workers": 0, "disable_tqdm": True,
    } | options  # fmt: skip
    trainer = trainer_class(
        model=tiny_llama().to(dtype), ref_model=tiny_llama().to(dtype), args=DPOConfig(**settings),
        train_dataset=preference_rows(), processing_class=word_tokenizer(),
    )  # fmt: skip
    trainer.train()
    return trainer


def differences(padded: Any, packed: Any) -> dict[str, tuple[float, float]]:
    """Every metric of ``METRICS``: its largest absolute and relative difference over the logged steps."""
    steps = [(a, b) for a, b in zip(padded.state.log_history, packed.state.log_history, strict=True) if "loss" in a]
    assert len(steps) == 3
    found = {}
    for name in METRICS:
        gaps = [(abs(a[name] - b[name]), abs(a[name] - b[name]) / max(abs(a[name]), 1e-30)) for a, b in steps]
        found[name] = (max(gap for gap, _ in gaps), max(relative for _, relative in gaps))
    return found


class CountingTrainer(PackedDPOTrainer):  # type: ignore[misc]
    """``PackedDPOTrainer`` that also counts the tokens TRL's padded forward would run on (its padded rows)."""

    padded_tokens = 0

    def compute_loss(self, model: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        self.padded_tokens += int(inputs["input_ids"].numel())
        return super().compute_loss(model, inputs, *args, **kwargs)


def test_the_padded_columns_are_trls_and_the_row_is_shorter() -> None:
    examples = [
        {"prompt_ids": [5, 6, 7, 8], "chosen_ids": [9, 1], "rejected_ids": [10, 11, 12, 1], "ref_chosen_logps": -1.5,
         "ref_rejected_logps": -2.0},
        {"prompt_ids": [13], "chosen_ids": [14, 15, 16, 1], "rejected_ids": [1], "ref_chosen_logps": -0.5,
         "ref_rejected_logps": -0.25},
    ]  # fmt: skip
    for max_length in (None, 6):
        ours = PackedPreferenceCollator(max_length)(examples)
        trls = DataCollatorForPreference(pad_token_id=0, max_length=max_length)(examples)
        for name in ("input_ids", "attention_mask", "completion_mask", "ref_chosen_logps", "ref_rejected_logps"):
            assert torch.equal(ours[name], trls[name]), name
        packed = ours["packed"]
        assert packed["input_ids"].numel() < trls["input_ids"].numel()
        trained = packed["labels"].reshape(-1) != -100  # every trained token read once, from the place before it
        source = packed["source"]
        assert sorted((source[source >= 0] + 1).tolist()) == torch.nonzero(trained)[:, 0].tolist()
        assert packed["input_ids"].shape[1] == {None: 11, 6: 9}[max_length]  # the longest pair: 4 + 2 + 4 (or 2) + 1
        assert int((source >= 0).sum()) == int(trls["completion_mask"][:, 1:].sum())


def test_a_cut_that_would_part_the_prompts_is_refused() -> None:
    example = {"prompt_ids": [5, 6, 7], "chosen_ids": [8, 9], "rejected_ids": [1]}
    with pytest.raises(SettingError, match="keep_end would keep a different prompt"):
        PackedPreferenceCollator(4, "keep_end")([example])
    assert PackedPreferenceCollator(5, "keep_end")([example])["input_ids"].shape == (2, 5)  # no cut: kept
    with pytest.raises(SettingError, match="prompts shorter than max_length=3"):
        PackedPreferenceCollator(3)([example])


@pytest.mark.slow
@pytest.mark.parametrize(
    "options",
    [
        {"loss_type": ["sigmoid"]},
        {"loss_type": ["sigmoid", "ipo", "sft", "hinge"], "loss_weights": [1.0, 0.5, 0.2, 0.3], "max_length": 20},
        {
            "loss_type": ["sigmoid_norm", "apo_zero"],
            "precompute_ref_log_probs": True,
            "use_weighting": True,
            "ld_alpha": 0.5,
        },
    ],
    ids=["sigmoid", "mixed-truncated", "precomputed-weighted"],
)
def test_float64_losses_and_metrics_equal_trls(tmp_path: Any, options: dict[str, Any]) -> None:
    padded = train(DPOTrainer, tmp_path, torch.float64, **options)
    packed = train(CountingTrainer, tmp_path, torch.float64, **options)
    found = differences(padded, packed)
    assert all(gap <= 1e-9 * max(1.0, abs(padded.state.log_history[0][name])) for name, (gap, _) in found.items())
    assert packed.packed_tokens < 0.7 * packed.padded_tokens
    held_out = preference_rows(8, seed=1)
    evaluated = padded.evaluate(held_out), packed.evaluate(held_out)  # TRL's padded logits path too
    for name in ("eval_loss", "eval_rewards/margins", "eval_logps/chosen", "eval_logps/rejected"):
        assert abs(evaluated[0][name] - evaluated[1][name]) <= 1e-9 * max(1.0, abs(evaluated[0][name])), name


@pytest.mark.slow
def test_float32_losses_and_metrics_within_float32_rounding(tmp_path: Any) -> None:
    padded = train(DPOTrainer, tmp_path, torch.float32)
    packed = train(CountingTrainer, tmp_path, torch.float32)
    found = differences(padded, packed)
    for name in ("loss", "logps/chosen", "logps/rejected", "entropy"):
        assert found[name][1] <= 1e-4, (name, found[name])
    for name in ("rewards/chosen", "rewards/rejected", "rewards/margins", "logits/chosen", "logits/rejected"):
        assert found[name][0] <= 5e-4, (name, found[name])
    for name in ("rewards/accuracies", "mean_token_accuracy", "num_tokens"):
        assert found[name][0] == 0, (name, found[name])
    logged = packed.state.log_history[-2]
    assert logged["num_tokens_packed"] == packed.packed_tokens < logged["num_tokens"] < packed.padded_tokens
