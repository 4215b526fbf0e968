"""Text views of tokens, without Streamlit: decoded pieces for heatmap cells, roles for the mask view.

- :func:`token_cells` gives, for any token ids (a packed block, a sample), each token's decoded piece,
  a short cell label with visible whitespace, and a hover text with its id.
- :func:`view_row` tokenizes one text row (``text``, ``prompt``/``completion``, ``messages``,
  conversational prompt/completion) and gives per token: id, piece, role (``system``, ``user``,
  ``assistant``, ``prompt``, ``completion``, ``text``) and whether it is trained on; :func:`turn_table`
  sums that up per turn, in words.
- :data:`EXAMPLES` holds one example row per form; :func:`parse_text_rows` reads pasted text (JSON,
  JSON lines, or plain text).

>>> view = view_row({"prompt": "2+2=", "completion": "4"}, "bytes")
>>> view.pieces, view.roles, view.trained
(['2', '+', '2', '=', '4', '<|endoftext|>'], ['prompt', 'prompt', 'prompt', 'prompt', 'completion', 'completion'], [0, 0, 0, 0, 1, 1])
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from packing.core._arrays import row_at
from packing.core._forms import text_forms
from packing.core._loss import LossRules
from packing.errors import DatasetError, SampleError
from packing.text._chats import turn_bounds
from packing.text._encoding import encode_texts
from packing.text._text_rows import decode_documents, encode_rows
from packing.text._tokenizers import ByteTokenizer, load_tokenizer

REPLACEMENT = "\ufffd"
VISIBLE = {" ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍"}
"""How whitespace is shown in a cell."""
CONTINUED = "·"
"""The label of a token that holds only part of a character (its bytes end in a later token); never ``…``, which
ends a token cut to its cell (a special token such as ``<|im_start|>`` in a narrow cell is ``…`` alone)."""
LABEL_LIMIT = 10
"""Most characters a cell label shows."""


@dataclass(frozen=True)
class TokenCells:
    """Per token: ``pieces`` (decoded text; ``""`` for a token that only starts a character, whose text
    comes with the token that completes it), ``labels`` (cell text) and ``hovers`` (id and text)."""

    pieces: list[str]
    labels: list[str]
    hovers: list[str]


def token_pieces(ids: Sequence[int], tokenizer: Any) -> tuple[list[str], list[str]]:
    """Each token's decoded piece and the text of the character group it belongs to.

    Decoding is incremental, so a piece keeps the spaces a tokenizer drops when it decodes one token
    alone, and the pieces join to the decoded whole. Tokens that together make up one character
    (bytes of a UTF-8 sequence) give ``""`` except the last, which holds the character.
    O(len(ids)) decode calls of a few tokens each.

    >>> token_pieces([104, 230, 151, 165], "bytes")
    (['h', '', '', '日'], ['h', '日', '日', '日'])
    """
    tokenizer = loaded(tokenizer)
    values = [int(value) for value in ids]
    pieces: list[str] = []
    groups: list[str] = []
    start = 0  # first token whose text is not out yet
    for index in range(len(values)):
        context = max(0, start - 4)
        before = tokenizer.decode(values[context:start]) if start > context else ""
        text = tokenizer.decode(values[context : index + 1])
        complete = not text.endswith(REPLACEMENT) or index == len(values) - 1
        if not complete:
            pieces.append("")
            continue
        piece = text[len(before) :] if text.startswith(before) else tokenizer.decode(values[start : index + 1])
        pieces.append(piece)
        groups.extend([piece] * (index + 1 - start))
        start = index + 1
    return pieces, groups


def cell_label(piece: str, limit: int = LABEL_LIMIT) -> str:
    """A piece as a heatmap cell shows it: whitespace made visible, cut to ``limit`` characters.

    >>> cell_label(" the"), cell_label("\\n"), cell_label(""), cell_label("abcdefghijklmno")
    ('␣the', '↵', '·', 'abcdefghi…')
    """
    if not piece:
        return CONTINUED
    shown = "".join(VISIBLE.get(char, char) for char in piece)
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


def token_cells(ids: Sequence[int], tokenizer: Any, limit: int = LABEL_LIMIT) -> TokenCells:
    """Pieces, cell labels and hover texts for token ids (a block of a packed batch, or one sample).

    >>> cells = token_cells([72, 105, 32, 195, 169, 256], "bytes")
    >>> cells.labels
    ['H', 'i', '␣', '·', 'é', '<|endofte…']
    >>> cells.hovers[3]
    "id 195: part of 'é'"
    """
    pieces, groups = token_pieces(ids, tokenizer)
    hovers = [
        f"id {int(value)}: {piece!r}" if piece else f"id {int(value)}: part of {group!r}"
        for value, piece, group in zip(ids, pieces, groups, strict=True)
    ]
    return TokenCells(pieces, [cell_label(piece, limit) for piece in pieces], hovers)


# ---------------------------------------------------------------- one row, with roles


@dataclass(frozen=True)
class RowView:
    """One tokenized row: per token its id, piece, cell label, hover text, role and 0/1 loss flag."""

    form: str
    ids: list[int]
    pieces: list[str]
    labels: list[str]
    hovers: list[str]
    roles: list[str]
    turns: list[int]
    trained: list[int]


def _message_roles(tokenizer: Any, messages: Sequence[Any], ids: Sequence[int]) -> tuple[list[str], list[int]]:
    """Role and message index of every token of a rendered conversation, from where each message starts."""
    text, bounds = turn_bounds(tokenizer, messages)
    encoded = encode_texts(tokenizer, [text], add_special_tokens=False, spans=True)
    if encoded.ids.tolist() != list(ids):
        raise ValueError("the rendered conversation tokenizes differently from the template's ids")
    turn = row_at(bounds, encoded.starts)
    turn = np.clip(turn, 0, len(messages) - 1)
    return [str(messages[t]["role"]) for t in turn.tolist()], turn.tolist()


def view_row(row: Any, tokenizer: Any, rules: LossRules | None = None) -> RowView:
    """Tokenize one text row as ``packing.encode_rows`` does (trained as ``rules`` say, the library's
    ``LossRules``; default its defaults), with each token's role and turn.

    Roles: ``text`` for a text row; ``prompt`` and ``completion`` for a prompt/completion pair; the
    message's role for chats (template tokens between messages belong to the message they open, so an
    assistant turn's header is ``assistant`` with loss 0). ``turns`` is the message index (0 when the
    row is not a chat; -1 where a template does not render message by message). O(tokens).

    >>> chat = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]
    >>> view = view_row({"messages": chat}, "bytes")
    >>> "".join(p for p, t in zip(view.pieces, view.trained) if t)
    'Yo<|im_end|>\\n'
    >>> sorted(set(view.roles))
    ['assistant', 'user']
    >>> last = view_row({"messages": chat * 2}, "bytes", LossRules("last_turn"))
    >>> "".join(p for p, t in zip(last.pieces, last.trained) if t)
    'Yo<|im_end|>\\n'
    """
    tokenizer = loaded(tokenizer)
    forms = text_forms(row)
    tokens, mask, _ = encode_rows([row], tokenizer, loss_rules=rules)
    ids = tokens.tolist()
    form = forms[0]
    turns = [0] * len(ids)
    if form == "text":
        roles = ["text"] * len(ids)
    elif form == "prompt_completion":
        prompt = encode_texts(tokenizer, [row["prompt"]], add_special_tokens=True)
        size = len(prompt.ids)
        roles = ["prompt"] * size + ["completion"] * (len(ids) - size)
    else:
        messages = list(row["messages"]) if form == "messages" else [*row["prompt"], *row["completion"]]
        try:
            roles, turns = _message_roles(tokenizer, messages, ids)
        except (SampleError, ValueError):
            roles = ["assistant" if flag else "other" for flag in mask.tolist()]
            turns = [-1] * len(ids)
    cells = token_cells(ids, tokenizer)
    return RowView(form, ids, cells.pieces, cells.labels, cells.hovers, roles, turns, mask.astype(int).tolist())


def turn_table(view: RowView) -> list[dict[str, Any]]:
    """One line per turn (consecutive tokens of one message or part): role, tokens, trained tokens and the
    trained text, so a learner reads exactly what each assistant turn trains on. O(tokens).

    >>> chat = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]
    >>> [(t["role"], t["tokens"], t["trained"], t["trained text"]) for t in turn_table(view_row({"messages": chat}, "bytes"))]
    [('user', 10, 0, ''), ('assistant', 15, 4, 'Yo<|im_end|>\\n')]
    """
    table: list[dict[str, Any]] = []
    for index, (role, turn) in enumerate(zip(view.roles, view.turns, strict=True)):
        if not table or table[-1]["role"] != role or table[-1]["turn"] != turn:
            table.append({"turn": turn, "role": role, "tokens": 0, "trained": 0, "text": "", "trained text": ""})
        line = table[-1]
        line["tokens"] += 1
        line["text"] += view.pieces[index]
        if view.trained[index]:
            line["trained"] += 1
            line["trained text"] += view.pieces[index]
    return table


def block_labels(batch: Any, block: int, per_sample: Sequence[Sequence[str]], padding: str = "padding") -> list[str]:
    """One value per position of ``block`` taken from the sample each token comes from: ``per_sample[s][i]`` is
    the value of token ``i`` of sample ``s`` (a role, a piece, a hover text); padding gets ``padding``.
    Pieces of samples cut across blocks are followed through the plan. O(max_seq_length).

    >>> import packing
    >>> batch = packing.pack([[1, 2, 3], [4]], 3, strategy="split", overflow="split")
    >>> block_labels(batch, 1, [["a", "b", "c"], ["d"]])
    ['d', 'padding', 'padding']
    """
    plan = batch.plan
    labels: list[str] = []
    for piece in range(int(plan.block_starts[block]), int(plan.block_starts[block + 1])):
        sample, start = int(plan.piece_sequence[piece]), int(plan.piece_start[piece])
        labels.extend(per_sample[sample][start : start + int(plan.piece_length[piece])])
    return labels + [padding] * (int(batch.max_seq_length) - len(labels))


def documents_table(batch: Any, tokenizer: Any, *, skip_special_tokens: bool = False) -> list[dict[str, Any]]:
    """The export's round trip: one line per document of a packed batch with its block, sample, tokens, tokens
    with loss mask 1, training targets (labels that are not -100) and decoded text (``packing.decode_documents``),
    in block order. O(tokens).

    >>> import packing
    >>> tokens, mask, offsets = encode_rows([{"text": "hi"}, {"prompt": "a", "completion": "b"}], "bytes")
    >>> batch = packing.pack([{"input_ids": tokens[:3], "loss_mask": mask[:3]}, {"input_ids": tokens[3:], "loss_mask": mask[3:]}], 8, strategy="next_fit")
    >>> [tuple(d.values()) for d in documents_table(batch, "bytes")]
    [(0, 0, 3, 3, 2, 'hi<|endoftext|>'), (0, 1, 3, 2, 2, 'ab<|endoftext|>')]
    """
    texts = decode_documents(batch, loaded(tokenizer), skip_special_tokens=skip_special_tokens)
    table: list[dict[str, Any]] = []
    for block in range(int(batch.num_blocks)):
        start = 0
        for length in batch.seq_lengths(block).tolist():
            table.append(
                {
                    "block": block,
                    "sample": int(batch.sequence_ids[block, start]),
                    "tokens": int(length),
                    "loss_mask": int(batch.loss_mask[block, start : start + length].sum()),
                    "targets": int((batch.labels[block, start : start + length] != -100).sum()),
                    "text": texts[len(table)],
                }
            )
            start += length
    return table


TOKENIZERS_ENV = "PACKING_EXPLORER_TOKENIZERS"
"""The operator's folder of tokenizer folders (off when unset): a visitor names one of its folders, never a path."""
SHIPPED_TOKENIZERS = ("bytes",)
"""Tokenizers every server offers (the library's own; no tokenizer folder is shipped with the explorer)."""
MAX_TOKENIZER_NAME = 100
_FOLDER_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*(/[A-Za-z0-9_][A-Za-z0-9._-]*)?")
"""A folder, or a folder inside one (``org/model``), under the operator's folder: no ``~``, no ``..``, no root."""


