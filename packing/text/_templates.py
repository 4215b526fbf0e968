"""Chat templates rendered by this project in transformers' Jinja sandbox (its environment, read and never
patched), with a bound on each rendering's size and on its work: loop iterations and calls are counted as the
template runs, so a template that loops without writing anything is stopped too (no clock, no signal, no thread:
the same on every OS and in any thread). Internal.
"""

from __future__ import annotations

import contextlib
import functools
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from typing import Any, cast

from packing.core._forms import Message
from packing.errors import SampleError, SettingError, first_line
from packing.text._tokenizers import ByteTokenizer, tokenizer_name

_GENERATION_MARKER = re.compile(r"\{%-?\s*generation\s*-?%\}")


RENDER_FACTOR = 16
RENDER_SLACK = 1 << 20
"""A chat template's rendering may hold at most ``RENDER_FACTOR`` × the characters of the messages it
renders + ``RENDER_SLACK`` characters, and take ``STEP_FACTOR`` times as many steps (loop iterations, calls,
operators): a template of nested loops is stopped there, whether it writes or not, not run for minutes."""
STEP_FACTOR = 2
"""Steps per character a rendering may write: a loop writing a character an iteration meets the size first."""

Spans = list[tuple[int, int]]


class _RenderTooLarge(Exception):
    """A rendering went past its cap (the first argument)."""


class _RenderTooLong(Exception):
    """A rendering went past its steps: loop iterations, calls and operators."""


class _Budget:
    """What the rendering running in this context may still do: ``steps`` (loop iterations, calls, filters,
    operators), counted down, and ``size``, the most characters or items one value it builds may hold."""

    def __init__(self, steps: int, size: int) -> None:
        self.steps, self.size = steps, size


_BUDGET: ContextVar[_Budget | None] = ContextVar("packing_template_budget", default=None)
"""The budget of the rendering running in this context (one per rendering, so renderings in other threads or
tasks count their own), or None: not counted."""


CALL_STEPS = 4
"""Steps a call (a function, a method, a macro, a filter) counts: it does more than a loop iteration (a macro
call several microseconds), so that a template of calls is stopped about as soon as one of loops."""


def _step(*values: Any, steps: int = 1) -> None:
    """Count ``steps`` of the rendering running in this context, and refuse ``values`` (arguments, operands) that
    are integers past the size a value may have: ``'a'.center(10**10)`` would allocate before anything is written.
    O(values)."""
    budget = _BUDGET.get()
    if budget is None:
        return
    budget.steps -= steps
    if budget.steps < 0:
        raise _RenderTooLong()
    for value in values:
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > budget.size:
            raise _RenderTooLarge(budget.size)


def _within(size: int) -> None:
    """Refuse a value of ``size`` characters or items past the size a value of the rendering may have. O(1)."""
    budget = _BUDGET.get()
    if budget is not None and size > budget.size:
        raise _RenderTooLarge(budget.size)


def _counted(iterable: Iterable[Any]) -> Iterator[Any]:
    """``iterable``'s items, each counted as a step: what every ``{% for %}`` of a template iterates (its loop
    filter included, which runs no body)."""
    for item in iterable:
        _step()
        yield item


def _joined(*parts: Any) -> str:
    """Jinja's ``~`` (and string building): the parts as text, joined, within the size a value may have."""
    _step()
    texts = [str(part) for part in parts]
    _within(sum(map(len, texts)))
    return "".join(texts)


def _work(*values: Any) -> int:
    """The steps a call over ``values`` may take besides its own: an item of a list, tuple, dict, set or range
    each, a character of a string or bytes per 16 (``sum``, ``join``, ``count`` go through them). O(values)."""
    steps = 0
    for value in values:
        if isinstance(value, (list, tuple, dict, set, frozenset, range)):
            steps += len(value)
        elif isinstance(value, (str, bytes)):
            steps += len(value) // 16
    return steps


def _counted_result(value: Any) -> Any:
    """A filter's or a call's result, its items counted as steps when it is an iterator (``map``, ``select``):
    they are made when the next filter goes through them. O(1)."""
    return _counted(value) if isinstance(value, Iterator) else value


