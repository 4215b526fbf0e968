"""Text rows through a tokenizer: plain text, prompt/completion pairs and chats, with exact loss masks.

Four row forms are text (everything else is left to the token reader):

- ``{"text": str}``: the tokenizer's tokens with its special tokens, then EOS if it did not add
  one; loss on every token.
- ``{"prompt": str, "completion": str}``: prompt tokens as the tokenizer makes them (with its
  special tokens), completion tokens after them (without), EOS at the end; loss on the completion
  and the EOS.
- ``{"messages": [{"role": ..., "content": ...}, ...]}``: the chat template renders the
  conversation; loss on each assistant turn: the tokens the template adds for that turn after its
  generation prompt (content and end-of-turn tokens).
- ``{"prompt": [messages], "completion": [messages]}`` (conversational prompt/completion): the chat
  ``prompt + completion`` rendered and ruled as a ``{"messages": ...}`` row of it, the prompt's messages
  context: loss on the completion's assistant turns (for one assistant message, what it adds after the
  prompt's generation prompt), never on the prompt's.

What is trained follows the loss rules (:class:`packing.core._loss.LossRules`: ``loss`` ``completion``,
``last_turn`` or ``all``, ``roles_to_train``, ``train_on_eos``, and each message's ``weight`` of 0 or 1);
the default is the above, ``completion_only_loss=False`` (``loss="all"``) trains on every token of every
form. A row with a non-null ``input_ids`` is a token row, whatever text it also carries.

Each chat is rendered once (by transformers, in its Jinja sandbox), and the chats of a chunk
tokenized in one batch call of the fast tokenizer; the trained character spans are mapped to tokens through its character
offsets (a token is trained when its characters overlap a trained span, the rule
``return_assistant_tokens_mask`` follows), looked up at each span's two ends (:func:`encode_masked`). With generation markers (``{% generation %}``) the assistant
spans are the template's own blocks, as transformers' renderer finds them. Otherwise each message's place in the
rendering is found as its role's header + content + footer, learned once per call from a few probe
renderings and checked end to end on every chat (:func:`_layout`); the assistant turn ``k`` covers the
characters between the rendering of the first ``k`` messages with the generation prompt and the start of
message ``k + 1``. Chats that cannot be laid out that way (tool calls, content the template changes) are
rendered prefix by prefix, up to ``MAX_PREFIX_TURNS`` messages; a template whose prefix renderings are not
prefixes of the whole conversation is refused. Every rendering runs in transformers' Jinja sandbox, as
``apply_chat_template`` runs it. ``num_proc`` processes share the chunks, with the one process's result.

``"bytes"`` is a built-in UTF-8 byte tokenizer that needs no download (see :class:`ByteTokenizer`).

>>> tokenizer = load_tokenizer("bytes")
>>> tokens, mask, offsets = encode_rows([{"prompt": "Hi", "completion": "yo"}], tokenizer)
>>> tokens.tolist(), mask.tolist(), offsets.tolist()
([72, 105, 121, 111, 256], [0, 0, 1, 1, 1], [0, 5])

Internal: the public names are in ``packing`` and ``packing.text``.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from packing.core._arrays import offsets_of, ranges
from packing.core._forms import TEXT_FORMS, Message, TextForm, null_unit, null_unit_error, text_forms
from packing.core._loss import DEFAULT_RULES, LossRules
from packing.errors import SampleError, SettingError
from packing.text._chats import TemplateShape, chat_spans, marked_spans, render_marked
from packing.text._encoding import Encoded, encode_masked, encode_texts, eos_id, with_eos
from packing.text._templates import has_generation_markers, render, render_all
from packing.text._tokenizers import Int8Array, Int64Array, load_tokenizer

_CHUNK_ROWS = 2048


def _check_messages(value: Any, sample: int, field: str) -> list[Message]:
    """A list of messages, each a mapping with string 'role' and 'content'."""
    if not isinstance(value, (list, tuple)) or not value:
        raise SampleError(sample, field, None, "a non-empty list of messages {'role': str, 'content': str}", value)
    for position, message in enumerate(value):
        if not isinstance(message, Mapping):
            raise SampleError(sample, field, position, "a message {'role': str, 'content': str}", message)
        if not isinstance(message.get("role"), str):
            raise SampleError(
                sample, field, position, "a message with a string 'role'", message.get("role", "<missing>")
            )
        content = message.get("content")
        if not isinstance(content, str) and not (content is None and message.get("tool_calls") is not None):
            expected = "a message with a string 'content' (or none, with 'tool_calls')"
            raise SampleError(sample, field, position, expected, message.get("content", "<missing>"))
    return list(value)


@dataclass(frozen=True)
class _Row:
    """A checked text row: its form and its parts."""

    form: TextForm
    parts: tuple[Any, ...]


def _check_row(row: Any, sample: int) -> _Row:
    """Classify and check one text row; every problem names the sample and the field."""
    forms = text_forms(row)
    if not forms:
        raise SampleError(sample, None, None, "a text row (" + ", ".join(TEXT_FORMS.values()) + ")", row)
    if len(forms) > 1:
        first, second = ({"prompt_completion": "prompt", "conversational": "prompt"}.get(f, f) for f in forms[:2])
        raise SampleError(sample, second, None, f"one text form per row; the row also has {first!r}", "<both>")
    form = forms[0]
    if form in ("text", "messages") and (row.get("prompt") is not None or row.get("completion") is not None):
        raise SampleError(sample, "prompt", None, f"one form per row; the row also has {form!r}", "<both>")
    if form == "text":
        if not isinstance(row["text"], str):
            raise SampleError(sample, "text", None, "a string", row["text"])
        return _Row(form, (row["text"],))
    if form == "messages":
        return _Row(form, (_check_messages(row["messages"], sample, "messages"),))
    prompt, completion = row.get("prompt"), row.get("completion")
    if completion is None and (null := null_unit(row)) is not None:
        raise null_unit_error(sample, null)
    if form == "prompt_completion":
        for field, value in (("prompt", prompt), ("completion", completion)):
            if not isinstance(value, str):
                other = "completion" if field == "prompt" else "prompt"
                raise SampleError(
                    sample, field, None, f"a string, like '{other}'", "<missing>" if value is None else value
                )
        return _Row(form, (prompt, completion))
    for field, value in (("prompt", prompt), ("completion", completion)):
        if value is None:
            raise SampleError(sample, field, None, "a list of messages, like the other field", "<missing>")
    return _Row(form, (_check_messages(prompt, sample, "prompt"), _check_messages(completion, sample, "completion")))


def _encode_chats(
    tokenizer: Any,
    conversations: list[list[Message]],
    samples: list[int],
    rules: LossRules = DEFAULT_RULES,
    contexts: Sequence[int] | None = None,
) -> tuple[Encoded, Int8Array]:
    """Ids and loss masks of many conversations: each rendered once (in transformers' sandbox),
    all tokenized in one batch call with character offsets, the spans the loss ``rules`` train mapped to
    tokens (:func:`spans_mask`). With generation markers the spans start from the template's blocks (the
    masks of ``return_assistant_tokens_mask``); otherwise from the chat's layout (:func:`chat_spans`).
    ``contexts[i]``: how many messages of conversation ``i`` open it as a prompt, never trained (default 0)."""
    if not rules.masks_anything:
        texts = render_all(tokenizer, conversations, samples)
        encoded = encode_texts(tokenizer, texts, add_special_tokens=False)
        return encoded, np.ones(len(encoded.ids), dtype=np.int8)
    shape = TemplateShape()
    heads = list(contexts) if contexts is not None else [0] * len(conversations)
    if has_generation_markers(tokenizer):
        texts, blocks = render_marked(tokenizer, conversations, samples)
        spans = [
            marked_spans(tokenizer, conversation, text, found, rules, sample, shape, head)
            for conversation, text, found, sample, head in zip(
                conversations, texts, blocks, samples, heads, strict=True
            )
        ]
    else:
        texts = render_all(tokenizer, conversations, samples)
        spans = []
        for index, (conversation, sample) in enumerate(zip(conversations, samples, strict=True)):
            texts[index], found = chat_spans(
                tokenizer, conversation, sample, rules, whole=texts[index], shape=shape, context=heads[index]
            )
            spans.append(found)
    return encode_masked(tokenizer, texts, spans)


def _in_parts(error: SampleError, prompt_lengths: Mapping[int, int]) -> SampleError:
    """``error`` about the chat ``prompt + completion`` of a conversational row (field ``messages``) about the
    row's own fields instead: message ``p`` of the chat is ``prompt`` position ``p`` or ``completion`` position
    ``p - len(prompt)``; the chat as a whole is its ``completion`` (what the prompt is rendered with). O(1).

    >>> str(_in_parts(SampleError(4, "messages", 3, "a message 'weight' of 0 or 1", 2), {4: 2}))
    "sample 4, 'completion', position 1: expected a message 'weight' of 0 or 1, got 2"
    """
    length = prompt_lengths.get(error.sample) if error.sample is not None else None
    if error.field != "messages" or length is None:
        return error
    if error.position is not None and error.position < length:
        return error.moved(field="prompt")
    return error.moved(field="completion", position=None if error.position is None else error.position - length)


def _encode_conversational(
    tokenizer: Any, rows: list[_Row], samples: list[int], rules: LossRules
) -> tuple[Encoded, Int8Array]:
    """Ids and loss masks of conversational prompt/completion rows: each the chat ``prompt + completion`` encoded
    as a ``{"messages": ...}`` row is (:func:`_encode_chats`), its prompt's messages context: the completion's
    messages are trained by the loss rules as that chat's are, the prompt's never (under ``loss="all"`` every
    token, as in every text row). Errors name the row's ``prompt`` or ``completion`` (:func:`_in_parts`)."""
    prompts = [list(row.parts[0]) for row in rows]
    conversations = [[*prompt, *row.parts[1]] for prompt, row in zip(prompts, rows, strict=True)]
    lengths = [len(prompt) for prompt in prompts]
    try:
        return _encode_chats(tokenizer, conversations, samples, rules, lengths)
    except SampleError as error:
        raise _in_parts(error, dict(zip(samples, lengths, strict=True))) from None


