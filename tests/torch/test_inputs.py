"""``model_inputs`` on real models (tiny transformers Llama and Qwen2 built here, float64 where the kernel allows):
one packed forward through the inputs it makes gives every completion's log-probability as its sequence alone, for
every attention implementation and batch form; flash-attention's boundaries are collate's and keep each sequence
apart; what cannot be kept apart, and what is not an implementation or a dtype, is refused by name."""

from __future__ import annotations

import itertools
import re
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import packing  # noqa: E402
import packing.torch as pt  # noqa: E402
from packing.errors import SettingError  # noqa: E402
from tests.helpers.tiny_models import tiny_causal_lm  # noqa: E402
from tests.helpers.units import alone_logps, completions_of, random_units  # noqa: E402

TOLERANCE = 1e-6
FLOAT32_TOLERANCE = 1e-5
"""float32's rounding of a sum of a few dozen log-probabilities of size ~5 (FlexAttention on CPU is float32)."""
BLOCK = 64
"""A block that holds the longest unit of ``random_units`` in either layout (4 completions of 6 after 8 tokens)."""
FLASH_NAMES = [
    "flash_attention_2",
    "flash_attention_3",
    "kernels-community/flash-attn3",
    "kernels-community/vllm-flash-attn3",
]


def _units(kind: str, seed: int) -> list[dict[str, Any]]:
    """Pairs only, groups only, or both, from ``random_units``."""
    rows = random_units(seed, count=24)
    if kind == "pairs":
        return [row for row in rows if "chosen" in row]
    if kind == "groups":
        return [row for row in rows if "chosen" not in row]
    return rows


def _batches(rows: list[dict[str, Any]], share_prompt: bool) -> dict[str, Any]:
    """The batch forms of the same units: collate's one row, pack's blocks (several rows, units reordered, padding)
    and collate_fixed's rows (next-fit blocks of ``BLOCK`` tokens)."""
    packed = packing.pack(rows, BLOCK, share_prompt=share_prompt)
    assert packed.stats.units.units_truncated == 0 and packed.num_blocks > 1
    fixed = pt.collate_fixed(BLOCK, share_prompt=share_prompt)(rows)
    assert fixed["input_ids"].shape[0] > 1
    return {"collate": pt.collate(rows, share_prompt=share_prompt), "pack": packed, "collate_fixed": fixed}


def _packed_logps(model: Any, batch: Any) -> Any:
    with torch.no_grad():
        return pt.completion_logps(model(**pt.model_inputs(batch, model)).logits, batch)


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
@pytest.mark.parametrize("attention", ["eager", "sdpa"])
@pytest.mark.parametrize("share_prompt", [False, True])
@pytest.mark.parametrize("units", ["pairs", "groups"])
def test_one_forward_through_the_inputs_gives_every_sequence_alone(
    kind: str, attention: str, share_prompt: bool, units: str
) -> None:
    model = tiny_causal_lm(kind, attention)
    rows = _units(units, seed=3)
    reference = alone_logps(model, rows)
    for form, batch in _batches(rows, share_prompt).items():
        inputs = pt.model_inputs(batch, model)
        assert sorted(inputs) == ["attention_mask", "input_ids", "position_ids", "use_cache"], form
        assert inputs["attention_mask"].dtype == torch.float64 and inputs["use_cache"] is False
        rows_, length = inputs["input_ids"].shape
        assert inputs["attention_mask"].shape == (rows_, 1, length, length)
        packed = _packed_logps(model, batch)
        assert packed.shape == reference.shape, form
        assert float((packed - reference).abs().max()) < TOLERANCE, form


def test_a_shared_prompt_without_its_mask_is_wrong_and_with_the_inputs_right() -> None:
    """Why the helper: the position ids alone let a shared prompt's completions see each other."""
    model = tiny_causal_lm("llama", "sdpa")
    rows = _units("pairs", seed=4)
    batch = pt.collate(rows, share_prompt=True)
    with torch.no_grad():
        bare = model(input_ids=batch["input_ids"], position_ids=batch["position_ids"], use_cache=False).logits
    reference = alone_logps(model, rows)
    assert float((pt.completion_logps(bare, batch) - reference).abs().max()) > 1e-2
    assert float((_packed_logps(model, batch) - reference).abs().max()) < TOLERANCE


