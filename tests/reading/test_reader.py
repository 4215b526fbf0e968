"""Reading samples in every form, and building masked chat samples."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from packing import SampleError, Samples, SettingError, pack, read_rows, stream
from packing.core._samples import IGNORE_INDEX
from packing.reading import chat_sample, read_table
from packing.reading._reader import read_batch, read_row


def flat(samples: Any, completion_only_loss: bool = True) -> tuple[list[int], list[int], list[int]]:
    result = read_rows(samples, completion_only_loss)
    return result.tokens.tolist(), result.loss_mask.tolist(), result.offsets.tolist()


# ---------------------------------------------------------------------------------------------------------------
# read_rows / read_row
# ---------------------------------------------------------------------------------------------------------------


def test_samples_are_flattened_with_offsets() -> None:
    result = read_rows([[1, 2], {"prompt": [3], "completion": [4]}, [], [5]])
    assert result.tokens.tolist() == [1, 2, 3, 4, 5]
    assert result.loss_mask.tolist() == [1, 1, 0, 1, 1]
    assert result.offsets.tolist() == [0, 2, 4, 4, 5]
    assert result.lengths.tolist() == [2, 2, 0, 1]
    assert result.tokens.dtype.kind == "i" and result.loss_mask.dtype.kind == "i"


def test_no_samples() -> None:
    assert flat([]) == ([], [], [0])
    assert read_rows([]).lengths.tolist() == []


@pytest.mark.parametrize(
    "sample",
    [
        [7, 0, 9],
        (7, 0, 9),
        np.array([7, 0, 9], dtype=np.int8),
        np.array([7, 0, 9], dtype=np.int32),
        np.array([7, 0, 9], dtype=np.uint16),
        np.array([7, 0, 9], dtype=np.uint64),
        [np.int64(7), np.int16(0), 9],
        {"input_ids": [7, 0, 9]},
        {"input_ids": (7, 0, 9), "loss_mask": None},
    ],
    ids=["list", "tuple", "int8", "int32", "uint16", "uint64", "numpy scalars", "input_ids", "loss_mask None"],
)
def test_token_lists_in_any_integer_form_are_all_trained_on(sample: Any) -> None:
    assert flat([sample]) == ([7, 0, 9], [1, 1, 1], [0, 3])


def test_range_is_a_sequence_of_token_ids() -> None:
    assert flat([range(3)]) == ([0, 1, 2], [1, 1, 1], [0, 3])


def test_large_token_ids_that_fit_int64_are_kept_exactly() -> None:
    big = 2**63 - 1
    assert flat([[big, 2**40]])[0] == [big, 2**40]


@pytest.mark.parametrize("completion_only_loss", [True, False])
def test_prompt_completion(completion_only_loss: bool) -> None:
    prompt_mask = [0, 0] if completion_only_loss else [1, 1]
    sample = {"prompt": [1, 2], "completion": np.array([3, 4, 5])}
    assert flat([sample], completion_only_loss) == ([1, 2, 3, 4, 5], [*prompt_mask, 1, 1, 1], [0, 5])


def test_prompt_only_and_completion_only() -> None:
    assert flat([{"prompt": [1, 2], "completion": []}, {"prompt": [], "completion": [3]}]) == (
        [1, 2, 3],
        [0, 0, 1],
        [0, 2, 3],
    )


def test_completion_only_loss_does_not_touch_explicit_masks() -> None:
    sample = {"input_ids": [1, 2, 3], "loss_mask": [0, 1, 0]}
    assert flat([sample], completion_only_loss=False) == ([1, 2, 3], [0, 1, 0], [0, 3])


@pytest.mark.parametrize(
    "mask",
    [[0, 1, 1], (0, 1, 1), [False, True, True], np.array([False, True, True]), np.array([0, 1, 1], dtype=np.uint8)],
    ids=["list", "tuple", "bools", "numpy bools", "numpy uint8"],
)
def test_loss_mask_forms(mask: Any) -> None:
    assert flat([{"input_ids": [4, 5, 6], "loss_mask": mask}]) == ([4, 5, 6], [0, 1, 1], [0, 3])


def test_samples_may_come_from_a_generator() -> None:
    def generate() -> Iterator[list[int]]:
        yield [1]
        yield [2, 3]

    assert flat(generate()) == ([1, 2, 3], [1, 1, 1], [0, 1, 3])
    assert pack(generate(), 2, strategy="split").to_lists() == ([[1, 2], [3, 0]], [[1, 1], [1, 0]])


def test_a_generator_of_token_ids_is_not_a_sample() -> None:
    with pytest.raises(SampleError, match=r"^sample 1: expected a list of token ids, .* \(generator\)$") as error:
        read_rows([[1], (t for t in [1, 2])])
    assert (error.value.sample, error.value.field, error.value.position) == (1, None, None)


def test_reading_copies_the_data() -> None:
    tokens = np.array([1, 2, 3], dtype=np.int64)
    mask = np.array([1, 0, 1], dtype=np.int8)
    result = read_rows([tokens, {"input_ids": tokens, "loss_mask": mask}])
    result.tokens[:] = 0
    result.loss_mask[:] = 0
    assert tokens.tolist() == [1, 2, 3]
    assert mask.tolist() == [1, 0, 1]


def test_read_row_reports_the_index_it_is_given() -> None:
    kind, tokens, mask, _ = read_row({"prompt": [5, 6], "completion": [7]}, 0)
    assert mask is not None
    assert (kind, tokens.tolist(), mask.tolist()) == ("tokens", [5, 6, 7], [0, 0, 1])
    kind, tokens, mask, _ = read_row([4, 5], 3)
    assert (kind, tokens.tolist(), mask) == ("tokens", [4, 5], None)  # None: every token is trained on
    with pytest.raises(SampleError, match=r"^sample 41: expected a list of token ids, .* got 3.5 \(float\)$") as error:
        read_row(3.5, 41)
    assert (error.value.sample, error.value.field, error.value.position) == (41, None, None)
    with pytest.raises(SampleError, match=r"^sample 7, position 2: expected a non-negative integer token id, got -1$"):
        read_row([0, 1, -1], 7)


# ---------------------------------------------------------------------------------------------------------------
# chat_sample
# ---------------------------------------------------------------------------------------------------------------


def test_chat_sample_trains_on_assistant_turns_by_default() -> None:
    turns = [("user", [1, 2]), ("assistant", [3, 4]), ("user", [5]), ("assistant", [6])]
    assert chat_sample(turns) == {"input_ids": [1, 2, 3, 4, 5, 6], "loss_mask": [0, 0, 1, 1, 0, 1]}


@pytest.mark.parametrize(
    ("train_on", "expected_mask"),
    [
        (("user", "assistant"), [0, 1, 1, 1]),
        (["system"], [1, 0, 0, 0]),
        ((), [0, 0, 0, 0]),
        ({"assistant"}, [0, 0, 1, 1]),
    ],
)
def test_chat_sample_train_on(train_on: Any, expected_mask: list[int]) -> None:
    turns = [("system", [9]), ("user", [1]), ("assistant", [2, 3])]
    assert chat_sample(turns, train_on=train_on) == {"input_ids": [9, 1, 2, 3], "loss_mask": expected_mask}


def test_chat_sample_edge_cases() -> None:
    assert chat_sample([]) == {"input_ids": [], "loss_mask": []}
    assert chat_sample([("user", []), ("assistant", [])]) == {"input_ids": [], "loss_mask": []}
    assert chat_sample(iter([("assistant", (1,))])) == {"input_ids": [1], "loss_mask": [1]}


def test_chat_sample_gives_plain_lists_of_ints() -> None:
    sample = chat_sample([("user", np.array([1, 2], dtype=np.int32)), ("assistant", [np.int64(3)])])
    assert sample == {"input_ids": [1, 2, 3], "loss_mask": [0, 0, 1]}
    assert all(type(v) is int for v in sample["input_ids"] + sample["loss_mask"])


def test_chat_sample_does_not_modify_the_turns() -> None:
    turns = [("user", [1, 2]), ("assistant", [3])]
    before = copy.deepcopy(turns)
    chat_sample(turns)
    assert turns == before


@pytest.mark.parametrize(
    ("turns", "field", "position", "message"),
    [
        (
            [("user", [1]), ["assistant", [2]]],
            "turn 1",
            None,
            r"'turn 1': expected a \(role, tokens\) pair, got \['assistant'",
        ),
        ([(3, [1])], "turn 0", None, r"'turn 0': expected a \(role, tokens\) pair, got \(3, \[1\]\) \(tuple\)$"),
        ([("user", [1], "extra")], "turn 0", None, r"'turn 0': expected a \(role, tokens\) pair"),
        (["user"], "turn 0", None, r"'turn 0': expected a \(role, tokens\) pair, got 'user' \(str\)$"),
        (
            [("user", [1]), ("assistant", [2, -1])],
            "turn 1 (assistant)",
            1,
            r"'turn 1 \(assistant\)', position 1: .* got -1$",
        ),
        (
            [("user", "hello")],
            "turn 0 (user)",
            None,
            r"'turn 0 \(user\)': expected a list of token ids, got 'hello' \(str\)$",
        ),
        ([("user", [1.5])], "turn 0 (user)", 0, r"'turn 0 \(user\)', position 0: .* got 1.5 \(float\)$"),
    ],
)
def test_chat_sample_errors_name_the_turn(turns: Any, field: str, position: int | None, message: str) -> None:
    with pytest.raises(SampleError, match=message) as error:
        chat_sample(turns)
    # a turn is not a sample: the turn (and its role) is the field, no sample index is claimed
    assert (error.value.sample, error.value.field, error.value.position) == (None, field, position)
    assert not str(error.value).startswith("sample ")


def test_chat_sample_train_on_a_single_role_name() -> None:
    # a bare string is one role name, not a set of letters
    turns = [("user", [1]), ("assistant", [2]), ("a", [3])]
    assert chat_sample(turns, train_on="assistant") == {"input_ids": [1, 2, 3], "loss_mask": [0, 1, 0]}


def test_a_sample_with_both_forms_is_refused() -> None:
    message = r"^sample 0: expected one form, 'input_ids' or 'prompt'/'completion', got <both>$"
    with pytest.raises(SampleError, match=message) as error:
        read_rows([{"prompt": [1, 2], "completion": [3], "input_ids": [1, 2, 3]}])
    assert (error.value.sample, error.value.field, error.value.position) == (0, None, None)


def test_integer_arrays_are_checked_all_at_once_but_errors_keep_row_order() -> None:
    import numpy as np

    from packing import SampleError, read_rows

    rows = [np.array([1, 2]), np.array([3, -4]), [5, "x"]]
    with pytest.raises(SampleError) as caught:  # row 1's negative comes before row 2's string
        read_rows(rows)
    assert (caught.value.sample, caught.value.position, caught.value.got) == (1, 1, "-4")
    with pytest.raises(SampleError) as later:
        read_rows([np.array([1, 2], dtype=np.int32), [5, "x"], np.array([-1])])
    assert (later.value.sample, later.value.position) == (1, 1)
    flat = read_rows([np.array([1, 2], dtype=np.int16), np.array([3]), [4]])
    assert flat.tokens is not None and flat.tokens.dtype == np.int64 and flat.tokens.tolist() == [1, 2, 3, 4]
    with pytest.raises(SampleError) as negative:
        read_rows([np.array([1]), np.array([2, 3, -9])])
    assert (negative.value.sample, negative.value.position, negative.value.got) == (1, 2, "-9")


# ---------------------------------------------------------------------------------------------------------------
# labels (transformers' form): a mask source, read alike by the row and the table reader
# ---------------------------------------------------------------------------------------------------------------

_labelled_rows = st.lists(
    st.lists(st.tuples(st.integers(0, 2**31 - 1), st.booleans(), st.booleans()), max_size=6),
    min_size=1,
    max_size=6,
)
"""Rows of (token, trained by its label, trained by its loss mask) triples."""


def _table(rows: list[dict[str, Any]]) -> pa.Table:
    """The rows as a table of the columns any of them has (nulls elsewhere), typed int64 lists."""
    names = sorted({name for row in rows for name in row})
    return pa.table({name: pa.array([row.get(name) for row in rows], pa.list_(pa.int64())) for name in names})


def _read_both(rows: list[dict[str, Any]]) -> list[Any]:
    """What the row reader and the table reader give for ``rows``: arrays, or the error's text."""
    results: list[Any] = []
    for read in (lambda: read_rows(rows), lambda: read_table(_table(rows))):
        try:
            s = read()
        except SampleError as error:
            results.append(str(error))
        else:
            labels = None if s.labels is None else s.labels.tolist()
            results.append((s.tokens.tolist(), s.loss_mask.tolist(), s.offsets.tolist(), labels))
    return results