def tokenizer_problem(spec: str) -> str:
    """The one sentence for every tokenizer that is not used, whatever the reason (missing, unreadable, not a
    tokenizer, not allowed): the page never tells one from another, so it is no oracle of the server's files.

    >>> print(tokenizer_problem("/etc/passwd"))
    Cannot load the tokenizer '/etc/passwd': expected bytes or the name of a tokenizer folder this server offers.
    """
    return f"Cannot load the tokenizer {quote_name(spec)}: expected {offered_tokenizers()}."


def quote_name(spec: str) -> str:
    """``spec`` quoted, cut to a few dozen characters (the page's ``safety.quote`` rule, kept here to avoid a cycle).

    >>> quote_name("x" * 50)
    "'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx…"
    """
    text = repr(spec.strip()[:41])
    return text if len(text) <= 40 else text[:39] + "…"


def tokenizer_root() -> str | None:
    """The operator's tokenizer folder (``PACKING_EXPLORER_TOKENIZERS``, resolved), or None when none is set."""
    root = os.environ.get(TOKENIZERS_ENV, "").strip()
    return os.path.realpath(root) if root and os.path.isdir(root) else None


def offered_tokenizers() -> str:
    """What the tokenizer box accepts, in words: ``bytes`` and the operator folder's sub-folders (a few named)."""
    root = tokenizer_root()
    names: list[str] = []
    if root is not None:
        try:
            names = sorted(n for n in os.listdir(root) if _FOLDER_NAME.fullmatch(n))[:8]
        except OSError:
            names = []
    shown = f" ({', '.join(names)})" if names else ""
    return f"bytes or the name of a tokenizer folder this server offers{shown}"


