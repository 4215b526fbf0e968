"""Loss rules token by token: ``loss`` (completion, last_turn, all), ``roles_to_train``, ``train_on_eos`` and each
message's ``weight``, against hand-written expectations on three real templates built here (no hub): ChatML,
a Llama-3-style template (content trimmed, ``<|eot_id|>``), and a template with ``{% generation %}`` markers.

A mask is checked as the exact list of trained runs of tokens, each decoded: a token trained or left out by
mistake changes a run's text or splits or joins runs.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from packing import Recipe
from packing.core._loss import LossRules
from packing.errors import SampleError, SettingError
from packing.text._chats import TemplateShape, _prefix_spans, chat_spans
from packing.text._text_rows import encode_rows
from packing.text._tokenizers import load_tokenizer

pytest.importorskip("tokenizers")
pytest.importorskip("transformers")

from tests.helpers.text_fixtures import CHATML, MARKED, train_backend

LLAMA3 = (
    "{{- bos_token -}}"
    "{%- for m in messages -%}"
    "{{- '<|start_header_id|>' + m['role'] + '<|end_header_id|>\\n\\n' + m['content'] | trim + '<|eot_id|>' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}{%- endif -%}"
)
"""Llama 3's layout: a BOS, a header per message, content trimmed, ``<|eot_id|>`` after each message."""
LLAMA3_SPECIAL = ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]


def build(folder: Path, template: str, llama: bool = False) -> Any:
    from transformers import PreTrainedTokenizerFast

    backend = train_backend()
    extra: dict[str, str] = {}
    if llama:
        backend.add_special_tokens(LLAMA3_SPECIAL)
        extra = {"bos_token": "<|begin_of_text|>"}
    wrapper: Any = PreTrainedTokenizerFast
    tokenizer = wrapper(
        tokenizer_object=backend, eos_token="<|endoftext|>", pad_token="<|pad|>", chat_template=template, **extra
    )
    tokenizer.save_pretrained(str(folder))
    return load_tokenizer(str(folder))


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("rules")
    return {
        "chatml": build(root / "chatml", CHATML),
        "llama3": build(root / "llama3", LLAMA3, llama=True),
        "marked": build(root / "marked", MARKED),
    }


CHAT = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "What is 2 + 2?"},
    {"role": "assistant", "content": "It is 4."},
    {"role": "tool", "content": "4"},
    {"role": "user", "content": "Thanks!"},
    {"role": "assistant", "content": "Hello world"},
]
END = {"chatml": "<|im_end|>\n", "llama3": "<|eot_id|>", "marked": "<|endoftext|>"}
"""What each template puts after an assistant turn's content, inside the trained part."""
OTHER_END = {"chatml": "<|im_end|>\n", "llama3": "<|eot_id|>", "marked": "<|endoftext|>\n"}
"""... and after another role's content (the marked template's newline is outside its generation block)."""


def runs(tokenizer: Any, rows: list[dict[str, Any]], **options: Any) -> list[str]:
    """The trained runs of the first row, each decoded."""
    tokens, mask, offsets = encode_rows(rows, tokenizer, **options)
    tokens, mask = tokens[offsets[0] : offsets[1]], mask[offsets[0] : offsets[1]]
    out, run = [], []
    for token, flag in zip(tokens.tolist(), mask.tolist(), strict=True):
        if flag:
            run.append(token)
        elif run:
            out.append(tokenizer.decode(run))
            run = []
    if run:
        out.append(tokenizer.decode(run))
    return out


def rules(**options: Any) -> dict[str, Any]:
    return {"loss_rules": LossRules(**options)}


@pytest.mark.parametrize("name", ["chatml", "llama3", "marked"])
def test_completion_trains_every_assistant_turn_and_its_end(tokenizers: dict[str, Any], name: str) -> None:
    end = END[name]
    assert runs(tokenizers[name], [{"messages": CHAT}]) == [f"It is 4.{end}", f"Hello world{end}"]
    assert runs(tokenizers[name], [{"messages": CHAT}], **rules()) == [f"It is 4.{end}", f"Hello world{end}"]


@pytest.mark.parametrize("name", ["chatml", "llama3", "marked"])
def test_last_turn_trains_only_the_final_assistant_turn(tokenizers: dict[str, Any], name: str) -> None:
    assert runs(tokenizers[name], [{"messages": CHAT}], **rules(loss="last_turn")) == [f"Hello world{END[name]}"]
    # a chat that ends with a user message: its last assistant turn is still the one trained
    assert runs(tokenizers[name], [{"messages": CHAT[:5]}], **rules(loss="last_turn")) == [f"It is 4.{END[name]}"]


