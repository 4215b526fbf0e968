"""The unit forms read by the one reader: preference pairs and completion groups as token ids, text and TRL's
conversational messages, laid out with and without a shared prompt; their errors, one located line each."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import packing
import packing.core
import packing.reading
import packing.text
from packing import DatasetError, SampleError
from packing.core._pairs_groups import Units
from packing.errors import NeedsTokenizer, UnitError
from packing.reading._reader import unit_row
from tests.helpers.units import completions_of, random_units

PAIR = {"prompt": [1, 2, 3], "chosen": [4, 5], "rejected": [6]}
GROUP = {"prompt": [7, 8], "completions": [[9], [10, 11], [12, 13, 14]]}


def test_a_pair_laid_out_in_each_layout() -> None:
    duplicated = packing.read_rows([PAIR])
    assert duplicated.tokens.tolist() == [1, 2, 3, 4, 5, 1, 2, 3, 6]
    assert duplicated.loss_mask.tolist() == [0, 0, 0, 1, 1, 0, 0, 0, 1]
    shared = packing.read_rows([PAIR], share_prompt=True)
    assert shared.tokens.tolist() == [1, 2, 3, 4, 5, 6]
    assert shared.loss_mask.tolist() == [0, 0, 0, 1, 1, 1]
    assert shared.units.kind.tolist() == [1] and shared.units.share_prompt


def test_a_group_and_plain_rows_mix() -> None:
    samples = packing.read_rows([GROUP, [20, 21], {"prompt": [30], "completion": [31]}], share_prompt=True)
    assert samples.lengths.tolist() == [8, 2, 2]
    assert samples.units.kind.tolist() == [2, 0, 0]
    assert samples.loss_mask.tolist() == [0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1]


def test_tensors_and_arrays_are_read_as_lists() -> None:
    torch = pytest.importorskip("torch")
    row = {"prompt": torch.tensor([1, 2]), "completions": np.array([[3, 4], [5, 6]])}
    assert packing.read_rows([row]).tokens.tolist() == [1, 2, 3, 4, 1, 2, 5, 6]


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10_000), st.booleans())
def test_every_layout_holds_every_completion_after_its_prompt(seed: int, share_prompt: bool) -> None:
    """Property: read back (``unit_row``), every unit is the row given; its tokens are the prompt then each
    completion (duplicated: the prompt before each); relaid, the other layout's tokens."""
    rows = random_units(seed, count=5)
    samples = packing.read_rows(rows, share_prompt=share_prompt)
    assert samples.units is not None
    for index, row in enumerate(rows):
        back = unit_row(samples, index)
        assert back["prompt"].tolist() == row["prompt"]
        assert [
            c.tolist() for c in (back["completions"] if "completions" in back else (back["chosen"], back["rejected"]))
        ] == completions_of(row)
        lo, hi = samples.offsets[index], samples.offsets[index + 1]
        expected: list[int] = []
        for number, completion in enumerate(completions_of(row)):
            if number == 0 or not share_prompt:
                expected += row["prompt"]
            expected += completion
        assert samples.tokens[lo:hi].tolist() == expected
    index, other = samples.units.relaid(not share_prompt)
    assert samples.tokens[index].tolist() == packing.read_rows(rows, share_prompt=not share_prompt).tokens.tolist()
    assert other.lengths().tolist() == packing.read_rows(rows, share_prompt=not share_prompt).lengths.tolist()


def test_text_pairs_through_the_tokenizer() -> None:
    samples = packing.read_rows(
        [{"prompt": "2+2=", "chosen": "4", "rejected": "5"}], tokenizer="bytes", share_prompt=True
    )
    assert samples.tokens.tolist() == [50, 43, 50, 61, 52, 256, 53, 256]  # the EOS after each completion
    assert samples.loss_mask.tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    unmasked_eos = packing.read_rows(
        [{"prompt": "a", "chosen": "b", "rejected": "c"}],
        tokenizer="bytes",
        loss_rules=packing.Recipe(8, train_on_eos="none").loss_rules,
    )
    assert unmasked_eos.loss_mask.tolist() == [0, 1, 0, 0, 1, 0]