def tokenizer_path(spec: str) -> str | None:
    """The folder a visitor's tokenizer name stands for, or ``"bytes"``; None when it names nothing offered.

    Only a name (``[A-Za-z0-9_][A-Za-z0-9._-]*``, at most one ``/``, up to ``MAX_TOKENIZER_NAME`` characters)
    of a folder under ``PACKING_EXPLORER_TOKENIZERS`` whose real path (symbolic links resolved) stays inside it.
    No ``~`` expansion, no absolute path, no ``..``. O(len(spec)) plus one ``realpath``.

    >>> tokenizer_path("bytes"), tokenizer_path("~root"), tokenizer_path("../../etc/passwd"), tokenizer_path("/etc")
    ('bytes', None, None, None)
    """
    name = spec.strip()
    if name in SHIPPED_TOKENIZERS:
        return name
    root = tokenizer_root()
    if root is None or len(name) > MAX_TOKENIZER_NAME or not _FOLDER_NAME.fullmatch(name):
        return None
    if any(part in (".", "..") for part in name.split("/")):
        return None
    try:
        path = os.path.realpath(os.path.join(root, name))
        inside = path.startswith(root + os.sep) and os.path.isdir(path)
    except (OSError, ValueError):
        return None
    return path if inside else None


def loaded(tokenizer: Any) -> Any:
    """A tokenizer object as is; a name through :func:`choose_tokenizer` (raises ``ValueError`` with its line)."""
    if not isinstance(tokenizer, str):
        return load_tokenizer(tokenizer, local_files_only=True)
    chosen, message = choose_tokenizer(tokenizer)
    if message is not None:
        raise ValueError(message)
    return chosen


