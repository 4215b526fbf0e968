"""``collate``'s transformers options (``separator_id``, ``position_ids_start``, ``return_tensors``) against the real
``DataCollatorWithFlattening``, and ``pad_to_multiple_of`` against the collator that has it, TRL's padding-free
``DataCollatorForLanguageModeling``: key for key on random rows."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import packing  # noqa: E402
from packing.torch import collate  # noqa: E402
from tests.helpers.peer_batches import as_features, assert_same_batch  # noqa: E402
from tests.helpers.sample_rows import rows as sample_rows  # noqa: E402

ROWS = sample_rows(max_tokens=12, min_size=1, max_size=6).filter(
    lambda rows: any(len(f["input_ids"]) for f in as_features(rows))
)


@settings(max_examples=80, deadline=None)
@given(
    rows=ROWS,
    separator_id=st.sampled_from([-100, -1, 0, 7]),
    start=st.sampled_from([0, 2]),
    tensors=st.sampled_from(["pt", "np"]),
    flash=st.booleans(),
    seq_idx=st.booleans(),
    positions=st.booleans(),
)
def test_collate_equals_data_collator_with_flattening_for_every_option(
    rows: list[Any], separator_id: int, start: int, tensors: str, flash: bool, seq_idx: bool, positions: bool
) -> None:
    reference = transformers.DataCollatorWithFlattening(
        return_position_ids=positions, separator_id=separator_id, return_flash_attn_kwargs=flash,
        return_seq_idx=seq_idx, position_ids_start=start, return_tensors=tensors,
    )  # fmt: skip
    ours = collate(
        rows, return_position_ids=positions, separator_id=separator_id, return_flash_attn_kwargs=flash,
        return_seq_idx=seq_idx, position_ids_start=start, return_tensors=tensors,  # type: ignore[arg-type]
    )  # fmt: skip
    assert_same_batch(ours, reference(as_features(rows)))


@settings(max_examples=40, deadline=None)
@given(rows=ROWS, tensors=st.sampled_from(["pt", "np"]))
def test_the_call_time_options_of_the_collator_are_collates_keywords(rows: list[Any], tensors: str) -> None:
    """transformers takes ``return_tensors`` and ``separator_id`` at call time too; they are the same options."""
    theirs = transformers.DataCollatorWithFlattening()(as_features(rows), return_tensors=tensors, separator_id=3)
    assert_same_batch(collate(rows, return_tensors=tensors, separator_id=3), theirs)  # type: ignore[arg-type]


@settings(max_examples=80, deadline=None)
@given(rows=ROWS, multiple=st.integers(1, 9), pad_id=st.sampled_from([0, 5]))
def test_pad_to_multiple_of_pads_as_trls_padding_free_collator(rows: list[Any], multiple: int, pad_id: int) -> None:
    """transformers' ``DataCollatorWithFlattening`` takes no ``pad_to_multiple_of`` (a TypeError); TRL's
    padding-free collator does, and ``collate`` pads as it does: pad id, label -100, position 0, each padding
    token a sequence of its own in ``cu_seq_lens`` and ``seq_idx``."""
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    with pytest.raises(TypeError):
        transformers.DataCollatorWithFlattening(pad_to_multiple_of=multiple)
    trl_collator = DataCollatorForLanguageModeling(pad_token_id=pad_id, padding_free=True, pad_to_multiple_of=multiple)
    features = [f for f in as_features(rows) if f["input_ids"]]  # an empty one makes TRL's ids floats (below)
    theirs = dict(trl_collator(features))
    ours = collate(
        rows, return_flash_attn_kwargs=True, return_seq_idx=True, pad_to_multiple_of=multiple, pad_token_id=pad_id
    )
    assert ours["input_ids"].shape[1] % multiple == 0
    assert_same_batch(ours, theirs)


def test_padding_gets_no_loss_weight_and_keeps_the_documents_weights() -> None:
    plain = collate([[5, 6], [7, 8, 9]], loss_weights="sequence")["loss_weights"][0].tolist()
    padded = collate([[5, 6], [7, 8, 9]], loss_weights="sequence", pad_to_multiple_of=8)["loss_weights"][0].tolist()
    assert padded == [*plain, 0.0, 0.0, 0.0]


def test_padding_with_a_start_gives_each_padding_token_the_start() -> None:
    batch = collate([[5, 6, 7]], pad_to_multiple_of=5, position_ids_start=2, pad_token_id=9, return_seq_idx=True)
    assert batch["input_ids"].tolist() == [[5, 6, 7, 9, 9]]
    assert batch["position_ids"].tolist() == [[2, 3, 4, 2, 2]]
    assert batch["seq_idx"].tolist() == [[0, 0, 0, 1, 2]]


def test_the_separator_is_never_a_loss_weight() -> None:
    """Weights are computed from what is trained, before the separator takes each document's first label."""
    batch = collate([[5, 6], [7, 8, 9]], separator_id=1, loss_weights="token")
    assert batch["labels"].tolist() == [[1, 6, 1, 8, 9]]
    third = float(np.float32(1 / 3))
    assert batch["loss_weights"].tolist() == [[0.0, third, 0.0, third, third]]