@pytest.mark.parametrize("name", ["chatml", "llama3", "marked"])
def test_a_last_turn_of_weight_0_is_context(tokenizers: dict[str, Any], name: str) -> None:
    """Weight 0 on the final assistant message: the assistant message before it is the last turn."""
    chat = [*CHAT[:5], {"role": "assistant", "content": "Hello world", "weight": 0}]
    assert runs(tokenizers[name], [{"messages": chat}], **rules(loss="last_turn")) == [f"It is 4.{END[name]}"]
    assert runs(tokenizers[name], [{"messages": chat}]) == [f"It is 4.{END[name]}"]  # as completion trains it


@pytest.mark.parametrize("name", ["chatml", "llama3", "marked"])
def test_train_on_eos_false_leaves_the_end_of_turn_out(tokenizers: dict[str, Any], name: str) -> None:
    assert runs(tokenizers[name], [{"messages": CHAT}], **rules(train_on_eos=False)) == ["It is 4.", "Hello world"]
    assert runs(tokenizers[name], [{"messages": CHAT}], **rules(loss="last_turn", train_on_eos=False)) == [
        "Hello world"
    ]


@pytest.mark.parametrize("name", ["chatml", "llama3", "marked"])
def test_train_on_eos_takes_axolotls_names(tokenizers: dict[str, Any], name: str) -> None:
    """turn (True), last, all and none (False), token by token: the end of turn is what the template puts
    after a message's content, up to the next message (or the end of the generation block)."""
    end, other = END[name], OTHER_END[name]
    tokenizer, row = tokenizers[name], [{"messages": CHAT}]
    assert runs(tokenizer, row, **rules(train_on_eos="turn")) == runs(tokenizer, row, **rules(train_on_eos=True))
    assert runs(tokenizer, row, **rules(train_on_eos="none")) == runs(tokenizer, row, **rules(train_on_eos=False))
    assert runs(tokenizer, row, **rules(train_on_eos="last")) == ["It is 4.", f"Hello world{end}"]
    # every message's end of turn, trained message or not (system, user, tool, user)
    assert runs(tokenizer, row, **rules(train_on_eos="all")) == [
        other, other, f"It is 4.{end}", other, other, f"Hello world{end}"
    ]  # fmt: skip
    assert runs(tokenizer, row, **rules(loss="last_turn", train_on_eos="all")) == [
        other, other, end, other, other, f"Hello world{end}"
    ]  # fmt: skip
    # last: the last trained turn's end, whichever role it has (here a tool turn with weight 1)
    chat = [dict(m, weight=0) if m["role"] == "assistant" and m["content"] == "Hello world" else dict(m) for m in CHAT]
    chat[3]["weight"] = 1
    assert runs(tokenizer, [{"messages": chat}], **rules(train_on_eos="last")) == ["It is 4.", f"4{other}"]


@pytest.mark.parametrize("name", ["chatml", "llama3", "marked"])
def test_roles_to_train_adds_the_tool_turns(tokenizers: dict[str, Any], name: str) -> None:
    end, other = END[name], OTHER_END[name]
    got = runs(tokenizers[name], [{"messages": CHAT}], **rules(roles_to_train=("assistant", "tool")))
    assert got == [f"It is 4.{end}", f"4{other}", f"Hello world{end}"]
    got = runs(tokenizers[name], [{"messages": CHAT}], **rules(roles_to_train=["tool"], train_on_eos=False))
    assert got == ["4"]
    got = runs(tokenizers[name], [{"messages": CHAT}], **rules(roles_to_train="tool, assistant", loss="last_turn"))
    assert got == [f"Hello world{end}"]