def choose_tokenizer(spec: str) -> tuple[Any, str | None]:
    """A tokenizer for the explorer, never going online and never outside the operator's tokenizer folder:
    ``(tokenizer, None)``, or ``(None, message)`` with one plain sentence, the same for every refusal
    (:func:`tokenizer_problem`); nothing read from a file is shown.

    >>> choose_tokenizer("bytes")
    (ByteTokenizer(), None)
    >>> choose_tokenizer("  ")[1]
    'Choose a tokenizer: bytes or the name of a tokenizer folder this server offers.'
    """
    if not spec.strip():
        return None, f"Choose a tokenizer: {offered_tokenizers()}."
    path = tokenizer_path(spec)
    if path is None:
        return None, tokenizer_problem(spec)
    if path == "bytes":
        return ByteTokenizer(), None
    try:
        return load_tokenizer(path, local_files_only=True), None
    except Exception:  # whatever the folder holds: the same sentence, nothing of it echoed
        return None, tokenizer_problem(spec)


# ---------------------------------------------------------------- examples and pasted text

EXAMPLES: dict[str, dict[str, Any]] = {
    "text": {"text": "Sample packing puts many short documents into one block. Größe ✓"},
    "prompt_completion": {"prompt": "Translate to French: cheese\n", "completion": "fromage"},
    "messages": {
        "messages": [
            {"role": "system", "content": "You answer in one short sentence."},
            {"role": "user", "content": "What does packing do?"},
            {"role": "assistant", "content": "It fills each block with several samples."},
            {"role": "user", "content": "And the loss?"},
            {"role": "assistant", "content": "Only the answers are trained."},
        ]
    },
    "conversational": {
        "prompt": [{"role": "user", "content": "What is 2 + 2?"}],
        "completion": [{"role": "assistant", "content": "4."}],
    },
}
"""One example row of each text form (keys as in ``packing.core._forms.TEXT_FORMS``)."""


