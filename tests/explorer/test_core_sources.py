"""Examples, synthetic lengths, workloads and uploads as datasets."""

from __future__ import annotations

import json

import numpy as np
import pytest

import packing
from explorer.core import sources
from explorer.core.examples import DISTRIBUTIONS, EXAMPLES, synthetic_code, synthetic_lengths, workload_sample
from explorer.core.model import MAX_UPLOAD_MB
from explorer.core.parsing import InputError, parse_sequences
from packing._workloads import WORKLOADS, load_workload


def test_classic_example_packs_to_the_classic_blocks() -> None:
    example = EXAMPLES["classic"]
    samples = parse_sequences(example.text).samples
    assert packing.pack(samples, example.max_seq_length, strategy=example.strategy).to_lists() == (
        [[1, 2, 3, 4], [5, 6, 0, 0]],
        [[1, 1, 1, 1], [1, 1, 0, 0]],
    )


def test_every_example_parses_and_makes_its_point() -> None:
    for example in EXAMPLES.values():
        samples = parse_sequences(example.text).samples
        batch = packing.pack(samples, example.max_seq_length, strategy=example.strategy)
        assert batch.num_blocks >= 1, example.key
    masking = EXAMPLES["masking"]
    batch = packing.pack(parse_sequences(masking.text).samples, masking.max_seq_length, strategy=masking.strategy)
    assert batch.stats.trainable_tokens < batch.stats.packed_tokens  # prompts are masked
    attention = EXAMPLES["attention"]
    batch = packing.pack(parse_sequences(attention.text).samples, attention.max_seq_length, strategy=attention.strategy)
    assert max(len(batch.seq_lengths(b)) for b in range(batch.num_blocks)) >= 2  # documents share a block
    no_split = EXAMPLES["no_split"]
    lengths = packing.read_rows(parse_sequences(no_split.text).samples).lengths

    def cut(strategy: str) -> int:
        pieces = [
            p.sequence
            for block in packing.plan(lengths, no_split.max_seq_length, strategy=strategy).blocks()
            for p in block
        ]
        return len(pieces) - len(set(pieces))

    assert cut("split") > 0  # the classic method cuts a sequence here
    assert cut(no_split.strategy) == 0
    assert packing.plan(lengths, no_split.max_seq_length, strategy="optimal").num_blocks == 2
    assert packing.plan(lengths, no_split.max_seq_length, strategy=no_split.strategy).num_blocks == 3


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
    pasted = sources.Paste("1 2 | 3\n4 5 6").load()
    assert pasted.has_tokens and pasted.has_masked_tokens and pasted.lengths.tolist() == [3, 3]
    synthetic = sources.Synthetic(100, "uniform", 1, 64).load()
    assert not synthetic.has_tokens and len(synthetic.lengths) == 100
    sample = sources.Workload(WORKLOADS[0], 500).load()
    assert len(sample.lengths) == 500 and "500 of the" in sample.note and "random" in sample.note


def test_every_sequence_of_a_workload_keeps_the_files_order_like_the_cli() -> None:
    """All of a distribution is used in the file's order, so order-dependent strategies agree with
    `packing compare` (a shuffled copy would not)."""
    full = sources.Workload("squad_1_1_bert_384", 0).load()
    loaded = load_workload("squad_1_1_bert_384").lengths
    assert np.array_equal(full.lengths, loaded) and "file's order" in full.note
    for strategy in ("split", "next_fit", "first_fit"):
        assert (
            packing.plan(full.lengths, 384, strategy=strategy).num_blocks
            == packing.plan(loaded, 384, strategy=strategy).num_blocks
        )


def test_dataset_errors_are_plain() -> None:
    with pytest.raises(InputError, match="line 1"):
        sources.Paste("[[1, 2], [3, 'a']]").load()
    with pytest.raises(InputError, match="between 1 and"):
        sources.Synthetic(0, "uniform", 0, 10).load()
    with pytest.raises(InputError, match="MB"):
        sources.Upload.of("big.jsonl", b"0" * (MAX_UPLOAD_MB * 2**20 + 1)).load()


def test_uploads_are_read_with_the_library() -> None:
    lengths_only = sources.Upload.of("lengths.csv", b"length\n5\n7\n").load()
    assert lengths_only.lengths.tolist() == [5, 7] and not lengths_only.has_tokens
    tokens = sources.Upload.of("train.jsonl", b'{"input_ids": [1, 2, 3]}\n{"prompt": [4], "completion": [5]}\n')
    data = tokens.load()
    assert data.lengths.tolist() == [3, 2] and data.has_tokens
    assert data.samples is not None and data.samples.loss_mask.tolist() == [1, 1, 1, 0, 1]
    with pytest.raises(InputError, match=r"bad\.json"):
        sources.Upload.of("bad.json", b'[[1, 2], [3, "x"]]').load()


def test_an_upload_is_keyed_by_its_digest_not_its_bytes() -> None:
    a = sources.Upload.of("a.jsonl", b"[1, 2]\n")
    b = sources.Upload.of("a.jsonl", b"[1, 2]\n")
    assert a == b and hash(a) == hash(b) and a.cache_key == ("Upload", "a.jsonl", a.digest, "bytes")
    assert b"[1, 2]" not in repr(a.cache_key).encode()
    assert a != sources.Upload.of("a.jsonl", b"[1, 3]\n")