@pytest.mark.parametrize("name", ["chatml", "llama3", "marked"])
def test_message_weights_override_the_rule(tokenizers: dict[str, Any], name: str) -> None:
    end, other = END[name], OTHER_END[name]
    chat = [dict(m) for m in CHAT]
    chat[2]["weight"] = 0
    assert runs(tokenizers[name], [{"messages": chat}]) == [f"Hello world{end}"]
    chat[2]["weight"], chat[5]["weight"] = 1, 0
    assert runs(tokenizers[name], [{"messages": chat}], **rules(loss="last_turn")) == [f"It is 4.{end}"]
    chat[4]["weight"] = 1  # a user message with weight 1 is trained, from its content on
    assert runs(tokenizers[name], [{"messages": chat}]) == [f"It is 4.{end}", f"Thanks!{other}"]
    # under loss=all every token is trained, weights or not
    tokens, mask, _ = encode_rows([{"messages": chat}], tokenizers[name], **rules(loss="all"))
    assert mask.all() and len(tokens) == len(
        tokenizers[name].apply_chat_template(CHAT, tokenize=True, return_dict=False)
    )


def test_bad_weights_and_rules_are_refused_in_one_line(tokenizers: dict[str, Any]) -> None:
    chat = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b", "weight": 0.5}]
    with pytest.raises(SampleError, match=r"^sample 0, 'messages', position 1: expected a message 'weight' of 0 or 1"):
        encode_rows([{"messages": chat}], tokenizers["chatml"])
    with pytest.raises(SettingError, match=r"^roles_to_train: expected one or more role names"):
        Recipe(8, roles_to_train=[])
    with pytest.raises(SettingError, match=r"^train_on_eos: expected one of turn, last, all, none \(or True/False\)"):
        Recipe(8, train_on_eos="yes")
    assert [Recipe(8, train_on_eos=flag).train_on_eos for flag in (True, False, np.bool_(True), "last")] == [
        "turn", "none", "turn", "last"
    ]  # fmt: skip
    assert Recipe(8, train_on_eos=False) == Recipe(8, train_on_eos="none")
    with pytest.raises(SettingError, match=r"^loss: expected one of completion, last_turn, all"):
        Recipe(8, loss="mask_history")
    assert Recipe(8, loss="last_turn", roles_to_train="assistant,tool").loss_rules == LossRules(
        "last_turn", ("assistant", "tool")
    )


def test_prompt_completion_rules(tokenizers: dict[str, Any]) -> None:
    tokenizer = tokenizers["chatml"]
    row = {"prompt": "What is 2 + 2?", "completion": "It is 4."}
    assert runs(tokenizer, [row]) == ["It is 4.<|endoftext|>"]
    assert runs(tokenizer, [row], **rules(loss="last_turn")) == ["It is 4.<|endoftext|>"]
    assert runs(tokenizer, [row], **rules(train_on_eos=False)) == ["It is 4."]
    # a pair's one trained turn is its completion: last and all train its EOS, as turn does
    for rule in ("last", "all"):
        assert runs(tokenizer, [row], **rules(train_on_eos=rule)) == ["It is 4.<|endoftext|>"]
    conversational = {"prompt": CHAT[:2], "completion": [CHAT[2]]}
    assert runs(tokenizer, [conversational]) == ["It is 4.<|im_end|>\n"]
    assert runs(tokenizer, [conversational], **rules(train_on_eos=False)) == ["It is 4."]


def test_the_byte_tokenizer_follows_the_same_rules() -> None:
    got = runs(load_tokenizer("bytes"), [{"messages": CHAT}], **rules(roles_to_train=("assistant", "tool")))
    assert got == ["It is 4.<|im_end|>\n", "4<|im_end|>\n", "Hello world<|im_end|>\n"]


# ------------------------------------------------------------------ properties over generated chats

pieces = st.sampled_from(["hi", "user", "assistant", "a", " ", "\n", "日本", "2+2", "ok.", "<|im_end|>"])
contents = st.lists(pieces, min_size=1, max_size=5).map("".join)
messages = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "system", "tool"]), "content": contents},
    optional={"weight": st.sampled_from([0, 1])},
)
chats = st.lists(messages, min_size=1, max_size=7)
rule_sets = st.builds(
    LossRules,
    loss=st.sampled_from(["completion", "last_turn"]),
    roles_to_train=st.sampled_from([("assistant",), ("assistant", "tool"), ("user",)]),
    train_on_eos=st.sampled_from(["turn", "last", "all", "none", True, False]),
)


def outcome(function: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return function(*args, **kwargs)
    except SampleError as error:
        return type(error), str(error)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=st.lists(chats, min_size=1, max_size=12), name=st.sampled_from(["chatml", "llama3", "bytes"]))
