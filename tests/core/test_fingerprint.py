"""Recipes that pack differently describe and fingerprint differently: every option by its value, a tokenizer by
its content (the cache of ``packing.hf.pack_dataset`` and the stream's and sampler's "same recipe" checks read them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import packing
from packing.core.fingerprint import shown, tokenizer_fingerprint
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
    prepare.cache_clear()
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