def test_the_mask_takes_the_models_dtype_and_device_unless_told() -> None:
    rows = _units("both", seed=5)
    batch = pt.collate(rows, share_prompt=True, return_tensors="np")  # numpy columns are read too
    for dtype in (torch.float32, torch.bfloat16, torch.float64):
        model = tiny_causal_lm("llama", "sdpa").to(dtype)
        inputs = pt.model_inputs(batch, model)
        assert inputs["attention_mask"].dtype == dtype
        assert inputs["input_ids"].device == next(model.parameters()).device
        assert inputs["input_ids"].dtype == torch.int64
        with torch.no_grad():
            assert model(**inputs).logits.dtype == dtype
    told = pt.model_inputs(batch, tiny_causal_lm("llama", "eager"), dtype=torch.float32)["attention_mask"]
    assert told.dtype == torch.float32
    assert torch.equal(told == 0, pt.attention_mask(batch) == 0)


def test_a_config_or_a_name_gives_the_same_inputs_as_the_model() -> None:
    model = tiny_causal_lm("qwen2", "eager")
    batch = pt.collate(_units("groups", seed=6), share_prompt=True)
    by_model = pt.model_inputs(batch, model)
    for given_ in (model.config, "eager", "sdpa"):
        other = pt.model_inputs(batch, given_, dtype=torch.float64)
        assert sorted(other) == sorted(by_model)
        assert all(torch.equal(other[name], by_model[name]) for name in ("input_ids", "position_ids", "attention_mask"))


def test_an_empty_step_is_padding_alone_and_runs() -> None:
    """A sampler's empty step (a rank with no unit) makes inputs the model runs, whose log-probabilities are none."""
    rows = _units("pairs", seed=7)
    sampler = pt.PackingSampler(packing.read_rows(rows), BLOCK, share_prompt=True)
    batch = sampler.collate([])
    model = tiny_causal_lm("llama", "sdpa")
    assert _packed_logps(model, batch).shape == (0,)
    assert pt.model_inputs(batch, "flash_attention_2")["cu_seq_lens_q"].tolist() == [0, 1]


def _sliding_model(window: int, kind: str = "mistral", attention: str = "sdpa") -> Any:
    """A two-layer Mistral (every layer slides) or Qwen2 (its second layer slides) with a sliding ``window``, in
    float64, the same weights every call."""
    shape = {
        "vocab_size": 96, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 512, "sliding_window": window,
    }  # fmt: skip
    if kind == "mistral":
        config: Any = transformers.MistralConfig(**shape)
    else:
        config = transformers.Qwen2Config(**shape, use_sliding_window=True, max_window_layers=1)
    config._attn_implementation = attention
    torch.manual_seed(0)
    model = (transformers.MistralForCausalLM if kind == "mistral" else transformers.Qwen2ForCausalLM)(config)
    return model.double().eval()


@pytest.mark.parametrize("kind", ["mistral", "qwen2"])
@pytest.mark.parametrize("share_prompt", [False, True])
def test_a_sliding_window_shorter_than_a_sequence_is_refused_and_a_longer_one_kept(
    kind: str, share_prompt: bool
) -> None:
    """A mask replaces the window in every layer: with a sequence longer than the window the packed forward is
    wrong (shown through a name, which knows no window), so the model's inputs are refused; with every sequence
    within the window they give each sequence alone."""
    rows = _units("both", seed=13)
    batch = pt.collate(rows, share_prompt=share_prompt)
    short = _sliding_model(4, kind)
    with torch.no_grad():
        blind = pt.completion_logps(short(**pt.model_inputs(batch, "sdpa", dtype=torch.float64)).logits, batch)
    assert float((blind - alone_logps(short, rows)).abs().max()) > 1e-3
    for given_ in (short, short.config):
        config = given_.config if given_ is short else given_
        for attention in ("eager", "sdpa", "flex_attention"):
            config._attn_implementation = attention
            with pytest.raises(SettingError) as caught:
                pt.model_inputs(batch, given_, dtype=torch.float64)
            assert caught.value.name == "model" and "sliding window's 4 tokens" in str(caught.value)
    config._attn_implementation = "flash_attention_2"  # flash-attention applies the window itself
    if not share_prompt:
        assert "cu_seq_lens_q" in pt.model_inputs(batch, short)
    wide = _sliding_model(64, kind)
    assert float((_packed_logps(wide, batch) - alone_logps(wide, rows)).abs().max()) < TOLERANCE