def _encode_group(
    tokenizer: Any, form: TextForm, rows: list[_Row], samples: list[int], rules: LossRules
) -> tuple[Int64Array, Int8Array, Int64Array]:
    """Ids, masks and offsets of rows that share a form, in one batch."""
    if form == "text":
        eos = eos_id(tokenizer, samples[0], "text")
        encoded = encode_texts(tokenizer, [row.parts[0] for row in rows], add_special_tokens=True)
        ids, offsets = with_eos(encoded, eos)
        return ids, np.ones(len(ids), dtype=np.int8), offsets
    if form == "prompt_completion":
        eos = eos_id(tokenizer, samples[0], "completion")
        prompts = encode_prompts(tokenizer, [row.parts[0] for row in rows], samples)
        completions = encode_texts(tokenizer, [row.parts[1] for row in rows], add_special_tokens=False)
        completion_ids, completion_offsets = with_eos(completions, eos)
        prompt_lengths, completion_lengths = np.diff(prompts.offsets), np.diff(completion_offsets)
        offsets = offsets_of(prompt_lengths + completion_lengths)
        # each row: its prompt tokens, then its completion tokens
        is_prompt = np.tile(np.array([1, 0], dtype=np.int8), len(rows))
        segment_lengths = np.column_stack((prompt_lengths, completion_lengths)).reshape(-1)
        kind = np.repeat(is_prompt, segment_lengths)
        ids = np.empty(int(offsets[-1]), dtype=np.int64)
        ids[kind == 1] = prompts.ids
        ids[kind == 0] = completion_ids
        if not rules.masks_anything:
            return ids, np.ones(len(ids), dtype=np.int8), offsets
        mask = (kind == 0).astype(np.int8)
        if not rules.completion_eos:  # every completion ends with the EOS (with_eos): leave it out
            mask[offsets[1:] - 1] = 0
        return ids, mask, offsets
    if form == "messages":
        encoded, mask = _encode_chats(tokenizer, [list(row.parts[0]) for row in rows], samples, rules)
        return encoded.ids, mask, encoded.offsets
    encoded, mask = _encode_conversational(tokenizer, rows, samples, rules)
    return encoded.ids, mask, encoded.offsets


