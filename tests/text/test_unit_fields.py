"""A bad part of a preference pair or completion group is named by its field: every bad value of ``prompt``,
``chosen``, ``rejected``, ``completions`` or one of its items, in a unit of token ids, text or messages, is one
error naming the sample and that field (a group with null ``completions`` is about ``completions``, not a
prompt/completion row's ``completion``)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import packing
from packing.errors import DatasetError, SampleError

GOOD = {
    "tokens": ([1, 2], [[3], [4, 5], [6]]),
    "text": ("2+2=", ["4", "5", "four"]),
    "messages": (
        [{"role": "user", "content": "2+2?"}],
        [[{"role": "assistant", "content": c}] for c in ("4", "5", "four")],
    ),
}
"""A good prompt and three good completions of each form."""

NOT_A_PART = [None, 0, 7, -1, 2.5, True, float("nan"), {}, {"a": 1}, {1, 2}, [None], [[]], [2.5], [-1], ["x"]]
"""Values that are no part of any form (or of no form the unit has)."""


def bad_values(form: str, field: str) -> st.SearchStrategy[Any]:
    """Bad values of ``field`` in a unit of ``form``: what no form is, and the good parts of the other forms."""
    others = [
        value for other, (prompt, completions) in GOOD.items() if other != form for value in (prompt, completions[0])
    ]
    empty = [] if form == "tokens" and field == "prompt" else [[]]  # an empty token prompt is a prompt
    empty += [""] if form != "text" or field != "prompt" else []  # an empty text prompt is a prompt
    if form == "messages":
        empty += [[{"role": 5, "content": "x"}], [{"role": "user"}], [{"role": "user", "content": "x", "weight": 2}]]
    values = [*NOT_A_PART, *others, *empty]
    if field == "completions":  # a list of one good text completion is a group
        values.remove(["x"])
    return st.sampled_from(values)


@st.composite
def broken_units(draw: st.DrawFn) -> tuple[dict[str, Any], str]:
    """A unit with one bad field, and the field an error must name."""
    form = draw(st.sampled_from(sorted(GOOD)))
    prompt, completions = GOOD[form]
    if draw(st.booleans()):
        row: dict[str, Any] = {"prompt": prompt, "chosen": completions[0], "rejected": completions[1]}
        field = draw(st.sampled_from(["prompt", "chosen", "rejected"]))
    else:
        row = {"prompt": prompt, "completions": list(completions[: draw(st.integers(2, 3))])}
        field = draw(st.sampled_from(["prompt", "completions", "completions[0]", "completions[1]"]))
    value = draw(bad_values(form, field))
    if field.startswith("completions["):
        row["completions"][int(field[-2])] = value
    else:
        row[field] = value
    return row, field


@settings(max_examples=300, deadline=None)
@given(broken=broken_units())
def test_every_bad_part_is_named_by_its_field(broken: tuple[dict[str, Any], str]) -> None:
    row, field = broken
    good = {"prompt": [1], "chosen": [2], "rejected": [3]}
    with pytest.raises(SampleError) as refused:
        packing.pack([good, row], 256, tokenizer="bytes")
    error = refused.value
    assert error.sample == 1, str(error)
    # a bad whole 'completions' may be named by the item of it that is bad ('completions[0]')
    named = error.field if field != "completions" else str(error.field).split("[")[0]
    assert named == field, str(error)
    assert str(error).startswith(f"sample 1, {error.field!r}") and len(str(error)) < 400


@pytest.mark.parametrize("prompt", ["2+2=", [1, 2], GOOD["messages"][0]])
@pytest.mark.parametrize("value", [None, 5, 2.5, "ab", {}])
def test_a_group_with_bad_completions_names_completions(prompt: Any, value: Any) -> None:
    with pytest.raises(SampleError) as refused:
        packing.read_rows([{"prompt": prompt, "completions": value}], tokenizer="bytes")
    assert (refused.value.sample, refused.value.field) == (0, "completions")
    assert "expected at least one completion (a group has 'prompt' and 'completions'" in str(refused.value)


BAD_IDS = {"too large": 2**40, "negative": -3, "non-integer": 2.5, "bool": True}
"""Bad token ids of each kind; ids above 2**31 - 1 are refused where they are packed (the int32 schema)."""


@st.composite
def units_with_a_bad_id(draw: st.DrawFn) -> tuple[dict[str, Any], str, int, Any]:
    """A token unit with one bad id: the unit, the field and position it is at, and the bad id."""
    size = st.lists(st.integers(0, 300), min_size=1, max_size=4)
    if draw(st.booleans()):
        row: dict[str, Any] = {"prompt": draw(size), "chosen": draw(size), "rejected": draw(size)}
        field = draw(st.sampled_from(["prompt", "chosen", "rejected"]))
        part = row[field]
    else:
        row = {"prompt": draw(size), "completions": draw(st.lists(size, min_size=1, max_size=3))}
        fields = ["prompt", *(f"completions[{j}]" for j in range(len(row["completions"])))]
        field = draw(st.sampled_from(fields))
        part = row["prompt"] if field == "prompt" else row["completions"][int(field[12:-1])]
    position = draw(st.integers(0, len(part) - 1))
    part[position] = bad = BAD_IDS[draw(st.sampled_from(sorted(BAD_IDS)))]
    return row, field, position, bad


@settings(max_examples=200, deadline=None)
@given(broken=units_with_a_bad_id(), share=st.booleans())
def test_a_bad_token_id_is_named_by_its_field_and_position(
    broken: tuple[dict[str, Any], str, int, Any], share: bool
) -> None:
    row, field, position, _ = broken
    good = {"prompt": [1], "completions": [[2], [3]]}
    with pytest.raises(SampleError) as refused:
        packing.pack([good, row], 256, share_prompt=share)
    error = refused.value
    assert (error.sample, error.field, error.position) == (1, field, position), str(error)
    assert str(error).startswith(f"sample 1, {field!r}, position {position}: expected")


@settings(max_examples=60, deadline=None)
@given(broken=units_with_a_bad_id())
def test_a_bad_token_id_in_a_file_is_named_by_its_line_field_and_position(
    tmp_path_factory: pytest.TempPathFactory, broken: tuple[dict[str, Any], str, int, Any]
) -> None:
    row, field, position, bad = broken
    source = tmp_path_factory.mktemp("units") / "units.jsonl"
    source.write_text(json.dumps({"prompt": [1], "chosen": [2], "rejected": [3]}) + "\n" + json.dumps(row) + "\n")
    with pytest.raises(DatasetError) as refused:
        if bad == 2**40:  # read as it is (int64 ids); refused where packed into the int32 schema
            packing.pack(packing.read_dataset(str(source)), 256)
        packing.read_dataset(str(source))
    where = f"{source}, line 2, {field!r}, position {position}: expected"
    assert str(refused.value).startswith(where), str(refused.value)


@pytest.mark.parametrize("prompt", ["2+2=", [5], GOOD["messages"][0]])
def test_a_pair_with_null_completions_names_chosen(prompt: Any) -> None:
    for row in ({"prompt": prompt, "chosen": None, "rejected": None}, {"prompt": prompt, "rejected": None}):
        with pytest.raises(SampleError) as refused:
            packing.pack([row], 256, tokenizer="bytes")
        field = "chosen" if "chosen" in row else "rejected"
        assert (refused.value.sample, refused.value.field) == (0, field), str(refused.value)
        assert "expected a completion (a pair has 'prompt', 'chosen' and 'rejected')" in str(refused.value)


UNTRAINED = {
    "messages": (GOOD["messages"][0], [{"role": "assistant", "content": "4", "weight": 0}], {}),
    "roles": (GOOD["messages"][0], [{"role": "assistant", "content": "4"}], {"roles_to_train": ["user"]}),
    "tokens": ([1, 2], [3, 4], None),  # with a mask of zeros
}
"""A completion that trains nothing, of each form, with the options it is packed under."""


@pytest.mark.parametrize("form", sorted(UNTRAINED))
@pytest.mark.parametrize("field", ["chosen", "rejected", "completions[1]"])
@pytest.mark.parametrize("door", ["pack", "read_dataset"])
def test_a_completion_that_trains_nothing_is_refused_by_its_field(
    tmp_path: Any, form: str, field: str, door: str
) -> None:
    prompt, untrained, options = UNTRAINED[form]
    good = [3] if form == "tokens" else [{"role": "user" if form == "roles" else "assistant", "content": "5"}]
    if field == "completions[1]":
        row: dict[str, Any] = {"prompt": prompt, "completions": [good, untrained]}
        if form == "tokens":
            row["completion_masks"] = [[1], [0, 0]]
    else:
        other = "rejected" if field == "chosen" else "chosen"
        row = {"prompt": prompt, field: untrained, other: good}
        if form == "tokens":
            row[f"{field}_mask"] = [0, 0]
    extra = {} if form == "tokens" else {"tokenizer": "bytes", **(options or {})}
    expected = f"{field!r}: expected a completion with at least one trained token"
    if door == "pack":
        with pytest.raises(SampleError) as refused:
            packing.pack([row], 256, **extra)
        assert str(refused.value).startswith(f"sample 0, {expected}"), str(refused.value)
        return
    source = tmp_path / "units.jsonl"
    source.write_text(json.dumps(row) + "\n")
    with pytest.raises(DatasetError) as read:
        packing.read_dataset(str(source), **extra)
    assert str(read.value).startswith(f"{source}, line 1, {expected}"), str(read.value)