# ---------------------------------------------------------------- FlexAttention


def _flex_or_skip(run: Any) -> Any:
    """``run()``, skipped when the installed torch's FlexAttention cannot do it on this device (on CPU: float32,
    float16 and bfloat16 only, and no backward). Compiled afresh: torch 2.13's CPU Inductor fails to recompile
    FlexAttention for a second shape (a C++ compile error), a fault of its own, not of the inputs."""
    torch._dynamo.reset()
    try:
        return run()
    except Exception as error:  # torch raises NotImplementedError, or Inductor's error wrapping it
        text = str(error)
        if "FlexAttention for CPU" in text or "does not support backward on CPU" in text:
            pytest.skip(f"the installed torch's FlexAttention: {text.splitlines()[0][:160]}")
        raise


@pytest.mark.slow
@pytest.mark.parametrize("share_prompt", [False, True])
def test_flex_attention_block_mask_gives_every_sequence_alone(share_prompt: bool) -> None:
    """FlexAttention (it compiles, so slow) in float32, pairs and groups, one row and pack's blocks."""
    pytest.importorskip("torch.nn.attention.flex_attention")
    model = tiny_causal_lm("llama", "flex_attention").float()
    rows = _units("both", seed=8)
    reference = alone_logps(tiny_causal_lm("llama", "eager").float(), rows)
    batches = _batches(rows, share_prompt)
    for form in ("collate", "pack"):
        inputs = pt.model_inputs(batches[form], model)
        assert type(inputs["attention_mask"]).__name__ == "BlockMask"
        assert inputs["attention_mask"].shape[0] == inputs["input_ids"].shape[0]
        packed = _flex_or_skip(lambda b=batches[form]: _packed_logps(model, b))
        assert float((packed - reference).abs().max()) < FLOAT32_TOLERANCE, form


@pytest.mark.slow
def test_flex_attention_in_float64_gives_every_sequence_alone() -> None:
    pytest.importorskip("torch.nn.attention.flex_attention")
    model = tiny_causal_lm("qwen2", "flex_attention")
    rows = _units("both", seed=9)
    batch = pt.collate(rows, share_prompt=True)
    packed = _flex_or_skip(lambda: _packed_logps(model, batch))
    assert float((packed - alone_logps(tiny_causal_lm("qwen2", "eager"), rows)).abs().max()) < TOLERANCE


@pytest.mark.slow
def test_flex_attention_gradients_equal_the_eager_ones() -> None:
    pytest.importorskip("torch.nn.attention.flex_attention")
    rows = _units("pairs", seed=10)
    batch = pt.collate(rows, share_prompt=True)
    grads = []
    for attention in ("flex_attention", "eager"):
        model = tiny_causal_lm("llama", attention).float()
        loss = _flex_or_skip(lambda m=model: pt.completion_logps(m(**pt.model_inputs(batch, m)).logits, batch).sum())
        grads.append(torch.autograd.grad(loss, list(model.parameters())))
    assert max(float((a - b).abs().max()) for a, b in zip(*grads, strict=True)) < FLOAT32_TOLERANCE


# ---------------------------------------------------------------- flash-attention