def _counted_filter(function: Callable[..., Any]) -> Callable[..., Any]:
    """A Jinja filter counted as steps (:data:`CALL_STEPS` and the work of its arguments, :func:`_work`), its
    integer arguments within the size a value may have (``center``, ``indent``, ``batch``), its lazy results
    counted item by item; its Jinja markers (``pass_context`` and the like) kept."""

    @functools.wraps(function)
    def counted(*args: Any, **kwargs: Any) -> Any:
        _step(*args[1:], *kwargs.values(), steps=CALL_STEPS + _work(*args, *kwargs.values()))
        return _counted_result(function(*args, **kwargs))

    return counted


_LARGEST = RENDER_FACTOR * RENDER_SLACK
"""The most characters or items a sum (``+``) may build in any rendering: doubling a string 64 times in a loop
of 64 steps would not be stopped by the steps."""
_POWER_BITS = 1 << 16
"""The most bits ``**`` may make: ``7 ** 10 ** 9`` would hold a core for minutes without writing anything."""


class _Counting:
    """A Jinja sandbox that counts its work: every call, filter, loop iteration, ``~`` and arithmetic operator is a
    step (:func:`_step`), and no value may grow past the size of what the rendering may write (``*``, ``+``, ``~``,
    integer arguments). Mixed into transformers' own environment class (:func:`_counting_class`) over an overlay
    of its environment, without constant folding (which would run the template's expressions while compiling it):
    its filters (counted), globals and extensions are read, never changed."""

    def call(self, context: Any, obj: Any, /, *args: Any, **kwargs: Any) -> Any:
        if getattr(obj, "__func__", None) in _OWN:  # the loops' and joins' own counters count themselves
            return obj(*args)
        work = _work(getattr(obj, "__self__", None), *args, *kwargs.values())  # a method's object and arguments
        _step(*args, *kwargs.values(), steps=CALL_STEPS + work)
        return _counted_result(super().call(context, obj, *args, **kwargs))  # type: ignore[misc]

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "+":  # the common one (ChatML adds strings), kept short: a fixed bound, no look-up
            result = left + right
            if isinstance(result, (str, bytes, list, tuple)) and len(result) > _LARGEST:
                raise _RenderTooLarge(_LARGEST)
            return result
        _step()
        if operator == "*":
            _within(max(_repeat_size(left, right), _repeat_size(right, left)))
        elif operator == "**" and isinstance(left, int) and isinstance(right, int) and right > 0:
            _power(left, right)
        return super().call_binop(context, operator, left, right)  # type: ignore[misc]

    def packing_steps(self, iterable: Iterable[Any]) -> Iterator[Any]:
        return _counted(iterable)

    def packing_join(self, *parts: Any) -> str:
        return _joined(*parts)


_OWN = (_Counting.packing_steps, _Counting.packing_join)
"""The counting environment's own methods, which the compiled template calls."""


def _power(base: int, exponent: int) -> None:
    """Refuse ``base ** exponent`` when it would hold more than :data:`_POWER_BITS` bits. O(1)."""
    if abs(base) > 1 and exponent * abs(base).bit_length() > _POWER_BITS:
        raise _RenderTooLong()


def _repeat_size(value: Any, times: Any) -> int:
    """How many items ``value * times`` holds when it repeats a string or a sequence, else 0. O(1)."""
    if isinstance(value, (str, bytes, list, tuple)) and isinstance(times, int) and not isinstance(times, bool):
        return len(value) * max(times, 0)
    return 0


def _internal(code: str) -> Any:
    """A Jinja expression node that the compiler writes as the Python ``code`` (a name of the environment),
    made as Jinja's parser makes its own (``free_identifier``): a template cannot name or replace it."""
    from jinja2 import nodes

    name = object.__new__(nodes.InternalName)
    nodes.Node.__init__(name, code)
    return name


