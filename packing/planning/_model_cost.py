"""The training cost of a document, from a model's shape: what balancing ranks should weigh.

A decoder's work on a document of ``ℓ`` tokens has two parts. **Tokens**: every matrix multiply touches each
token once, ``2 × (weights used per token)`` FLOPs forward (projections, MLP or the routed experts, the output
head). **Attention**: each causal attention layer pairs every query with the keys before it,
``4 × (query width) × pairs`` FLOPs forward (``Q·Kᵀ`` and ``attention·V``), with ``ℓ(ℓ + 1)/2`` pairs for full
attention, ``w(w + 1)/2 + (ℓ − w)·w`` for a sliding window of ``w`` tokens, and none for linear attention (its
state update is per token: counted with the tokens). Training multiplies both by 3 (the backward pass is about
twice the forward one). Nothing here depends on the hardware: it is a proportion to balance by, not a time.

verl's ``24576·ℓ + ℓ²`` (``packing.torch.default_cost``) is this shape for one model width (``12h²ℓ + 2hℓ²``
with ``h = 4096``); :meth:`ModelCost.from_config` gives the weights of the model being trained.

>>> llama = ModelCost.from_config({"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
...                                "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256})
>>> round(llama.tokens_per_attention)   # attention outweighs the rest in documents over about 57k tokens
57256
>>> parts = llama.components(np.array([1_000, 32_000]))
>>> [round(float(a / t), 3) for a, t in zip(parts["attention"], parts["tokens"])]
[0.017, 0.559]

Internal: the public names are in ``packing`` and ``packing.planning``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from packing.core._validation import check_integer
from packing.errors import SettingError

FloatArray = npt.NDArray[np.float64]
TRAINING = 3.0
"""Forward plus backward: about three times the forward pass."""
_NOT_GATED = frozenset({"gpt2", "gpt_neox", "gptj", "opt", "bert", "falcon", "bloom", "gpt_bigcode", "codegen"})
"""Model families whose MLP has two matrices (up, down) rather than three (gate, up, down)."""
ATTENTION_KINDS = ("full", "sliding", "linear")
"""How a layer attends: every earlier token, the last ``window`` tokens, or through a running state."""


@dataclass(frozen=True)
class ModelCost:
    """The training FLOPs of documents by length, for ``PackingSampler(cost=...)``: ``linear`` FLOPs per token
    (every matrix multiply, backward included), and per attention layer its query width (``heads × head_dim``)
    and kind (``layers``: ``(width, window)``, ``window`` None for full attention, 0 for linear attention).
    Callable on an int64 array of lengths (total FLOPs); :meth:`components` splits them. O(n × distinct layers).

    >>> cost = ModelCost(linear=6.0, layers=((1, None),))
    >>> cost(np.array([1, 2, 4])).tolist()   # 6ℓ + 3 · 4 · ℓ(ℓ+1)/2
    [18.0, 48.0, 144.0]
    """

    linear: float
    layers: tuple[tuple[int, int | None], ...]

    def __post_init__(self) -> None:
        if not isinstance(self.linear, (int, float)) or not 0 <= self.linear < float("inf"):
            raise SettingError("linear", "a non-negative number of FLOPs per token", self.linear)
        for width, window in self.layers:
            if (
                not isinstance(width, int)
                or width < 1
                or (window is not None and (not isinstance(window, int) or window < 0))
            ):
                raise SettingError("layers", "(query width >= 1, window None or >= 0) per layer", (width, window))

    @classmethod
    def from_config(cls, config: Any, attention: str | None = None) -> ModelCost:
        """The cost of a transformers model config (a ``PretrainedConfig`` or its ``to_dict()``): ``hidden_size``,
        ``num_hidden_layers``, ``num_attention_heads``, ``num_key_value_heads``, ``head_dim``,
        ``intermediate_size`` (or ``moe_intermediate_size`` × ``num_experts_per_tok`` plus a shared expert's),
        ``vocab_size``, and how each layer attends: ``layer_types`` (``full_attention``, ``sliding_attention``,
        ``linear_attention``, ...), else ``sliding_window`` when set (and ``use_sliding_window`` is not False),
        else full. ``attention`` (``full``, ``sliding``, ``linear``) overrides the kind of every layer. O(layers).

        >>> small = ModelCost.from_config({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
        ...                                "intermediate_size": 128, "vocab_size": 100, "sliding_window": 8})
        >>> small.layers
        ((64, 8), (64, 8))
        """
        values = _as_mapping(config)
        hidden = _required(values, "hidden_size")
        count = _required(values, "num_hidden_layers")
        heads = _required(values, "num_attention_heads")
        kv_heads = int(values.get("num_key_value_heads") or heads)
        head_dim = int(values.get("head_dim") or hidden // heads)
        query = heads * head_dim
        projections = hidden * head_dim * (2 * heads + 2 * kv_heads)  # q, k, v, o
        matrices = 2 if str(values.get("model_type", "")) in _NOT_GATED else 3
        experts = values.get("num_experts_per_tok") or values.get("num_experts_per_token")
        if experts and values.get("moe_intermediate_size"):
            mlp = matrices * hidden * int(values["moe_intermediate_size"]) * int(experts)
            mlp += matrices * hidden * int(values.get("shared_expert_intermediate_size") or 0)
        else:
            mlp = matrices * hidden * int(values.get("intermediate_size") or 4 * hidden)
        head = hidden * int(values.get("vocab_size") or 0)
        kinds = _layer_kinds(values, count, attention)
        window = values.get("sliding_window")
        layers: list[tuple[int, int | None]] = []
        state = 0
        for kind in kinds:
            if kind == "linear":
                layers.append((query, 0))
                state += 4 * query * head_dim  # the state update and read-out, per token
            elif kind == "sliding":
                if not isinstance(window, int) or window < 1:
                    raise SettingError("sliding_window", "a window of >= 1 tokens for sliding attention", window)
                layers.append((query, window))
            else:
                layers.append((query, None))
        linear = TRAINING * (2.0 * (count * (projections + mlp) + head) + state)
        return cls(float(linear), tuple(layers))

    def components(self, lengths: npt.ArrayLike) -> dict[str, FloatArray]:
        """Per document, ``tokens`` (the matrix multiplies, linear in ``ℓ``) and ``attention`` (the query-key pairs
        of every softmax-attention layer) in FLOPs; their sum is the cost. O(n × distinct layers)."""
        ell = np.asarray(lengths, dtype=np.float64)
        attention = np.zeros_like(ell)
        for (width, window), repeats in Counter(self.layers).items():  # identical layers counted once
            if window == 0:
                continue
            if window is None:
                pairs = ell * (ell + 1) / 2
            else:
                near = np.minimum(ell, window)
                pairs = near * (near + 1) / 2 + (ell - near) * window
            attention += repeats * TRAINING * 4.0 * width * pairs
        return {"tokens": self.linear * ell, "attention": attention}

    def __call__(self, lengths: npt.ArrayLike) -> FloatArray:
        parts = self.components(lengths)
        total: FloatArray = parts["tokens"] + parts["attention"]
        return total

    @property
    def tokens_per_attention(self) -> float:
        """The document length at which full attention costs as much as everything else (infinite without full
        attention layers): below it, balance tokens; above it, attention."""
        full = sum(TRAINING * 2.0 * width for width, window in self.layers if window is None)
        return self.linear / full if full else float("inf")


def _as_mapping(config: Any) -> Mapping[str, Any]:
    if isinstance(config, Mapping):
        return config
    if hasattr(config, "to_dict"):
        values = config.to_dict()
        text = getattr(config, "text_config", None)  # multimodal configs keep the decoder's shape apart
        if text is not None and "hidden_size" not in values:
            return _as_mapping(text)
        return dict(values)
    raise SettingError("config", "a transformers config or a dict of its fields", type(config).__name__)


def _required(values: Mapping[str, Any], name: str) -> int:
    return check_integer(values.get(name), name, context=" in the model config")


def _layer_kinds(values: Mapping[str, Any], count: int, attention: str | None) -> list[str]:
    """The kind of every layer: ``attention`` for all, else the config's ``layer_types``, else sliding when the
    config sets a window it uses, else full."""
    if attention is not None:
        if attention not in ATTENTION_KINDS:
            raise SettingError("attention", f"one of {', '.join(ATTENTION_KINDS)}", attention)
        return [attention] * count
    types: Sequence[str] | None = values.get("layer_types")
    if types:
        if len(types) != count:
            raise SettingError("layer_types", f"one type per layer ({count})", f"<{len(types)} types>")
        return [
            "linear" if "linear" in t else "sliding" if ("sliding" in t or "chunked" in t) else "full" for t in types
        ]
    if values.get("sliding_window") and values.get("use_sliding_window", True) is not False:
        return ["sliding"] * count
    return ["full"] * count