def test_pieces_learned_on_earlier_chats_give_the_prefix_spans(
    tokenizers: dict[str, Any], batch: list[list[dict[str, Any]]], name: str
) -> None:
    """Chats laid out from pieces learned on earlier chats of a call (no probe rendering) get the spans
    rendering prefix by prefix gives (the reference), or the same error."""
    tokenizer = load_tokenizer("bytes") if name == "bytes" else tokenizers[name]
    shape = TemplateShape()
    for chat in batch:
        plain = [{"role": m["role"], "content": m["content"]} for m in chat]
        assert outcome(chat_spans, tokenizer, plain, 0, shape=shape) == outcome(_prefix_spans, tokenizer, plain, 0)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=st.lists(chats, min_size=1, max_size=8))
def test_marker_masks_are_transformers_assistant_masks(
    tokenizers: dict[str, Any], batch: list[list[dict[str, Any]]]
) -> None:
    tokenizer = tokenizers["marked"]
    plain = [[{"role": m["role"], "content": m["content"]} for m in chat] for chat in batch]
    tokens, mask, _ = encode_rows([{"messages": chat} for chat in plain], tokenizer)
    out = tokenizer.apply_chat_template(plain, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
    assert tokens.tolist() == [t for ids in out["input_ids"] for t in ids]
    assert mask.tolist() == [f for flags in out["assistant_masks"] for f in flags]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(chat=chats, chosen=rule_sets, name=st.sampled_from(["chatml", "llama3", "marked"]))
@example(  # a last assistant turn of weight 0: the last turn is the one before it, whose end "last" trains
    chat=[
        {"role": "user", "content": "hi", "weight": 1},
        {"role": "assistant", "content": "hi"},
        {"role": "assistant", "content": "hi", "weight": 0},
    ],
    chosen=LossRules(loss="completion", roles_to_train=("assistant",), train_on_eos="last"),
    name="chatml",
)
def test_rules_nest(tokenizers: dict[str, Any], chat: list[dict[str, Any]], chosen: LossRules, name: str) -> None:
    """Whatever the chat: last_turn trains a subset of completion, each train_on_eos rule a subset of the next, and a
    chat without weights trained under a rule trains only tokens of messages of roles_to_train."""
    tokenizer = tokenizers[name]
    row = [{"messages": chat}]

    def mask(**changes: Any) -> Any:
        fields = {"loss": chosen.loss, "roles_to_train": chosen.roles_to_train, "train_on_eos": chosen.train_on_eos}
        fields.update(changes)
        try:
            return encode_rows(row, tokenizer, loss_rules=LossRules(**fields))[1]
        except SampleError:
            return None

    full, last = mask(loss="completion"), mask(loss="last_turn")
    if full is not None and last is not None:
        assert np.all(last <= full)
    # none trains a subset of last, last of turn, turn of all
    chain = [mask(train_on_eos=rule) for rule in ("none", "last", "turn", "all")]
    for fewer, more in itertools.pairwise(chain):
        if fewer is not None and more is not None:
            assert np.all(fewer <= more)
    every = encode_rows(row, tokenizer, completion_only_loss=False)[1]
    assert every.all() and (full is None or len(full) == len(every))


@pytest.mark.slow
def test_num_proc_gives_the_one_process_result(tokenizers: dict[str, Any]) -> None:
    rng = np.random.default_rng(0)
    words = ["hello", "world", "2 + 2", "日本語", "ok", "Thanks!"]
    rows: list[dict[str, Any]] = []
    for index in range(5000):
        text = " ".join(rng.choice(words, size=int(rng.integers(1, 6))).tolist())
        if index % 3 == 0:
            rows.append({"messages": [{"role": "user", "content": text}, {"role": "assistant", "content": text}]})
        elif index % 3 == 1:
            rows.append({"prompt": text, "completion": text[::-1]})
        else:
            rows.append({"text": text})
    for tokenizer in (tokenizers["chatml"], load_tokenizer("bytes")):
        one = encode_rows(rows, tokenizer, loss_rules=LossRules(train_on_eos=False))
        two = encode_rows(rows, tokenizer, loss_rules=LossRules(train_on_eos=False), num_proc=2)
        for a, b in zip(one, two, strict=True):
            assert a.dtype == b.dtype and a.tolist() == b.tolist()
    bad = [*rows[:3000], {"messages": [{"role": "user"}]}, *rows[3000:]]
    with pytest.raises(SampleError, match=r"^sample 3000, 'messages', position 0"):
        encode_rows(bad, tokenizers["chatml"], num_proc=2)


@given(rows=st.integers(0, 20_000), num_proc=st.integers(1, 4))
def test_chunks_cover_the_rows_in_order_and_balance_the_processes(rows: int, num_proc: int) -> None:
    from packing.text._text_rows import _CHUNK_ROWS, chunk_bounds

    bounds = chunk_bounds(rows, num_proc)
    assert [start for start, _ in bounds] == ([0, *(stop for _, stop in bounds[:-1])] if rows else [])
    assert (bounds[-1][1] if bounds else 0) == rows and all(0 < stop - start <= _CHUNK_ROWS for start, stop in bounds)
    if len(bounds) > 1 and num_proc > 1:
        sizes = [stop - start for start, stop in bounds]
        assert len(bounds) % num_proc == 0 and max(sizes) - min(sizes) <= 1


def _encode_in_a_daemon(rows: list[dict[str, Any]], out: Any) -> None:
    out.put([part.tolist() for part in encode_rows(rows, "bytes", num_proc=2)])


def test_num_proc_in_a_daemonic_process_tokenizes_there(monkeypatch: pytest.MonkeyPatch) -> None:
    """A daemonic process (a pool's worker) may not start processes: num_proc=2 gives the one-process result."""
    import multiprocessing

    import packing.text._text_rows

    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("needs fork")
    monkeypatch.setattr(packing.text._text_rows, "_CHUNK_ROWS", 4)  # several chunks (inherited by the forked process)
    rows = [
        {"messages": [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}]}
        for i in range(20)
    ]
    context = multiprocessing.get_context("fork")
    out = context.Queue()
    process = context.Process(target=_encode_in_a_daemon, args=(rows, out), daemon=True)
    process.start()
    got = out.get(timeout=60)
    process.join(60)
    assert process.exitcode == 0
    assert got == [part.tolist() for part in encode_rows(rows, "bytes")]