@functools.lru_cache(maxsize=8)
def _counting_class(environment_class: type) -> type:
    """``environment_class`` (transformers' sandbox) with :class:`_Counting` over it, and a compiler that makes every
    ``{% for %}`` iterate through the environment's counter and every ``~`` join through its bounded join."""
    from jinja2 import nodes
    from jinja2.compiler import CodeGenerator

    class Generator(CodeGenerator):
        def visit_Template(self, node: nodes.Template, frame: Any = None) -> None:
            for loop in node.find_all(nodes.For):
                loop.iter = nodes.Call(
                    _internal(f"environment.{_Counting.packing_steps.__name__}"), [loop.iter], [], None, None
                )
            for concat in node.find_all(nodes.Concat):
                join = _internal(f"environment.{_Counting.packing_join.__name__}")
                concat.nodes = [nodes.Call(join, concat.nodes, [], None, None)]
            super().visit_Template(node, frame)

    intercepted = frozenset({"*", "**", "+"})  # the operators Jinja's sandbox hands to call_binop
    members = {"code_generator_class": Generator, "intercepted_binops": intercepted}
    return type("CountingEnvironment", (_Counting, environment_class), members)


@functools.lru_cache(maxsize=16)
def _counting_template(source: str) -> Any:
    """The chat template ``source`` compiled in an overlay of transformers' environment (taken from its compiler,
    given an empty template: the source is never compiled there) whose class counts the work
    (:func:`_counting_class`), without constant folding, its filters counted."""
    try:
        from transformers.utils.chat_template_utils import _compile_jinja_template
    except ImportError as error:  # pragma: no cover - transformers without its chat template module
        raise SettingError("tokenizer", "transformers with its chat template sandbox", f"<{error}>") from None
    environment = _compile_jinja_template("").environment.overlay(optimized=False)
    kind: Any = type(environment)
    environment.__class__ = _counting_class(kind)
    environment.filters = {name: _counted_filter(function) for name, function in environment.filters.items()}
    return environment.from_string(source)


def _text_size(value: Any) -> int:
    """Characters of the strings in messages (contents, roles, tool calls), for the rendering cap. O(size)."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, Mapping):  # strings counted here, not by a call each: this runs over every message
        return sum(
            (len(key) if type(key) is str else _text_size(key)) + (len(item) if type(item) is str else _text_size(item))
            for key, item in value.items()
        )
    if isinstance(value, (list, tuple)):
        return sum(_text_size(item) for item in value)
    return 8


def _too_large(sample: int, field: str, cap: int) -> SampleError:
    return SampleError(
        sample, field, None, f"a chat template rendering of at most {cap:,} characters", "<a longer rendering>"
    )


def _too_long(sample: int, field: str, steps: int) -> SampleError:
    return SampleError(
        sample,
        field,
        None,
        f"a chat template that renders in at most {steps:,} steps (loop iterations and calls)",
        "<a template that runs longer>",
    )


def _transformers_step(name: str) -> Callable[[Any], Any]:
    """transformers' own step ``name`` of preparing what a chat template sees (``chat_template_utils``), or
    no change with a transformers that does not take that step."""
    from transformers.utils import chat_template_utils

    step: Callable[[Any], Any] | None = getattr(chat_template_utils, name, None)
    return step if callable(step) else (lambda value: value)


def _compiled(tokenizer: Any) -> Any:
    """The tokenizer's chat template (the one transformers picks from a dict of named templates) compiled in
    transformers' Jinja sandbox, counting its steps (:func:`_counting_template`, cached)."""
    getter = getattr(tokenizer, "get_chat_template", None)
    return _counting_template(getter() if callable(getter) else tokenizer.chat_template)


def _variables(tokenizer: Any, messages: Sequence[Message], generation_prompt: bool) -> dict[str, Any]:
    """What transformers' ``apply_chat_template`` hands the template for one conversation: the messages
    without their keys whose value is None, as plain data, reasoning under the names templates read; no
    tools or documents; the generation prompt flag; the tokenizer's special tokens. O(size)."""
    normalize = _transformers_step("_normalize_chat_messages")
    plain = _transformers_step("_plain_template_data")
    chat = plain(normalize(list(messages)))
    return {
        "messages": _transformers_step("_alias_reasoning_fields")(chat),
        "tools": None,
        "documents": None,
        "add_generation_prompt": generation_prompt,
        **plain(dict(getattr(tokenizer, "special_tokens_map", {}))),
    }


def _blocks(template: Any, variables: dict[str, Any]) -> Iterator[str]:
    """The template's output, block by block (``Template.generate``, what ``render`` joins)."""
    return iter(template.generate(**variables))


