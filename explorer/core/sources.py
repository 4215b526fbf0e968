"""Where the data comes from: one small class per source, each with its loading, its label, what a link to it
reproduces, and the lines of Python that rebuild it.

A source is a frozen dataclass of the user's real choices, so it is its own cache key (an upload is keyed by the
SHA-256 of its bytes, never by the bytes). ``load`` raises ``InputError`` with one plain line on bad input, and
refuses data that expands past ``MAX_SEQUENCES`` sequences or ``MAX_TOKENS`` tokens before building it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

import packing
import packing.core
import packing.errors
import packing.reading
from explorer.core.examples import DISTRIBUTIONS, synthetic_lengths, workload_info, workload_sample
from explorer.core.export import DataOrigin
from explorer.core.model import (
    MAX_LENGTH_TOKENS,
    MAX_PASTE_CHARS,
    MAX_SEQUENCES,
    MAX_TOKENS,
    MAX_UPLOAD_MB,
    Dataset,
    grammar_count,
)
from explorer.core.parsing import InputError, parse_sequences
from explorer.core.safety import describe, escape, quote
from explorer.core.text import choose_tokenizer, example_text, parse_text_rows
from packing._workloads import WORKLOADS, load_workload
from packing.core._forms import text_forms, unit_kind
from packing.core._loss import DEFAULT_RULES, LossRules
from packing.core._validation import MAX_SEQ_LENGTH
from packing.reading._limits import ReadLimits

DATA_STRATEGY = "bfd"
"""The strategy every data source starts with: the library's, the command line's and the adapters' default."""
EXAMPLE_STRATEGY = "split"
"""The strategy the classic example starts with (the paste source): the seed's layout, cut at every block's end."""
MAX_URL_TEXT = 4_000
"""Longest pasted text a link carries (browsers and servers cap the length of an address)."""
MAX_SYNTHETIC = MAX_SEQUENCES
MAX_FILE_VALUES = 4 * MAX_TOKENS
"""Most values an uploaded JSON text may spell out (ids, labels, masks of ``MAX_TOKENS`` tokens, with room)."""
DEFAULT_WORKLOAD_SAMPLE = 200_000
"""Sequences used by default from a distribution larger than this (0 = all of a smaller one)."""
_ERRORS: tuple[type[Exception], ...] = (ValueError, TypeError, OverflowError, RecursionError, MemoryError)
_FILE_ERRORS: tuple[type[Exception], ...] = (*_ERRORS, OSError, UnicodeError)

Progress = Callable[[int, int], None]
"""``progress(done, total)``: how many rows of how many a long read has done."""


def read_rows(rows: Iterable[Any], rules: LossRules = DEFAULT_RULES) -> packing.Samples:
    """The library's one reader of rows (``packing.read_rows``): the paste box reads exactly what ``pack`` reads,
    trained as ``rules`` say."""
    return packing.read_rows(rows, loss_rules=rules)


def check_size(sequences: int, tokens: int | None, what: str) -> None:
    """Refuse data larger than the page handles, naming the limit."""
    if sequences > MAX_SEQUENCES:
        raise InputError(f"{what} holds {sequences:,} sequences; the explorer reads up to {MAX_SEQUENCES:,} at a time")
    if tokens is not None and tokens > MAX_TOKENS:
        raise InputError(f"{what} holds {tokens:,} tokens; the explorer reads up to {MAX_TOKENS:,} at a time")


def check_lengths(lengths: Any, what: str) -> None:
    """Refuse lengths-only data standing for more than ``MAX_LENGTH_TOKENS`` tokens (summed in floats: no
    overflow). O(n).

    >>> check_lengths(np.array([10**12]), "up.csv")
    Traceback (most recent call last):
    ...
    explorer.core.parsing.InputError: up.csv stands for 1,000,000,000,000 tokens; the explorer plans lengths standing for up to 10,000,000,000
    """
    tokens = float(np.sum(np.asarray(lengths, dtype=np.float64)))
    if tokens > MAX_LENGTH_TOKENS:
        raise InputError(
            f"{what} stands for {tokens:,.0f} tokens; the explorer plans lengths standing for up to "
            f"{MAX_LENGTH_TOKENS:,}"
        )