def _sequences(batch: Any) -> list[tuple[int, int]]:
    """Brute force: the ``(start, end)`` of every sequence flash-attention must see, over the flattened rows: each
    run of one document within a row, and every padding token (document -1) alone."""
    document = np.asarray(batch["document_ids"] if isinstance(batch, dict) else batch.document_ids)
    document = document.reshape(-1, document.shape[-1])
    found: list[tuple[int, int]] = []
    for row, values in enumerate(document):
        at = row * len(values)
        for t, value in enumerate(values):
            if t == 0 or value < 0 or value != values[t - 1]:
                found.append((at + t, at + t + 1))
            else:
                found[-1] = (found[-1][0], at + t + 1)
    return found


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    count=st.integers(1, 12),
    block=st.integers(BLOCK, 3 * BLOCK),
    name=st.sampled_from(FLASH_NAMES),
)
def test_flash_boundaries_are_one_sequence_a_document(seed: int, count: int, block: int, name: str) -> None:
    rows = random_units(seed, count=count)
    for batch in (packing.pack(rows, block), pt.collate_fixed(block)(rows), pt.collate(rows)):
        inputs = pt.model_inputs(batch, name)
        cu = inputs["cu_seq_lens_q"].tolist()
        assert list(itertools.pairwise(cu)) == _sequences(batch)
        assert inputs["cu_seq_lens_k"].tolist() == cu and inputs["cu_seq_lens_q"].dtype == torch.int32
        assert inputs["max_length_q"] == inputs["max_length_k"] == max(np.diff(cu))
        assert "attention_mask" not in inputs and inputs["use_cache"] is False


@pytest.mark.parametrize("pad_to_multiple_of", [None, 8])
def test_flash_boundaries_of_one_row_are_collates(pad_to_multiple_of: int | None) -> None:
    """For one row, what ``collate(return_flash_attn_kwargs=True)`` gives (transformers' collator's boundaries)."""
    rows = random_units(11, count=6)
    ours = pt.model_inputs(pt.collate(rows, pad_to_multiple_of=pad_to_multiple_of), "flash_attention_2")
    theirs = pt.collate(rows, pad_to_multiple_of=pad_to_multiple_of, return_flash_attn_kwargs=True)
    for name in ("cu_seq_lens_q", "cu_seq_lens_k"):
        assert ours[name].tolist() == theirs[name].tolist()
    assert ours["max_length_q"] == theirs["max_length_q"]


def _varlen_attention(
    module: Any, query: Any, key: Any, value: Any, attention_mask: Any, scaling: float | None = None, **kwargs: Any
) -> tuple[Any, None]:
    """flash-attention's varlen semantics in plain torch (flash-attention does not run on CPU): causal attention
    within each interval of ``cu_seq_lens_q`` over the flattened rows, nothing across. Refuses to guess without
    the boundaries."""
    cu = kwargs.get("cu_seq_lens_q")
    assert attention_mask is None and cu is not None, "a flash-attention call without cu_seq_lens"
    rows, heads, length, width = query.shape
    groups = heads // key.shape[1]
    q = query.transpose(1, 2).reshape(rows * length, heads, width)
    k, v = (x.repeat_interleave(groups, 1).transpose(1, 2).reshape(rows * length, heads, width) for x in (key, value))
    out = torch.empty_like(q)
    for start, end in zip(cu[:-1].tolist(), cu[1:].tolist(), strict=True):
        piece = torch.nn.functional.scaled_dot_product_attention(
            *(x[start:end].transpose(0, 1) for x in (q, k, v)), is_causal=True, scale=scaling
        )
        out[start:end] = piece.transpose(0, 1)
    return out.reshape(rows, length, heads, width), None


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_flash_boundaries_through_the_model_give_every_sequence_alone(kind: str, monkeypatch: Any) -> None:
    """A real model whose attention is flash-attention's varlen rule (``_varlen_attention``, under a flash name):
    the boundaries reach every layer and keep every sequence apart, in several rows too (pack's blocks, where
    transformers reads no boundaries from the position ids)."""
    name = "flash_varlen_in_torch"
    monkeypatch.setitem(transformers.AttentionInterface._global_mapping, name, _varlen_attention)
    model = tiny_causal_lm(kind, "sdpa")
    model.config._attn_implementation = name  # after the model's own check, which would load flash-attention
    rows = _units("both", seed=12)
    single = [{"prompt": row["prompt"], "completions": completions_of(row)[:1]} for row in rows]
    plain = tiny_causal_lm(kind, "sdpa")  # the same weights, for each sequence alone
    reference = alone_logps(plain, rows)
    for form, batch in _batches(rows, share_prompt=False).items():
        assert float((_packed_logps(model, batch) - reference).abs().max()) < TOLERANCE, form
    shared = pt.collate(single, share_prompt=True)  # one completion a unit: a shared prompt is one sequence a unit
    assert float((_packed_logps(model, shared) - alone_logps(plain, single)).abs().max()) < TOLERANCE