@given(_labelled_rows, st.booleans())
@settings(max_examples=60, deadline=None)
def test_labels_read_as_the_equivalent_loss_mask(rows: list[list[tuple[int, bool, bool]]], with_mask: bool) -> None:
    """``labels`` with -100 on untrained tokens read as the loss mask they stand for, ANDed with a given mask,
    by the row reader and the table reader alike; labels equal to the ids keep ``Samples.labels`` None."""
    labelled, masked = [], []
    for row in rows:
        ids = [token for token, _, _ in row]
        labels = [token if by_label else IGNORE_INDEX for token, by_label, _ in row]
        mask = [int(by_mask or not with_mask) for _, _, by_mask in row]
        labelled.append({"input_ids": ids, "labels": labels, **({"loss_mask": mask} if with_mask else {})})
        masked.append(
            {"input_ids": ids, "loss_mask": [int(lab != IGNORE_INDEX) & m for lab, m in zip(labels, mask, strict=True)]}
        )
    expected = _read_both(masked)
    assert expected[0] == expected[1]
    assert _read_both(labelled) == expected


@given(_labelled_rows, st.lists(st.integers(0, 50), min_size=36, max_size=36))
@settings(max_examples=60, deadline=None)
def test_other_labels_are_kept_where_trained(rows: list[list[tuple[int, bool, bool]]], others: list[int]) -> None:
    """Labels that differ from the ids are kept (``Samples.labels``) where trained, the token elsewhere."""
    labelled = []
    expected: list[int] = []
    other = iter(others)
    for row in rows:
        labels = [next(other) if by_label else IGNORE_INDEX for _, by_label, _ in row]
        labelled.append({"input_ids": [token for token, _, _ in row], "labels": labels})
        expected += [lab if lab != IGNORE_INDEX else token for (token, _, _), lab in zip(row, labels, strict=True)]
    python, arrow = _read_both(labelled)
    assert python == arrow
    tokens, mask, _, kept = python
    differs = any(lab != token and m for lab, token, m in zip(expected, tokens, mask, strict=True))
    assert kept == (expected if differs else None)


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([{"input_ids": [1, 2], "labels": [1]}], r"^sample 0, 'labels': expected 2 values \(one per token\), got <1 values>$"),
        ([[5], {"input_ids": [1, 2], "labels": [1, -1]}], r"^sample 1, 'labels', position 1: expected a non-negative integer token id or -100, got -1$"),
        ([{"input_ids": [1, 2], "labels": [1.5, 2]}], r"^sample 0, 'labels', position 0: expected a non-negative integer token id or -100, got 1.5 \(float\)$"),
        ([{"input_ids": [1, 2], "labels": [True, 2]}], r"^sample 0, 'labels', position 0: expected a non-negative integer token id or -100, got True \(bool\)$"),
        ([{"input_ids": [1, 2], "labels": "12"}], r"^sample 0, 'labels': expected a list of labels, got '12' \(str\)$"),
        ([{"prompt": [1], "completion": [2], "labels": [1, 2]}], r"^sample 0, 'labels': expected no labels in a prompt/completion row"),
        ([{"length": 2, "labels": [1, 2]}], r"^sample 0, 'labels': expected no labels in a length row"),
    ],
    ids=["length", "negative", "float", "bool", "text", "prompt", "length row"],
)  # fmt: skip
def test_bad_labels_are_refused_where_they_are(rows: list[Any], message: str) -> None:
    with pytest.raises(SampleError, match=message):
        read_rows(rows)