@dataclass(frozen=True)
class Source:
    """Base of the data sources."""

    kind: ClassVar[str] = ""
    title: ClassVar[str] = ""
    has_tokens: ClassVar[bool] = False
    default_strategy: ClassVar[str] = DATA_STRATEGY
    """The strategy the page starts with on this source: the library's default (``bfd``) for data."""

    @property
    def cache_key(self) -> tuple[Any, ...]:
        return (type(self).__name__, *(getattr(self, f) for f in self.__dataclass_fields__))

    def load(self, rules: LossRules = DEFAULT_RULES, progress: Progress | None = None) -> Dataset:
        """The data, read and checked, trained as ``rules`` say (the library's ``LossRules``; lengths-only sources
        ignore them); ``progress(done, total)`` hears how far reading rows is (long reads only)."""
        raise NotImplementedError

    def link_reproduces(self) -> str:
        """What a link to this page opens: a sentence for the Export tab."""
        return "This link opens the same data and settings."

    def origin(self) -> DataOrigin:
        raise NotImplementedError

    def default_max_seq_length(self) -> int:
        """A block size that fits this data when the user has not chosen one."""
        return 4

    def reading(self) -> str:
        """What reading this source does, for the page's status line while it runs."""
        return f"Reading {self.title.lower()}"


def rows_label(samples: packing.Samples) -> str:
    """What ``samples`` hold, counted in their own words: sequences, or the preference pairs and completion groups
    among them (``Samples.units``). O(samples).

    >>> rows_label(packing.read_rows([[1, 2], [3]]))
    '2 sequences'
    >>> rows_label(packing.read_rows([{"prompt": [1], "chosen": [2], "rejected": [3]}, {"prompt": [1], "completions": [[2]]}, [4]]))
    '1 preference pair, 1 completion group and 1 sequence'
    """
    units = samples.units
    if units is None:
        return grammar_count(len(samples.lengths), "sequence")
    counts = np.bincount(units.kind, minlength=3).tolist()  # plain, pair, group
    parts = [
        grammar_count(count, noun)
        for count, noun in zip(
            (counts[1], counts[2], counts[0]), ("preference pair", "completion group", "sequence"), strict=True
        )
        if count
    ]
    return ", ".join(parts[:-1]) + f" and {parts[-1]}" if len(parts) > 1 else parts[0]


@dataclass(frozen=True)
class Paste(Source):
    """Sequences typed or pasted into the sidebar (or an example)."""

    text: str
    kind: ClassVar[str] = "paste"
    title: ClassVar[str] = "Paste sequences or pick an example"
    has_tokens: ClassVar[bool] = True
    default_strategy: ClassVar[str] = EXAMPLE_STRATEGY

    def reading(self) -> str:
        return "Reading the pasted sequences"

    def load(self, rules: LossRules = DEFAULT_RULES, progress: Progress | None = None) -> Dataset:
        parsed = parse_sequences(self.text)
        try:
            samples = read_rows(parsed.samples, rules)
            samples.refuse_other_labels()  # the page packs: blocks train each token on itself
        except _ERRORS as error:
            raise InputError(describe(error, name_sample=parsed.where)) from None
        check_size(len(samples.lengths), int(samples.lengths.sum()), "the pasted text")
        return Dataset(f"{rows_label(samples)}, pasted", samples.lengths, samples)

    @property
    def in_link(self) -> bool:
        return len(self.text) <= MAX_URL_TEXT

    def link_reproduces(self) -> str:
        if self.in_link:
            return "This link opens the same sequences and settings."
        return (
            f"The pasted text has {len(self.text):,} characters, more than a link carries ({MAX_URL_TEXT:,}): this "
            "link opens the same settings with the classic example's sequences. Share the text itself, or a file."
        )

    def origin(self) -> DataOrigin:
        return DataOrigin(samples=parse_sequences(self.text).samples)


DEFAULT_TEXT_ROWS = example_text("chats")
TEXT_FORM_KEYS = ("text", "prompt and completion", "messages", "prompt with chosen and rejected or completions")
DEFAULT_TOKENIZER = "bytes"
TEXT_MAX_SEQ_LENGTH = 64
"""Block size of the text examples: two of the short chats (``explorer.core.text.CHATS``) to a block; a cell prints
its token where the chart is wide enough (hover and the table under it have the text everywhere)."""