def _chat(*turns: tuple[str, str]) -> dict[str, Any]:
    """A chat of (question, answer) turns."""
    messages = []
    for question, answer in turns:
        messages += [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
    return {"messages": messages}


CHATS: list[dict[str, Any]] = [
    _chat(("Red?", "A colour."), ("Sky?", "Blue.")),
    _chat(("2 + 2?", "4.")),
    _chat(("Hi!", "Hello.")),
    _chat(("Say yes.", "Yes.")),
    _chat(("3 x 3?", "9.")),
    _chat(("Ice is?", "Cold.")),
    _chat(("Yes or no?", "No.")),
]
"""The text source's first example: seven short chats whose assistant turns are trained. With the byte tokenizer
they are 29 to 64 tokens long, so best-fit decreasing packs them whole, two to a block of 64, in four blocks: each
block shows where one chat ends and the next starts, and which tokens of each are trained."""


def _pair(question: str, chosen: str, rejected: str) -> dict[str, Any]:
    """A preference pair in TRL's conversational form."""
    return {
        "prompt": [{"role": "user", "content": question}],
        "chosen": [{"role": "assistant", "content": chosen}],
        "rejected": [{"role": "assistant", "content": rejected}],
    }


PREFERENCE_CHATS: list[dict[str, Any]] = [
    _pair("2 + 2?", "4.", "5."),
    _pair("Sky?", "Blue.", "Green."),
    _pair("Ice is?", "Cold.", "Hot."),
]
"""The text source's preference example: three chat pairs. With the byte tokenizer (its chat template) they take
184 tokens with the prompt before each answer (two blocks of 128) and 110 with the prompt shared (one block)."""
PREFERENCE_MAX_SEQ_LENGTH = 128

EXAMPLE_TITLES = {
    "chats": "Several chats (messages)",
    "text": "Plain text",
    "prompt_completion": "Prompt / completion",
    "messages": "One chat with a system turn (messages)",
    "conversational": "Chat prompt / completion (TRL)",
    "preference": "Chat preference pairs (TRL: prompt, chosen, rejected)",
}


def example_text(form: str) -> str:
    """The example of ``form`` as the JSON a user would paste (``chats``: one JSON line per chat).

    >>> example_text("prompt_completion")
    '{"prompt": "Translate to French: cheese\\\\n", "completion": "fromage"}'
    >>> len(example_text("chats").splitlines())
    7
    """
    if form == "chats":
        return "\n".join(json.dumps(row, ensure_ascii=False) for row in CHATS)
    if form == "preference":
        return "\n".join(json.dumps(row, ensure_ascii=False) for row in PREFERENCE_CHATS)
    return json.dumps(EXAMPLES[form], ensure_ascii=False)


def parse_text_rows(text: str, name: str = "pasted text") -> list[Any]:
    """Rows from pasted text: a JSON object (one row), a JSON list (rows; a list of messages is one chat),
    JSON lines, or else plain text (one ``text`` row). Bad JSON that looks like JSON raises
    :class:`DatasetError` with the line. O(characters).

    >>> parse_text_rows('[{"role": "user", "content": "hi"}]')
    [{'messages': [{'role': 'user', 'content': 'hi'}]}]
    >>> parse_text_rows('{"text": "a"}\\n{"text": "b"}')
    [{'text': 'a'}, {'text': 'b'}]
    >>> parse_text_rows("just words")
    [{'text': 'just words'}]
    """
    stripped = text.strip()
    if not stripped:
        return []
    if stripped[0] not in "[{":
        return [{"text": text}]
    try:
        data = json.loads(stripped)
    except json.JSONDecodeError as error:
        if error.msg != "Extra data":
            raise DatasetError(name, f"line {error.lineno}", f"invalid JSON ({error.msg})") from None
        rows = []
        for number, line in enumerate(stripped.splitlines(), start=1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as line_error:
                    raise DatasetError(name, f"line {number}", f"invalid JSON ({line_error.msg})") from None
        return rows
    if isinstance(data, dict):
        return [data]
    if isinstance(data, list) and data and all(isinstance(item, dict) and "role" in item for item in data):
        return [{"messages": data}]
    return list(data) if isinstance(data, list) else [data]


CONTEXT_TOKENS = 8
"""Tokens decoded before a piece that starts inside a sample, so its first characters come out whole."""


def window_cells(
    batch: Any, samples: Any, tokenizer: Any, padding: str = "padding", limit: int = LABEL_LIMIT
) -> tuple[list[list[str]], list[list[str]]]:
    """Cell labels and hover texts of every position of a (windowed) packed batch, shape ``(blocks,
    max_seq_length)``: each piece of a sample is decoded from the sample's own tokens (with a few tokens of
    context before it when it starts inside the sample), so characters and spaces come out as in the whole
    sample. Labels have at most ``limit`` characters; padding gets an empty label and the hover ``padding``.
    O(tokens in the batch).

    >>> import packing
    >>> samples = packing.read_rows([{"text": "héllo"}], tokenizer="bytes")
    >>> batch = packing.pack(samples, 4, strategy="split", overflow="split")
    >>> labels, hovers = window_cells(batch, samples, "bytes")
    >>> labels
    [['h', '·', 'é', 'l'], ['l', 'o', '<|endofte…', '']]
    >>> hovers[1][0], hovers[1][3]
    ("id 108: 'l'", 'padding')
    """
    tokenizer = loaded(tokenizer)
    plan = batch.plan
    width = int(batch.max_seq_length)
    all_labels: list[list[str]] = []
    all_hovers: list[list[str]] = []
    for block in range(int(plan.num_blocks)):
        labels: list[str] = []
        hovers: list[str] = []
        for piece in range(int(plan.block_starts[block]), int(plan.block_starts[block + 1])):
            sample, start = int(plan.piece_sequence[piece]), int(plan.piece_start[piece])
            length = int(plan.piece_length[piece])
            base = int(samples.offsets[sample])
            context = max(0, start - CONTEXT_TOKENS)
            ids = samples.tokens[base + context : base + start + length].tolist()
            cells = token_cells(ids, tokenizer, limit)
            labels.extend(cells.labels[start - context :])
            hovers.extend(cells.hovers[start - context :])
        all_labels.append(labels + [""] * (width - len(labels)))
        all_hovers.append(hovers + [padding] * (width - len(hovers)))
    return all_labels, all_hovers