def _bounded(template: Any, variables: dict[str, Any], cap: int, marked: bool) -> tuple[str, Spans]:
    """The template rendered with ``variables``, stopped (:class:`_RenderTooLarge`) once its output passes
    ``cap`` characters; with ``marked``, the character spans of its ``{% generation %}`` blocks too, from
    the assistant tracker transformers' sandbox holds, activated as ``render_jinja_template`` does."""
    blocks: list[str] = []
    spans: Spans = []
    tracker = template.environment.activate_tracker(blocks, spans) if marked else contextlib.nullcontext()
    size = 0
    budget = _BUDGET.set(_Budget(STEP_FACTOR * cap, cap))
    try:
        with tracker:
            for block in _blocks(template, variables):
                size += len(block)
                if size > cap:
                    raise _RenderTooLarge(cap)
                blocks.append(block)
    finally:
        _BUDGET.reset(budget)
    return "".join(blocks), [(int(start), int(end)) for start, end in spans]


def _rendered(
    tokenizer: Any, messages: Sequence[Message], generation_prompt: bool, cap: int, marked: bool
) -> tuple[str, Spans]:
    """The text (and with ``marked`` the generation blocks' spans) of ``messages``: the byte tokenizer's own
    ChatML (linear in the messages), or the tokenizer's chat template bounded at ``cap`` characters."""
    if isinstance(tokenizer, ByteTokenizer):
        text = tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=generation_prompt)
        return cast(str, text), []
    if not messages and not marked:  # as apply_chat_template refuses it
        raise ValueError("an empty conversation")
    return _bounded(_compiled(tokenizer), _variables(tokenizer, messages, generation_prompt), cap, marked)


def rendering(
    tokenizer: Any, messages: Sequence[Message], generation_prompt: bool, sample: int, field: str, marked: bool = False
) -> tuple[str, Spans]:
    """The chat template's text for ``messages`` (and with ``marked`` its generation blocks' spans), as
    transformers renders it; a template error names the sample. The rendering is stopped past
    ``RENDER_FACTOR`` × the messages' characters + ``RENDER_SLACK`` (a :class:`SampleError`)."""
    if not isinstance(tokenizer, ByteTokenizer) and (
        not callable(getattr(tokenizer, "apply_chat_template", None)) or not getattr(tokenizer, "chat_template", None)
    ):
        raise SettingError("tokenizer", "a tokenizer with a chat template (for chat rows)", tokenizer_name(tokenizer))
    cap = RENDER_FACTOR * _text_size(messages) + RENDER_SLACK
    try:
        return _rendered(tokenizer, messages, generation_prompt, cap, marked)
    except SettingError:
        raise
    except _RenderTooLarge:
        raise _too_large(sample, field, cap) from None
    except _RenderTooLong:
        raise _too_long(sample, field, STEP_FACTOR * cap) from None
    except Exception as error:
        raise SampleError(
            sample, field, None, "a conversation the chat template can render", f"<{first_line(error, 60)}>"
        ) from None


def render(tokenizer: Any, messages: Sequence[Message], generation_prompt: bool, sample: int, field: str) -> str:
    """The chat template's text for ``messages`` (:func:`rendering`, bounded the same way)."""
    return rendering(tokenizer, messages, generation_prompt, sample, field)[0]


def prefix_error(sample: int, field: str, turn: int) -> SampleError:
    return SampleError(
        sample,
        field,
        turn,
        "a chat template whose rendering of the first turns is a prefix of the whole conversation "
        "(add {% generation %} markers to the template, or fix it)",
        "<a template that renders earlier turns differently>",
    )


def has_generation_markers(tokenizer: Any) -> bool:
    """Whether the tokenizer's chat template marks assistant turns with ``{% generation %}``.

    >>> has_generation_markers(ByteTokenizer())
    False
    """
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):
        template = template.get("default")
    return isinstance(template, str) and _GENERATION_MARKER.search(template) is not None


def render_all(tokenizer: Any, conversations: list[list[Message]], samples: list[int]) -> list[str]:
    """Every conversation rendered (no generation prompt), each capped as :func:`render` caps it; a
    failure is reported for the first conversation that fails, as :func:`render` words it."""
    return [render(tokenizer, c, False, s, "messages") for c, s in zip(conversations, samples, strict=True)]