@dataclass(frozen=True)
class Text(Source):
    """Text rows pasted into the sidebar (JSON lines of ``text``, ``prompt``/``completion`` or ``messages``),
    tokenized by the library (``packing.read_rows(..., tokenizer=...)``) with its chat template and loss masks."""

    text: str
    tokenizer: str = DEFAULT_TOKENIZER
    kind: ClassVar[str] = "text"
    title: ClassVar[str] = "Paste text, prompt/completion or chat rows"
    has_tokens: ClassVar[bool] = True

    def rows(self) -> list[Any]:
        """The pasted rows (``text_view.parse_text_rows``); raises ``InputError`` with one line."""
        if len(self.text) > MAX_PASTE_CHARS:
            raise InputError(f"the pasted text has {len(self.text):,} characters; up to {MAX_PASTE_CHARS:,} are read")
        try:
            rows = parse_text_rows(self.text)
        except _ERRORS as error:
            raise InputError(describe(error)) from None
        check_size(len(rows), None, "the pasted text")
        return rows

    def roles(self) -> tuple[str, ...]:
        """The roles the pasted chats' messages name, in order of first use (none when the rows cannot be read):
        the page offers them as ``roles_to_train``. O(messages).

        >>> Text('{"messages": [{"role": "user", "content": "a"}, {"role": "tool", "content": "b"}]}').roles()
        ('user', 'tool')
        """
        try:
            rows = self.rows()
        except InputError:
            return ()
        seen: dict[str, None] = {}
        for row in rows:
            for key in ("messages", "prompt", "completion", "chosen", "rejected", "completions"):
                value = row.get(key) if isinstance(row, dict) else None
                turns = value if isinstance(value, list) else []
                if key == "completions":  # a group: a list of completions, each a list of messages
                    turns = [m for c in turns if isinstance(c, list) for m in c]
                for message in turns:
                    role = message.get("role") if isinstance(message, dict) else None
                    if isinstance(role, str):
                        seen.setdefault(role)
        return tuple(seen)

    def reading(self) -> str:
        try:
            rows = grammar_count(len(self.rows()), "text row")
        except InputError:
            rows = "the text rows"
        return f"Tokenizing {rows} with {quote(self.tokenizer.strip(), 40)}"

    def load_tokenizer(self) -> Any:
        """The chosen tokenizer, never from the network; raises ``InputError`` with its plain message."""
        tokenizer, message = choose_tokenizer(self.tokenizer)
        if message is not None:
            raise InputError(message)
        return tokenizer

    def load(self, rules: LossRules = DEFAULT_RULES, progress: Progress | None = None) -> Dataset:
        rows = self.rows()
        for number, row in enumerate(rows, start=1):
            if not text_forms(row) and unit_kind(row) is None:
                raise InputError(
                    f"row {number}: expected a text row ({', '.join(TEXT_FORM_KEYS)}), got {quote(row)}; "
                    "token ids go in the paste source"
                )
        tokenizer = self.load_tokenizer()
        try:
            samples = packing.read_rows(rows, tokenizer=tokenizer, loss_rules=rules, progress=progress)
        except _ERRORS as error:
            raise InputError(describe(error, name_sample=lambda i: f"row {i + 1}")) from None
        check_size(len(samples.lengths), int(samples.lengths.sum()), "the pasted text")
        counted = (
            grammar_count(len(rows), "text row") if samples.units is None else f"{rows_label(samples)} (text rows)"
        )
        label = f"{counted}, tokenized with {quote(self.tokenizer.strip(), 40)}"
        return Dataset(label, samples.lengths, samples, tokenizer=tokenizer, rows=tuple(rows))

    def link_reproduces(self) -> str:
        return (
            "A link does not carry pasted text rows: this one opens the same tokenizer and settings with the chat "
            "example. Share the rows themselves."
        )

    def origin(self) -> DataOrigin:
        try:
            rows = self.rows()
        except InputError:
            rows = []
        return DataOrigin(samples=rows, tokenizer=self.tokenizer.strip())

    def default_max_seq_length(self) -> int:
        return TEXT_MAX_SEQ_LENGTH


