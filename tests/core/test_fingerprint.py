"""Recipes that pack differently describe and fingerprint differently: every option by its value, a tokenizer by
its content (the cache of ``packing.hf.pack_dataset`` and the stream's and sampler's "same recipe" checks read them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import packing
from packing.core._fingerprint import shown, tokenizer_fingerprint
from packing.errors import SettingError
from packing.text import prepare
from tests.helpers.text_fixtures import CHATML, MARKED, save_tokenizer

ROLES = ("user", "assistant", "system", "tool")

options = st.fixed_dictionaries(
    {},
    optional={
        "strategy": st.sampled_from(["bfd", "ffd", "split", "next_fit", "spfhp"]),
        "overflow": st.sampled_from(["truncate", "split", "drop"]),
        "loss": st.sampled_from(["completion", "last_turn", "all"]),
        "roles_to_train": st.lists(st.sampled_from(ROLES), min_size=1, max_size=3, unique=True),
        "train_on_eos": st.sampled_from(["turn", "last", "all", "none"]),
        "chat_template": st.sampled_from([CHATML, MARKED, "{{ messages }}", "short.jinja"]),
        "pad_token_id": st.integers(0, 300),
        "seed": st.integers(0, 3),
        "int64": st.booleans(),
        "share_prompt": st.booleans(),
        "tokenizer": st.sampled_from(["bytes", "some/folder"]),
    },
)


def _recipe(length: int, chosen: dict[str, Any]) -> packing.Recipe:
    try:
        return packing.Recipe(length, **chosen)
    except SettingError:
        assume(False)
        raise


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(st.sampled_from([8, 16]), options, st.sampled_from([8, 16]), options)
def test_two_recipes_describe_alike_exactly_when_they_are_equal(
    length_a: int, a: dict[str, Any], length_b: int, b: dict[str, Any]
) -> None:
    first, second = _recipe(length_a, a), _recipe(length_b, b)
    assert (first.describe() == second.describe()) == (first == second)
    assert ", , " not in first.describe() and "tuple" not in first.describe()


@given(st.lists(st.sampled_from(ROLES), min_size=1, max_size=4, unique=True))
def test_roles_are_described_by_their_names_in_order(roles: list[str]) -> None:
    described = packing.Recipe(8, roles_to_train=roles).describe()
    assert (
        described == "max_seq_length=8" if roles == ["assistant"] else f"roles_to_train={','.join(roles)}" in described
    )


def test_a_long_chat_template_is_described_by_its_digest() -> None:
    one, other = packing.Recipe(8, chat_template=CHATML), packing.Recipe(8, chat_template=MARKED)
    assert f"<text of {len(CHATML)} chars, sha256 " in one.describe()
    assert one.describe() != other.describe()


def test_every_option_changes_the_prepared_fingerprint(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    base = packing.Recipe(16, tokenizer=str(save_tokenizer(tmp_path / "t", MARKED)))
    changes = {
        "strategy": "ffd",
        "overflow": "drop",
        "loss": "all",
        "roles_to_train": ["user", "assistant"],
        "train_on_eos": "none",
        "chat_template": CHATML,
        "pad_token_id": 3,
        "seed": 1,
        "int64": True,
        "share_prompt": True,
        "max_seq_length": 32,
    }
    seen = {prepare(base).fingerprint}
    for name, value in changes.items():
        seen.add(prepare(packing.Recipe.of(base, **{name: value})).fingerprint)
    assert len(seen) == len(changes) + 1
    assert prepare(packing.Recipe.of(base, num_proc=2)).fingerprint == prepare(base).fingerprint  # same output


def test_a_tokenizer_is_fingerprinted_by_its_content_not_its_name(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    first = packing.load_tokenizer(save_tokenizer(tmp_path / "a", CHATML))
    again = packing.load_tokenizer(tmp_path / "a")
    other = packing.load_tokenizer(save_tokenizer(tmp_path / "b", MARKED))
    other.name_or_path = first.name_or_path  # the same name, another template
    assert tokenizer_fingerprint(first) == tokenizer_fingerprint(again)
    assert tokenizer_fingerprint(first) != tokenizer_fingerprint(other)
    assert shown(first) != shown(other)
    assert packing.Recipe(8, tokenizer=first).describe() != packing.Recipe(8, tokenizer=other).describe()
    again.add_special_tokens({"additional_special_tokens": ["<|new|>"]})
    assert tokenizer_fingerprint(first) != tokenizer_fingerprint(again)
    # a folder whose files changed under the same path
    folder = save_tokenizer(tmp_path / "c", CHATML)
    before = prepare(packing.Recipe(8, tokenizer=str(folder))).fingerprint
    save_tokenizer(folder, MARKED)
    assert prepare(packing.Recipe(8, tokenizer=str(folder))).fingerprint != before


@given(st.lists(st.sampled_from(ROLES), min_size=1, max_size=3, unique=True))
@settings(max_examples=20, deadline=None)
def test_a_stream_or_sampler_state_is_refused_by_a_recipe_with_other_roles(roles: list[str]) -> None:
    from packing.errors import StateMismatch

    chat = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]}
    saved = packing.stream([chat] * 4, 64, tokenizer="bytes", buffer_size=2, roles_to_train=roles)
    next(iter(saved))
    state = saved.state_dict()
    other = ["assistant", "user"] if roles == ["assistant"] else ["assistant"]
    with pytest.raises(StateMismatch, match="roles_to_train"):
        packing.stream([chat] * 4, 64, tokenizer="bytes", buffer_size=2, roles_to_train=other, state=state)
    torch = pytest.importorskip("torch")
    del torch
    from packing.torch import PackingSampler

    sampler = PackingSampler([3, 5, 2], 8, roles_to_train=roles, shuffle=False)
    with pytest.raises(StateMismatch, match="roles_to_train"):
        PackingSampler([3, 5, 2], 8, roles_to_train=other, shuffle=False).load_state_dict(sampler.state_dict())


def test_roles_with_a_comma_describe_apart_from_two_roles() -> None:
    one, two = packing.Recipe(8, roles_to_train=["a,b"]), packing.Recipe(8, roles_to_train=["a", "b"])
    assert one.describe() != two.describe()
    assert prepare(one).fingerprint != prepare(two).fingerprint


def test_num_proc_is_not_part_of_the_description() -> None:
    assert packing.Recipe(8, tokenizer="bytes", num_proc=2).describe() == "max_seq_length=8, tokenizer=bytes"
    chat = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]}
    saved = packing.stream([chat] * 4, 64, tokenizer="bytes", buffer_size=2, num_proc=2)
    first = next(iter(saved))
    resumed = packing.stream([chat] * 4, 64, tokenizer="bytes", buffer_size=2, state=saved.state_dict())
    assert len(list(resumed)) + 1 == len(list(packing.stream([chat] * 4, 64, tokenizer="bytes", buffer_size=2)))
    assert first["input_ids"].size


def test_a_template_path_may_be_a_path_object(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    (tmp_path / "t.jinja").write_text(CHATML)
    assert packing.Recipe(8, chat_template=tmp_path / "t.jinja") == packing.Recipe(
        8, chat_template=str(tmp_path / "t.jinja")
    )


def test_a_tokenizer_changed_in_place_or_on_disk_is_loaded_and_fingerprinted_anew(tmp_path: Path) -> None:
    """The same recipe value over a tokenizer object given a new template or tokens, or over a folder and a template
    file rewritten in place: ``prepare`` loads what is there now, so ``pack``, the ``datasets`` cache and saved
    states all see the change."""
    pytest.importorskip("transformers")
    from packing.errors import StateMismatch

    tokenizer = packing.load_tokenizer(save_tokenizer(tmp_path / "object", CHATML))
    recipe = packing.Recipe(64, tokenizer=tokenizer)
    before = prepare(recipe).fingerprint
    tokenizer.chat_template = MARKED
    after_template = prepare(recipe).fingerprint
    tokenizer.add_tokens(["<|new|>"])
    assert len({before, after_template, prepare(recipe).fingerprint}) == 3

    folder = save_tokenizer(tmp_path / "folder", CHATML)
    (tmp_path / "t.jinja").write_text(CHATML)
    on_disk = packing.Recipe(64, tokenizer=str(folder), chat_template=str(tmp_path / "t.jinja"))
    chat = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]}
    old = packing.pack([chat], 64, recipe=on_disk).input_ids.tolist()
    saved = packing.stream([chat] * 4, recipe=on_disk, buffer_size=2)
    next(iter(saved))
    state = saved.state_dict()
    (tmp_path / "t.jinja").write_text(MARKED)
    assert packing.pack([chat], 64, recipe=on_disk).input_ids.tolist() != old
    with pytest.raises(StateMismatch, match="tokenizer_content="):
        packing.stream([chat] * 4, recipe=on_disk, buffer_size=2, state=state)


def test_a_sampler_state_names_what_differs() -> None:
    pytest.importorskip("torch")
    from packing.errors import StateMismatch
    from packing.torch import PackingSampler

    with_tokens = PackingSampler([3, 5, 2], 8, trained_tokens=[2, 4, 1], shuffle=False)
    without = PackingSampler([3, 5, 2], 8, shuffle=False)
    with pytest.raises(StateMismatch, match="trained_tokens"):
        without.load_state_dict(with_tokens.state_dict())
    with pytest.raises(StateMismatch, match="trained_tokens"):
        with_tokens.load_state_dict(without.state_dict())
    shared = PackingSampler([3, 5, 2], 8, share_prompt=True, shuffle=False)
    with pytest.raises(StateMismatch, match=r"expected the same recipe \(share_prompt at its default\)"):
        without.load_state_dict(shared.state_dict())
