"""Reading pasted sequences and typed practice answers."""

from __future__ import annotations

import pytest

from explorer.core.parsing import InputError, parse_blocks, parse_ids, parse_sequences
from explorer.core.sources import Paste


def test_json_list_of_lists() -> None:
    parsed = parse_sequences("[[1, 2], [3, 4, 5], [6]]")
    assert parsed.samples == [[1, 2], [3, 4, 5], [6]]
    assert not parsed.has_prompts


def test_one_sequence_per_line_with_spaces_or_commas() -> None:
    parsed = parse_sequences("1 2\n\n3,4, 5\n# a comment\n6")
    assert parsed.samples == [[1, 2], [3, 4, 5], [6]]
    assert parsed.lines == [1, 3, 5]


def test_one_json_list_per_line() -> None:
    assert parse_sequences("[1, 2]\n[3]").samples == [[1, 2], [3]]
    assert parse_sequences("[1, 2, 3]").samples == [[1, 2, 3]]  # a single JSON list is one sequence
    assert parse_sequences("[1, 2]\n3 4\n5 | 6").samples == [[1, 2], [3, 4], {"prompt": [5], "completion": [6]}]
    assert parse_sequences("[\n  [1, 2],\n  [3]\n]").samples == [[1, 2], [3]]


def test_prompt_completion_pairs_with_a_bar() -> None:
    parsed = parse_sequences("5 6 7 | 8 9\n10 | 11")
    assert parsed.samples == [{"prompt": [5, 6, 7], "completion": [8, 9]}, {"prompt": [10], "completion": [11]}]
    assert parsed.has_prompts


def test_json_objects_one_per_line() -> None:
    text = '{"prompt": [1], "completion": [2, 3]}\n{"input_ids": [4, 5], "loss_mask": [0, 1]}\n{"input_ids": [6]}'
    assert parse_sequences(text).samples == [
        {"prompt": [1], "completion": [2, 3]},
        {"input_ids": [4, 5], "loss_mask": [0, 1]},
        {"input_ids": [6]},
    ]


def test_json_list_of_objects() -> None:
    assert parse_sequences('[{"prompt": [1], "completion": [2]}, [3]]').samples == [
        {"prompt": [1], "completion": [2]},
        [3],
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "no sequences"),
        ("1 2\n3 x", "line 2: expected token ids"),
        ("[[1, 2], [3, x]]", "line 1, column 14: expected a JSON list of sequences (invalid JSON"),
        ("1 | 2 | 3", "line 1: expected one '|'"),
        ('{"prompt": [1], ', "line 1, column"),
        ("[1, 2]\n[3, x]", "line 2, column 5: expected a JSON list of token ids"),
        ("7\n8 9 | 1a", "line 2: expected token ids"),
        ("[1, 2", "line 1, column 6: expected a JSON list of token ids like [1, 2, 3] (invalid JSON"),
        ("[[1, 2]]\n[[3]]", "line 2, column 1: unexpected text after the end of the JSON list"),
        ('"text"', "line 1: expected token ids"),
        ("1 99999999999999999999", "line 1: token id '99999999999999999999' is too large"),
        ("1 ²", "line 1: expected token ids"),
        ("[[1, 2], 3]", "line 1 (sequence 2): expected a list of token ids or an object, got 3"),
        ("[" * 50_000, "nested too deeply"),
        ("[[" + "9" * 5000 + "]]", "a number has too many digits"),
        ("1 " + "9" * 5000, "is too large"),
    ],
)
def test_errors_name_the_line_and_what_was_expected(text: str, expected: str) -> None:
    with pytest.raises(InputError) as caught:
        parse_sequences(text)
    message = str(caught.value)
    assert expected in message and "\n" not in message and len(message) < 300, message[:400]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[[1, 2],\n [3, -4]]", "line 2 (sequence 2), position 1: expected a non-negative integer token id, got -4"),
        ("[[1, 2],\n [3, 1.5]]", "line 2 (sequence 2)"),
        ('{"prompt": [1]}', "line 1 (sequence 1)"),
        ('{"input_ids": [1, 2], "loss_mask": [1]}', "line 1 (sequence 1), 'loss_mask'"),
        ('{"tokens": [1]}', "line 1 (sequence 1): expected"),
        ("[[99999999999999999999]]", "line 1 (sequence 1), position 0"),
    ],
)
def test_the_librarys_reader_judges_the_rows_and_the_page_names_the_line(text: str, expected: str) -> None:
    with pytest.raises(InputError) as caught:
        Paste(text).load()
    assert expected in str(caught.value)


def test_boolean_loss_masks_are_read_as_by_pack() -> None:
    data = Paste('{"input_ids": [1, 2], "loss_mask": [true, false]}').load()
    assert data.samples is not None and data.samples.loss_mask.tolist() == [1, 0]


def test_parse_ids() -> None:
    assert parse_ids(" 1,2  3 ", "x") == [1, 2, 3]
    assert parse_ids("", "x") == []
    with pytest.raises(InputError, match="where: expected token ids"):
        parse_ids("1 -2", "where")


def test_blocks_in_every_accepted_form() -> None:
    text = "Block 1: [1, 2, 3, 4] -> mask: [1, 1, 1, 1]\n[5, 6, 0, 0]\n7 8 -> 0 1\n\n9,10"
    blocks = parse_blocks(text)
    assert [b.ids for b in blocks] == [[1, 2, 3, 4], [5, 6, 0, 0], [7, 8], [9, 10]]
    assert [b.mask for b in blocks] == [[1, 1, 1, 1], None, [0, 1], None]


def test_block_errors() -> None:
    with pytest.raises(InputError, match="no blocks"):
        parse_blocks("  ")
    with pytest.raises(InputError, match="line 2: expected token ids"):
        parse_blocks("1 2\n3 y")
    with pytest.raises(InputError, match="line 1: expected a block"):
        parse_blocks("Block 1: nothing")
    with pytest.raises(InputError, match=r"line 1 \(mask\): expected token ids"):
        parse_blocks("1 2 -> 1 x")