@dataclass(frozen=True)
class Synthetic(Source):
    """Random lengths (lengths only) from one of ``DISTRIBUTIONS``."""

    count: int
    distribution: str
    seed: int
    max_length: int
    kind: ClassVar[str] = "synthetic"
    title: ClassVar[str] = "Synthetic dataset"

    def reading(self) -> str:
        return f"Drawing {grammar_count(self.count, 'random length')} ({self.distribution}, seed {self.seed})"

    def load(self, rules: LossRules = DEFAULT_RULES, progress: Progress | None = None) -> Dataset:
        if not 1 <= self.count <= MAX_SYNTHETIC:
            raise InputError(f"the number of sequences must be between 1 and {MAX_SYNTHETIC:,}; got {self.count:,}")
        if not 1 <= self.max_length <= MAX_SEQ_LENGTH:
            raise InputError(f"the longest length must be between 1 and {MAX_SEQ_LENGTH:,}; got {self.max_length:,}")
        if self.distribution not in DISTRIBUTIONS:
            raise InputError(
                f"unknown distribution {quote(self.distribution)}; expected one of {', '.join(DISTRIBUTIONS)}"
            )
        lengths = synthetic_lengths(self.count, self.distribution, self.seed, self.max_length)
        check_lengths(lengths, "the synthetic data")
        kind = DISTRIBUTIONS[self.distribution].split(" (")[0].lower()
        return Dataset(f"{grammar_count(self.count, 'synthetic length')} ({kind}, seed {self.seed})", lengths)

    def origin(self) -> DataOrigin:
        return DataOrigin(synthetic=(self.count, self.distribution, self.seed, self.max_length))

    def default_max_seq_length(self) -> int:
        return max(1, min(self.max_length, MAX_SEQ_LENGTH))


@dataclass(frozen=True)
class Workload(Source):
    """A shipped real length distribution: all of it in the file's order (as ``packing compare`` reads it), or a
    seeded random sample of ``count`` sequences."""

    name: str
    count: int
    """0 = every sequence."""
    kind: ClassVar[str] = "workload"
    title: ClassVar[str] = "Real length distribution"

    def reading(self) -> str:
        return f"Loading {grammar_count(self.used, 'length')} of the distribution {quote(self.name, 40)}"

    @property
    def total(self) -> int:
        return workload_info(self.name).sequences

    @property
    def used(self) -> int:
        """Sequences the page works with: the request, at most the distribution and ``MAX_SEQUENCES``."""
        wanted = self.total if self.count <= 0 else min(self.count, self.total)
        return min(wanted, MAX_SEQUENCES)

    def load(self, rules: LossRules = DEFAULT_RULES, progress: Progress | None = None) -> Dataset:
        if self.name not in WORKLOADS:
            raise InputError(f"unknown distribution {quote(self.name)}; expected one of {', '.join(WORKLOADS)}")
        loaded = load_workload(self.name)
        total, used = len(loaded.lengths), self.used
        note = f"Source: {loaded.source}."
        if used == total:
            lengths = np.asarray(loaded.lengths, dtype=np.int64)
            note += " Every sequence, in the file's order (sorted by length), as `packing compare` reads it."
        else:
            lengths = workload_sample(loaded.lengths, used)
            note += f" A seeded random sample of {used:,} of the {total:,} sequences, in random order."
        check_lengths(lengths, "the distribution")
        return Dataset(f"{loaded.title} ({grammar_count(used, 'sequence')})", lengths, note=note)

    def origin(self) -> DataOrigin:
        return DataOrigin(workload=(self.name, 0 if self.used == self.total else self.used))

    def default_max_seq_length(self) -> int:
        return workload_info(self.name).max_seq_length if self.name in WORKLOADS else 4


def default_sample(name: str) -> int:
    """Sequences used by default from a distribution: all of a small one, a sample of a very large one."""
    if name not in WORKLOADS:
        return 0
    return 0 if workload_info(name).sequences <= DEFAULT_WORKLOAD_SAMPLE else DEFAULT_WORKLOAD_SAMPLE


