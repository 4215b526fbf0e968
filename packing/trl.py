"""TRL's DPO trainer with every batch's pairs packed, each prompt stored once: ``PackedDPOTrainer``.

``trl.DPOTrainer`` pads every pair to two rows of the batch's longest sequence, the prompt in both. The subclass
here keeps TRL's dataset (its tokenized ``prompt_ids``, ``chosen_ids``, ``rejected_ids`` and, with
``precompute_ref_log_probs``, ``ref_chosen_logps`` and ``ref_rejected_logps``), its configuration, its loss code
(every ``loss_type``, ``ld_alpha``, ``use_weighting``, the f-divergences) and its metrics, and changes only what the
model runs on:

1. the collator (:class:`PackedPreferenceCollator`) truncates each pair as TRL's does and lays the batch's pairs
   out whole with ``share_prompt=True`` in rows as long as its longest pair (``packing.torch.collate_fixed``,
   next-fit): each prompt once, both completions after it, each seeing the prompt and itself only. The prompt's last token is stored once more at the start of each completion
   (same token, same position, the same keys in view, so the same hidden state), so that every trained token is
   predicted from the token before it, as TRL's fused LM head reads its labels;
2. the policy's and the reference model's forwards (TRL's fused LM head, which gives per-token log-probabilities
   without the logits) run on those rows, with the attention mask the model's attention implementation takes
   (``packing.torch.model_inputs``: a 4-D mask for eager and SDPA, a ``BlockMask`` for FlexAttention);
3. their per-token outputs (log-probabilities, entropy, mean logits, top-1 hits) are laid back into the padded
   ``(2·pairs, length - 1)`` shape TRL's loss reads: a gather of numbers, no vocabulary, no second forward.

So the losses and metrics are TRL's own code on the same per-token values, within float32's rounding of a
differently shaped attention. Also logged: ``num_tokens_packed``, the tokens the forwards ran on (TRL's
``num_tokens`` counts the pairs' real tokens, the prompt twice).

TRL is an optional dependency (``pip install trl``), imported by ``import packing.trl``, never by
``import packing``. Not supported: MoE router losses (``output_router_logits``), flash-attention (its varlen
kernels cannot keep two completions of one prompt apart) and ``truncation_mode="keep_end"`` when it would cut
(the two sequences of a pair would keep different prompts).

Example (needs a model, so not a doctest)::

    from packing.trl import PackedDPOTrainer          # instead of: from trl import DPOTrainer
    trainer = PackedDPOTrainer(model=model, args=DPOConfig(...), train_dataset=dataset, processing_class=tokenizer)
    trainer.train()
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

try:
    from trl.trainer.dpo_config import DPOConfig
    from trl.trainer.dpo_trainer import DPOTrainer
except ImportError as error:  # pragma: no cover - exercised only without TRL
    raise ImportError("packing.trl needs TRL: pip install trl") from error

import torch

from packing.errors import SettingError
from packing.torch import collate_fixed, model_inputs

__all__ = ["PackedDPOTrainer", "PackedPreferenceCollator"]

PACKED = "packed"
"""The key of a batch's packed rows among TRL's padded columns; passed to the model's forward as a keyword."""