def test_trl_conversational_pairs_and_groups_train_the_completions_only() -> None:
    prompt = [{"role": "user", "content": "hi"}]
    pair = {
        "prompt": prompt,
        "chosen": [{"role": "assistant", "content": "yo"}],
        "rejected": [{"role": "assistant", "content": "no"}],
    }
    samples = packing.read_rows([pair], tokenizer="bytes", share_prompt=True)
    decode = packing.text.ByteTokenizer().decode
    units = samples.units
    prompt_text = decode(samples.tokens[: units.prompt_lengths[0]].tolist())
    assert prompt_text.endswith("<|im_start|>assistant\n") and "hi" in prompt_text
    assert decode(samples.tokens[samples.loss_mask == 1].tolist()) == "yo<|im_end|>\nno<|im_end|>\n"
    group = {"prompt": prompt, "completions": [[{"role": "assistant", "content": c}] for c in ("a", "bb", "a")]}
    same = packing.read_rows([group], tokenizer="bytes")  # two identical completions: the prompt still ends before
    back = unit_row(same, 0)
    assert [decode(c.tolist()) for c in back["completions"]] == ["a<|im_end|>\n", "bb<|im_end|>\n", "a<|im_end|>\n"]
    assert decode(back["prompt"].tolist()) == prompt_text


def test_loss_all_trains_every_completion_token_but_never_the_prompt() -> None:
    rules = packing.Recipe(8, loss="all").loss_rules
    samples = packing.read_rows([{"prompt": "a", "chosen": "b", "rejected": "c"}], tokenizer="bytes", loss_rules=rules)
    assert samples.loss_mask.tolist() == [0, 1, 1, 0, 1, 1]


# ---------------------------------------------------------------- errors: one line, the sample, the field


@pytest.mark.parametrize(
    ("row", "message"),
    [
        (
            {"prompt": [1], "chosen": [2]},
            "sample 1, 'rejected': expected a completion (a pair has 'prompt', 'chosen' and 'rejected'), got None (NoneType)",
        ),
        (
            {"chosen": [2], "rejected": [3]},
            "sample 1, 'prompt': expected a prompt (a pair has 'prompt', 'chosen' and 'rejected'), got None (NoneType)",
        ),
        (
            {"prompt": [1], "completions": []},
            "sample 1, 'completions': expected at least one completion (a group has 'prompt' and 'completions': [c1, ..., ck]), got <no completions>",
        ),
        (
            {"prompt": [1], "completions": [[2], []]},
            "sample 1, 'completions[1]': expected a completion of at least one token (nothing else is trained), got <no tokens>",
        ),
        (
            {"prompt": [1], "chosen": [], "rejected": [3]},
            "sample 1, 'chosen': expected a completion of at least one token (nothing else is trained), got <no tokens>",
        ),
        (
            {"prompt": [1], "chosen": [2], "rejected": [3], "completion": [4]},
            "sample 1, 'completion': expected one form: a pair or group has no 'completion' (the row has 'chosen'), got <both>",
        ),
        (
            {"prompt": [1], "completions": [[2], [-3]]},
            "sample 1, 'completions[1]', position 0: expected a non-negative integer token id, got -3",
        ),
        (
            {"prompt": [1], "chosen": [2], "rejected": [3], "chosen_mask": [1, 0]},
            "sample 1, 'chosen_mask': expected 1 values (one per token), got <2 values>",
        ),
    ],
)
def test_a_bad_unit_is_one_located_line(row: dict[str, Any], message: str) -> None:
    with pytest.raises(SampleError) as refused:
        packing.read_rows([PAIR, row])
    assert str(refused.value) == message
    assert "\n" not in str(refused.value)