@dataclass(frozen=True)
class Upload(Source):
    """An uploaded file (one of the reader's formats: ``packing.reading._files.FORMATS``), read by the library's
    file reader."""

    name: str
    digest: str
    data: bytes = field(default=b"", compare=False, hash=False, repr=False)
    tokenizer: str = DEFAULT_TOKENIZER
    """What tokenizes a file of text or chat rows (``packing.load_tokenizer``); a file of tokens ignores it."""
    kind: ClassVar[str] = "upload"
    title: ClassVar[str] = "Upload a file"

    def reading(self) -> str:
        shown = quote(self.name, 60).strip("'\"")
        size = f"{len(self.data) / 2**20:,.1f} MB" if len(self.data) >= 2**20 else f"{len(self.data):,} bytes"
        return f"Reading {shown} ({size}) in a worker process, stopped if you leave"

    @classmethod
    def of(cls, name: str, data: bytes, tokenizer: str = DEFAULT_TOKENIZER) -> Upload:
        return cls(name, hashlib.sha256(data).hexdigest(), data, tokenizer.strip())

    @property
    def cache_key(self) -> tuple[Any, ...]:
        return ("Upload", self.name, self.digest, self.tokenizer)

    @property
    def has_tokens(self) -> bool:  # type: ignore[override]
        return True

    def check_size(self) -> None:
        """Refuse, in one line (``InputError``), a file larger than ``MAX_UPLOAD_MB``."""
        if len(self.data) > MAX_UPLOAD_MB * 2**20:
            shown = quote(self.name, 60).strip("'\"")
            raise InputError(f"{shown} is {len(self.data) / 2**20:,.0f} MB; files up to {MAX_UPLOAD_MB} MB can be read")

    def load(self, rules: LossRules = DEFAULT_RULES, progress: Progress | None = None) -> Dataset:
        self.check_size()
        shown = quote(self.name, 60).strip("'\"")
        read, tokenizer = _read_file(self.name, self.data, rules, self.tokenizer, progress)
        tokenized = tokenizer is not None
        lengths = np.asarray(read.lengths, dtype=np.int64)
        flat: packing.Samples | None = read.samples if read.samples.has_tokens else None
        kind = "text row" if tokenized else "sample" if flat is not None else "length"
        label = f"{shown}: {grammar_count(len(lengths), kind)}"
        label += f", tokenized with {quote(self.tokenizer, 40)}" if tokenized else ""
        note = " ".join(f"Warning: {escape(text)}." for text in read.notes)  # a file that looks packed
        return Dataset(label, lengths, flat, note=note, tokenizer=tokenizer)

    def link_reproduces(self) -> str:
        return "A link cannot carry an uploaded file: this one opens the same settings, without the file."

    def origin(self) -> DataOrigin:
        return DataOrigin(upload_name=self.name, tokenizer=self.tokenizer)


UPLOAD_LIMITS = ReadLimits(
    max_bytes=MAX_UPLOAD_MB * 2**20,
    max_tokens=MAX_TOKENS,
    max_rows=MAX_SEQUENCES,
    max_length_tokens=MAX_LENGTH_TOKENS,
    max_values=MAX_FILE_VALUES,
)
"""What the page reads of an uploaded file (``packing.reading._limits``, checked by the library's readers before decoding:
bytes, samples, tokens, the tokens lengths-only data stands for, and the values JSON text spells out)."""


def _refuse_other_labels(read: packing.FileSamples, shown: str) -> None:
    """The page packs, and blocks train each token on itself: labels other than the ids are refused, the row
    named from 1 (a file of several shards counts on across them)."""
    try:
        read.samples.refuse_other_labels()
    except packing.SampleError as error:
        raise InputError(describe(error, shown, name_sample=lambda i: f"row {i + 1}")) from None


def _reading(rules: LossRules, tokenizer: Any = None) -> packing.Recipe:
    """The recipe ``read_dataset`` reads an upload with: ``rules`` as its fields, and the loaded tokenizer."""
    return packing.Recipe.for_reading(tokenizer=tokenizer, **dataclasses.asdict(rules))


def _read_file(
    name: str, data: bytes, rules: LossRules, tokenizer: str, progress: Progress | None = None
) -> tuple[packing.FileSamples, Any]:
    """``packing.read_dataset`` on the uploaded bytes, and the tokenizer that read its text rows (None for a file
    of tokens or lengths), trained as ``rules`` say; its typed errors are worded from their fields.

    A file of text rows (text, prompt/completion as text, chats) is read again with the chosen tokenizer, so it
    packs with its chat template and loss masks; a file of tokens never loads a tokenizer.
    """
    shown = quote(name, 60).strip("'\"")
    try:
        try:
            read = packing.read_dataset(io.BytesIO(data), name=name, limits=UPLOAD_LIMITS, recipe=_reading(rules))
            _refuse_other_labels(read, shown)
            return read, None
        except packing.DatasetError as error:
            if not isinstance(error.cause, packing.errors.NeedsTokenizer):
                raise
        loaded, message = choose_tokenizer(tokenizer)
        if message is not None:
            raise InputError(f"{shown} holds text rows. {message}")
        read = packing.read_dataset(
            io.BytesIO(data),
            name=name,
            limits=UPLOAD_LIMITS,
            progress=progress,
            recipe=_reading(rules, loaded),
        )
        _refuse_other_labels(read, shown)
        return read, loaded
    except _FILE_ERRORS as error:
        raise InputError(describe(error, shown)) from None


SOURCES: dict[str, type[Source]] = {s.kind: s for s in (Paste, Text, Synthetic, Workload, Upload)}