class PackedPreferenceCollator:
    """A ``collate_fn`` for TRL's tokenized preference rows (``prompt_ids``, ``chosen_ids``, ``rejected_ids``;
    optionally ``ref_chosen_logps`` and ``ref_rejected_logps``): the columns ``trl.DPOTrainer``'s loss reads in its
    padded shape (``input_ids``, ``attention_mask``, ``completion_mask``, chosen rows first, then rejected, and the
    reference log-probabilities), which no model runs on, and under ``"packed"`` the rows the model runs on
    (``packing.torch.collate_fixed``'s columns of pairs with a shared prompt, rows of ``row_length`` tokens, default
    the batch's longest pair; ``labels`` for the fused LM head, and ``source``: for each padded per-token place, the
    place in the flattened rows its value comes from, -1 for none). Truncation is TRL's (``max_length``,
    ``keep_start``). The attention costs ``rows × row_length²``. O(tokens + rows × row_length²).

    >>> collator = PackedPreferenceCollator()
    >>> batch = collator([{"prompt_ids": [1, 2], "chosen_ids": [3], "rejected_ids": [4, 5]}])
    >>> batch["completion_mask"].tolist()
    [[0, 0, 1, 0], [0, 0, 1, 1]]
    >>> batch["packed"]["input_ids"].tolist(), batch["packed"]["labels"].tolist()
    ([[1, 2, 3, 2, 4, 5]], [[-100, -100, 3, -100, 4, 5]])
    >>> batch["packed"]["source"].tolist()   # padded row, shifted place -> packed shifted place
    [[-1, 1, -1], [-1, 3, 4]]
    """

    def __init__(
        self, max_length: int | None = None, truncation_mode: str = "keep_start", row_length: int | None = None
    ) -> None:
        if truncation_mode not in ("keep_start", "keep_end"):
            raise SettingError("truncation_mode", "keep_start or keep_end (TRL's)", truncation_mode)
        self.max_length = max_length
        self.truncation_mode = truncation_mode
        self.row_length = row_length

    def _pair(self, example: Mapping[str, Any], index: int) -> tuple[list[int], list[int], list[int]]:
        """One example's prompt, chosen and rejected ids, truncated as TRL's collator truncates each sequence."""
        prompt, chosen, rejected = (list(example[name]) for name in ("prompt_ids", "chosen_ids", "rejected_ids"))
        limit = self.max_length
        if limit is None or len(prompt) + max(len(chosen), len(rejected)) <= limit:
            return prompt, chosen, rejected
        if self.truncation_mode == "keep_end":
            raise SettingError(
                "truncation_mode",
                "keep_start when a pair is cut (keep_end would keep a different prompt in each sequence)",
                f"<keep_end cutting example {index}>",
            )
        if len(prompt) >= limit:
            raise SettingError(
                "rows", f"prompts shorter than max_length={limit} (TRL drops the others)", f"<example {index}>"
            )
        return prompt, chosen[: limit - len(prompt)], rejected[: limit - len(prompt)]

    def __call__(self, examples: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        pairs = [self._pair(example, index) for index, example in enumerate(examples)]
        rows = [
            {"prompt": p[:-1], "chosen": p[-1:] + c, "rejected": p[-1:] + r}
            if p
            else {"prompt": p, "chosen": c, "rejected": r}
            for p, c, r in pairs
        ]
        lengths = [len(p) + len(c) + len(r) + (1 if p else 0) for p, c, r in pairs]
        width = self.row_length or max(lengths, default=1)
        if max(lengths, default=0) > width:
            raise SettingError("row_length", f"at least the longest pair's {max(lengths)} packed tokens", width)
        packed = collate_fixed(width, share_prompt=True)(rows)
        del packed["attention_mask"]  # made again for the model, in its dtype or as a BlockMask
        completion = packed["completion_ids"].reshape(-1).numpy()
        labels = packed["labels"].reshape(-1).numpy().copy()
        sequences = [p + c for p, c, _ in pairs] + [p + r for p, _, r in pairs]
        completions = [len(c) for _, c, _ in pairs] + [len(r) for _, _, r in pairs]
        prompts = [len(p) for p, _, _ in pairs] * 2
        length = max(len(ids) for ids in sequences)
        shape = (len(sequences), length)
        input_ids, attention, completion_mask = (np.zeros(shape, dtype=np.int64) for _ in range(3))
        source = np.full((len(sequences), max(length - 1, 0)), -1, dtype=np.int64)
        order = [2 * i for i in range(len(pairs))] + [2 * i + 1 for i in range(len(pairs))]
        for row, (ids, number) in enumerate(zip(sequences, order, strict=True)):
            input_ids[row, : len(ids)] = ids
            attention[row, : len(ids)] = 1
            start, count = prompts[row], completions[row]
            completion_mask[row, start : start + count] = 1
            places = np.flatnonzero(completion == number)
            if places.size:
                labels[places[0]] = -100  # the prompt's last token again, or a sequence's first: not trained
            places = places[len(places) - count :]  # the completion's own tokens
            targets = np.arange(start, start + count) - 1
            kept = targets >= 0
            source[row, targets[kept]] = places[kept] - 1
        tensors = {"input_ids": input_ids, "attention_mask": attention, "completion_mask": completion_mask}
        batch: dict[str, Any] = {name: torch.from_numpy(values) for name, values in tensors.items()}
        for name in ("ref_chosen_logps", "ref_rejected_logps"):
            if examples and name in examples[0]:
                batch[name] = torch.tensor([example[name] for example in examples])
        packed["labels"] = torch.from_numpy(labels).reshape(-1, width)
        packed["source"] = torch.from_numpy(source)
        batch[PACKED] = packed
        return batch


def _spread(values: torch.Tensor | None, source: torch.Tensor) -> torch.Tensor | None:
    """Per-token ``values`` of the packed rows ``(rows, width - 1)`` in the padded shape of ``source`` (places in
    the flattened ``(rows, width)``, the last column none), 0 where it is -1."""
    if values is None:
        return None
    flat = torch.cat((values, torch.zeros_like(values[:, :1])), dim=1).reshape(-1)
    taken = flat[source.clamp(min=0)]
    return taken.masked_fill(source < 0, 0)


def _packing_forward(model: Any) -> None:
    """Wrap ``model.forward`` (TRL's fused LM head, patched on the instance): a call with ``packed=`` runs the
    packed rows and returns TRL's per-token outputs in the padded shape; any other call is the forward as it was.
    Idempotent. O(1)."""
    if getattr(model, "_packing_forward", False):
        return
    previous = model.forward

    @functools.wraps(previous)
    def forward(*args: Any, packed: Mapping[str, Any] | None = None, **kwargs: Any) -> Any:
        if packed is None or not kwargs.get("fused_lm_head"):
            return previous(*args, **kwargs)  # generation, or the padded logits TRL recomputes for return_outputs
        if kwargs.get("output_router_logits"):
            raise SettingError("model", "no MoE router loss with packed pairs", "<output_router_logits=True>")
        outputs = previous(**model_inputs(packed, model), labels=packed["labels"], fused_lm_head=True)
        source = packed["source"]
        fields = ("log_probs", "entropy", "log_sum_sq_probs", "mean_logits", "is_top1")
        spread = {name: _spread(getattr(outputs, name), source) for name in fields}
        return type(outputs)(loss=outputs.loss, label_mask=source >= 0, **spread)

    model.forward = forward
    model._packing_forward = True


class PackedDPOTrainer(DPOTrainer):
    """``trl.DPOTrainer`` with every batch's pairs packed, each prompt once (see the module): the same arguments,
    dataset, losses and metrics; the default collator is :class:`PackedPreferenceCollator` with the config's
    ``max_length`` and ``truncation_mode``. A collator given is used as it is (it must give the same columns)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        bound = _bind(args, kwargs)
        if bound.get("data_collator") is None:
            config = bound.get("args")
            if config is None:  # TRL's default config, made here to read its max_length
                from trl.trainer.utils import get_config_model_id

                model = bound["model"]
                name = model if isinstance(model, str) else get_config_model_id(model.config)
                config = bound["args"] = DPOConfig(f"{name.split('/')[-1]}-DPO")
            bound["data_collator"] = PackedPreferenceCollator(config.max_length, config.truncation_mode)
        self.packed_tokens = 0
        super().__init__(**bound)

    def _pack_forwards(self) -> None:
        """Wrap the policy's and the reference model's forwards (:func:`_packing_forward`), once. O(1)."""
        models = [self.accelerator.unwrap_model(self.model)]
        if self.ref_model is not None:
            models.append(self.accelerator.unwrap_model(self.ref_model))
        for model in models:
            _packing_forward(model.get_base_model() if hasattr(model, "get_base_model") else model)

    def compute_ref_log_probs(self, model: Any, inputs: Any) -> Any:
        """TRL's reference log-probabilities of a batch (``precompute_ref_log_probs``), from its packed rows."""
        self._pack_forwards()
        return super().compute_ref_log_probs(model, inputs)  # type: ignore[no-untyped-call]

    def compute_loss(
        self, model: Any, inputs: Any, return_outputs: bool = False, num_items_in_batch: Any = None
    ) -> Any:
        """TRL's loss and metrics of a batch, its forwards run on the packed rows; also logs
        ``num_tokens_packed``, the tokens (padding included) the training forwards have run on so far."""
        self._pack_forwards()
        mode = "train" if getattr(self.model, "training", False) else "eval"
        if mode == "train" and PACKED in inputs:
            self.packed_tokens += int(inputs[PACKED]["input_ids"].numel())
        result = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)  # type: ignore[no-untyped-call]
        self._metrics[mode]["num_tokens_packed"] = [self.packed_tokens]
        return result


def _bind(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """``trl.DPOTrainer``'s arguments by name, as its signature binds them. O(arguments)."""
    signature = inspect.signature(DPOTrainer.__init__)
    bound = signature.bind(None, *args, **kwargs).arguments
    bound.pop("self")
    return dict(bound)
