"""Examples, synthetic lengths, workloads and uploads as datasets."""

from __future__ import annotations

import numpy as np
import pytest

import packing
from explorer import data
from explorer.examples import DISTRIBUTIONS, EXAMPLES, synthetic_code, synthetic_lengths, workload_sample
from explorer.parsing import InputError, parse_sequences
from packing.workloads import WORKLOADS, load_workload


def test_classic_example_packs_to_the_classic_blocks() -> None:
    example = EXAMPLES["classic"]
    samples = parse_sequences(example.text).samples
    assert packing.pack(samples, example.max_seq_length, example.strategy).to_lists() == (
        [[1, 2, 3, 4], [5, 6, 0, 0]],
        [[1, 1, 1, 1], [1, 1, 0, 0]],
    )


def test_every_example_parses_and_makes_its_point() -> None:
    for example in EXAMPLES.values():
        samples = parse_sequences(example.text).samples
        batch = packing.pack(samples, example.max_seq_length, example.strategy)
        assert batch.num_blocks >= 1, example.key
    masking = EXAMPLES["masking"]
    batch = packing.pack(parse_sequences(masking.text).samples, masking.max_seq_length, masking.strategy)
    assert batch.stats.trainable_tokens < batch.stats.packed_tokens  # prompts are masked
    attention = EXAMPLES["attention"]
    batch = packing.pack(parse_sequences(attention.text).samples, attention.max_seq_length, attention.strategy)
    assert max(len(batch.seq_lengths(b)) for b in range(batch.num_blocks)) >= 2  # documents share a block
    no_split = EXAMPLES["no_split"]
    lengths = packing.read_samples(parse_sequences(no_split.text).samples).lengths

    def cut(strategy: str) -> int:
        pieces = [
            p.sequence for block in packing.plan(lengths, no_split.max_seq_length, strategy).blocks() for p in block
        ]
        return len(pieces) - len(set(pieces))

    assert cut("split") > 0  # the classic method cuts a sequence here
    assert cut(no_split.strategy) == 0
    assert packing.plan(lengths, no_split.max_seq_length, "optimal").num_blocks == 2
    assert packing.plan(lengths, no_split.max_seq_length, no_split.strategy).num_blocks == 3


@pytest.mark.parametrize("distribution", list(DISTRIBUTIONS))
def test_synthetic_lengths_are_seeded_and_in_range(distribution: str) -> None:
    first = synthetic_lengths(5000, distribution, 7, 2048)
    assert np.array_equal(first, synthetic_lengths(5000, distribution, 7, 2048))
    assert not np.array_equal(first, synthetic_lengths(5000, distribution, 8, 2048))
    assert first.dtype == np.int64 and len(first) == 5000
    assert first.min() >= 1 and first.max() <= 2048


@pytest.mark.parametrize("distribution", list(DISTRIBUTIONS))
def test_synthetic_code_rebuilds_the_same_lengths(distribution: str) -> None:
    namespace: dict[str, object] = {"np": np}
    exec(synthetic_code(300, distribution, 3, 1000), namespace)
    assert np.array_equal(namespace["lengths"], synthetic_lengths(300, distribution, 3, 1000))


def test_unknown_distribution() -> None:
    with pytest.raises(ValueError, match="unknown distribution"):
        synthetic_lengths(3, "zipf", 0, 10)


def test_workload_sample_is_a_seeded_shuffle() -> None:
    lengths = np.arange(1, 101)
    sample = workload_sample(lengths, 10)
    assert len(sample) == 10 and len(set(sample.tolist())) == 10
    assert np.array_equal(sample, workload_sample(lengths, 10))
    assert sorted(workload_sample(lengths, 1000).tolist()) == lengths.tolist()


def test_datasets_from_each_source() -> None:
    pasted = data.from_text("1 2 | 3\n4 5 6")
    assert pasted.has_tokens and pasted.has_prompts and pasted.lengths.tolist() == [3, 3]
    synthetic = data.synthetic(100, "uniform", 1, 64)
    assert not synthetic.has_tokens and len(synthetic.lengths) == 100
    workload = data.workload(WORKLOADS[0], 500)
    assert len(workload.lengths) == 500 and "500 of" in workload.note
    full = data.workload("openchat_v1_2048", 0)
    assert len(full.lengths) == len(load_workload("openchat_v1_2048").lengths)


def test_dataset_errors_are_plain() -> None:
    with pytest.raises(InputError, match="line 1"):
        data.from_text("[[1, 2], [3, 'a']]")
    with pytest.raises(InputError, match="between 1 and"):
        data.synthetic(0, "uniform", 0, 10)
    with pytest.raises(InputError, match="MB"):
        data.from_upload("big.jsonl", b"0" * (data.MAX_UPLOAD_MB * 2**20 + 1))


def test_uploads_are_read_with_the_library() -> None:
    pytest.importorskip("packing.io")
    lengths_only = data.from_upload("lengths.csv", b"length\n5\n7\n")
    assert lengths_only.lengths.tolist() == [5, 7] and not lengths_only.has_tokens
    tokens = data.from_upload("train.jsonl", b'{"input_ids": [1, 2, 3]}\n{"prompt": [4], "completion": [5]}\n')
    assert tokens.lengths.tolist() == [3, 2] and tokens.has_tokens
    with pytest.raises(InputError, match=r"bad\.json"):
        data.from_upload("bad.json", b'[[1, 2], [3, "x"]]')