def test_numpy_batches_hold_no_tensor() -> None:
    batch = collate([[5, 6], [7]], return_tensors="np", return_flash_attn_kwargs=True, return_seq_idx=True)
    assert all(not isinstance(v, torch.Tensor) for v in batch.values())
    assert {k: v.dtype for k, v in batch.items() if isinstance(v, np.ndarray)} == {
        "input_ids": np.int64, "labels": np.int64, "position_ids": np.int64, "seq_idx": np.int32,
        "cu_seq_lens_q": np.int32, "cu_seq_lens_k": np.int32,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"return_tensors": "tf"}, r"^return_tensors: expected 'pt' or 'np', got 'tf' \(str\)$"),
        ({"pad_to_multiple_of": 0}, r"^pad_to_multiple_of: expected None or an integer >= 1, got 0$"),
        ({"pad_to_multiple_of": True}, r"^pad_to_multiple_of: expected None or an integer >= 1, got True \(bool\)$"),
        ({"separator_id": 1.5}, r"^separator_id: expected an integer, got 1.5 \(float\)$"),
        ({"position_ids_start": -1}, r"^position_ids_start: expected a non-negative integer, got -1$"),
        # out of range: a typed error, not numpy's OverflowError, MemoryError or positions wrapped round
        (
            {"separator_id": 2**70},
            r"^separator_id: expected an integer that fits in 64 bits, got 1180591620717411303424$",
        ),
        (
            {"separator_id": -(2**63) - 1},
            r"^separator_id: expected an integer that fits in 64 bits, got -9223372036854775809$",
        ),
        (
            {"position_ids_start": 2**63 - 2},
            r"^position_ids_start: expected at most 16,777,216, got 9223372036854775806$",
        ),
        ({"pad_to_multiple_of": 10**12}, r"^pad_to_multiple_of: expected at most 16,777,216, got 1000000000000$"),
    ],
)
def test_bad_options_are_refused_by_name(options: dict[str, Any], message: str) -> None:
    with pytest.raises(packing.SettingError, match=message):
        collate([[1, 2]], **options)


def test_an_empty_document_is_skipped_where_trl_turns_the_ids_into_floats() -> None:
    """A difference: TRL's padding-free collator concatenates an empty example's float tensor with the others, so
    its ``input_ids`` and ``labels`` come out float32; ``collate`` skips the empty document and stays int64."""
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    rows = [{"input_ids": [1, 2]}, {"input_ids": []}, {"input_ids": [3]}]
    theirs = DataCollatorForLanguageModeling(pad_token_id=0, padding_free=True, pad_to_multiple_of=4)(rows)
    ours = collate(rows, return_flash_attn_kwargs=True, return_seq_idx=True, pad_to_multiple_of=4)
    assert theirs["input_ids"].dtype == torch.float32 and ours["input_ids"].dtype == torch.int64
    for key in ("input_ids", "labels", "position_ids", "cu_seq_lens_q", "seq_idx"):
        assert ours[key].tolist() == theirs[key].tolist(), key


def test_the_samplers_collate_takes_the_options_through_partial() -> None:
    """``functools.partial(sampler.collate, ...)`` is a picklable ``collate_fn`` with the sampler's recipe and the
    options; the padded batch holds the block's tokens and padding only."""
    import functools
    import pickle

    from packing.torch import PackingSampler

    samples = [[1, 2, 3], [4, 5], [6, 7, 8, 9]]
    sampler = PackingSampler([3, 2, 4], 6, num_replicas=1, rank=0, shuffle=False)
    collate_fn = pickle.loads(
        pickle.dumps(functools.partial(sampler.collate, pad_to_multiple_of=8, return_tensors="np"))
    )
    for block in sampler:
        batch = collate_fn([samples[i] for i in block])
        assert isinstance(batch["input_ids"], np.ndarray) and batch["input_ids"].shape == (1, 8)
        assert sum(len(samples[i]) for i in block) <= 6