def encode_prompts(tokenizer: Any, prompts: Sequence[str | Sequence[Message]], samples: Sequence[int]) -> Encoded:
    """The tokens each prompt opens a prompt/completion row's encoding with: a text prompt as the tokenizer
    makes it (with its special tokens), a chat prompt (checked messages) rendered with its generation prompt
    (the encoding of its ``prompt + completion`` starts with them but where a token spans the two); a batch
    call per kind. O(characters).

    >>> encode_prompts(load_tokenizer("bytes"), ["Hi", [{"role": "user", "content": "a"}]], [0, 1]).offsets.tolist()
    [0, 2, 22]
    """
    kinds: list[list[int]] = [[], []]
    texts: list[str] = []
    rendered: list[str] = []
    for index, prompt in enumerate(prompts):
        kinds[not isinstance(prompt, str)].append(index)
        if isinstance(prompt, str):
            texts.append(prompt)
        else:
            rendered.append(render(tokenizer, list(prompt), True, samples[index], "prompt"))
    pieces: list[Int64Array] = [np.zeros(0, dtype=np.int64)] * len(prompts)
    for members, encoded in (
        (kinds[0], encode_texts(tokenizer, texts, add_special_tokens=True)),
        (kinds[1], encode_texts(tokenizer, rendered, add_special_tokens=False)),
    ):
        for j, i in enumerate(members):
            pieces[i] = encoded.ids[encoded.offsets[j] : encoded.offsets[j + 1]]
    ids, offsets = (np.concatenate(pieces) if pieces else np.zeros(0, np.int64)), offsets_of([len(p) for p in pieces])
    empty = np.zeros(0, dtype=np.int64)
    return Encoded(ids.astype(np.int64, copy=False), empty, empty, offsets)


