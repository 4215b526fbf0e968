"""Practice problems and answer checking."""

from __future__ import annotations

import packing
from explorer import practice


def test_problems_are_seeded_small_and_numbered_in_order() -> None:
    for seed in range(30):
        problem = practice.new_problem(seed)
        assert problem == practice.new_problem(seed)
        assert 3 <= len(problem.sequences) <= 6 and 4 <= problem.max_seq_length <= 8
        flat = [t for s in problem.sequences for t in s]
        assert flat == list(range(1, len(flat) + 1))
        assert problem.strategy in practice.PRACTICE_STRATEGIES
        assert (
            problem.expected()
            == packing.pack(problem.sequences, problem.max_seq_length, problem.strategy).input_ids.tolist()
        )


def test_a_right_answer_may_leave_out_padding() -> None:
    feedback = practice.check_answer([[1, 2, 3, 4], [5, 6, 0, 0]], [[1, 2, 3, 4], [5, 6]], 4)
    assert feedback.correct and "all 2 blocks" in feedback.message
    assert feedback.rows["match"].tolist() == [True, True]


def test_a_wrong_answer_shows_where() -> None:
    feedback = practice.check_answer([[1, 2, 3, 4], [5, 6, 0, 0]], [[1, 2, 4, 3], [5, 6]], 4)
    assert not feedback.correct and feedback.message == "1 of 2 blocks differ."
    assert feedback.rows["differs at positions"].tolist() == ["2, 3", ""]


def test_missing_extra_and_overlong_blocks() -> None:
    missing = practice.check_answer([[1, 2, 0], [3, 0, 0]], [[1, 2]], 3)
    assert not missing.correct and "You gave 1 block;" in missing.message
    assert missing.rows["yours"].tolist() == ["[1, 2]", "(missing)"]
    extra = practice.check_answer([[1, 2, 3]], [[1, 2, 3], [4]], 3)
    assert extra.rows["expected"].tolist() == ["[1, 2, 3]", "(none)"]
    too_long = practice.check_answer([[1, 2, 3]], [[1, 2, 3, 4]], 3)
    assert not too_long.correct and "more than 3 tokens" in too_long.message
    assert too_long.rows["differs at positions"].tolist() == ["3"]


def test_a_problem_loads_into_the_sidebar_as_pasted_data() -> None:
    from explorer.parsing import parse_sequences

    problem = practice.new_problem(5)
    values = practice.sidebar_values(problem)
    assert parse_sequences(str(values["sequences"])).samples == problem.sequences
    assert values["max_seq_length"] == problem.max_seq_length and values["strategy"] == problem.strategy