def test_the_table_reader_words_bad_labels_as_the_row_reader() -> None:
    for rows in (
        [{"input_ids": [1, 2], "labels": [1]}],
        [{"input_ids": [3]}, {"input_ids": [1, 2], "labels": [1, -7]}],
    ):
        python, arrow = _read_both(rows)
        assert python == arrow and python.startswith(f"sample {len(rows) - 1}, 'labels'")
    with pytest.raises(SampleError, match=r"^sample 0, 'labels', position 0: .* got 1.5 \(float\)$"):
        read_table(pa.table({"input_ids": [[1, 2]], "labels": [[1.5, 2.0]]}))


def test_packing_refuses_labels_other_than_the_ids_where_trained() -> None:
    rows = [[4], {"input_ids": [1, 2, 3], "labels": [-100, 2, 9]}]
    message = (
        r"^sample 1, 'labels', position 2: expected 3 \(the token: packed blocks train each token on itself; .*, got 9$"
    )
    with pytest.raises(SampleError, match=message):
        pack(rows, 4)
    with pytest.raises(SampleError, match=message.replace("sample 1", "sample 3")):
        list(stream([[5], [6], *rows], 4, buffer_size=10))
    assert pack([{"input_ids": [1, 2, 3], "labels": [-100, 2, 3]}], 4).to_lists() == ([[1, 2, 3, 0]], [[0, 1, 1, 0]])