@pytest.mark.parametrize("name", FLASH_NAMES)
@pytest.mark.parametrize("form", ["collate", "pack", "collate_fixed"])
def test_flash_attention_refuses_completions_that_share_a_prompt(name: str, form: str) -> None:
    """Named: the first unit whose completions share a document (the pairs here; a group of one is one sequence)."""
    rows = [{"prompt": [5, 6], "completions": [[7]]}, {"prompt": [1, 2], "chosen": [3], "rejected": [4, 5]}] * 3
    make = {
        "collate": lambda r, n, **o: pt.collate(r, **o),
        "pack": packing.pack,
        "collate_fixed": lambda r, n, **o: pt.collate_fixed(n, **o)(r),
    }
    batch = make[form](rows, 8, share_prompt=True)
    config = transformers.LlamaConfig()
    config._attn_implementation = name
    for given_ in (name, config):
        with pytest.raises(SettingError) as caught:
            pt.model_inputs(batch, given_)
        assert caught.value.name == "attn_implementation"
        named = re.search(r"unit (\d+)'s 2 do", str(caught.value))
        assert named is not None and int(named.group(1)) % 2 == 1, str(caught.value)
        assert "share_prompt=False" in str(caught.value)


# ---------------------------------------------------------------- errors


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=80).filter(lambda s: "flash" not in s and s not in ("eager", "sdpa", "flex_attention")))
def test_an_unknown_implementation_is_refused_by_name(name: str) -> None:
    batch = pt.collate([{"prompt": [1], "chosen": [2], "rejected": [3]}])
    with pytest.raises(SettingError) as caught:
        pt.model_inputs(batch, name, dtype=torch.float32)
    assert caught.value.name == "attn_implementation" and len(str(caught.value)) < 240


@pytest.mark.parametrize("dtype", [torch.int64, torch.bool, "float32", np.float32, 3])
@pytest.mark.parametrize("model", ["sdpa", "model"])
def test_a_dtype_that_is_not_a_floating_torch_dtype_is_refused(dtype: Any, model: str) -> None:
    batch = pt.collate([{"prompt": [1], "completions": [[2], [3]]}], share_prompt=True)
    given_ = tiny_causal_lm("llama", "sdpa") if model == "model" else model
    with pytest.raises(SettingError) as caught:
        pt.model_inputs(batch, given_, dtype=dtype)
    assert caught.value.name == "dtype"


@pytest.mark.parametrize("name", ["eager", "sdpa", None])
def test_a_mask_with_no_dtype_to_take_is_refused(name: str | None) -> None:
    """A name or a config says no dtype: the additive mask's must be given (not guessed)."""
    config = transformers.LlamaConfig()
    config._attn_implementation = name
    batch = pt.collate([{"prompt": [1], "completions": [[2], [3]]}], share_prompt=True)
    for given_ in (config, name) if name else (config,):
        with pytest.raises(SettingError) as caught:
            pt.model_inputs(batch, given_)
        assert caught.value.name == "dtype"


@pytest.mark.parametrize("model", [object(), 3, {"attn_implementation": "sdpa"}])
def test_what_is_not_a_model_a_config_or_a_name_is_refused(model: Any) -> None:
    batch = pt.collate([{"prompt": [1], "completions": [[2]]}])
    with pytest.raises(SettingError) as caught:
        pt.model_inputs(batch, model, dtype=torch.float32)
    assert caught.value.name == "model"


@pytest.mark.parametrize("batch", [{"input_ids": [[1, 2]]}, "collate of plain rows"])
def test_a_batch_without_units_is_refused_by_name(batch: Any) -> None:
    batch = pt.collate([[1, 2, 3], [4, 5]]) if isinstance(batch, str) else batch
    with pytest.raises(SettingError) as caught:
        pt.model_inputs(batch, "sdpa", dtype=torch.float32)
    assert caught.value.name == "batch" and "pairs or groups" in str(caught.value)