def _encode_chunk(
    tokenizer: Any, rows: Sequence[Any], names: Sequence[int], rules: LossRules
) -> tuple[Int64Array, Int8Array, Int64Array]:
    """Ids, masks and per-row lengths of a chunk of rows: each form in one batch call, then the rows put
    back in their order (vectorized). O(characters + tokens)."""
    checked = [_check_row(row, name) for row, name in zip(rows, names, strict=True)]
    groups: dict[TextForm, list[int]] = {}
    for position, row in enumerate(checked):
        groups.setdefault(row.form, []).append(position)
    lengths = np.zeros(len(checked), dtype=np.int64)
    results = []
    for form, members in groups.items():
        ids, mask, offsets = _encode_group(
            tokenizer, form, [checked[m] for m in members], [int(names[m]) for m in members], rules
        )
        if len(groups) == 1:
            return ids, mask, np.diff(offsets)
        lengths[members] = np.diff(offsets)
        results.append((np.asarray(members, dtype=np.int64), ids, mask, offsets))
    starts = offsets_of(lengths)
    out_ids = np.empty(int(starts[-1]), dtype=np.int64)
    out_mask = np.empty(int(starts[-1]), dtype=np.int8)
    for members_array, ids, mask, offsets in results:
        where = ranges(starts[members_array], np.diff(offsets))
        out_ids[where] = ids
        out_mask[where] = mask
    return out_ids, out_mask, lengths


_WORKER: list[Any] = []
"""A tokenizing process's tokenizer and loss rules (set once when it starts)."""


def _start_worker(tokenizer: Any, rules: LossRules) -> None:
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one thread per process: the processes are the parallelism
    _WORKER[:] = [tokenizer, rules]


def _worker_chunk(rows: Sequence[Any], names: Sequence[int]) -> tuple[Int64Array, Int8Array, Int64Array]:
    return _encode_chunk(_WORKER[0], rows, names, _WORKER[1])