def test_joined_samples_carry_labels() -> None:
    parts = [read_rows([[1, 2]]), read_rows([{"input_ids": [3, 4], "labels": [3, 8]}]), read_rows([[5]])]
    joined = Samples.join(parts)
    assert joined.labels is not None and joined.labels.tolist() == [1, 2, 3, 8, 5]
    assert Samples.join([parts[0], parts[2]]).labels is None
    with pytest.raises(SampleError, match=r"^sample 1, 'labels', position 1: expected 4 "):
        joined.refuse_other_labels()


# ---------------------------------------------------------------------------------------------------------------
# the one reader: rows read together as each alone, whatever the row forms and their mix
# ---------------------------------------------------------------------------------------------------------------

item = st.one_of(
    st.integers(-3, 60),
    st.sampled_from([True, False, np.True_, 1.0, 2.5, None, "x", 2**63, 2**64, -(2**64), np.int8(4), np.uint64(7)]),
)
plain_items = st.lists(st.integers(-1, 60), max_size=5)
token_value = st.one_of(
    plain_items,
    plain_items,
    st.lists(item, max_size=5),
    plain_items.map(lambda v: np.array(v, dtype=np.int64)),
    plain_items.map(lambda v: np.array([x % 50 for x in v], dtype=np.uint16)),
    st.sampled_from([np.zeros((2, 2), dtype=np.int64), np.array([1.5]), np.array([True]), "ab", b"ab", {1, 2}, 3]),
)