@pytest.mark.parametrize(
    ("name", "data", "message"),
    [
        (
            "h.json",
            b'{"histogram": [0, 1000000000000]}',
            "1,000,000,000,000 sequences, more than the limit of 1,000,000",  # the library's wording (packing.reading._limits)
        ),
        ("n.json", b"[" * 100_000 + b"]" * 100_000, "n.json"),
        ("big.csv", b"input_ids\n" + b"9" * 5000 + b"\n", "big.csv"),
        ("s.json", b'[["' + b"x" * 1_000_000 + b'"]]', "s.json"),
    ],
)
def test_hostile_files_give_one_short_line(name: str, data: bytes, message: str) -> None:
    with pytest.raises(InputError) as caught:
        sources.Upload.of(name, data).load()
    text = str(caught.value)
    assert message in text and "\n" not in text and len(text) < 400, text[:500]


def test_pasted_text_is_bounded_by_what_it_expands_to() -> None:
    with pytest.raises(InputError, match="2,000,000 can be pasted"):
        sources.Paste("1 " * 1_000_001).load()
    with pytest.raises(InputError, match="nested too deeply"):
        sources.Paste("[" * 10_000).load()
    with pytest.raises(InputError, match="too many digits"):
        sources.Paste("[[" + "9" * 5000 + "]]").load()


def test_the_paste_box_refuses_what_pack_refuses() -> None:
    """Rows go through the library's reader: both forms in one row are refused, as by pack (a prompt/completion
    pair is not silently cut down to its input_ids or the other way round)."""
    row = '{"prompt": [1], "completion": [2], "input_ids": [9, 9, 9]}'
    with pytest.raises(ValueError):
        packing.pack([json.loads(row)], 4)
    with pytest.raises(InputError):
        sources.Paste(row).load()


def test_links_say_what_they_reproduce() -> None:
    assert "same sequences" in sources.Paste("1 2").link_reproduces()
    long = sources.Paste("1 2\n" * 2000)
    assert not long.in_link and "classic example" in long.link_reproduces()
    assert "cannot carry an uploaded file" in sources.Upload.of("a.csv", b"length\n1\n").link_reproduces()


def test_an_uploaded_file_of_text_rows_is_tokenized_with_bytes() -> None:
    import io
    import json

    import packing
    from explorer.core.sources import Upload

    rows = [
        {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]},
        {"prompt": "2+2=", "completion": "4"},
    ]
    data = "".join(json.dumps(row) + "\n" for row in rows).encode()
    loaded = Upload.of("chats.jsonl", data).load()
    expected = packing.read_dataset(io.BytesIO(data), name="chats.jsonl", tokenizer="bytes").samples
    assert loaded.samples is not None and loaded.samples.tokens is not None and expected.tokens is not None
    assert loaded.samples.tokens.tolist() == expected.tokens.tolist()
    assert loaded.samples.loss_mask is not None and expected.loss_mask is not None
    assert loaded.samples.loss_mask.tolist() == expected.loss_mask.tolist()
    assert 0 < int(expected.loss_mask.sum()) < len(expected.loss_mask)  # only the answers are trained
    tokens = Upload.of("ids.jsonl", b'{"input_ids": [1, 2, 3]}\n').load()  # token files are read as before
    assert tokens.samples is not None and tokens.samples.tokens is not None
    assert tokens.samples.tokens.tolist() == [1, 2, 3]


def test_an_upload_of_text_rows_uses_the_chosen_tokenizer_and_says_so() -> None:
    import json

    from explorer.core.parsing import InputError
    from explorer.core.sources import Upload

    data = (json.dumps({"prompt": "2+2=", "completion": "4"}) + "\n").encode()
    loaded = Upload.of("qa.jsonl", data, " bytes ").load()
    assert loaded.label == "qa.jsonl: 1 text row, tokenized with 'bytes'"
    with pytest.raises(InputError) as refused:  # a tokenizer that cannot be loaded: one plain line, no traceback
        Upload.of("qa.jsonl", data, "/no/such/tokenizer/folder").load()
    assert str(refused.value).startswith("qa.jsonl holds text rows. Cannot load the tokenizer")
    assert "\n" not in str(refused.value)
    # a file of tokens never loads the tokenizer, whatever it is
    tokens = Upload.of("ids.jsonl", b'{"input_ids": [1, 2, 3]}\n', "/no/such/tokenizer/folder").load()
    assert tokens.label == "ids.jsonl: 1 sample"
    # the tokenizer is part of what identifies the data (the cache keeps one entry per choice)
    assert Upload.of("qa.jsonl", data, "bytes").cache_key != Upload.of("qa.jsonl", data, "other").cache_key


def test_labels_in_an_upload_or_a_paste_are_read_as_the_library_reads_them() -> None:
    """-100 labels mask their tokens (as a loss mask would); labels other than the ids are refused in one line
    naming the row, since the page packs and blocks train each token on itself."""
    rows = [{"input_ids": [4, 5], "labels": [-100, 5]}, {"input_ids": [1, 2, 3], "labels": [1, 2, 3]}]
    upload = sources.Upload.of("labels.jsonl", "\n".join(map(json.dumps, rows)).encode()).load()
    pasted = sources.Paste(json.dumps(rows)).load()
    for data in (upload, pasted):
        assert data.samples is not None and data.samples.loss_mask.tolist() == [0, 1, 1, 1, 1]
    rows[1]["labels"] = [1, 2, 9]
    with pytest.raises(InputError, match=r"labels.jsonl, row 2, 'labels', position 2: expected 3 .*got 9"):
        sources.Upload.of("labels.jsonl", "\n".join(map(json.dumps, rows)).encode()).load()
    with pytest.raises(InputError, match=r"'labels', position 2: expected 3 .*got 9"):
        sources.Paste(json.dumps(rows)).load()