@pytest.mark.slow
def test_every_door_takes_the_rules_and_num_proc(
    tokenizers: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """read_dataset, pack, hf.pack_dataset and the command line give the masks encode_rows gives in one
    process, with two processes (chunks of 64 rows here, so a few hundred rows make several)."""
    import json

    import pyarrow.parquet as pq

    import packing
    import packing.text._text_rows
    from packing._cli import main

    tokenizer = tokenizers["chatml"]
    chosen = LossRules("last_turn", train_on_eos=False)
    rules = {"loss": "last_turn", "train_on_eos": False}  # the same rules as every door's options
    monkeypatch.setattr(packing.text._text_rows, "_CHUNK_ROWS", 64)
    rows = [{"messages": [*CHAT[:5], {"role": "assistant", "content": f"Answer {i}."}]} for i in range(300)]
    tokens, mask, _ = encode_rows(rows, tokenizer, loss_rules=chosen)
    source = tmp_path / "chats.jsonl"
    source.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")

    read = packing.read_dataset(source, tokenizer=tokenizer, **rules, num_proc=2).samples
    assert read.tokens is not None and read.loss_mask is not None
    assert read.tokens.tolist() == tokens.tolist() and read.loss_mask.tolist() == mask.tolist()

    packed = packing.pack(rows, 128, tokenizer=tokenizer, **rules, num_proc=2)
    assert int(packed.loss_mask.sum()) == int(mask.sum())

    pytest.importorskip("datasets")
    from datasets import Dataset

    from packing.hf import pack_dataset

    table = Dataset.from_list(rows)
    one = pack_dataset(table, 128, tokenizer=tokenizer, **rules, shuffle=False)
    two = pack_dataset(table, 128, tokenizer=tokenizer, **rules, shuffle=False, num_proc=2)
    assert one.to_dict() == two.to_dict()

    template = tmp_path / "chatml.jinja"
    template.write_text(CHATML, encoding="utf-8")
    output = tmp_path / "blocks.parquet"
    tokenizer.save_pretrained(str(tmp_path / "tok"))
    code = main(["pack", str(source), "--tokenizer", str(tmp_path / "tok"), "-q", "--max-seq-length", "128",
                 "--loss", "last_turn", "--train-on-eos", "none", "--num-proc", "2", "--chat-template", str(template),
                 "--output", str(output)])  # fmt: skip
    assert code == 0
    blocks = pq.read_table(output).to_pydict()
    assert sum(sum(row) for row in blocks["loss_mask"]) == int(mask.sum())