@st.composite
def any_row(draw: st.DrawFn) -> Any:
    form = draw(st.sampled_from(["bare", "ids", "ids", "pair", "length", "junk", "text"]))
    if form == "bare":
        return draw(token_value)
    if form == "junk":
        return draw(st.sampled_from([None, 3, "hello", {"other": 1}, {}, {"input_ids": None}]))
    if form == "text":
        return draw(st.sampled_from([{"text": "hi"}, {"prompt": "a", "completion": "b"}]))
    if form == "length":
        return {"length": draw(st.sampled_from([0, 3, -1, 2.5, True, None, 2**64]))}
    if form == "pair":
        row: dict[str, Any] = {"prompt": draw(token_value), "completion": draw(token_value)}
        if draw(st.integers(0, 5)) == 0:
            row[draw(st.sampled_from(["loss_mask", "labels", "input_ids", "length"]))] = [1]
        if draw(st.integers(0, 5)) == 0:
            del row[draw(st.sampled_from(["prompt", "completion"]))]
        return row
    ids = draw(token_value)
    row = {"input_ids": ids}
    size = len(ids) if isinstance(ids, (list, np.ndarray)) else 1
    for name in draw(st.lists(st.sampled_from(["loss_mask", "completion_mask", "labels"]), max_size=2, unique=True)):
        count = size + draw(st.sampled_from([0, 0, 0, 1]))
        values = (
            st.sampled_from([0, 1, True, 2, -100, 5]) if name == "labels" else st.sampled_from([0, 1, True, False, 2])
        )
        row[name] = draw(st.lists(values, min_size=count, max_size=count))
    return row


def outcome(read: Any) -> Any:
    try:
        samples = read()
    except SampleError as error:
        return type(error).__name__, error.sample, error.field, error.position, str(error)
    if samples.tokens is None:
        return "lengths", samples.offsets.tolist()
    labels = None if samples.labels is None else samples.labels.tolist()
    return samples.tokens.tolist(), np.asarray(samples.loss_mask).tolist(), samples.offsets.tolist(), labels