def test_a_text_unit_without_a_tokenizer_says_so() -> None:
    with pytest.raises(NeedsTokenizer, match=r"^sample 0, 'prompt': expected token ids \(a text row needs a tokenizer"):
        packing.read_rows([{"prompt": "a", "chosen": "b", "rejected": "c"}])


def test_text_unit_errors_name_the_units_field() -> None:
    with pytest.raises(SampleError, match=r"^sample 0, 'completions\[1\]': expected a string, like 'prompt'"):
        packing.read_rows([{"prompt": "a", "completions": ["b", 3]}], tokenizer="bytes")
    with pytest.raises(UnitError, match=r"^sample 0, 'rejected': expected a completion of at least one token"):
        packing.read_rows([{"prompt": "a", "chosen": "b", "rejected": ""}], tokenizer="bytes")


def _jsonl(folder: Path, rows: list[Any]) -> Path:
    path = folder / "pairs.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_a_file_names_the_line_of_a_bad_unit(tmp_path: Path) -> None:
    path = _jsonl(tmp_path, [PAIR, GROUP, {"prompt": [1], "completions": []}])
    with pytest.raises(DatasetError) as refused:
        packing.read_dataset(path)
    assert str(refused.value) == (
        f"{path}, line 3, 'completions': expected at least one completion (a group has 'prompt' and "
        "'completions': [c1, ..., ck]), got <no completions>"
    )


def test_read_dataset_items_give_back_the_units(tmp_path: Path) -> None:
    data = packing.read_dataset(_jsonl(tmp_path, [PAIR, GROUP, [5, 6]]), share_prompt=True)
    assert data.lengths.tolist() == [6, 8, 2]
    assert {k: v.tolist() for k, v in data[0].items()} == PAIR
    assert [c.tolist() for c in data[1]["completions"]] == GROUP["completions"]
    assert data[2]["input_ids"].tolist() == [5, 6]
    again = packing.read_rows([data[i] for i in range(len(data))], share_prompt=True)
    assert again.tokens.tolist() == data.samples.tokens.tolist()


def test_parquet_and_text_files_read_units(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table(
        {"prompt": [[1, 2], [3]], "chosen": [[4], None], "rejected": [[5], None], "completions": [None, [[6], [7, 8]]]}
    )
    pq.write_table(table, tmp_path / "units.parquet")
    data = packing.read_dataset(tmp_path / "units.parquet")
    assert data.samples.units.kind.tolist() == [1, 2]
    assert data.samples.tokens.tolist() == [1, 2, 4, 1, 2, 5, 3, 6, 3, 7, 8]
    text = io.BytesIO(b'{"prompt": "a", "chosen": "b", "rejected": "c"}\n')
    assert packing.read_dataset(text, format="jsonl", tokenizer="bytes").lengths.tolist() == [6]


def test_units_join_and_take() -> None:
    a = packing.read_rows([PAIR])
    b = packing.read_rows([[9, 9, 9]])
    joined = packing.Samples.join([a, b])
    assert joined.units.kind.tolist() == [1, 0]
    assert Units.join([a.units, a.units]).completion_offsets.tolist() == [0, 2, 4]
    assert a.units.take(np.array([0, 0])).completion_lengths.tolist() == [2, 1, 2, 1]


def test_a_file_of_text_units_names_a_bad_token_row(tmp_path: Path) -> None:
    path = _jsonl(tmp_path, [{"prompt": "a", "chosen": "b", "rejected": "c"}, {"input_ids": [1, -2]}])
    with pytest.raises(DatasetError, match=r"pairs\.jsonl, line 2, 'input_ids', position 1: expected a non-negative"):
        packing.read_dataset(path, tokenizer="bytes")
    good = _jsonl(tmp_path, [{"prompt": "a", "chosen": "b", "rejected": "c"}, {"input_ids": [1, 2]}])
    assert packing.read_dataset(good, tokenizer="bytes", share_prompt=True).lengths.tolist() == [5, 2]
