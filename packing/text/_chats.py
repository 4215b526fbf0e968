"""Where each turn of a chat lies in its rendering: learned once per template from probe renderings,
checked on every chat, prefix by prefix when it cannot be, or from generation markers. Internal.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from packing.core._forms import Message
from packing.core._loss import DEFAULT_RULES, LossRules
from packing.errors import SampleError
from packing.text._templates import prefix_error, render, rendering


def _opening(tokenizer: Any, whole: str, sample: int, shape: TemplateShape | None = None) -> str:
    """What precedes an assistant turn that opens a conversation: the template's rendering of no messages
    with the generation prompt, or (when the template refuses an empty conversation) the rendering up to
    the end of the first generation prompt in it, as a one-message probe renders it. Learned once per
    ``shape``."""
    if shape is None or shape.opening is None:
        try:
            learned = (True, render(tokenizer, [], True, sample, "messages"))
        except SampleError:
            probe = [{"role": "user", "content": "x"}]
            without = render(tokenizer, probe, False, sample, "messages")
            with_prompt = render(tokenizer, probe, True, sample, "messages")
            learned = (False, with_prompt[len(without) :] if with_prompt.startswith(without) else "")
        if shape is None:
            shape = TemplateShape()
        shape.opening = learned
    empty, text = shape.opening
    if empty:
        return text
    found = whole.find(text) if text else -1
    if found < 0:
        raise prefix_error(sample, "messages", 0)
    return whole[: found + len(text)]


MAX_PREFIX_TURNS = 1024
"""Most messages in a chat whose turns cannot be found in one rendering (the fallback renders every
prefix: O(turns × rendering), quadratic in the chat's length)."""

_MAX_ROLES = 16
"""Most distinct roles a chat may have for the one-rendering path (each costs one probe rendering)."""


@dataclass
class TemplateShape:
    """What one call has learned of a chat template, so that later chats are laid out from their one
    rendering alone: how message 0 renders alone (``first``: header and footer around its content, by
    role), how every later message renders (``pieces``, by role), the generation prompt after a message
    (``prompts``, by its role) and what opens a chat before an assistant turn at position 0
    (``opening``: ``(True, text)`` from the empty rendering, ``(False, generation prompt)`` from a probe).
    Every piece is checked on every chat it lays out: the chat's rendering must be exactly the pieces and
    contents end to end, or the chat is learned afresh."""

    first: dict[str, tuple[str, str]] = field(default_factory=dict)
    pieces: dict[str, tuple[str, str]] = field(default_factory=dict)
    prompts: dict[str, str] = field(default_factory=dict)
    opening: tuple[bool, str] | None = None


@dataclass(frozen=True)
class _TurnSpans:
    """A chat rendered once: its text; where each message starts (``bounds[i]``; ``bounds[-1]`` is the
    end); for each assistant turn, where its generation prompt ends (``opens[i]``, else None); each
    message's content span in the text where it is known for certain (``contents[i]``, else None)."""

    whole: str
    bounds: list[int]
    opens: list[int | None]
    contents: list[tuple[int, int] | None]
    opening_error: SampleError | None = None
    """Why an assistant turn at position 0 has no start (raised only when that turn is trained)."""


def _fits(whole: str, start: int, header: str, content: str, footer: str) -> int:
    """The end of ``header + content + footer`` laid at ``start`` in ``whole``, or -1 if they are not there."""
    middle = start + len(header)
    fits = whole.startswith(header, start) and whole.startswith(content, middle)
    if fits and whole.startswith(footer, middle + len(content)):
        return middle + len(content) + len(footer)
    return -1


def _laid_out(messages: Sequence[Message]) -> bool:
    """Whether a chat may be laid out from one rendering: string contents, no tool calls, few roles."""
    if len({str(m.get("role")) for m in messages}) > _MAX_ROLES:
        return False
    return all(isinstance(m.get("content"), str) and m.get("tool_calls") is None for m in messages)


def _opens(
    tokenizer: Any, messages: Sequence[Message], whole: str, bounds: list[int], prompts: dict[str, str], sample: int
) -> list[int | None] | None:
    """Where each assistant turn's generation prompt ends, from the prompts known by preceding role (a
    missing one learned by one rendering; with no ``tokenizer``, None); None when a rendering with the
    generation prompt does not continue into the turn as the whole does."""
    opens: list[int | None] = [None] * len(messages)
    for turn, message in enumerate(messages):
        if message.get("role") != "assistant" or turn == 0:
            continue
        before = str(messages[turn - 1]["role"])
        if before not in prompts:
            if tokenizer is None:
                return None
            rendered = render(tokenizer, messages[:turn], True, sample, "messages")
            if not (whole.startswith(rendered) and bounds[turn] <= len(rendered) <= bounds[turn + 1]):
                return None
            prompts[before] = rendered[bounds[turn] :]
        prompt = prompts[before]
        if not whole.startswith(prompt, bounds[turn]) or bounds[turn] + len(prompt) > bounds[turn + 1]:
            return None
        opens[turn] = bounds[turn] + len(prompt)
    return opens


def _cached_layout(messages: Sequence[Message], whole: str, shape: TemplateShape) -> _TurnSpans | None:
    """The layout of a chat from pieces learned on earlier chats alone (no rendering), or None when a
    piece is missing or the rendering is not exactly those pieces and contents end to end. O(characters)."""
    first = shape.first.get(str(messages[0]["role"]))
    if first is None:
        return None
    bounds: list[int] = [0]
    contents: list[tuple[int, int] | None] = []
    for index, message in enumerate(messages):
        piece = first if index == 0 else shape.pieces.get(str(message["role"]))
        if piece is None:
            return None
        start, content = bounds[-1], message["content"]
        end = _fits(whole, start, piece[0], content, piece[1])
        if end < 0:
            return None
        contents.append((start + len(piece[0]), start + len(piece[0]) + len(content)))
        bounds.append(end)
    opens = _opens(None, messages, whole, bounds, shape.prompts, 0) if bounds[-1] == len(whole) else None
    if opens is None:
        return None
    if messages[0]["role"] == "assistant":
        opening = shape.opening
        if opening is None or not opening[0] or not whole.startswith(opening[1]) or len(opening[1]) > bounds[1]:
            return None
        opens[0] = len(opening[1])
    return _TurnSpans(whole, bounds, opens, contents)


def _learned_layout(
    tokenizer: Any, messages: Sequence[Message], whole: str, sample: int, shape: TemplateShape, opens_too: bool = True
) -> _TurnSpans | None:
    """Where each message of a chat starts in its one rendering, or None when that cannot be made out.

    Message 0 ends where the rendering of it alone ends. Every later message is ``header + content +
    footer``, the header and footer of its role learned from the rendering of the prefix that ends
    with the role's first message after message 0 (one probe per role) and then checked at every
    message of that role: the whole rendering must be exactly these pieces, end to end, or the chat
    goes to the prefix-by-prefix path. A message without string content (tool calls), content the
    template changes, or a template whose prefixes are not prefixes also go there. What is learned
    without ambiguity (a content found once where it was learned) goes into ``shape`` for the next
    chats. O(distinct roles renderings + characters), against O(turns) renderings prefix by prefix.
    """
    first = whole if len(messages) == 1 else render(tokenizer, messages[:1], False, sample, "messages")
    if not whole.startswith(first):
        return None
    bounds = [0, len(first)]
    content0 = str(messages[0]["content"])
    known0 = shape.first.get(str(messages[0]["role"]))
    if known0 is not None and first == known0[0] + content0 + known0[1]:
        contents: list[tuple[int, int] | None] = [(len(known0[0]), len(known0[0]) + len(content0))]
    else:
        contents = [_once(first, content0, 0, len(first))]
    pieces: dict[str, tuple[str, str]] = {}
    certain: dict[str, bool] = {}
    for index in range(1, len(messages)):
        role, content, start = str(messages[index]["role"]), str(messages[index]["content"]), bounds[-1]
        if role not in pieces and role in shape.pieces:  # learned for certain on an earlier chat
            header, footer = shape.pieces[role]
            if _fits(whole, start, header, content, footer) >= 0:
                pieces[role], certain[role] = (header, footer), True
        if role not in pieces:
            end = len(whole)
            if index < len(messages) - 1:
                prefix = render(tokenizer, messages[: index + 1], False, sample, "messages")
                if not whole.startswith(prefix):
                    return None
                end = len(prefix)
            found = whole.find(content, start, end)
            if found < 0:
                return None
            pieces[role] = (whole[start:found], whole[found + len(content) : end])
            certain[role] = _once(whole, content, start, end) is not None
        header, footer = pieces[role]
        end = _fits(whole, start, header, content, footer)
        if end < 0:
            return None
        middle = start + len(header)
        contents.append((middle, middle + len(content)) if certain[role] else None)
        bounds.append(end)
    if bounds[-1] != len(whole):
        return None
    prompts = dict(shape.prompts)
    opens: list[int | None] | None = [None] * len(messages)
    if opens_too:
        opens = _opens(tokenizer, messages, whole, bounds, prompts, sample)
    if opens is None:
        return None
    opening_error = None
    if messages[0].get("role") == "assistant" and opens_too:
        try:
            opening = _opening(tokenizer, whole, sample, shape)
            if not whole.startswith(opening) or len(opening) > bounds[1]:
                raise prefix_error(sample, "messages", 0)
            opens[0] = len(opening)
        except SampleError as error:
            opening_error = error
    for turn, message in enumerate(messages):  # an assistant's content starts where its generation prompt ends
        opened = opens[turn]
        if contents[turn] is None and opened is not None:
            contents[turn] = _content_in(whole, message, opened, bounds[turn + 1])
    for role, piece in pieces.items():
        if certain[role]:
            shape.pieces.setdefault(role, piece)
    if contents[0] is not None:
        shape.first.setdefault(str(messages[0]["role"]), (first[: contents[0][0]], first[contents[0][1] :]))
    for role, prompt in prompts.items():
        shape.prompts.setdefault(role, prompt)
    return _TurnSpans(whole, bounds, opens, contents, opening_error)


def _once(text: str, content: str, start: int, end: int) -> tuple[int, int] | None:
    """The span of ``content`` in ``text[start:end]`` if it occurs there exactly once (and is not empty)."""
    if not content:
        return None
    found = text.find(content, start, end)
    if found < 0 or text.find(content, found + 1, end) >= 0:
        return None
    return found, found + len(content)


def _layout(
    tokenizer: Any,
    messages: Sequence[Message],
    sample: int,
    whole: str | None = None,
    shape: TemplateShape | None = None,
    opens_too: bool = True,
) -> _TurnSpans | None:
    """The layout of a chat from its one rendering (``whole``, rendered here if not given): from the pieces
    ``shape`` holds when they fit, else learned with a few probe renderings (:func:`_learned_layout`);
    None when the chat cannot be laid out that way. ``opens_too=False``: the message bounds alone."""
    if not _laid_out(messages):
        return None
    if whole is None:
        whole = render(tokenizer, messages, False, sample, "messages")
    shape = shape if shape is not None else TemplateShape()
    if opens_too:
        cached = _cached_layout(messages, whole, shape)
        if cached is not None:
            return cached
    return _learned_layout(tokenizer, messages, whole, sample, shape, opens_too)


def _too_many_turns(sample: int, messages: Sequence[Message]) -> SampleError:
    return SampleError(
        sample,
        "messages",
        None,
        f"at most {MAX_PREFIX_TURNS:,} messages for a chat whose turns the template does not render one "
        "after the other (tool calls, changed content)",
        f"<{len(messages):,} messages>",
    )


def _content_in(whole: str, message: Message, start: int, end: int) -> tuple[int, int] | None:
    """Where a message's content is in ``whole[start:end]``: at ``start``, or found once there (as given, or
    trimmed as templates often do); None when it cannot be told."""
    content = message.get("content")
    if not isinstance(content, str) or not content:
        return None
    if whole.startswith(content, start) and start + len(content) <= end:
        return start, start + len(content)
    return _once(whole, content, start, end) or _once(whole, content.strip(), start, end)


def _prefix_layout(
    tokenizer: Any, messages: Sequence[Message], sample: int, needed: Sequence[int] | None = None
) -> _TurnSpans:
    """The layout prefix by prefix (the fallback): the bounds around each message of ``needed`` (default
    every assistant turn) from the renderings of the messages before and through it; the generation prompt
    of each assistant turn among them from the rendering with it. O(turns × rendering), so refused over
    ``MAX_PREFIX_TURNS`` messages; refuses a template whose prefixes are not prefixes."""
    if len(messages) > MAX_PREFIX_TURNS:
        raise _too_many_turns(sample, messages)
    if needed is None:
        needed = [turn for turn, message in enumerate(messages) if message.get("role") == "assistant"]
    whole = render(tokenizer, messages, False, sample, "messages")
    known: dict[int, int] = {0: 0, len(messages): len(whole)}

    def bound(turn: int) -> int:
        if turn not in known:
            prefix = render(tokenizer, messages[:turn], False, sample, "messages")
            if not whole.startswith(prefix):
                raise prefix_error(sample, "messages", turn - 1)
            known[turn] = len(prefix)
        return known[turn]

    opens: list[int | None] = [None] * len(messages)
    contents: list[tuple[int, int] | None] = [None] * len(messages)
    for turn in needed:
        message = messages[turn]
        if message.get("role") == "assistant":
            before = (
                render(tokenizer, messages[:turn], True, sample, "messages")
                if turn
                else _opening(tokenizer, whole, sample)
            )
            through = bound(turn + 1)
            if not whole[:through].startswith(before):
                raise prefix_error(sample, "messages", turn)
            opens[turn] = len(before)
            contents[turn] = _content_in(whole, message, len(before), through)
        else:
            contents[turn] = _content_in(whole, message, bound(turn), bound(turn + 1))
    bounds = [known.get(turn, -1) for turn in range(len(messages) + 1)]
    return _TurnSpans(whole, bounds, opens, contents)


def _unknown_content(sample: int, turn: int) -> SampleError:
    return SampleError(
        sample,
        "messages",
        turn,
        "a message whose content the chat template renders as it is, once (to train its role's tokens, or "
        "its end of turn without the rest of it)",
        "<content the template changes, repeats or leaves out>",
    )


def _rule_spans(
    layout: _TurnSpans, messages: Sequence[Message], trained: Sequence[bool], ends: Sequence[bool], sample: int
) -> list[tuple[int, int]]:
    """The character spans the loss rules train in a laid-out chat: for each trained message, from the end
    of its generation prompt (assistant turns) or the start of its content (other roles) to the start of
    the next message when its end of turn is trained (``ends``), else to the end of its content; for an
    untrained message whose end of turn is trained, from the end of its content to the start of the next
    message. O(messages)."""
    spans = []
    for turn, message in enumerate(messages):
        if not trained[turn] and not ends[turn]:
            continue
        if turn == 0 and trained[turn] and layout.opening_error is not None:
            raise layout.opening_error
        start, content = layout.opens[turn], layout.contents[turn]
        if content is None and (not ends[turn] or not trained[turn] or start is None):
            if message.get("content") == "" and (not ends[turn] or not trained[turn]):
                continue  # an empty content: nothing of it trained, and no end of it to start an end of turn at
            raise _unknown_content(sample, turn)
        if not trained[turn]:
            assert content is not None  # checked above
            start = content[1]
        elif start is None:
            assert content is not None  # checked above
            start = content[0]
        end = layout.bounds[turn + 1] if ends[turn] else content[1] if content is not None else start
        if end > start:
            spans.append((start, end))
    return spans


def chat_spans(
    tokenizer: Any,
    messages: Sequence[Message],
    sample: int = 0,
    rules: LossRules = DEFAULT_RULES,
    *,
    whole: str | None = None,
    shape: TemplateShape | None = None,
    context: int = 0,
) -> tuple[str, list[tuple[int, int]]]:
    """The rendered conversation and the character spans ``[start, end)`` the loss ``rules`` train (by
    default every assistant turn: from the end of the generation prompt after the messages before the turn
    to the start of the next message); the first ``context`` messages are a prompt, never trained
    (:meth:`LossRules.turns`). Rendered once (plus one probe per role on the first chats of a
    ``shape``, see :func:`_layout`): O(characters); a chat that cannot be laid out from one rendering is
    rendered prefix by prefix, O(turns × rendering), and refused over ``MAX_PREFIX_TURNS`` messages.

    >>> from packing.text import ByteTokenizer
    >>> chat_spans(ByteTokenizer(), [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}])
    ('<|im_start|>user\\na<|im_end|>\\n<|im_start|>assistant\\nb<|im_end|>\\n', [(51, 63)])
    >>> chat_spans(ByteTokenizer(), [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}],
    ...            rules=LossRules(train_on_eos=False))[1]
    [(51, 52)]
    """
    trained, ends = rules.turns(messages, sample, context=context)
    layout = _layout(tokenizer, messages, sample, whole, shape)
    if layout is None:
        needed = [turn for turn in range(len(messages)) if trained[turn] or ends[turn]]
        layout = _prefix_layout(tokenizer, messages, sample, needed)
    return layout.whole, _rule_spans(layout, messages, trained, ends, sample)


def _prefix_spans(tokenizer: Any, messages: Sequence[Message], sample: int) -> tuple[str, list[tuple[int, int]]]:
    """:func:`chat_spans` (default rules) prefix by prefix: O(turns × rendering), refused over ``MAX_PREFIX_TURNS``."""
    layout = _prefix_layout(tokenizer, messages, sample)
    trained = DEFAULT_RULES.trained(messages, sample)
    return layout.whole, _rule_spans(layout, messages, trained, trained, sample)


def turn_bounds(tokenizer: Any, messages: Sequence[Message], sample: int = 0) -> tuple[str, list[int]]:
    """The rendered conversation and where each message starts in it (rendering of the messages before it),
    for showing roles. Rendered once as :func:`chat_spans` does, else prefix by prefix (refused over
    ``MAX_PREFIX_TURNS`` messages); refuses a template whose prefixes are not prefixes.

    >>> from packing.text import ByteTokenizer
    >>> turn_bounds(ByteTokenizer(), [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}])[1]
    [0, 29]
    """
    layout = _layout(tokenizer, messages, sample, opens_too=False)
    if layout is not None:
        return layout.whole, layout.bounds[:-1]
    if len(messages) > MAX_PREFIX_TURNS:
        raise _too_many_turns(sample, messages)
    whole = render(tokenizer, messages, False, sample, "messages")
    bounds = [0]
    for turn in range(1, len(messages)):
        prefix = render(tokenizer, messages[:turn], False, sample, "messages")
        if not whole.startswith(prefix):
            raise prefix_error(sample, "messages", turn - 1)
        bounds.append(len(prefix))
    return whole, bounds


def render_marked(
    tokenizer: Any, conversations: list[list[Message]], samples: list[int]
) -> tuple[list[str], list[list[tuple[int, int]]]]:
    """Every conversation rendered once with the character spans of its ``{% generation %}`` blocks, in
    the template's own sandbox, as transformers' ``render_jinja_template`` finds them; a failure named by its
    sample."""
    rendered = [
        rendering(tokenizer, conversation, False, sample, "messages", marked=True)
        for conversation, sample in zip(conversations, samples, strict=True)
    ]
    return [text for text, _ in rendered], [spans for _, spans in rendered]


def marked_spans(
    tokenizer: Any,
    messages: Sequence[Message],
    whole: str,
    blocks: list[tuple[int, int]],
    rules: LossRules,
    sample: int,
    shape: TemplateShape,
    context: int = 0,
) -> list[tuple[int, int]]:
    """The spans the loss rules train in a chat whose template marks assistant turns with ``{% generation
    %}``: every block (what ``return_assistant_tokens_mask`` trains) under the default rules; otherwise
    block ``k`` is assistant turn ``k`` (cut at its content's end when its end of turn is not trained, or
    only its end of turn, after its content, for an untrained turn whose end is), and the turns of other
    roles are found by the chat's layout; the first ``context`` messages are a prompt, never trained
    (:meth:`LossRules.turns`). O(messages + characters)."""
    trained, ends = rules.turns(messages, sample, context=context)
    assistants = [turn for turn, message in enumerate(messages) if message.get("role") == "assistant"]
    others = [
        turn
        for turn, message in enumerate(messages)
        if (trained[turn] or ends[turn]) and message.get("role") != "assistant"
    ]
    if not others and all(trained[turn] and ends[turn] for turn in assistants):
        return blocks
    if len(blocks) != len(assistants):
        raise SampleError(
            sample,
            "messages",
            None,
            "a chat template with one {% generation %} block per assistant message (for these loss rules)",
            f"<{len(blocks)} blocks for {len(assistants)} assistant messages>",
        )
    spans = []
    for (start, end), turn in zip(blocks, assistants, strict=True):
        if not trained[turn] and not ends[turn]:
            continue
        if not (trained[turn] and ends[turn]):
            content = _content_in(whole, messages[turn], start, end)
            if content is None:
                if messages[turn].get("content") == "":
                    continue
                raise _unknown_content(sample, turn)
            start, end = (start, content[1]) if trained[turn] else (content[1], end)
        if end > start:
            spans.append((start, end))
    if others:
        layout = _layout(tokenizer, messages, sample, whole, shape) or _prefix_layout(
            tokenizer, messages, sample, others
        )
        chosen = [turn in others and trained[turn] for turn in range(len(messages))]
        their_ends = [turn in others and ends[turn] for turn in range(len(messages))]
        spans += _rule_spans(layout, messages, chosen, their_ends, sample)
    return sorted(spans)