def read_alone(rows: list[Any], completion_only: bool) -> Any:
    """The rows read one at a time (``read_row``), joined: what reading them together must give."""
    tokens: list[int] = []
    masks: list[int] = []
    labels: list[int] = []
    offsets = [0]
    kinds = []
    given_labels = False
    for index, row in enumerate(rows):
        try:
            kind, values, mask, own = read_row(row, index, completion_only)
        except SampleError as error:
            return type(error).__name__, error.sample, error.field, error.position, str(error)
        kinds.append(kind)
        if kind != kinds[0]:
            expected = "token ids" if kinds[0] == "tokens" else "a length only"
            got = "<a length only>" if kind == "length" else "<token ids>"
            error = SampleError(
                index, None, None, f"{expected} like sample 0 (all rows have tokens or all have lengths only)", got
            )
            return "SampleError", index, None, None, str(error)
        offsets.append(offsets[-1] + (int(values[0]) if kind == "length" else len(values)))
        if kind == "tokens":
            tokens += values.tolist()
            masks += [1] * len(values) if mask is None else mask.tolist()
            labels += values.tolist() if own is None else own.tolist()
            given_labels |= own is not None
    if kinds and kinds[0] == "length":
        return "lengths", offsets
    return tokens, masks, offsets, labels if given_labels else None


@settings(max_examples=400, deadline=None)
@given(st.lists(any_row(), max_size=6), st.booleans())
def test_rows_read_together_as_each_alone(rows: list[Any], completion_only: bool) -> None:
    """Whatever the forms and their mix (bare lists, arrays, dicts, lengths, junk, text), the one reader reads the
    rows together (a column per field, pyarrow's conversion where it takes them) as it reads each row alone: the
    same samples, or the same error about the same row, field and position."""
    together = outcome(lambda: read_rows(rows, completion_only))
    assert together == read_alone(rows, completion_only)
    dicts = [row for row in rows if isinstance(row, dict)]
    if dicts and dicts[0] and len(dicts) == len(rows) and len({tuple(row) for row in dicts}) == 1:  # one batch
        batch = {name: [row[name] for row in dicts] for name in dicts[0]}
        assert outcome(lambda: read_batch(batch, completion_only)) == together


def test_the_common_forms_are_read_as_columns_not_row_by_row(monkeypatch: pytest.MonkeyPatch) -> None:
    """Token lists, dicts of ids and labels, numpy arrays and a ``datasets`` batch go through pyarrow's conversion
    or numpy's join, never the Python scan of one row at a time (kept for values no column holds)."""
    import packing.reading._columns as columns

    def scanned(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("read row by row")

    monkeypatch.setattr(columns, "_scanned", scanned)
    ids = [[1, 2, 0], [3, 1]]
    labelled = [{"input_ids": row, "labels": [-100, *row[1:]]} for row in ids]
    assert read_rows(ids).tokens.tolist() == [1, 2, 0, 3, 1]
    assert read_rows(labelled).loss_mask.tolist() == [0, 1, 1, 0, 1]
    assert read_rows([np.array(row, dtype=np.int32) for row in ids]).lengths.tolist() == [3, 2]
    assert read_batch({"input_ids": ids, "loss_mask": [[1, 0, 1], [1, 0]]}).loss_mask.tolist() == [1, 0, 1, 1, 0]
    assert read_batch({"input_ids": ids, "loss_mask": [[True, False, True], [True, True]]}).loss_mask.all() == 0
    with pytest.raises(AssertionError, match="row by row"):
        read_rows([[1, 2.5]])  # a float: only the scan names it


def test_a_batch_takes_the_readers_options() -> None:
    from packing.core._loss import LossRules

    batch = {"prompt": [[1, 2]], "completion": [[3]]}
    assert read_batch(batch).loss_mask.tolist() == [0, 0, 1]
    assert read_batch(batch, loss_rules=LossRules("all")).loss_mask.tolist() == [1, 1, 1]
    with pytest.raises(SettingError, match="columns of one length"):
        read_batch({"input_ids": [[1]], "labels": []})
