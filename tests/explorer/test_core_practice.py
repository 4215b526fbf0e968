"""Practice problems and answer checking: blocks and loss masks."""

from __future__ import annotations

import packing
from explorer.core import practice
from explorer.core.parsing import TypedBlock, parse_blocks, parse_sequences


def _typed(blocks: list[list[int]], masks: list[list[int]] | None = None) -> list[TypedBlock]:
    return [TypedBlock(b, None if masks is None else masks[i]) for i, b in enumerate(blocks)]


def test_problems_are_numbered_small_and_their_ids_in_order() -> None:
    pairs = 0
    for number in range(1, 40):
        problem = practice.new_problem(number)
        assert problem == practice.new_problem(number)
        assert 3 <= len(problem.sequences) <= 6 and 4 <= problem.max_seq_length <= 8
        flat = [t for s in problem.sequences for t in (s["prompt"] + s["completion"] if isinstance(s, dict) else s)]
        assert flat == list(range(1, len(flat) + 1))
        assert problem.strategy in practice.PRACTICE_STRATEGIES
        batch = packing.pack(problem.sequences, problem.max_seq_length, strategy=problem.strategy)
        assert problem.expected() == (batch.input_ids.tolist(), batch.loss_mask.tolist())
        pairs += sum(isinstance(s, dict) for s in problem.sequences)
    assert pairs > 0  # some problems have prompts, so the loss mask is part of the question


def test_the_problem_text_reads_back_as_the_same_samples() -> None:
    for number in range(1, 20):
        problem = practice.new_problem(number)
        assert parse_sequences(problem.text).samples == problem.sequences


EXPECTED = ([[1, 2, 3, 4], [5, 6, 0, 0]], [[0, 1, 1, 1], [1, 1, 0, 0]])


def test_a_right_answer_may_leave_out_padding() -> None:
    feedback = practice.check_answer(EXPECTED, _typed([[1, 2, 3, 4], [5, 6]], [[0, 1, 1, 1], [1, 1]]), 4)
    assert feedback.correct and "all 2 blocks and their loss masks match" in feedback.message
    assert feedback.rows["ids"].tolist() == [True, True] and feedback.rows["mask"].tolist() == [True, True]


def test_right_blocks_without_masks_ask_for_the_masks() -> None:
    feedback = practice.check_answer(EXPECTED, _typed([[1, 2, 3, 4], [5, 6]]), 4)
    assert not feedback.correct and "give each block's loss mask" in feedback.message


def test_right_blocks_with_a_wrong_mask_say_so() -> None:
    feedback = practice.check_answer(EXPECTED, _typed([[1, 2, 3, 4], [5, 6]], [[1, 1, 1, 1], [1, 1]]), 4)
    assert not feedback.correct and feedback.message.startswith(
        "The token ids are right, but 1 of 2 loss masks differs"
    )


def test_a_wrong_answer_shows_where() -> None:
    feedback = practice.check_answer(EXPECTED, _typed([[1, 2, 4, 3], [5, 6]]), 4)
    assert not feedback.correct and feedback.message == "1 of 2 blocks differs in its token ids."
    assert feedback.rows["ids differ at"].tolist() == ["2, 3", ""]
    two = practice.check_answer(EXPECTED, _typed([[2, 1, 3, 4], [6, 5]]), 4)
    assert two.message == "2 of 2 blocks differ in their token ids."


def test_missing_extra_and_overlong_blocks() -> None:
    expected = ([[1, 2, 0], [3, 0, 0]], [[1, 1, 0], [1, 0, 0]])
    missing = practice.check_answer(expected, _typed([[1, 2]]), 3)
    assert not missing.correct and "You gave 1 block;" in missing.message
    assert missing.rows["yours"].tolist()[1] == "(missing)"
    one = ([[1, 2, 3]], [[1, 1, 1]])
    extra = practice.check_answer(one, _typed([[1, 2, 3], [4]]), 3)
    assert extra.rows["expected"].tolist()[1] == "(none)"
    too_long = practice.check_answer(one, _typed([[1, 2, 3, 4]]), 3)
    assert not too_long.correct and "more than 3 tokens" in too_long.message


def test_a_one_block_answer_reads_right() -> None:
    one = ([[1, 2, 3]], [[1, 1, 1]])
    feedback = practice.check_answer(one, parse_blocks("1 2 3 -> 1 1 1"), 3)
    assert feedback.correct and feedback.message == "Correct: the block and its loss mask match."


def test_a_problem_loads_into_the_sidebar_as_pasted_data() -> None:
    problem = practice.new_problem(5)
    values = practice.sidebar_values(problem)
    assert parse_sequences(str(values["sequences"])).samples == problem.sequences
    assert values["max_seq_length"] == problem.max_seq_length and values["strategy"] == problem.strategy