def chunk_bounds(rows: int, num_proc: int = 1) -> list[tuple[int, int]]:
    """``[start, stop)`` of the chunks ``rows`` rows are tokenized in: at most ``_CHUNK_ROWS`` each; for
    ``num_proc`` processes and more than one chunk's rows, a multiple of ``num_proc`` chunks of equal size
    (give or take a row), so that no process is left with the last chunk alone. O(chunks).

    >>> chunk_bounds(5000), chunk_bounds(5000, num_proc=2)
    ([(0, 2048), (2048, 4096), (4096, 5000)], [(0, 1250), (1250, 2500), (2500, 3750), (3750, 5000)])
    """
    if num_proc <= 1 or rows <= _CHUNK_ROWS:  # one chunk is not worth starting processes for
        return [(start, min(start + _CHUNK_ROWS, rows)) for start in range(0, rows, _CHUNK_ROWS)]
    count = num_proc * -(-rows // (num_proc * _CHUNK_ROWS))
    return list(itertools.pairwise(rows * index // count for index in range(count + 1)))


def _chunks(
    tokenizer: Any, row_list: Sequence[Any], names: Sequence[int], rules: LossRules, num_proc: int
) -> Iterator[tuple[Int64Array, Int8Array, Int64Array]]:
    """Every chunk (:func:`chunk_bounds`) encoded, in order: here, or by ``num_proc`` processes (forked
    where the platform can, so the tokenizer is not copied; each chunk's rows sent to one process and its
    arrays sent back, taken in the input order, so the result is the one process's)."""
    import multiprocessing

    # a daemonic process (a pool's worker, a server's) may not start processes: it tokenizes every chunk itself
    if multiprocessing.current_process().daemon:
        num_proc = 1
    bounds = chunk_bounds(len(row_list), num_proc)
    if num_proc <= 1 or len(bounds) <= 1:
        for start, stop in bounds:
            yield _encode_chunk(tokenizer, row_list[start:stop], names[start:stop], rules)
        return
    from concurrent.futures import ProcessPoolExecutor

    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    pool = ProcessPoolExecutor(
        min(num_proc, len(bounds)), mp_context=context, initializer=_start_worker, initargs=(tokenizer, rules)
    )
    try:
        yield from pool.map(_worker_chunk, [row_list[a:b] for a, b in bounds], [list(names[a:b]) for a, b in bounds])
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def encode_rows(
    rows: Iterable[Any],
    tokenizer: Any,
    *,
    completion_only_loss: bool = True,
    loss_rules: LossRules | None = None,
    num_proc: int | None = None,
    indices: Sequence[int] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[Int64Array, Int8Array, Int64Array]:
    """Tokenize text rows: flat ``tokens`` (int64), ``loss_mask`` (int8) and ``offsets`` (int64, n + 1).

    Row ``i`` is ``tokens[offsets[i]:offsets[i + 1]]``. What is trained follows ``loss_rules``
    (:class:`packing.core._loss.LossRules`: ``loss``, ``roles_to_train``, ``train_on_eos``, and each message's
    ``weight``); without them ``completion_only_loss`` chooses ``completion`` (True) or ``all``. Rows are
    tokenized in chunks, each form of a chunk in one batch call; ``num_proc`` processes share the chunks
    (same result, same order, as one process; a daemonic process, which may not start any, does it alone). ``indices[i]`` is how errors number row ``i`` (default
    ``i``); ``progress(done, total)`` is called after each chunk with the number of rows done. Every row
    must be text (:func:`is_text_row`); errors are :class:`SampleError` (the row) or
    :class:`SettingError` (the tokenizer). O(characters), one template rendering per chat (see
    :func:`chat_spans`).

    >>> from packing.text import ByteTokenizer
    >>> chat = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    >>> tokens, mask, offsets = encode_rows([{"messages": chat}], "bytes")
    >>> ByteTokenizer().decode(tokens[mask == 1])
    'b<|im_end|>\\n'
    >>> tokens, mask, offsets = encode_rows([{"messages": chat}], "bytes", loss_rules=LossRules(train_on_eos=False))
    >>> ByteTokenizer().decode(tokens[mask == 1])
    'b'
    """
    rules = LossRules.of(loss_rules, completion_only_loss)
    processes = 1
    if num_proc is not None:
        from packing.core._validation import check_integer

        processes = check_integer(num_proc, "num_proc")
    tokenizer = load_tokenizer(tokenizer)
    if isinstance(rows, (str, bytes, Mapping)) or not isinstance(rows, Iterable):
        raise SettingError("rows", "a list of text rows", rows)
    row_list = rows if isinstance(rows, Sequence) else list(rows)
    if indices is not None and len(indices) != len(row_list):
        raise SettingError("indices", f"{len(row_list)} indices, one per row", f"<{len(indices)} indices>")
    names = [int(i) for i in indices] if indices is not None else range(len(row_list))
    ids_parts: list[Int64Array] = []
    mask_parts: list[Int8Array] = []
    lengths: list[Int64Array] = []
    done = 0
    for ids, mask, chunk_lengths in _chunks(tokenizer, row_list, names, rules, processes):
        ids_parts.append(ids)
        mask_parts.append(mask)
        lengths.append(chunk_lengths)
        if progress is not None:
            done += len(chunk_lengths)
            progress(done, len(row_list))
    offsets = offsets_of(np.concatenate(lengths) if lengths else np.zeros(len(row_list), dtype=np.int64))
    tokens = np.concatenate(ids_parts).astype(np.int64, copy=False) if ids_parts else np.zeros(0, np.int64)
    loss_mask = np.concatenate(mask_parts).astype(np.int8, copy=False) if mask_parts else np.zeros(0, np.int8)
    return tokens, loss_mask, offsets


# ---------------------------------------------------------------- decoding


def decode_documents(batch: Any, tokenizer: Any, *, skip_special_tokens: bool = False) -> list[str]:
    """The text of every document of a ``PackedBatch``, or of a dataset of packed blocks (a ``PackedDataset``, a
    list of its items: rows with ``input_ids`` and ``seq_lengths``), block by block, in order (a sample cut across
    blocks gives one text per piece). O(tokens).

    >>> import packing
    >>> rows = [{"text": "héllo"}, {"prompt": "2+2=", "completion": "4"}]
    >>> tokens, mask, offsets = encode_rows(rows, "bytes")
    >>> samples = [{"input_ids": tokens[a:b], "loss_mask": mask[a:b]} for a, b in zip(offsets[:-1], offsets[1:])]
    >>> decode_documents(packing.pack(samples, 16), "bytes")
    ['héllo<|endoftext|>', '2+2=4<|endoftext|>']
    >>> decode_documents([{"input_ids": [104, 105, 33, 257], "seq_lengths": [2, 1]}], "bytes")
    ['hi', '!']
    """
    tokenizer = load_tokenizer(tokenizer)
    return [
        tokenizer.decode(ids[start : start + length].tolist(), skip_special_tokens=skip_special_tokens)
        for ids, lengths in _blocks(batch)
        for start, length in zip((np.cumsum(lengths) - lengths).tolist(), lengths.tolist(), strict=True)
    ]


def _blocks(batch: Any) -> Iterator[tuple[Int64Array, Int64Array]]:
    """Each block's token ids and its documents' lengths: of a ``PackedBatch``, or of a dataset of packed blocks
    (anything with ``len`` whose items are rows with ``input_ids`` and ``seq_lengths``; a row that is not is
    refused by its index). O(blocks)."""
    if hasattr(batch, "seq_lengths") and hasattr(batch, "num_blocks"):  # a PackedBatch
        for block in range(int(batch.num_blocks)):
            yield np.asarray(batch.input_ids[block]), np.asarray(batch.seq_lengths(block), dtype=np.int64)
        return
    if not hasattr(batch, "__len__") or not hasattr(batch, "__getitem__"):
        raise SettingError("batch", "a PackedBatch or a dataset of packed blocks (a PackedDataset)", batch)
    for index in range(len(batch)):
        row = batch[index]
        if not isinstance(row, Mapping) or "input_ids" not in row or "seq_lengths" not in row:
            raise SampleError(index, None, None, "a packed block: a dict with 'input_ids' and 'seq_lengths'", row)
        yield np.asarray(row["input_ids"]).reshape(-1), np.asarray(row["seq_lengths"], dtype=np.int64).reshape(-1)
