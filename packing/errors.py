"""The errors ``packing`` raises on purpose, with fields that callers format.

Every error the library raises on purpose is a :class:`PackingError`. Each kind
carries its facts as fields (which sample, which field, which position, what was
expected, what was found), so the command line, the explorer and file readers
word them in their own context by reading fields, never by rewriting text.
Quoted values are cut to a few dozen characters: a 50 MB string in a file
gives a one-line message.

>>> error = SampleError(3, "input_ids", 2, "a non-negative integer token id", -4)
>>> str(error)
"sample 3, 'input_ids', position 2: expected a non-negative integer token id, got -4"
>>> error.sample, error.field, error.position
(3, 'input_ids', 2)
>>> isinstance(error, ValueError) and isinstance(error, PackingError)
True
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import ClassVar

__all__ = [
    "DatasetError",
    "LimitError",
    "NeedsTokenizer",
    "OptionNotUsed",
    "PackingError",
    "PeerName",
    "SampleError",
    "SequenceTooLong",
    "SettingError",
    "StateMismatch",
    "TokensLost",
    "TooManyDocuments",
    "UnitError",
    "UnitTooLong",
    "one_line",
]

QUOTE_LIMIT = 40
"""The most characters of a user's value an error message repeats."""


def quote(value: object, limit: int = QUOTE_LIMIT) -> str:
    """``repr(value)`` cut to at most ``limit`` characters, with an ellipsis where it was cut. O(limit).

    Long containers and strings are cut before they are printed in full, so quoting
    a 50 MB value costs as little as quoting a short one.

    >>> quote("x" * 100)
    "'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx…"
    >>> quote([1, 2, 3])
    '[1, 2, 3]'
    >>> import numpy as np
    >>> quote(np.zeros((2, 2), dtype=int))  # one line, whatever the repr
    'array([[0, 0], [0, 0]])'
    >>> quote(10**5000), quote([1, 10**5000])
    ('<int too large to print>', '<list too large to print>')
    """
    if isinstance(value, (str, bytes)) and len(value) > limit:
        value = value[: limit + 1]
    elif isinstance(value, (list, tuple)) and len(value) > limit:
        value = type(value)(value[: limit // 2 + 1])
    try:
        text = repr(value)
    except RecursionError:
        text = f"<deeply nested {type(value).__name__}>"
    except ValueError:  # an int of more digits than Python prints (sys.get_int_max_str_digits), or one inside
        text = f"<{type(value).__name__} too large to print>"
    if "\n" in text:  # a multi-line repr (a numpy array's, a tensor's): one line
        text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _got(value: object) -> str:
    """What was found: the value (quoted) and, for non-numbers, its type."""
    if isinstance(value, str) and value.startswith("<") and value.endswith(">"):
        return value  # a description such as '<3 values>' rather than a value
    if isinstance(value, bool) or not isinstance(value, int):
        return f"{quote(value)} ({type(value).__name__})"
    return quote(value)


def _restore(kind: type[PackingError], args: tuple[object, ...], fields: dict[str, object]) -> PackingError:
    """An error rebuilt from its message and fields, without calling ``__init__`` again (for pickle)."""
    error = kind.__new__(kind)
    error.args = args
    error.__dict__.update(fields)
    return error


class PackingError(Exception):
    """Base of every error ``packing`` raises on purpose (bad samples, settings, files).

    Catch this (and ``OSError`` for files) to report a user's mistake; anything
    else is a bug and should surface as one. Errors pickle with their fields, so they
    cross process boundaries (``datasets.map(num_proc=...)``, Ray workers) intact.

    >>> import pickle
    >>> error = pickle.loads(pickle.dumps(SampleError(2, "prompt", 1, "a token id", -1)))
    >>> error.sample, error.field, str(error)
    (2, 'prompt', "sample 2, 'prompt', position 1: expected a token id, got -1")
    """

    def __reduce__(self) -> tuple[object, ...]:
        return _restore, (type(self), self.args, dict(self.__dict__))


class SampleError(PackingError, ValueError):
    """A sample (row) that cannot be read: where it is and what was expected.

    ``sample`` is the row's index (from 0; None when not known), ``field`` the
    column or key (None for a plain token list), ``position`` the index inside
    that field (None for the field as a whole), ``expected`` what would have been
    accepted and ``got`` a short description of what was found.

    >>> str(SampleError(0, None, None, "a list of token ids", "hello"))
    "sample 0: expected a list of token ids, got 'hello' (str)"
    """

    def __init__(self, sample: int | None, field: str | None, position: int | None, expected: str, got: object) -> None:
        self.sample = sample
        self.field = field
        self.position = position
        self.expected = expected
        self.got = _got(got)
        super().__init__(self.where_and_what())

    @property
    def location(self) -> str:
        """Field and position: ``'input_ids', position 2`` (empty for a whole sample)."""
        parts = [repr(self.field)] if self.field is not None else []
        if self.position is not None:
            parts.append(f"position {self.position}")
        return ", ".join(parts)

    @property
    def problem(self) -> str:
        """``expected ..., got ...``."""
        return f"expected {self.expected}, got {self.got}"

    def where_and_what(self, row: str | None = None) -> str:
        """The message, with ``row`` (such as ``"notes.jsonl, line 4"``) in place of ``sample N``.

        >>> SampleError(3, "prompt", 0, "a non-negative integer token id", "x").where_and_what("a.csv, line 5")
        "a.csv, line 5, 'prompt', position 0: expected a non-negative integer token id, got 'x' (str)"
        """
        head = row if row is not None else (f"sample {self.sample}" if self.sample is not None else "a sample")
        location = self.location
        return f"{head}{', ' + location if location else ''}: {self.problem}"

    def moved(self, **place: int | str | None) -> SampleError:
        """The same error at another place (``sample``, ``field``, ``position``: those given), worded again: the one
        way an error read in part of the input is renumbered as the whole input numbers it. O(1).

        >>> str(SampleError(2, "messages", 3, "a token id", -1).moved(sample=12, field="completion", position=1))
        "sample 12, 'completion', position 1: expected a token id, got -1"
        """
        error = copy.copy(self)
        error.__dict__.update(place)
        error.args = (error.where_and_what(),)
        return error

    def after(self, rows: int) -> SampleError:
        """The same error about a row that comes ``rows`` rows later (in a table read after others). O(1).

        >>> str(SampleError(2, None, 1, "a token id", -1).after(10))
        'sample 12, position 1: expected a token id, got -1'
        """
        return self if self.sample is None or not rows else self.moved(sample=self.sample + rows)


class NeedsTokenizer(SampleError):
    """A text row (``text``, ``messages``, or ``prompt``/``completion`` as text) met without a tokenizer.

    ``option`` is how the entry point it came from takes one: ``tokenizer=...`` in the library,
    ``--tokenizer`` at the command line; :meth:`at` rewords it for another entry point.

    >>> error = NeedsTokenizer(2, "messages", [{"role": "user"}])
    >>> str(error)
    "sample 2, 'messages': expected token ids (a text row needs a tokenizer: tokenizer=...), got [{'role': 'user'}] (list)"
    >>> str(error.at("--tokenizer"))
    "sample 2, 'messages': expected token ids (a text row needs a tokenizer: --tokenizer), got [{'role': 'user'}] (list)"
    """

    def __init__(self, sample: int | None, field: str | None, got: object, option: str = "tokenizer=...") -> None:
        self.option = option
        super().__init__(sample, field, None, f"token ids (a text row needs a tokenizer: {option})", got)

    def at(self, option: str) -> NeedsTokenizer:
        """The same error, naming ``option`` as the way to give a tokenizer. O(1)."""
        error = _restore(type(self), self.args, dict(self.__dict__))
        assert isinstance(error, NeedsTokenizer)
        error.option = option
        error.expected = f"token ids (a text row needs a tokenizer: {option})"
        error.args = (error.where_and_what(),)
        return error


class SequenceTooLong(SampleError):
    """A sample longer than ``max_seq_length`` under ``overflow="error"`` (torchtune's rule: refuse it rather
    than cut or leave it out): ``sample`` (its index), its ``length`` and ``max_seq_length``.

    >>> error = SequenceTooLong(5, 12, 8)
    >>> str(error)
    "sample 5: expected at most max_seq_length=8 tokens (overflow='error'), got 12 tokens"
    >>> error.sample, error.length, error.max_seq_length, str(error.moved(sample=105))[:10]
    (5, 12, 8, 'sample 105')
    """

    def __init__(self, sample: int | None, length: int, max_seq_length: int) -> None:
        self.length = length
        self.max_seq_length = max_seq_length
        expected = f"at most max_seq_length={max_seq_length:,} tokens (overflow='error')"
        super().__init__(sample, None, None, expected, f"{length:,} tokens")
        self.got = f"{length:,} tokens"
        self.args = (self.where_and_what(),)


class UnitError(SampleError):
    """A preference pair or completion group that cannot be read (``packing.core._pairs_groups``): the sample, the field
    (``prompt``, ``chosen``, ``rejected``, ``completions``), the completion's place in a group, and what a unit
    needs. Made by the classmethods, which word every unit problem here, once.

    >>> str(UnitError.missing(4, "rejected", "pair"))
    "sample 4, 'rejected': expected a completion (a pair has 'prompt', 'chosen' and 'rejected'), got None (NoneType)"
    >>> str(UnitError.no_completions(2))
    "sample 2, 'completions': expected at least one completion (a group has 'prompt' and 'completions': [c1, ..., ck]), got <no completions>"
    >>> str(UnitError.empty_completion(7, "completions", 1))
    "sample 7, 'completions', position 1: expected a completion of at least one token (nothing else is trained), got <no tokens>"
    """

    FORMS: ClassVar[dict[str, str]] = {
        "pair": "a pair has 'prompt', 'chosen' and 'rejected'",
        "group": "a group has 'prompt' and 'completions': [c1, ..., ck]",
    }
    """What each unit form holds, as the messages say it."""

    @classmethod
    def missing(cls, sample: int | None, field: str, kind: str) -> UnitError:
        """A part the unit needs is absent (``None``)."""
        what = "a prompt" if field == "prompt" else "a completion"
        return cls(sample, field, None, f"{what} ({cls.FORMS[kind]})", None)

    @classmethod
    def no_completions(cls, sample: int | None, got: object = "<no completions>") -> UnitError:
        """A group whose ``completions`` is not a non-empty list."""
        return cls(sample, "completions", None, f"at least one completion ({cls.FORMS['group']})", got)

    @classmethod
    def empty_completion(cls, sample: int | None, field: str, position: int | None = None) -> UnitError:
        """A completion of no tokens (``position``: its place in a group)."""
        return cls(
            sample, field, position, "a completion of at least one token (nothing else is trained)", "<no tokens>"
        )

    @classmethod
    def untrained_completion(cls, sample: int | None, field: str) -> UnitError:
        """A completion none of whose tokens is trained (its mask all 0: its log-probability would be 0)."""
        expected = (
            "a completion with at least one trained token (one that trains nothing leaves the unit nothing to compare)"
        )
        return cls(sample, field, None, expected, "<no trained token>")

    @classmethod
    def two_forms(cls, sample: int | None, field: str, other: str) -> UnitError:
        """A unit row that also holds another form's column (``field``, with the unit's ``other``)."""
        return cls(sample, field, None, f"one form: a pair or group has no {field!r} (the row has {other!r})", "<both>")


class UnitTooLong(SequenceTooLong):
    """A pair or group longer than ``max_seq_length`` under ``overflow="error"`` (its length in the recipe's
    layout): a unit is never cut across blocks, so it must fit one. ``kind`` is ``pair`` or ``group``.

    >>> str(UnitTooLong(3, 12, 8, "pair"))
    "sample 3: expected a pair of at most max_seq_length=8 tokens (overflow='error'; a pair is never split), got 12 tokens"
    >>> str(UnitTooLong(3, 12, 8, "group").after(37))[:9]
    'sample 40'
    """

    def __init__(self, sample: int | None, length: int, max_seq_length: int, kind: str = "pair") -> None:
        super().__init__(sample, length, max_seq_length)
        self.kind = kind
        self.expected = (
            f"a {kind} of at most max_seq_length={max_seq_length:,} tokens (overflow='error'; a {kind} is never split)"
        )
        self.args = (self.where_and_what(),)


def refuse_with_units(name: str, value: object, why: str) -> SettingError:
    """The refusal of option ``name`` (given ``value``) with rows that are pairs or groups, saying ``why`` it
    cannot keep a unit whole or keep its completions apart.

    >>> str(refuse_with_units("overflow", "split", "it cuts a sample across blocks"))
    "overflow: expected another value with preference pairs or completion groups (it cuts a sample across blocks), got 'split' (str)"
    """
    return SettingError(name, f"another value with preference pairs or completion groups ({why})", value)


class SettingError(PackingError, ValueError):
    """A bad argument: ``name`` (such as ``max_seq_length``), what was ``expected`` and what was found.

    >>> str(SettingError("max_seq_length", "an integer >= 1", 0))
    'max_seq_length: expected an integer >= 1, got 0'
    """

    def __init__(self, name: str, expected: str, got: object) -> None:
        self.name = name
        self.expected = expected
        self.got = _got(got)
        super().__init__(f"{name}: expected {expected}, got {self.got}")


class OptionNotUsed(SettingError):
    """An option given to an entry point (``door``) that does not use it: it would change nothing there, so it is
    refused rather than ignored; ``users`` are the entry points that use it (``packing.recipe``'s field metadata).

    >>> error = OptionNotUsed("window", "collate", ("pack", "plan", "stream", "PackingSampler", "hf.pack_batch"), 3)
    >>> str(error)
    'window: expected no value at collate (it does not use window; pack, plan, stream and 2 more do), got 3'
    >>> error.door, error.users[-1]
    ('collate', 'hf.pack_batch')
    """

    NAMED = 3
    """Users named in the message (all are in ``users``)."""

    def __init__(self, name: str, door: str, users: tuple[str, ...] | list[str], got: object) -> None:
        self.door = door
        self.users = tuple(users)
        named = ", ".join(self.users[: self.NAMED])
        more = len(self.users) - self.NAMED
        users_said = f"{named} and {more} more" if more > 0 else named
        verb = "does" if len(self.users) == 1 else "do"
        super().__init__(name, f"no value at {door} (it does not use {name}; {users_said} {verb})", got)


class PeerName(SettingError):
    """Another library's name for an option (TRL's ``max_length``) or a value (TRL's strategy ``bfd_split``:
    ``term``), answered with what this library calls it: ``peer`` (who names it so), ``option`` (the option meant
    here; None when no option is needed) and ``how`` (what to give it). One name per concept: the peer's is not
    an alias.

    >>> str(PeerName("max_length", 2048, "TRL", "max_seq_length"))
    "max_length: expected max_seq_length (TRL's max_length), got 2048"
    >>> error = PeerName("completion_only_loss", False, "TRL", "loss", "'all' for False")
    >>> str(error), error.answer(lambda name: "--" + name.replace("_", "-"))
    ("completion_only_loss: expected loss: 'all' for False (TRL's completion_only_loss), got False (bool)", "--loss: 'all' for False (TRL's completion_only_loss)")
    """

    def __init__(
        self, name: str, got: object, peer: str, option: str | None, how: str = "", term: str | None = None
    ) -> None:
        self.peer = peer
        self.option = option
        self.how = how
        self.term = term or name
        """The peer's word: ``name``, or the value when a value is the peer's (``bfd_split``)."""
        super().__init__(name, self.answer(), got)

    def answer(self, spell: Callable[[str], str | None] | None = None) -> str:
        """What to give instead, the option spelled by ``spell`` (``--max-seq-length`` at the command line)."""
        option = (spell(self.option) if spell and self.option else None) or self.option
        said = ": ".join(part for part in (option, self.how) if part)
        return f"{said} ({self.peer}'s {self.term})"


class TooManyDocuments(SettingError):
    """A strategy that refuses an input this large: ``strategy``, its ``limit`` and the ``count`` given.

    >>> error = TooManyDocuments("explain", 2000, 2001)
    >>> str(error), error.limit, error.count
    ('explain: expected at most 2,000 documents, got 2001', 2000, 2001)
    """

    def __init__(self, strategy: str, limit: int, count: int) -> None:
        super().__init__(strategy, f"at most {limit:,} documents", count)
        self.strategy = strategy
        self.limit = limit
        self.count = count


class StateMismatch(SettingError):
    """A saved state (``PackingSampler.state_dict()``, a stream's ``state_dict()``) loaded into something it does
    not belong to: ``what`` differs (``lengths``, ``recipe``, ``sampler options``, ``format``), ``ours`` is what
    loads it and ``theirs`` what the state was saved with, each in a few words.

    >>> error = StateMismatch("lengths", "1,000 samples, fingerprint 1a2b3c4d", "999 samples, fingerprint 9f8e7d6c")
    >>> str(error)
    'state: expected the same lengths (1,000 samples, fingerprint 1a2b3c4d), got other lengths (999 samples, fingerprint 9f8e7d6c)'
    >>> error.what, error.name
    ('lengths', 'state')
    """

    def __init__(self, what: str, ours: str, theirs: str) -> None:
        self.what = what
        self.ours = quote(ours, 2 * QUOTE_LIMIT).strip("'\"")
        self.theirs = quote(theirs, 2 * QUOTE_LIMIT).strip("'\"")
        super().__init__("state", f"the same {what} ({self.ours})", f"<other {what}>")
        self.got = f"other {what} ({self.theirs})"
        self.args = (f"state: expected {self.expected}, got {self.got}",)

    @classmethod
    def recipes(cls, ours: str, theirs: str) -> StateMismatch:
        """A state saved with another recipe: ``ours`` and ``theirs`` are ``Recipe.describe()`` lines, and the
        error names the options of ``theirs`` that differ (``name at its default`` where it left one there),
        so the difference is seen even when the lines are long. O(options).

        >>> str(StateMismatch.recipes("max_seq_length=8, loss=all", "max_seq_length=8, roles_to_train=user"))
        'state: expected the same recipe (roles_to_train at its default, loss=all), got other recipe (roles_to_train=user, loss at its default)'
        """
        mine = dict(part.partition("=")[::2] for part in ours.split(", "))
        saved = dict(part.partition("=")[::2] for part in theirs.split(", "))
        names = dict.fromkeys(k for k in (*saved, *mine) if mine.get(k) != saved.get(k))

        def of(options: dict[str, str]) -> str:
            return ", ".join(f"{k}={options[k]}" if k in options else f"{k} at its default" for k in names)

        return cls("recipe", of(mine) or ours, of(saved) or theirs)


class DatasetError(PackingError, ValueError):
    """A dataset file that cannot be read: ``source`` (the file), ``where`` in it (``line 3``, ``row 7``;
    None for the file as a whole) and ``reason``; ``cause`` is the :class:`SampleError` behind it, if any.

    >>> str(DatasetError("notes.csv", None, "the file is empty"))
    'notes.csv: the file is empty'
    >>> cause = SampleError(1, "input_ids", 0, "a non-negative integer token id", -1)
    >>> str(DatasetError.from_sample("d.jsonl", "line 2", cause))
    "d.jsonl, line 2, 'input_ids', position 0: expected a non-negative integer token id, got -1"
    """

    def __init__(self, source: str, where: str | None, reason: str, cause: SampleError | None = None) -> None:
        self.source = source
        self.where = where
        self.reason = reason
        self.cause = cause
        head = f"{source}, {where}" if where else source
        super().__init__(f"{head}{', ' if cause is not None and cause.location else ': '}{reason}")

    @classmethod
    def from_sample(cls, source: str, where: str, cause: SampleError) -> DatasetError:
        """The file-level error for a bad row: the row's place in the file, then the sample error's fields."""
        reason = f"{cause.location}: {cause.problem}" if cause.location else cause.problem
        return cls(source, where, reason, cause)


def first_line(error: BaseException, limit: int = 100) -> str:
    """The first line of ``error``'s message cut to ``limit`` characters, or its class's name when it has none: how
    a library's error is quoted inside one of ours. O(message).

    >>> first_line(ValueError("bad\\nmore")), first_line(KeyError())
    ('bad', 'KeyError')
    """
    text = str(error).strip()
    return text.splitlines()[0][:limit] if text else type(error).__name__


def one_line(
    error: BaseException,
    option: Callable[[str], str | None] | None = None,
    *,
    sample: Callable[[int], str] | None = None,
) -> str:
    """The one line an entry point shows for ``error`` (a :class:`PackingError`, an ``OSError``, anything),
    worded for that entry point: ``option(name)`` is how it spells the library option ``name`` (``--tokenizer``
    at the command line; None: not one of its options), so a :class:`NeedsTokenizer` and a
    :class:`SettingError` name the entry point's own option; ``sample(i)`` is how it names sample ``i`` (the
    explorer: ``line 3`` of what was pasted). The command line and the explorer print this. O(1).

    >>> one_line(SampleError(2, None, 1, "a token id", -4), sample=lambda i: f"line {i + 1}")
    'line 3, position 1: expected a token id, got -4'

    >>> flag = lambda name: "--" + name.replace("_", "-")
    >>> one_line(SettingError("max_seq_length", "an integer >= 1", 0), flag)
    '--max-seq-length: expected an integer >= 1, got 0'
    >>> one_line(DatasetError.from_sample("a.jsonl", "line 1", NeedsTokenizer(0, "text", "hi")), flag)
    "a.jsonl, line 1, 'text': expected token ids (a text row needs a tokenizer: --tokenizer), got 'hi' (str)"
    >>> one_line(FileNotFoundError(2, "No such file or directory", "x.jsonl"))
    'x.jsonl: No such file or directory'
    """
    spell = option or (lambda name: None)
    flag = spell("tokenizer")
    if isinstance(error, NeedsTokenizer) and flag:
        error = error.at(flag)
    elif isinstance(error, DatasetError) and isinstance(error.cause, NeedsTokenizer) and flag and error.where:
        error = DatasetError.from_sample(error.source, error.where, error.cause.at(flag))
    if isinstance(error, SettingError) and spell(error.name):
        text = f"{spell(error.name)}: expected {error.expected}, got {error.got}"
    elif isinstance(error, SampleError) and sample is not None and error.sample is not None:
        text = error.where_and_what(sample(error.sample))
    elif isinstance(error, OSError) and not isinstance(error, PackingError):
        text = f"{error.filename or 'file'}: {error.strerror or error}"
    else:
        text = str(error)
    return text.strip().splitlines()[0] if text.strip() else type(error).__name__


class LimitError(DatasetError):
    """A dataset over one of the bounds a caller set (``packing.reading.ReadLimits``: bytes, rows, tokens, values),
    refused before it is decoded or as its totals grow; a server answers it as "too large".

    >>> str(LimitError("big.jsonl", None, "holds 2,000 lines, more than the limit of 1,000"))
    'big.jsonl: holds 2,000 lines, more than the limit of 1,000'
    """


class TokensLost(UserWarning):
    """A warning that a door (``where``: ``hf.pack_dataset``, ``collate``, ...) cut or left out tokens by the
    overflow policy, saying how many (``text``, worded by ``PackingStats.loss_text``); ``stats`` holds every count
    (``stats.units`` for pairs and groups), as ``pack`` and the command line count them.

    >>> str(TokensLost("collate", "3 of 9 tokens (33.33 %) lost", None))
    'collate: 3 of 9 tokens (33.33 %) lost'
    """

    def __init__(self, where: str, text: str, stats: object) -> None:
        self.where = where
        self.stats = stats
        super().__init__(f"{where}: {text}")
